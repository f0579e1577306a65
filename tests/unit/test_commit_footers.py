"""Added files must be what their manifest entries claim (``proxy.commits.footers``), on every
commit path: an ordinary commit's added data and delete files, and a data operation's appends.

The base is a real table ``db.t (id long, name string, score double)`` with one data file; each
test writes real Parquet (or Puffin) files under the table and an entry that states ``claims``
about them, then classifies a commit adding them. Symbolic links are resolved for local files.
"""

from __future__ import annotations

import itertools
import json
import math
import os
from decimal import Decimal
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pyarrow as pa
import pyarrow.orc as orc
import pyarrow.parquet as pq
import pytest
from pyiceberg.conversions import to_bytes
from pyiceberg.io.pyarrow import parquet_file_to_data_file, schema_to_pyarrow
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat, ManifestEntryStatus
from pyiceberg.schema import Schema
from pyiceberg.typedef import Record
from pyiceberg.types import DecimalType, DoubleType, LongType, NestedField

from proxy.commits import CommitIntent, UnverifiableCommit, classify_commit
from proxy.commits import footers as footers_module
from proxy.commits.confine import canonical_location
from proxy.commits.limits import CommitLimits
from proxy.commits.manifests import CommitTooLarge
from proxy.errors import IcebergError
from proxy.governance import Action
from tests.support.row_files import RowTable, v3_delete_manifest
from tests.unit.test_operations import Tbl

ADDED = ManifestEntryStatus.ADDED
SCHEMA = pa.schema([pa.field("id", pa.int64(), False), ("name", pa.string()),
                    ("score", pa.float64())])
ROWS = pa.table({"id": [1, 2, 3], "name": ["a", "b", None], "score": [1.5, math.nan, None]},
                schema=SCHEMA)
_ids = itertools.count(5000)


def _field(name: str, kind: pa.DataType, field_id: int, nullable: bool = True) -> pa.Field:
    return pa.field(name, kind, nullable, {b"PARQUET:field_id": str(field_id).encode()})


@pytest.fixture()
def rt(tmp_path: Path) -> RowTable:
    return RowTable.create(tmp_path, SCHEMA, [ROWS])


def insert(rt: RowTable, *files: DataFile, deletes: bool = False,
           limits: CommitLimits | None = None, updates: list[dict[str, Any]] = ()) -> CommitIntent:
    """Classify a commit adding ``files`` (one new manifest on top of the table's)."""
    sid = next(_ids)
    manifest = rt.crafter.manifest(sid, [(ADDED, f, 0) for f in files], deletes=deletes)
    snapshot = rt.crafter.snapshot(sid, [manifest, *rt.crafter.parent_manifests()],
                                   "delete" if deletes else "append")
    body = rt.crafter.body(snapshot)
    body["updates"][:0] = list(updates)
    return classify_commit(body, rt.table.metadata, rt.table.io, limits=limits or CommitLimits())


def raw_file(rt: RowTable, name: str, rows: pa.Table, **claims: Any) -> DataFile:
    """A data file of ``rows`` written exactly as given (its own field ids and types)."""
    return rt._parquet(f"{rt.path(name)}.parquet", rows, DataFileContent.DATA, **claims)


def measured(rt: RowTable, name: str, rows: pa.Table) -> DataFile:
    """A data file of ``rows`` with the metrics pyiceberg measures from its footer."""
    written = rt.write_data(name, rows)
    return parquet_file_to_data_file(rt.table.io, rt.table.metadata, written.file_path)


def in_spec(data_file: DataFile, spec_id: int = 0) -> DataFile:
    """``data_file`` under a spec of the table, as reading its manifest sets it (files handed
    to ``check_added_files`` directly, not through a commit's manifests)."""
    data_file.spec_id = spec_id
    return data_file


def long_bound(value: int) -> bytes:
    return to_bytes(LongType(), value)


# files that are what they claim land --------------------------------------------------------

def test_honest_files_with_their_measured_metrics_are_an_insert(rt: RowTable) -> None:
    files = [measured(rt, f"ok{i}", ROWS.slice(i, 2)) for i in range(3)]
    assert files[0].lower_bounds and files[0].null_value_counts, "pyiceberg measured metrics"
    intent = insert(rt, *files)
    assert intent.actions == {Action.INSERT} and intent.evidence.verified


