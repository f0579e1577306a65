"""Added files are what their manifest entries claim: ``check_added_files``.

Every path that adds data or delete files goes through this one checker before anything is
forwarded: an ordinary commit (INSERT, DELETE's delete files, UPDATE, REWRITE: the files
``classify`` finds added) and a data operation's appends (``operations.inputs``). For each file:

* it is there, with the declared ``file_size_in_bytes`` (a missing, unreadable or resized file
  is refused with a message of icegov's own: no OS error text, no file content);
* Parquet: only the footer is read (its length from the file's last 8 bytes first, charged to
  the commit's ``footer_bytes_budget`` and bounded per file by ``max_footer_bytes``, then
  ``ParquetFile(...).metadata`` through the table's FileIO). Its row count must be the
  declared ``record_count``; its columns must fit what the file claims to be, under the table's
  schemas (``columns``: field ids the table has, types equal or promoted, an INT96 column as
  the ``timestamptz`` Iceberg reads it as, position deletes' reserved columns, equality
  deletes' ``equality_ids``); the column metrics the entry
  declares must be proven by the footer's statistics (``footstats``);
* a deletion vector (Puffin): its blob (``content_offset`` / ``content_size_in_bytes``) lies
  inside the file, after the Puffin magic;
* Avro and ORC: presence and size only, and no metric claims but value counts (``footstats``:
  what cannot be proven is refused), except an ORC position delete file that declares more:
  its two columns are read and prove its claims (``orc_deletes``);
* a Parquet data file of a partitioned spec: its partition source columns are read and every
  row maps to the declared partition values (``partition_proof``);
* format 3: a data file may keep the row lineage columns (``_row_id``,
  ``_last_updated_sequence_number``) of the rows it updates, but the files of a snapshot
  classified INSERT may hold no non-null value in them (new rows take the ids the table
  assigns; carried ids would pass an insert off as an update of existing rows).

Footers of object-store files are read in parallel (at most ``FOOTER_THREADS`` at once; local
files by one thread, where more only contend for the GIL), and the whole check must end within
the commit's ``footer_seconds``; beyond a budget the commit is refused (400, nothing
landed). Which file is reported, when several fail, follows the order the files were given.

Nothing a footer says is remembered across requests: an added file is the writer's until its
commit lands, and one swapped for another of the same size between two requests must be read
again (each file is opened once per check). A single local file is read on the calling thread
(no pool to start for a one-file append).
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.io import FileIO
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.table.metadata import TableMetadata

from proxy.commits.columns import ROW_LINEAGE_IDS, FileRules, check_columns, file_schema
from proxy.commits.confine import canonical_location, require_regular, shown_path
from proxy.commits.diff import SnapshotChange
from proxy.commits.footstats import (
    FileColumns,
    FooterStats,
    footer_stats,
    metrics_disagreement,
    with_float_spans,
)
from proxy.commits.intent import UnverifiableCommit
from proxy.commits.limits import CommitLimits
from proxy.commits.manifests import CommitTooLarge
from proxy.commits.orc_deletes import orc_position_deletes, position_metrics_problem
from proxy.commits.partition_proof import partition_problem
from proxy.governance import Action

FOOTER_THREADS = 8
_PARQUET_MAGIC = b"PAR1"
_PUFFIN_MAGIC = b"PFA1"
_TAIL = 8  # footer length (4 bytes, little-endian) and magic
_MIN_PARQUET = 12  # leading magic, an empty footer, its length and the trailing magic
_SPECULATIVE_READ = 64 * 1024  # what pyarrow reads from a file's end to find its footer
_CONTENT_OFFSET, _CONTENT_SIZE = 18, 19  # positions in the v3 ``data_file`` struct


@dataclass(frozen=True)
class Footer:
    """What an added file was found to be: present with its size; for Parquet, its row count,
    schema and column statistics (None for other formats)."""

    rows: int | None = None
    schema: pa.Schema | None = None
    stats: FooterStats | None = None
    partition: str | None = None  # what is wrong with its declared partition values
    values: pa.Table | None = None  # an ORC position delete file's rows (``orc_deletes``)




@dataclass
class _Budget:
    """Footer bytes one commit may still read, shared by the reading threads."""

    remaining: int
    lock: threading.Lock
    kind: str = "footer"  # what is read: "footer" or "partition" (names the budget)

    def charge(self, size: int) -> None:
        with self.lock:
            if size > self.remaining:
                raise CommitTooLarge(f"verifying the commit would read more {self.kind} bytes "
                                     f"than its {self.kind}_bytes_budget")
            self.remaining -= size


@dataclass(frozen=True)
class _Reading:
    """What reading one commit's added files needs: where, under which rules and budgets."""

    table_uuid: str
    io: FileIO
    limits: CommitLimits
    rules: FileRules
    footer_budget: _Budget
    partition_budget: _Budget


