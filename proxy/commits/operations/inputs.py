"""The files a data operation adds: under the table, distinct, present with the declared size,
and (Parquet) holding the declared number of rows.

Each file is checked through the table's FileIO. A location outside the table is refused before
anything is opened (``confine``); a missing or unreadable file, a size or record count that
differs from the declaration, is refused with a message of icegov's own: no OS error text and no
file content reaches the client. Avro and ORC files are checked for presence and size only.
"""

from __future__ import annotations

from collections.abc import Iterable

import pyarrow.parquet as pq
from pyiceberg.io import FileIO
from pyiceberg.manifest import DataFile, FileFormat
from pyiceberg.table.metadata import TableMetadata

from proxy.commits.confine import canonical_location, table_locations
from proxy.commits.intent import UnverifiableCommit

_SHOWN = 120


def check_added_files(files: Iterable[DataFile], metadata: TableMetadata, io: FileIO) -> None:
    """Refuse (400) any added file that is outside the table, named twice, missing, of another
    size than declared, or (Parquet) with another row count than declared."""
    locations = table_locations(metadata, {})
    seen: set[str] = set()
    for data_file in files:
        path = data_file.file_path
        locations.require(path, "content file")
        key = canonical_location(path)
        if key in seen:
            raise UnverifiableCommit(f"content file {_shown(path)} is added twice")
        seen.add(key)
        _check_present(data_file, io)


def _check_present(data_file: DataFile, io: FileIO) -> None:
    path = data_file.file_path
    try:
        source = io.new_input(path)
        size = len(source) if source.exists() else None
    except Exception as exc:  # any I/O failure: refused alike, nothing echoed
        raise UnverifiableCommit(f"content file {_shown(path)} could not be read") from exc
    if size is None:
        raise UnverifiableCommit(f"content file {_shown(path)} does not exist")
    if size != data_file.file_size_in_bytes:
        raise UnverifiableCommit(
            f"content file {_shown(path)} is {size} bytes, not the declared "
            f"{data_file.file_size_in_bytes}")
    if data_file.file_format == FileFormat.PARQUET:
        rows = _parquet_rows(data_file, io)
        if rows != data_file.record_count:
            raise UnverifiableCommit(
                f"content file {_shown(path)} holds {rows} rows, not the declared "
                f"{data_file.record_count}")


def _parquet_rows(data_file: DataFile, io: FileIO) -> int:
    path = data_file.file_path
    try:
        with io.new_input(path).open() as stream:
            return int(pq.ParquetFile(stream).metadata.num_rows)
    except Exception as exc:  # not Parquet, truncated, unreadable: all refused alike
        raise UnverifiableCommit(
            f"content file {_shown(path)} could not be read as Parquet") from exc


def _shown(path: str) -> str:
    return repr(path if len(path) <= _SHOWN else path[:_SHOWN] + "...")