def test_allowed_promotions_are_accepted(tmp_path: Path) -> None:
    schema = Schema(NestedField(1, "id", LongType(), required=True),
                    NestedField(2, "score", DoubleType()),
                    NestedField(3, "amount", DecimalType(12, 2)))
    arrow = schema_to_pyarrow(schema)
    rt = RowTable.create(tmp_path, schema, [pa.table(
        {"id": [1], "score": [1.0], "amount": [Decimal("1.25")]}, schema=arrow)])
    narrow = pa.table([pa.array([5, 6], pa.int32()), pa.array([0.5, 2.5], pa.float32()),
                       pa.array([Decimal("3.10"), Decimal("-4.00")], pa.decimal128(9, 2))],
                      schema=pa.schema([_field("id", pa.int32(), 1, False),
                                        _field("score", pa.float32(), 2),
                                        _field("amount", pa.decimal128(9, 2), 3)]))
    claims = {"lower_bounds": {1: to_bytes(LongType(), 5), 2: to_bytes(DoubleType(), 0.5),
                               3: to_bytes(DecimalType(12, 2), Decimal("-4.00"))},
              "upper_bounds": {1: long_bound(6), 3: to_bytes(DecimalType(12, 2), Decimal("3.10"))},
              "value_counts": {1: 2, 2: 2, 3: 2}, "null_value_counts": {1: 0, 2: 0, 3: 0}}
    assert insert(rt, raw_file(rt, "narrow", narrow, **claims)).actions == {Action.INSERT}


def test_a_column_added_by_the_same_commit_may_be_in_its_files(rt: RowTable) -> None:
    wider = ROWS.cast(schema_to_pyarrow(rt.table.schema())).append_column(
        _field("extra", pa.string(), 4), pa.array(["x", "y", "z"]))
    schema = json.loads(rt.table.schema().model_dump_json())
    schema["schema-id"], schema["fields"] = 1, [
        *schema["fields"], {"id": 4, "name": "extra", "type": "string", "required": False}]
    updates = [{"action": "add-schema", "schema": schema},
               {"action": "set-current-schema", "schema-id": -1}]
    data = raw_file(rt, "wider", wider)
    with pytest.raises(UnverifiableCommit, match="not a column of the table"):
        insert(rt, data)
    assert Action.INSERT in insert(rt, data, updates=updates).actions


# files that are not what they claim are refused ---------------------------------------------

@pytest.mark.parametrize(("fields", "values", "why"), [
    ([_field("id", pa.int64(), 1, False), _field("hidden", pa.string(), 99)],
     [[1], ["x"]], "has a column that is not a column of the table"),  # a future column id
    ([_field("id", pa.string(), 1)], [["1"]], "with a type that does not read as the table's"),
    ([_field("id", pa.int64(), 2)], [[1]], "with a type that does not read as the table's"),
    ([_field("id", pa.float64(), 1)], [[1.0]], "with a type that does not read as the table's"),
])
def test_files_whose_columns_are_not_the_tables_are_refused(
        rt: RowTable, fields: list[pa.Field], values: list[list[Any]], why: str) -> None:
    rows = pa.table(values, schema=pa.schema(fields))
    with pytest.raises(UnverifiableCommit, match=why):
        insert(rt, raw_file(rt, "alien", rows))


@pytest.mark.parametrize(("claims", "why"), [
    ({"record_count": 5}, "holds 3 rows, not the declared 5"),
    ({"record_count": 0}, "holds 3 rows, not the declared 0"),
    ({"lower_bounds": {1: long_bound(2)}}, "lower bound above the least value"),
    ({"upper_bounds": {1: long_bound(2)}}, "upper bound below the greatest value"),
    ({"lower_bounds": {2: b"b"}}, "lower bound above"),
    ({"upper_bounds": {2: b"a"}}, "upper bound below"),
    ({"null_value_counts": {2: 0}}, "declare 0 nulls, the footer 1"),
    ({"value_counts": {1: 30}}, "declare 30 values, the footer 3"),
    ({"nan_value_counts": {1: 1}}, "NaN values, more than the column can hold"),
    ({"nan_value_counts": {3: 3}}, "NaN values, more than the column can hold"),
    ({"lower_bounds": {7: long_bound(0)}}, "field id 7, which is no primitive column"),
])
def test_entries_the_footer_contradicts_are_refused(rt: RowTable, claims: dict[str, Any],
                                                    why: str) -> None:
    with pytest.raises(UnverifiableCommit, match=why):
        insert(rt, rt.write_data("lying", ROWS, **claims))