def check_added_files(files: Sequence[DataFile], rules: FileRules, io: FileIO, *,
                      table_uuid: str, limits: CommitLimits,
                      inserted: Collection[str] = frozenset()) -> None:
    """Refuse (400) the first of ``files`` (in order) that is not what it claims: missing, of
    another size, or (Parquet) whose footer disagrees with its entry under ``rules``. Files at
    the canonical locations ``inserted`` (an INSERT's) may carry no row ids of their own."""
    if not files:
        return
    reading = _Reading(table_uuid, io, limits, rules,
                       _Budget(limits.footer_bytes_budget, threading.Lock(), "footer"),
                       _Budget(limits.partition_bytes_budget, threading.Lock(), "partition"))
    if len(files) == 1 and _pool_size(files) == 1:  # one local file: no pool to start
        footers = [_footer(files[0], reading)]
    else:
        footers = _read_in_pool(files, reading)
    memo: dict[tuple[bytes, Any, tuple[int, ...]], FileColumns] = {}
    for data_file, footer in zip(files, footers, strict=True):
        _check_against(data_file, footer, rules, memo)
        if canonical_location(data_file.file_path) in inserted:
            _check_new_rows(data_file, footer)


def _read_in_pool(files: Sequence[DataFile], reading: _Reading) -> list[Footer]:
    """Every file's footer, read by ``_pool_size`` threads within ``footer_seconds``."""
    limits = reading.limits
    pool = ThreadPoolExecutor(_pool_size(files), thread_name_prefix="icegov-footers")
    try:
        futures = [pool.submit(_footer, f, reading) for f in files]
        _, pending = wait(futures, timeout=limits.footer_seconds)
    finally:
        pool.shutdown(wait=False, cancel_futures=True)  # a read under way ends on its own
    if pending:
        raise CommitTooLarge(f"verifying the commit's {len(files)} added files took longer "
                             f"than {limits.footer_seconds} s")
    return [future.result() for future in futures]


def _pool_size(files: Sequence[DataFile]) -> int:
    """Threads reading footers: one for local files (reading them is CPU work under the GIL,
    which more threads only contend for: measured 26 ms for 200 files with one, 51 ms with
    eight), up to ``FOOTER_THREADS`` for object stores (each read waits on the network)."""
    local = all(canonical_location(f.file_path).startswith("file:///") for f in files)
    return 1 if local else min(FOOTER_THREADS, len(files))


def _check_against(data_file: DataFile, footer: Footer, rules: FileRules,
                   memo: dict[tuple[bytes, Any, tuple[int, ...]], FileColumns]) -> None:
    """The entry against what the file was found to be (run on every check, never cached
    across commits; within one, files of one schema and content share their column check)."""
    shown = shown_path(data_file.file_path)
    if footer.rows is not None and footer.rows != data_file.record_count:
        raise UnverifiableCommit(f"content file {shown} holds {footer.rows} rows, not the "
                                 f"declared {data_file.record_count}")
    if footer.partition is not None:
        raise UnverifiableCommit(f"data file {shown} {footer.partition}")
    if footer.values is not None:  # an ORC position delete file: its metrics by its values
        problem = position_metrics_problem(data_file, footer.values)
        if problem:
            raise UnverifiableCommit(f"content file {shown}: {problem}")
        return
    columns = None
    if footer.schema is not None:
        key = (footer.schema.serialize().to_pybytes(), data_file.content,
               tuple(data_file.equality_ids or ()))
        columns = memo.get(key)
        if columns is None:
            converted = file_schema(data_file, footer.schema, rules)
            check_columns(data_file, converted, rules)
            columns = memo[key] = FileColumns.of(converted)
    problem = metrics_disagreement(data_file, columns, footer.stats, rules)
    if problem:
        raise UnverifiableCommit(f"content file {shown}: {problem}")


