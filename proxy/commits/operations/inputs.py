"""The files a data operation adds: under the table, distinct, present with the declared size,
and (Parquet) holding the declared number of rows in columns that fit the declared content
(``columns``: the table's columns for data, ``file_path``/``pos`` for position deletes...).

Each file is checked through the table's FileIO. A location outside the table is refused before
anything is opened (``confine``); a missing or unreadable file, a size or record count that
differs from the declaration, is refused with a message of icegov's own: no OS error text and no
file content reaches the client. Avro and ORC files are checked for presence and size only.

What a file's footer says is remembered (a small LRU keyed by table, location and size), so the
rebuilds of an operation on a moving head do not open its files again; the checks of the
declaration against the footer and the table's schemas run on every build.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.io import FileIO
from pyiceberg.manifest import DataFile, FileFormat
from pyiceberg.table.metadata import TableMetadata

from proxy.commits.confine import canonical_location, shown_path, table_locations
from proxy.commits.intent import UnverifiableCommit
from proxy.commits.lru import SizedLru
from proxy.commits.operations.columns import check_columns, table_columns

FOOTER_CACHE_FILES = 16_384


@dataclass(frozen=True)
class Footer:
    """What an added file was found to be: present with its size; for Parquet, its row count
    and schema (None for Avro and ORC)."""

    rows: int | None = None
    schema: pa.Schema | None = None


FOOTERS: SizedLru[tuple[str, str, int], Footer] = SizedLru(FOOTER_CACHE_FILES)
"""Footers of files found present, by (table uuid, canonical location, size)."""


def check_added_files(files: Iterable[DataFile], metadata: TableMetadata, io: FileIO) -> None:
    """Refuse (400) any added file that is outside the table, named twice, missing, of another
    size than declared, or (Parquet) with another row count than declared or columns that do
    not fit its content (``columns.check_columns``)."""
    locations = table_locations(metadata, {})
    seen: set[str] = set()
    columns = None
    for data_file in files:
        path = data_file.file_path
        locations.require(path, "content file")
        key = canonical_location(path)
        if key in seen:
            raise UnverifiableCommit(f"content file {shown_path(path)} is added twice")
        seen.add(key)
        footer = _footer(data_file, key, metadata, io)
        if footer.rows is not None and footer.rows != data_file.record_count:
            raise UnverifiableCommit(
                f"content file {shown_path(path)} holds {footer.rows} rows, not the declared "
                f"{data_file.record_count}")
        if footer.schema is not None:
            columns = columns if columns is not None else table_columns(metadata)
            check_columns(data_file, footer.schema, metadata, columns)


def _footer(data_file: DataFile, key: str, metadata: TableMetadata, io: FileIO) -> Footer:
    """The file's footer, from the cache or read (after checking it is there, of its size)."""
    cache_key = (str(metadata.table_uuid), key, data_file.file_size_in_bytes)
    found = FOOTERS.get(cache_key)
    if found is None or (data_file.file_format == FileFormat.PARQUET) != (found.rows is not None):
        _check_present(data_file, io)
        found = _parquet_footer(data_file, io) if data_file.file_format == FileFormat.PARQUET \
            else Footer()
        FOOTERS.put(cache_key, found)
    return found


def _check_present(data_file: DataFile, io: FileIO) -> None:
    path = data_file.file_path
    try:
        source = io.new_input(path)
        size = len(source) if source.exists() else None
    except Exception as exc:  # any I/O failure: refused alike, nothing echoed
        raise UnverifiableCommit(f"content file {shown_path(path)} could not be read") from exc
    if size is None:
        raise UnverifiableCommit(f"content file {shown_path(path)} does not exist")
    if size != data_file.file_size_in_bytes:
        raise UnverifiableCommit(
            f"content file {shown_path(path)} is {size} bytes, not the declared "
            f"{data_file.file_size_in_bytes}")


def _parquet_footer(data_file: DataFile, io: FileIO) -> Footer:
    path = data_file.file_path
    try:
        with io.new_input(path).open() as stream:
            parquet = pq.ParquetFile(stream)
            return Footer(int(parquet.metadata.num_rows), parquet.schema_arrow)
    except Exception as exc:  # not Parquet, truncated, unreadable: all refused alike
        raise UnverifiableCommit(
            f"content file {shown_path(path)} could not be read as Parquet") from exc