def test_a_file_of_another_size_or_none_at_all_is_refused(rt: RowTable) -> None:
    honest = rt.write_data("sized", ROWS)
    resized = DataFile.from_args(content=DataFileContent.DATA, file_path=honest.file_path,
                                 file_format=FileFormat.PARQUET, partition=Record(),
                                 record_count=3, file_size_in_bytes=honest.file_size_in_bytes + 1)
    with pytest.raises(UnverifiableCommit, match=r"is \d+ bytes, not the declared"):
        insert(rt, resized)
    Path(urlparse(honest.file_path).path).unlink()
    with pytest.raises(UnverifiableCommit, match="does not exist"):
        insert(rt, honest)


def test_a_file_that_is_not_parquet_is_refused(rt: RowTable) -> None:
    path = f"{rt.path('text')}.parquet"
    Path(urlparse(path).path).write_bytes(b"PAR1 not really a parquet file PAR1")
    fake = DataFile.from_args(content=DataFileContent.DATA, file_path=path,
                              file_format=FileFormat.PARQUET, partition=Record(), record_count=1,
                              file_size_in_bytes=len(rt.table.io.new_input(path)))
    with pytest.raises(UnverifiableCommit, match="could not be read as Parquet"):
        insert(rt, fake)


def test_bounds_a_footer_without_statistics_cannot_prove_are_refused(rt: RowTable) -> None:
    path = f"{rt.path('nostats')}.parquet"
    with rt.table.io.new_output(path).create() as out:
        pq.write_table(ROWS.cast(schema_to_pyarrow(rt.table.schema())), out,
                       write_statistics=False)
    size = len(rt.table.io.new_input(path))

    def entry(**claims: Any) -> DataFile:
        return DataFile.from_args(content=DataFileContent.DATA, file_path=path,
                                  file_format=FileFormat.PARQUET, partition=Record(),
                                  record_count=3, file_size_in_bytes=size, **claims)

    for claims in ({"lower_bounds": {1: long_bound(1)}}, {"upper_bounds": {1: long_bound(9)}},
                   {"null_value_counts": {1: 0}}):
        with pytest.raises(UnverifiableCommit, match=r"cannot prove|does not record"):
            insert(rt, entry(**claims))
    assert insert(rt, entry(value_counts={1: 3})).actions == {Action.INSERT}, "no bounds claimed"


def test_bounds_on_a_column_of_only_nulls_prove_nothing_and_hide_nothing(rt: RowTable) -> None:
    rows = pa.table({"id": [1, 2], "name": [None, None], "score": [None, None]}, schema=SCHEMA)
    data = rt.write_data("nulls", rows, lower_bounds={2: b"zz"}, upper_bounds={2: b"zz"},
                         null_value_counts={2: 2})
    assert insert(rt, data).actions == {Action.INSERT}


def test_non_parquet_files_may_declare_value_counts_only(rt: RowTable) -> None:
    path = f"{rt.path('avro')}.avro"
    Path(urlparse(path).path).write_bytes(b"Obj\x01 whatever")
    size = len(rt.table.io.new_input(path))

    def entry(**claims: Any) -> DataFile:
        return DataFile.from_args(content=DataFileContent.DATA, file_path=path,
                                  file_format=FileFormat.AVRO, partition=Record(),
                                  record_count=1, file_size_in_bytes=size, **claims)

    with pytest.raises(UnverifiableCommit, match="may declare value counts only"):
        insert(rt, entry(lower_bounds={1: long_bound(1)}))
    assert Action.INSERT in insert(rt, entry(value_counts={1: 1})).actions


# delete files --------------------------------------------------------------------------------

def test_a_position_delete_file_needs_the_reserved_columns(rt: RowTable) -> None:
    [(data, _)] = rt.data_files()
    honest = rt.write_positions("pd", [(data.file_path, 0)])
    assert insert(rt, honest, deletes=True).actions == {Action.DELETE}
    wrong = pa.table([[data.file_path], pa.array([0], pa.int64())], schema=pa.schema([
        _field("file_path", pa.string(), 2, False), _field("pos", pa.int64(), 1, False)]))
    shaped = rt._parquet(f"{rt.path('pd-wrong')}.parquet", wrong,
                         DataFileContent.POSITION_DELETES)
    with pytest.raises(UnverifiableCommit, match="needs the columns file_path"):
        insert(rt, shaped, deletes=True)