def _check_new_rows(data_file: DataFile, footer: Footer) -> None:
    """An INSERT's rows take the row ids the table assigns (format 3): a file that carries
    non-null ``_row_id`` or ``_last_updated_sequence_number`` values would give its rows
    existing rows' ids (an insert passed off as an update of them)."""
    if footer.schema is None or footer.stats is None:
        return
    names = {f.name for f in footer.schema if _field_id(f) in ROW_LINEAGE_IDS}
    for name in names:
        leaf = footer.stats.get(name)
        if leaf is None or leaf.nulls is None or leaf.nulls < leaf.values:
            raise UnverifiableCommit(
                f"data file {shown_path(data_file.file_path)} of an INSERT carries row lineage "
                f"values ({name!r:.40}): new rows take the ids the table assigns")


def _field_id(field: pa.Field) -> int | None:
    raw = (field.metadata or {}).get(b"PARQUET:field_id")
    try:
        return int(raw) if raw is not None else None
    except ValueError:
        return None


def _footer(data_file: DataFile, reading: _Reading) -> Footer:
    """The file's footer, read after checking it is there, of its size."""
    parquet = data_file.file_format == FileFormat.PARQUET
    path = data_file.file_path
    try:
        require_regular(path, "content file")  # never open a FIFO: it blocks forever
        with reading.io.new_input(path).open() as stream:
            size = stream.seek(0, 2)
            _check_size(data_file, size)
            found = _parquet(stream, size, reading, data_file) if parquet else \
                _not_parquet(stream, size, data_file, reading)
            if data_file.file_format == FileFormat.PUFFIN:
                _check_blob(stream, data_file, size)
    except UnverifiableCommit:
        raise
    except FileNotFoundError as exc:
        raise UnverifiableCommit(f"content file {shown_path(path)} does not exist") from exc
    except Exception as exc:  # any I/O failure: refused alike, nothing echoed
        raise UnverifiableCommit(f"content file {shown_path(path)} could not be read") from exc
    return found


def _not_parquet(stream: Any, size: int, data_file: DataFile, reading: _Reading) -> Footer:
    """Nothing read, but an ORC position delete file that declares bounds: its values."""
    values = orc_position_deletes(stream, size, data_file, reading.footer_budget.charge)
    return Footer() if values is None else Footer(rows=values.num_rows, values=values)


def _check_size(data_file: DataFile, size: int) -> None:
    if size != data_file.file_size_in_bytes:
        raise UnverifiableCommit(
            f"content file {shown_path(data_file.file_path)} is {size} bytes, not the declared "
            f"{data_file.file_size_in_bytes}")


def _parquet(stream: object, size: int, reading: _Reading, data_file: DataFile) -> Footer:
    """Read the footer (its length first, bounded and charged, then its metadata) and, for a
    data file of a partitioned spec, prove its partition values (``partition_proof``)."""
    budget, limits = reading.footer_budget, reading.limits
    shown = shown_path(data_file.file_path)
    not_parquet = UnverifiableCommit(f"content file {shown} could not be read as Parquet")
    if size < _MIN_PARQUET:
        raise not_parquet
    stream.seek(size - _TAIL)  # type: ignore[attr-defined]
    tail = stream.read(_TAIL)  # type: ignore[attr-defined]
    if len(tail) != _TAIL or tail[4:] != _PARQUET_MAGIC:
        raise not_parquet
    length = int.from_bytes(tail[:4], "little")
    if length + _TAIL + len(_PARQUET_MAGIC) > size:
        raise not_parquet
    if length > limits.max_footer_bytes:
        raise CommitTooLarge(f"content file {shown} has a footer of {length} bytes, more than "
                             f"max_footer_bytes ({limits.max_footer_bytes})")
    budget.charge(min(size, max(length + _TAIL, _SPECULATIVE_READ)))
    try:
        stream.seek(0)  # type: ignore[attr-defined]
        parquet = pq.ParquetFile(stream, coerce_int96_timestamp_unit="us")  # as Java reads
        metadata = parquet.metadata
        stats = with_float_spans(parquet, footer_stats(metadata), budget.charge)
        schema = _as_iceberg_reads(parquet)
        return Footer(int(metadata.num_rows), schema, stats,
                      _partition(schema, data_file, reading, stream))
    except (UnverifiableCommit, CommitTooLarge):
        raise
    except Exception as exc:  # not Parquet, truncated, corrupt footer: all refused alike
        raise not_parquet from exc


