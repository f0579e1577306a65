"""Puffin files: written here (pyiceberg only reads them), read back through pyiceberg's reader.

Layout (Iceberg's Puffin spec, version 1): ``Magic Blob₁ … Blobₙ Footer`` where ``Footer`` is
``Magic FooterPayload FooterPayloadSize Flags Magic``, ``Magic`` is ``PFA1``, the payload is the
UTF-8 JSON ``{"blobs": [...], "properties": {...}}`` (uncompressed: flags all zero), its size a
4-byte little-endian integer. Each blob's metadata names its ``type``, ``fields``,
``snapshot-id``, ``sequence-number``, ``offset`` and ``length`` within the file, and string
``properties``. Blobs are written uncompressed.

``read_puffin`` refuses anything malformed (``ValueError``): wrong magic, a footer that does not
fit, blobs that lie outside the blob area or overlap the footer, a compressed blob.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from pyiceberg.table.puffin import MAGIC_BYTES, PuffinBlobMetadata, PuffinFile

_SIZE_AND_FLAGS = 8


@dataclass(frozen=True)
class Blob:
    """One blob to write, or one read back."""

    type: str
    fields: tuple[int, ...]
    snapshot_id: int
    sequence_number: int
    payload: bytes
    properties: Mapping[str, str] = field(default_factory=dict)


def write_puffin(blobs: Sequence[Blob], properties: Mapping[str, str] | None = None) -> bytes:
    """The bytes of a Puffin file holding ``blobs``."""
    out = bytearray(MAGIC_BYTES)
    described = []
    for blob in blobs:
        described.append({
            "type": blob.type, "fields": list(blob.fields), "snapshot-id": blob.snapshot_id,
            "sequence-number": blob.sequence_number, "offset": len(out),
            "length": len(blob.payload), "properties": dict(blob.properties)})
        out += blob.payload
    payload = json.dumps({"blobs": described, "properties": dict(properties or {})},
                         separators=(",", ":"), sort_keys=True).encode("utf-8")
    out += MAGIC_BYTES + payload + len(payload).to_bytes(4, "little") + bytes(4) + MAGIC_BYTES
    return bytes(out)


def read_puffin(data: bytes) -> list[Blob]:
    """The blobs of a Puffin file (``ValueError`` when it is not a well-formed one)."""
    if len(data) < 2 * len(MAGIC_BYTES) + len(MAGIC_BYTES) + _SIZE_AND_FLAGS:
        raise ValueError("too short for a Puffin file")
    size = int.from_bytes(data[-12:-8], "little", signed=True)
    footer_start = len(data) - _SIZE_AND_FLAGS - len(MAGIC_BYTES) - size - len(MAGIC_BYTES)
    if size < 0 or footer_start < len(MAGIC_BYTES):
        raise ValueError("the Puffin footer does not fit the file")
    if data[footer_start:footer_start + len(MAGIC_BYTES)] != MAGIC_BYTES:
        raise ValueError("the Puffin footer does not start with its magic")
    puffin = PuffinFile(data)  # checks both ends' magic and the flags
    return [_blob(puffin, meta, footer_start) for meta in puffin.footer.blobs]


def _blob(puffin: PuffinFile, meta: PuffinBlobMetadata, footer_start: int) -> Blob:
    if meta.compression_codec is not None:
        raise ValueError("compressed Puffin blobs are not read here")
    if meta.offset < len(MAGIC_BYTES) or meta.length < 0 or meta.offset + meta.length > \
            footer_start:
        raise ValueError("a Puffin blob lies outside the file's blob area")
    return Blob(meta.type, tuple(meta.fields), meta.snapshot_id, meta.sequence_number,
                puffin.get_blob_payload(meta), dict(meta.properties))