def test_an_equality_delete_file_needs_its_equality_columns(rt: RowTable) -> None:
    missing = rt.write_equality("eq", pa.table({"name": ["a"]}), [1])
    with pytest.raises(UnverifiableCommit, match="lacks its equality-ids"):
        insert(rt, missing, deletes=True)
    assert insert(rt, rt.write_equality("eq2", pa.table({"id": [1]}), [1]),
                  deletes=True).actions == {Action.DELETE}


def test_a_position_delete_file_whose_path_bounds_lie_is_refused(rt: RowTable) -> None:
    [(data, _)] = rt.data_files()
    lying = rt.write_positions("pd", [(data.file_path, 0)], path_bounds=("a", "b"))
    with pytest.raises(UnverifiableCommit, match="upper bound below"):
        insert(rt, lying, deletes=True)


def orc_positions(rt: RowTable, name: str, deleted: list[tuple[str, int]],
                  path_bounds: tuple[str, str], declared: int | None = None) -> DataFile:
    """An ORC position delete file with ``file_path`` bounds, as Spark's merge-on-read writes."""
    rows = pa.table({"file_path": [p for p, _ in deleted],
                     "pos": pa.array([i for _, i in deleted], pa.int64())})
    path = f"{rt.path(name)}.orc"
    with rt.table.io.new_output(path).create() as out:
        orc.write_table(rows, out)
    lower, upper = path_bounds
    return DataFile.from_args(
        content=DataFileContent.POSITION_DELETES, file_path=path, file_format=FileFormat.ORC,
        partition=Record(), record_count=len(deleted) if declared is None else declared,
        file_size_in_bytes=len(rt.table.io.new_input(path)),
        lower_bounds={2147483546: lower.encode()}, upper_bounds={2147483546: upper.encode()},
        value_counts={2147483546: len(deleted), 2147483545: len(deleted)})


def test_an_orc_position_delete_file_proves_its_path_bounds_by_its_values(rt: RowTable) -> None:
    [(data, _)] = rt.data_files()
    scoped = (data.file_path, data.file_path)
    honest = orc_positions(rt, "orc-pd", [(data.file_path, 0)], scoped)
    assert insert(rt, honest, deletes=True).actions == {Action.DELETE}
    lying = orc_positions(rt, "orc-lie", [(data.file_path, 0)], ("a", "b"))
    with pytest.raises(UnverifiableCommit, match="upper bound below"):
        insert(rt, lying, deletes=True)
    miscounted = orc_positions(rt, "orc-count", [(data.file_path, 0), (data.file_path, 1)],
                               scoped, declared=1)
    with pytest.raises(UnverifiableCommit, match="holds 2 rows, not the declared 1"):
        insert(rt, miscounted, deletes=True)


def test_a_deletion_vector_blob_must_lie_inside_its_file(rt: RowTable) -> None:
    [(data, _)] = rt.data_files()
    vector = rt.write_vector("dv", data.file_path, [0])
    outside = DataFile.from_args(
        _table_format_version=3, content=DataFileContent.POSITION_DELETES,
        file_path=vector.file_path, file_format=FileFormat.PUFFIN, partition=Record(),
        record_count=1, file_size_in_bytes=vector.file_size_in_bytes,
        referenced_data_file=data.file_path, content_offset=vector.file_size_in_bytes - 2,
        content_size_in_bytes=64)
    sid = next(_ids)
    manifest = v3_delete_manifest(rt.crafter, sid, [(ADDED, outside, 0)])
    snapshot = rt.crafter.snapshot(sid, [manifest, *rt.crafter.parent_manifests()], "delete")
    with pytest.raises(UnverifiableCommit, match="has no blob at offset"):
        classify_commit(rt.crafter.body(snapshot), rt.table.metadata, rt.table.io)


# files are identified by what they are: symbolic links resolved ------------------------------

def test_a_link_under_the_table_to_another_tables_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "ours").mkdir()
    (tmp_path / "theirs").mkdir()
    ours = RowTable.create(tmp_path / "ours", SCHEMA, [ROWS])
    theirs = RowTable.create(tmp_path / "theirs", SCHEMA, [ROWS])
    [(their_file, _)] = theirs.data_files()
    link = Path(urlparse(ours.path("borrowed")).path + ".parquet")
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(urlparse(their_file.file_path).path)
    borrowed = DataFile.from_args(content=DataFileContent.DATA, file_path=link.as_uri(),
                                  file_format=FileFormat.PARQUET, partition=Record(),
                                  record_count=3, file_size_in_bytes=their_file.file_size_in_bytes)
    with pytest.raises(UnverifiableCommit, match="not under the table's locations"):
        insert(ours, borrowed)
    folder = Path(urlparse(ours.path("x")).path).parent / "linked-folder"
    folder.symlink_to(Path(urlparse(their_file.file_path).path).parent)
    name = Path(their_file.file_path).name
    through = DataFile.from_args(
        content=DataFileContent.DATA, file_path=f"{folder.as_uri()}/{name}",
        file_format=FileFormat.PARQUET, partition=Record(), record_count=3,
        file_size_in_bytes=their_file.file_size_in_bytes)
    with pytest.raises(UnverifiableCommit, match="not under the table's locations"):
        insert(ours, through)


