"""Reading the rows that row verification compares, through the table's FileIO, within a budget.

``RowFile`` is what a manifest entry says about one data or delete file (built from
``manifests.Entry``); ``ContentReader`` reads

* position delete files (Parquet ``file_path``/``pos``) and deletion vectors (the Puffin
  ``deletion-vector-v1`` blob at ``content_offset``/``content_size_in_bytes``) as positions per
  data file;
* equality delete files as the values of their ``equality_ids`` columns;
* data files as rows projected onto an Iceberg schema by field id, the way pyiceberg reads them.

Every byte read is charged to a ``RowBudget`` first, at the file's real size (not the size the
manifest claims), and so is what decoding will hold in memory, before anything is decoded: a
Parquet file's footer is read first, its row count must equal the manifest entry's
``record_count`` (a small file may hold a hundred million dictionary- or run-length-encoded rows),
and the largest of its size, its declared uncompressed size and a cost per value (row x leaf
column) is charged; a deletion vector's cardinality must equal its ``record_count`` and is
charged before its positions are materialised. Whatever goes
wrong becomes ``RowCheckFailed`` with a message of our own (no OS error text, no file content),
and the caller falls back to the stricter classification.

Identity: ``RowFile.key`` is ``manifests.ContentFile.key`` (one spelling per physical file,
``confine.canonical_location``); ``RowFile.path`` is the location exactly as the manifest lists
it, which is what readers match position deletes against.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.expressions import AlwaysTrue
from pyiceberg.io import FileIO
from pyiceberg.io.pyarrow import ArrowScan
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.schema import Schema
from pyiceberg.table import FileScanTask
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.typedef import Record
from pyroaring import BitMap64

from proxy.commits.columns import id_problem
from proxy.commits.confine import require_regular
from proxy.commits.manifests import Entry, FileKey, file_key
from proxy.commits.rowgroups import row_group_problem

T = TypeVar("T")

# positions of fields in ``Entry.record`` (the v3 ``data_file`` struct, in order)
_FORMAT, _PARTITION, _SIZE, _KEY_METADATA, _EQUALITY_IDS = 2, 3, 5, 12, 14
_VALUE_COUNTS, _NULL_COUNTS, _NAN_COUNTS, _LOWER, _UPPER = 7, 8, 9, 10, 11
_REFERENCED, _CONTENT_SIZE = 17, 19
PATH_FIELD_ID = 2147483546  # ``file_path`` column of position delete files
_VALUE_COST = 8  # bytes charged per decoded value (per row and leaf column), beyond page sizes
_MAX_CHUNKS = 100_000  # row groups x columns of one Parquet footer looked at
_DV_MAGIC = bytes.fromhex("d1d33964")
_FIELD_ID = b"PARQUET:field_id"


class RowCheckFailed(Exception):
    """A row check could not be completed; the message is safe to show in the audit record."""


class BudgetExhausted(RowCheckFailed):
    """Reading further would exceed the commit's ``row_bytes_budget``."""


@dataclass(frozen=True)
class RowFile:
    """One data or delete file with what reading its rows needs (from its manifest entry)."""

    path: str
    content: DataFileContent
    file_format: FileFormat
    records: int
    size: int
    sequence: int
    spec_id: int
    partition: tuple[Any, ...]
    equality_ids: tuple[int, ...] = ()
    offset: int | None = None
    length: int | None = None
    referenced: str | None = None
    encrypted: bool = False
    referenced_field: str | None = None  # ``referenced_data_file`` as listed (not from bounds)
    stats: FileStats = field(default_factory=lambda: FileStats())
    first_row_id: int | None = None  # format 3: its own, or inherited from its manifest

    @property
    def key(self) -> FileKey:
        """Same identity as ``manifests.ContentFile.key``."""
        return file_key(self.content, self.path, self.offset)

    @property
    def is_vector(self) -> bool:
        return self.positional and self.file_format == FileFormat.PUFFIN

    @property
    def positional(self) -> bool:
        return self.content == DataFileContent.POSITION_DELETES

    @property
    def equality(self) -> bool:
        return self.content == DataFileContent.EQUALITY_DELETES

    def data_file(self) -> DataFile:
        """A pyiceberg ``DataFile`` for reading this file with ``ArrowScan``."""
        data_file = DataFile.from_args(
            content=self.content, file_path=self.path, file_format=self.file_format,
            partition=Record(*(_plain(v) for v in self.partition)), record_count=self.records,
            file_size_in_bytes=self.size)
        data_file.spec_id = self.spec_id
        return data_file


@dataclass(frozen=True)
class FileStats:
    """The column metrics a manifest entry claims (field id -> value), which readers prune on."""

    value_counts: Mapping[int, Any] = field(default_factory=dict)
    null_counts: Mapping[int, Any] = field(default_factory=dict)
    nan_counts: Mapping[int, Any] = field(default_factory=dict)
    lower: Mapping[int, Any] = field(default_factory=dict)
    upper: Mapping[int, Any] = field(default_factory=dict)

    @property
    def field_ids(self) -> set[Any]:
        """Every field id some metric is claimed for."""
        return {*self.value_counts, *self.null_counts, *self.nan_counts, *self.lower,
                *self.upper}


