"""The hash chain that makes the audit stream tamper-evident.

Every record carries ``schema`` (``icegov.audit/2``), ``seq`` (1, 2, … across the whole stream),
``prev`` (the previous record's ``hash``; 64 zeros before the first) and ``hash``: SHA-256 in hex
over the record's canonical JSON without ``hash`` (sorted keys, compact separators, ASCII), or
HMAC-SHA256 under a key when the record says ``"mac": "hmac-sha256"``. A worker of
``icegov serve --workers`` writes its own chain and names it in ``writer`` (``w0``, ``w1``...).
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

SCHEMA = "icegov.audit/2"
GENESIS = "0" * 64
HMAC_SHA256 = "hmac-sha256"


_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                              default=str)


def canonical(body: Mapping[str, Any]) -> bytes:
    """The bytes a record's hash is computed over (the record without ``hash``)."""
    return _CANONICAL.encode(body).encode("ascii")


def digest(data: bytes, key: bytes | None) -> str:
    """SHA-256 (no key) or HMAC-SHA256 (key) of ``data``, in hex."""
    if key is None:
        return hashlib.sha256(data).hexdigest()
    return hmac.new(key, data, hashlib.sha256).hexdigest()


@dataclass(frozen=True)
class Link:
    """The end of a chain: the last record's ``seq`` and ``hash`` (seq 0: no record yet)."""

    seq: int
    hash: str


START = Link(0, GENESIS)


def link_of(line: bytes | str) -> Link | None:
    """The link a written line ends the chain with, or None when it is no v2 record."""
    try:
        record = json.loads(line)
    except (ValueError, RecursionError):  # not a line icegov wrote
        return None
    if not isinstance(record, dict) or record.get("schema") != SCHEMA:
        return None
    seq, sealed = record.get("seq"), record.get("hash")
    if type(seq) is not int or seq < 1 or not isinstance(sealed, str) or len(sealed) != 64:
        return None
    return Link(seq, sealed)


class Chain:
    """Seals events into lines, each linked to the one before. Not thread-safe by itself: the
    caller holds one lock around sealing and writing, so the order on disk is the chain's."""

    def __init__(self, key: bytes | None, last: Link = START, writer: str | None = None) -> None:
        self._key = key
        self.last = last
        self._writer = writer

    def seal(self, event: dict[str, Any]) -> tuple[str, int]:
        """The event as one JSON line (no newline) with seq, prev and hash; and its seq. The
        chain's fields are added to ``event`` itself (a fresh dict the caller hands over)."""
        seq = self.last.seq + 1
        event.update(schema=SCHEMA, seq=seq, prev=self.last.hash)
        if self._key is not None:
            event["mac"] = HMAC_SHA256
        if self._writer is not None:
            event["writer"] = self._writer
        data = canonical(event)
        sealed = digest(data, self._key)
        self.last = Link(seq, sealed)
        return f'{data[:-1].decode("ascii")},"hash":"{sealed}"}}', seq