def test_a_link_inside_the_table_is_followed_and_admitted(rt: RowTable) -> None:
    data = measured(rt, "target", ROWS)
    link = Path(urlparse(rt.path("alias")).path + ".parquet")
    link.symlink_to(urlparse(data.file_path).path)
    aliased = parquet_file_to_data_file(rt.table.io, rt.table.metadata, link.as_uri())
    assert insert(rt, aliased).actions == {Action.INSERT}


def test_a_table_located_through_a_link_still_admits_its_files(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "alias").symlink_to(tmp_path / "real")
    rt = RowTable.create(tmp_path / "alias", SCHEMA, [ROWS])
    assert insert(rt, measured(rt, "more", ROWS)).actions == {Action.INSERT}


# limits --------------------------------------------------------------------------------------

def test_footer_reading_is_bounded(rt: RowTable) -> None:
    files = [rt.write_data(f"b{i}", ROWS) for i in range(3)]
    with pytest.raises(CommitTooLarge, match="footer_bytes_budget"):
        insert(rt, *files, limits=CommitLimits(footer_bytes_budget=100))
    with pytest.raises(CommitTooLarge, match="max_footer_bytes"):
        insert(rt, *files, limits=CommitLimits(max_footer_bytes=10))
    many = [rt.write_data(f"t{i}", ROWS) for i in range(200)]
    with pytest.raises(CommitTooLarge, match="took longer than 1e-06 s"):
        insert(rt, *many, limits=CommitLimits(footer_seconds=1e-6))
    assert insert(rt, *files).actions == {Action.INSERT}


def test_many_files_are_checked_and_the_first_bad_one_is_named(rt: RowTable) -> None:
    files = [rt.write_data(f"m{i}", ROWS) for i in range(24)]
    files[17] = rt.write_data("bad17", ROWS, record_count=4)
    files[20] = rt.write_data("bad20", ROWS, record_count=9)
    with pytest.raises(UnverifiableCommit, match="bad17"):
        insert(rt, *files)


# data operations: one checker ---------------------------------------------------------------

def _wire(tbl: Tbl, path: str, rows: int, **extra: Any) -> dict[str, Any]:
    return {"content": "data", "file-path": path, "file-format": "parquet",
            "spec-id": tbl.table.metadata.default_spec_id, "partition": ["a"],
            "record-count": rows, "file-size-in-bytes": len(tbl.table.io.new_input(path)),
            **extra}


def _status(tbl: Tbl, update: dict[str, Any]) -> tuple[int, str]:
    try:
        tbl.build(update)
    except IcebergError as exc:
        return exc.status, exc.message
    return 200, ""


def test_append_files_with_bounds_the_footer_contradicts_is_refused(tmp_path: Path) -> None:
    tbl = Tbl(tmp_path)
    [written] = tbl.write([1, 2])
    [honest] = tbl.wire([written])
    assert _status(tbl, {"action": "append-files", "data-files": [honest]}) == (200, "")
    id_field = tbl.table.schema().find_field("id").field_id
    lying = {**honest, "upper-bounds": {"keys": [id_field], "values": [long_bound(1).hex()]}}
    status, message = _status(tbl, {"action": "append-files", "data-files": [lying]})
    assert status == 400 and "upper bound below the greatest value" in message, message


def test_append_files_through_a_link_to_another_table_is_refused(tmp_path: Path) -> None:
    tbl = Tbl(tmp_path)
    other = Tbl(tmp_path, name="db.other", catalog=tbl.catalog)
    [theirs] = other.write([1, 2])
    link = Path(urlparse(tbl.table.location()).path) / "data" / "p=a" / "linked.parquet"
    link.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(urlparse(theirs.file_path).path, link)
    status, message = _status(tbl, {"action": "append-files",
                                    "data-files": [_wire(tbl, f"file://{link}", 2)]})
    assert status == 400 and "not under the table's locations" in message, message