def row_file(entry: Entry) -> RowFile:
    """The ``RowFile`` of a manifest entry."""
    record = entry.record
    ids = record[_EQUALITY_IDS]
    return RowFile(
        path=entry.file.path, content=entry.file.content, file_format=FileFormat(record[_FORMAT]),
        records=entry.file.records, size=int(record[_SIZE]),
        sequence=entry.file.sequence_number or 0, spec_id=entry.spec_id or 0,
        partition=tuple(record[_PARTITION] or ()),
        equality_ids=tuple(ids) if ids else (), offset=entry.file.offset,
        length=record[_CONTENT_SIZE], referenced=entry.file.referenced_data_file,
        encrypted=record[_KEY_METADATA] is not None, referenced_field=record[_REFERENCED],
        first_row_id=entry.file.first_row_id,
        stats=FileStats(*(dict(record[i] or ()) for i in (_VALUE_COUNTS, _NULL_COUNTS,
                                                          _NAN_COUNTS, _LOWER, _UPPER))))


def _plain(value: Any) -> Any:
    """Undo ``manifests.canonical``'s NaN marker for a partition value."""
    return float("nan") if value == ("NaN",) else value


@dataclass
class RowBudget:
    """Bytes of data and delete files one commit's row checks may still read."""

    limit: int
    spent: int = 0

    @property
    def remaining(self) -> int:
        return max(self.limit - self.spent, 0)

    def charge(self, size: int, what: str) -> None:
        """Count ``size`` bytes about to be read for ``what``; refuse beyond the limit."""
        if self.spent + size > self.limit:
            self.spent = self.limit
            raise BudgetExhausted(f"row budget of {self.limit} bytes exhausted before reading "
                                  f"{what}")
        self.spent += size