def _partition(schema: pa.Schema, data_file: DataFile, reading: _Reading,
               stream: Any) -> str | None:
    """What is wrong with a data file's declared partition values (None for delete files and
    files of unpartitioned specs; 400 for a spec the table does not have)."""
    if data_file.content != DataFileContent.DATA:
        return None
    spec = reading.rules.spec_of(_spec_id(data_file))
    if spec is None:
        return f"names partition spec {_spec_id(data_file)}, which the table does not have"
    if spec.is_unpartitioned():
        return None
    converted = file_schema(data_file, schema, reading.rules)

    def open_file(**options: Any) -> pq.ParquetFile:
        return pq.ParquetFile(stream, **options)

    return partition_problem(open_file, data_file, spec, converted,
                             reading.partition_budget.charge)


def _spec_id(data_file: DataFile) -> int | None:
    """The spec of the manifest that named the file (pyiceberg sets it as it reads one)."""
    return getattr(data_file, "_spec_id", None)


def _as_iceberg_reads(parquet: pq.ParquetFile) -> pa.Schema:
    """The file's Arrow schema with its INT96 columns as Iceberg reads them: ``timestamptz``
    (Spark and Hive wrote them before Iceberg; pyarrow reads them as zone-less timestamps)."""
    int96 = {tuple(column.path.split(".")) for column in
             (parquet.schema.column(i) for i in range(len(parquet.schema)))
             if column.physical_type == "INT96"}
    schema = parquet.schema_arrow
    if not int96:
        return schema
    return pa.schema([_zoned(f, (f.name,), int96) for f in schema], metadata=schema.metadata)


def _zoned(field: pa.Field, path: tuple[str, ...], int96: set[tuple[str, ...]]) -> pa.Field:
    if path in int96 and pa.types.is_timestamp(field.type) and field.type.tz is None:
        return field.with_type(pa.timestamp(field.type.unit, tz="UTC"))
    if pa.types.is_struct(field.type):
        children = [_zoned(field.type.field(i), (*path, field.type.field(i).name), int96)
                    for i in range(field.type.num_fields)]
        return field.with_type(pa.struct(children))
    return field


def _check_blob(stream: object, data_file: DataFile, size: int) -> None:
    """A deletion vector's blob must lie inside its Puffin file, after the leading magic."""
    shown = shown_path(data_file.file_path)
    offset = _field(data_file, _CONTENT_OFFSET)
    length = _field(data_file, _CONTENT_SIZE)
    if offset is None or length is None:
        return  # not a deletion vector: a Puffin file is read by nothing else
    if offset < len(_PUFFIN_MAGIC) or length <= 0 or offset + length > size:
        raise UnverifiableCommit(f"deletion vector file {shown} has no blob at offset {offset} "
                                 f"of {length} bytes (the file is {size} bytes)")
    stream.seek(0)  # type: ignore[attr-defined]
    if stream.read(len(_PUFFIN_MAGIC)) != _PUFFIN_MAGIC:  # type: ignore[attr-defined]
        raise UnverifiableCommit(f"deletion vector file {shown} is not a Puffin file")


def _field(data_file: DataFile, position: int) -> int | None:
    """A v3 ``data_file`` field, when the record has it (v1/v2 records do not)."""
    try:
        value = data_file[position]
    except IndexError:
        return None
    return value if type(value) is int else None


def check_commit_files(changes: Iterable[tuple[SnapshotChange, Action]],
                       base: TableMetadata | None, updates: Iterable[Any], io: FileIO,
                       limits: CommitLimits) -> None:
    """``check_added_files`` for every file an ordinary commit's snapshots add (``changes``,
    each with its classification), under the table's rules once the commit's ``updates`` apply
    to ``base`` (None: a create). Files an INSERT adds must leave row lineage to the table."""
    updates = list(updates)
    added = [f.data_file for change, _ in changes for f in change.added]
    if any(f is None for f in added):
        raise UnverifiableCommit("cannot verify the commit: an added file has no manifest entry")
    inserted = {f.key[1] for change, action in changes if action == Action.INSERT
                for f in change.added}
    uuid = str(base.table_uuid) if base is not None else ""
    check_added_files([f for f in added if f is not None], FileRules.after(base, updates), io,
                      table_uuid=uuid, limits=limits, inserted=inserted)