# object stores: footers read in parallel ----------------------------------------------------

def test_object_store_footers_are_read_in_parallel_and_checked_alike(rt: RowTable) -> None:
    from pyiceberg.io.pyarrow import PyArrowFileIO

    from proxy.commits.columns import FileRules
    from tests.support.s3 import s3_server

    arrow = schema_to_pyarrow(rt.table.schema())
    with s3_server() as store:
        io = PyArrowFileIO(store.properties)
        files = []
        for i in range(12):
            path = f"{store.bucket_uri}/t/data/f{i}.parquet"
            with io.new_output(path).create() as out:
                pq.write_table(ROWS.cast(arrow), out)
            files.append(in_spec(parquet_file_to_data_file(io, rt.table.metadata, path)))
        assert footers_module._pool_size(files) == footers_module.FOOTER_THREADS
        rules = FileRules.of(rt.table.metadata)
        footers_module.check_added_files(files, rules, io, table_uuid="t",
                                         limits=CommitLimits())
        files[7] = in_spec(DataFile.from_args(
            content=DataFileContent.DATA, file_path=files[7].file_path,
            file_format=FileFormat.PARQUET, partition=Record(), record_count=2,
            file_size_in_bytes=files[7].file_size_in_bytes))
        with pytest.raises(UnverifiableCommit, match=r"f7.parquet' holds 3 rows, not the"):
            footers_module.check_added_files(files, rules, io, table_uuid="t",
                                             limits=CommitLimits())


# format 3: row lineage columns -----------------------------------------------------------------

def test_row_lineage_columns_are_kept_by_updates_but_not_claimed_by_inserts(rt: RowTable) -> None:
    from dataclasses import replace

    from proxy.commits.columns import FileRules

    def lineage_file(name: str, row_ids: list[int | None]) -> DataFile:
        rows = ROWS.cast(schema_to_pyarrow(rt.table.schema())).append_column(
            _field("_row_id", pa.int64(), 2147483540), pa.array(row_ids, pa.int64()))
        return in_spec(raw_file(rt, name, rows))

    v2 = FileRules.of(rt.table.metadata)
    v3 = replace(v2, format_version=3)
    kept, fresh = lineage_file("kept", [0, 1, 2]), lineage_file("fresh", [None] * 3)

    def check(data: DataFile, rules: FileRules, inserted: bool) -> None:
        footers_module.check_added_files(
            [data], rules, rt.table.io, table_uuid="t", limits=CommitLimits(),
            inserted={canonical_location(data.file_path)} if inserted else frozenset())

    with pytest.raises(UnverifiableCommit, match="not a column of the table"):
        check(kept, v2, inserted=False)  # format 2 has no row lineage
    check(kept, v3, inserted=False)  # an UPDATE keeps its rows' ids
    check(fresh, v3, inserted=True)  # null ids: the table assigns them
    with pytest.raises(UnverifiableCommit, match="of an INSERT carries row lineage values"):
        check(kept, v3, inserted=True)


def test_counts_of_a_nested_column_may_leave_out_null_parents_only(tmp_path: Path) -> None:
    from pyiceberg.types import StructType

    schema = Schema(NestedField(1, "id", LongType(), required=True),
                    NestedField(2, "point", StructType(NestedField(3, "x", DoubleType()))))
    arrow = schema_to_pyarrow(schema)
    rows = pa.table({"id": [1, 2, 3], "point": [{"x": 1.0}, None, {"x": None}]}, schema=arrow)
    rt = RowTable.create(tmp_path, schema, [rows])  # the footer: x has 3 values, 2 nulls
    for honest in ({3: 3}, {3: 2}), ({3: 2}, {3: 1}):  # as the footer counts; as Java does
        data = rt.write_data("n", rows, value_counts=honest[0], null_value_counts=honest[1])
        assert insert(rt, data).actions == {Action.INSERT}
    for lying, why in ((({3: 4}, {3: 2}), "declare 4 values, the footer 1 to 3"),
                       (({3: 3}, {3: 3}), "declare 3 nulls, the footer at most 2"),
                       (({3: 2}, {3: 2}), "declare 0 non-null values, the footer 1")):
        data = rt.write_data("n", rows, value_counts=lying[0], null_value_counts=lying[1])
        with pytest.raises(UnverifiableCommit, match=why):
            insert(rt, data)