@dataclass
class ContentReader:
    """Reads delete and data files for row checks, each file at most once."""

    io: FileIO
    metadata: TableMetadata
    budget: RowBudget
    _positions: dict[tuple[str, int | None], dict[str, pa.Array]] = field(default_factory=dict)

    def positions(self, delete: RowFile) -> dict[str, pa.Array]:
        """Deleted positions (int64) per data file path, of a position delete file or DV."""
        key = (delete.path, delete.offset)
        if key not in self._positions:
            read = self._vector if delete.file_format == FileFormat.PUFFIN else self._parquet
            self._positions[key] = self._guarded(delete, "delete file", lambda: read(delete))
        return self._positions[key]

    def equality_values(self, delete: RowFile, schema: Schema) -> pa.Table:
        """The rows of an equality delete file, projected onto ``schema`` (its id columns)."""
        def read() -> pa.Table:
            self._footer(delete, "equality delete file")
            return self._scan(delete, schema)
        return self._guarded(delete, "equality delete file", read)

    def data_rows(self, data: RowFile, schema: Schema, strict: bool = False) -> pa.Table:
        """The rows of a data file projected onto ``schema`` by field id, in file order.

        ``strict`` (a file the snapshot adds): the file may hold no column outside ``schema`` (a
        value there would be invisible now but could surface under another schema), and its
        row-group statistics must describe its rows (``rowgroups``).
        """
        def read() -> pa.Table:
            self._footer(data, "data file", schema if strict else None)
            rows = self._scan(data, schema)
            if rows.num_rows != data.records:
                raise RowCheckFailed(f"data file {data.path} yields {rows.num_rows} rows, its "
                                     f"manifest entry says {data.records}")
            if strict:
                self._row_groups(data)
            return rows
        return self._guarded(data, "data file", read)

    def _guarded(self, file: RowFile, what: str, read: Callable[[], T]) -> T:
        if file.encrypted:
            raise RowCheckFailed(f"{what} {file.path} is encrypted")
        if file.file_format not in (FileFormat.PARQUET, FileFormat.PUFFIN):
            raise RowCheckFailed(f"{what} {file.path} is {file.file_format.name}, not Parquet")
        try:
            require_regular(file.path, what)  # a FIFO would hold this thread forever
            return read()
        except RowCheckFailed:
            raise
        except Exception as exc:  # whatever the reason, only that it failed is reported
            raise RowCheckFailed(f"{what} {file.path} could not be read") from exc

    def _footer(self, file: RowFile, what: str, within: Schema | None = None) -> None:
        """Check ``file``'s Parquet footer against its manifest entry and charge what reading
        and decoding it will hold, before any row is decoded: the largest of its size, its
        declared uncompressed size and a cost per value. ``within``: the file may hold no column
        outside this schema."""
        size = len(self.io.new_input(file.path))
        self.budget.charge(size, file.path)
        with self.io.new_input(file.path).open() as stream:
            parquet = pq.ParquetFile(stream)
            metadata = parquet.metadata
            problem = id_problem(parquet.schema_arrow)
            if problem is not None:
                raise RowCheckFailed(f"{what} {file.path} {problem}: readers disagree which "
                                     "columns it holds")
            if within is not None:
                extra = _field_ids(parquet.schema_arrow) - set(within.field_ids)
                if extra:
                    raise RowCheckFailed(f"{what} {file.path} holds columns outside the table "
                                         f"schema (field ids {sorted(extra)})")
        groups, columns = metadata.num_row_groups, metadata.num_columns
        if groups * max(columns, 1) > _MAX_CHUNKS:
            raise RowCheckFailed(f"{what} {file.path} has too many column chunks to check")
        in_groups = [metadata.row_group(g) for g in range(groups)]
        if metadata.num_rows != file.records \
                or sum(g.num_rows for g in in_groups) != file.records:
            raise RowCheckFailed(f"{what} {file.path} holds {metadata.num_rows} rows, its "
                                 f"manifest entry says {file.records}")
        declared = max(sum(g.total_byte_size for g in in_groups),
                       sum(g.column(c).total_uncompressed_size
                           for g in in_groups for c in range(columns)))
        decoded = max(declared, file.records * max(columns, 1) * _VALUE_COST)
        self.budget.charge(max(decoded - size, 0), f"the decoded rows of {file.path}")

    def _row_groups(self, data: RowFile) -> None:
        """An added file's row-group statistics must describe its rows (``rowgroups``):
        readers skip row groups by them."""
        with self.io.new_input(data.path).open() as stream:
            problem = row_group_problem(pq.ParquetFile(stream))
        if problem is not None:
            raise RowCheckFailed(f"data file {data.path}: {problem}")

    def _parquet(self, delete: RowFile) -> dict[str, pa.Array]:
        self._footer(delete, "position delete file")
        with self.io.new_input(delete.path).open() as stream:
            table = pq.read_table(stream, columns=["file_path", "pos"],
                                  read_dictionary=["file_path"])
        grouped = table.group_by("file_path").aggregate([("pos", "list")])
        lists = grouped.column("pos_list").combine_chunks()
        return {path: pc.list_flatten(lists[i:i + 1]).cast(pa.int64())
                for i, path in enumerate(grouped.column("file_path").to_pylist())
                if path is not None}

    def _vector(self, delete: RowFile) -> dict[str, pa.Array]:
        if delete.offset is None or delete.length is None or delete.referenced is None:
            raise RowCheckFailed(f"deletion vector {delete.path} has no offset, size or "
                                 "referenced data file")
        self.budget.charge(delete.length, delete.path)
        with self.io.new_input(delete.path).open() as stream:
            stream.seek(delete.offset)
            blob = stream.read(delete.length)
        return {delete.referenced: _vector_positions(blob, delete.path, delete.records,
                                                     self.budget)}

    def _scan(self, file: RowFile, schema: Schema) -> pa.Table:
        scan = ArrowScan(self.metadata, self.io, schema, AlwaysTrue())
        return scan.to_table([FileScanTask(file.data_file())])


def _vector_positions(blob: bytes, path: str, records: int, budget: RowBudget) -> pa.Array:
    """Positions of a ``deletion-vector-v1`` blob: length, magic, 64-bit roaring bitmap, CRC."""
    length = int.from_bytes(blob[:4], "big")
    body = blob[4:4 + length]
    valid = (len(blob) == length + 8 and body[:4] == _DV_MAGIC
             and zlib.crc32(body) == int.from_bytes(blob[4 + length:], "big"))
    if not valid:
        raise RowCheckFailed(f"deletion vector in {path} is malformed")
    bitmap = BitMap64.deserialize(body[4:])
    if len(bitmap) != records:
        raise RowCheckFailed(f"deletion vector in {path} holds {len(bitmap)} positions, its "
                             f"manifest entry says {records}")
    budget.charge(len(bitmap) * _VALUE_COST, f"the positions of {path}")
    return pa.array(bitmap.to_array(), pa.uint64()).cast(pa.int64())


def _field_ids(schema: pa.Schema) -> set[int]:
    ids: set[int] = set()
    pending: list[pa.Field] = list(schema)
    while pending:
        current = pending.pop()
        value = (current.metadata or {}).get(_FIELD_ID)
        if value is not None:
            ids.add(int(value))
        pending += _children(current.type)
    return ids


def _children(kind: pa.DataType) -> Sequence[pa.Field]:
    if pa.types.is_struct(kind):
        return [kind.field(i) for i in range(kind.num_fields)]
    if pa.types.is_map(kind):
        return [kind.key_field, kind.item_field]
    if pa.types.is_list(kind) or pa.types.is_large_list(kind) \
            or pa.types.is_fixed_size_list(kind):
        return [kind.value_field]
    return []
