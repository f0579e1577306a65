"""Where a table's bloom filters lie and what each Puffin file must say to be believed.

Every filter is one Puffin file with one blob of type ``icegov-bloom-filter-v1`` under
``<metadata dir>/icegov-index/`` (the metadata dir is ``write.metadata.path`` or
``<location>/metadata``). Its name is a digest of its ``FilterKey`` — the data file's path and
size, the column's field id and hashing family — so any replica, or icegov after a restart,
finds the filter of a (file, column) without listing or any index manifest. The blob carries
the same provenance in its properties (``data-file``, ``data-file-size``, ``family``), and the
filter's parameters (``num-bits``, ``num-hashes``, ``hash``); a file whose provenance does not
match the key it was looked up for, or that is malformed, is not believed (the filter is built
again); with ``indexes.key`` set, neither is one without a valid ``hmac-sha256`` seal over the
provenance, parameters and bits, so whoever can write the table's storage cannot plant a filter
that hides rows from planning. These files are icegov's alone: they are never put in the
table's ``statistics``, so no client sees them in table metadata.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
from dataclasses import dataclass

from pyarrow.fs import FileSelector, FileType
from pyiceberg.io import FileIO
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.table.metadata import TableMetadata

from proxy.planning.bloom import HASH, MAX_BITS, BloomFilter
from proxy.planning.puffin import Blob, read_puffin, write_puffin

BLOB_TYPE = "icegov-bloom-filter-v1"
INDEX_DIR = "icegov-index"
MAX_PUFFIN_BYTES = MAX_BITS // 8 + 64 * 1024


@dataclass(frozen=True, slots=True)
class FilterKey:
    """What one filter indexes: a data file (path and size) and a column (id, family)."""

    data_path: str
    data_size: int
    field_id: int
    family: str


def index_dir(metadata: TableMetadata) -> str:
    """The directory of the table's filters."""
    root = metadata.properties.get("write.metadata.path") or f"{metadata.location}/metadata"
    return f"{root.rstrip('/')}/{INDEX_DIR}"


def filter_path(directory: str, key: FilterKey) -> str:
    """The Puffin file of ``key`` in ``directory``."""
    text = "\0".join((key.data_path, str(key.data_size), str(key.field_id), key.family))
    return f"{directory}/bloom-{hashlib.sha256(text.encode()).hexdigest()[:40]}.puffin"


def seal(mac_key: bytes, key: FilterKey, num_bits: int, num_hashes: int, bits: bytes) -> str:
    """The HMAC-SHA256 of a filter and what it indexes."""
    head = "\0".join((key.data_path, str(key.data_size), str(key.field_id), key.family,
                      str(num_bits), str(num_hashes), HASH))
    return hmac.new(mac_key, head.encode() + b"\0" + bits, hashlib.sha256).hexdigest()


def puffin_bytes(key: FilterKey, bloom: BloomFilter, snapshot_id: int,
                 sequence_number: int, mac_key: bytes | None = None) -> bytes:
    """The Puffin file of one filter (sealed with ``mac_key`` when given)."""
    properties = {"data-file": key.data_path, "data-file-size": str(key.data_size),
                  "family": key.family, "num-bits": str(bloom.num_bits),
                  "num-hashes": str(bloom.num_hashes), "hash": HASH}
    if mac_key is not None:
        properties["hmac-sha256"] = seal(mac_key, key, bloom.num_bits, bloom.num_hashes,
                                         bloom.to_bytes())
    blob = Blob(BLOB_TYPE, (key.field_id,), snapshot_id, sequence_number, bloom.to_bytes(),
                properties)
    return write_puffin([blob], {"created-by": "icegov"})


def load_filter(io: FileIO, path: str, key: FilterKey,
                mac_key: bytes | None = None) -> BloomFilter | None:
    """The filter stored at ``path`` for ``key``; None when there is none, or it is not one
    icegov wrote for exactly ``key`` (sealed with ``mac_key``, when given)."""
    source = io.new_input(path)
    try:
        if not source.exists() or len(source) > MAX_PUFFIN_BYTES:
            return None
        with source.open() as stream:
            data = stream.read()
        return filter_from(read_puffin(data), key, mac_key)
    except (OSError, ValueError):
        return None


def filter_from(blobs: list[Blob], key: FilterKey,
                mac_key: bytes | None = None) -> BloomFilter | None:
    """The filter in a Puffin file's blobs if they are exactly one for ``key`` (sealed with
    ``mac_key``, when given)."""
    if len(blobs) != 1:
        return None
    blob = blobs[0]
    p = blob.properties
    if (blob.type != BLOB_TYPE or blob.fields != (key.field_id,) or p.get("hash") != HASH
            or p.get("data-file") != key.data_path or p.get("family") != key.family
            or p.get("data-file-size") != str(key.data_size)):
        return None
    try:
        bloom = BloomFilter(int(p.get("num-bits", "")), int(p.get("num-hashes", "")),
                            blob.payload)
    except ValueError:
        return None
    if mac_key is not None and not hmac.compare_digest(
            p.get("hmac-sha256", ""), seal(mac_key, key, bloom.num_bits, bloom.num_hashes,
                                           blob.payload)):
        return None
    return bloom


def remove_all(io: FileIO, metadata: TableMetadata) -> int:
    """Remove every filter of the table (its property was dropped); how many were removed."""
    arrow = PyArrowFileIO(dict(io.properties))
    scheme, netloc, path = arrow.parse_location(index_dir(metadata))
    fs = arrow.fs_by_scheme(scheme, netloc)
    base = path.rstrip("/")
    removed = 0
    for info in fs.get_file_info(FileSelector(base, allow_not_found=True)):
        name = info.path.rsplit("/", 1)[-1]
        if info.type == FileType.File and name.startswith("bloom-") and name.endswith(
                ".puffin"):
            with contextlib.suppress(FileNotFoundError):
                fs.delete_file(info.path)
                removed += 1
    return removed
