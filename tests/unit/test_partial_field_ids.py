"""A Parquet file that gives field ids to some columns only is read differently by the readers.

Java (``ParquetSchemaUtil.hasIds``) reads a file by field id as soon as *one* column has one,
and ignores the columns without; pyiceberg applies the table's name mapping unless *every*
column has one. On a table with a name mapping (what ``add_files`` and ``migrate`` leave), a
file whose ``name`` column carries no id reads one way in icegov's checks (pyiceberg: by name,
the names) and another in Spark (by id: no column 2, every name null): a REWRITE or a
copy-on-write DELETE passed row checks that Java readers would not see, and an INSERT passed
footer checks for a file Java cannot read. Such a file is refused (footers: 400) and never
counts as read (row checks: the stricter classification).
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat, ManifestEntryStatus
from pyiceberg.table.name_mapping import create_mapping_from_schema
from pyiceberg.typedef import Record

from proxy.commits import classify_commit
from proxy.commits.intent import UnverifiableCommit
from proxy.commits.limits import CommitLimits
from proxy.governance import Action
from tests.support.row_files import RowTable

ADDED, DELETED = ManifestEntryStatus.ADDED, ManifestEntryStatus.DELETED
SCHEMA = pa.schema([pa.field("id", pa.int64(), False), ("name", pa.string())])
_ids = itertools.count(7100)


def rows(*ids: int) -> pa.Table:
    return pa.table({"id": list(ids), "name": [f"n{i}" for i in ids]}, schema=SCHEMA)


@pytest.fixture()
def rt(tmp_path: Path) -> RowTable:
    table = RowTable.create(tmp_path, SCHEMA, [rows(1, 2, 3, 4)])
    mapping = create_mapping_from_schema(table.table.schema()).model_dump_json()
    with table.table.transaction() as transaction:
        transaction.set_properties({"schema.name-mapping.default": mapping})
    table.crafter.table = table.catalog.load_table("db.t")
    return table


def partial_ids(rt: RowTable, ids: list[int], names: list[str]) -> DataFile:
    """``id`` with field id 1, the right names without an id (Java reads them as nulls)."""
    field = {b"PARQUET:field_id": b"1"}
    schema = pa.schema([pa.field("id", pa.int64(), False, metadata=field),
                        pa.field("name", pa.string())])
    table = pa.table({"id": ids, "name": names}, schema=schema)
    path = rt.path("partial") + ".parquet"
    with rt.table.io.new_output(path).create() as out:
        pq.write_table(table, out)
    return DataFile.from_args(content=DataFileContent.DATA, file_path=path,
                              file_format=FileFormat.PARQUET, partition=Record(),
                              record_count=len(ids),
                              file_size_in_bytes=len(rt.table.io.new_input(path)))


def duplicated_id(rt: RowTable, names: list[str], other: list[str]) -> DataFile:
    """Field id 2 on two columns: ``name`` and ``other`` (pyiceberg reads the last)."""
    def field(name: str, kind: pa.DataType, field_id: int) -> pa.Field:
        return pa.field(name, kind, metadata={b"PARQUET:field_id": str(field_id).encode()})
    schema = pa.schema([field("id", pa.int64(), 1), field("name", pa.string(), 2),
                        field("other", pa.string(), 2)])
    table = pa.table({"id": list(range(1, len(names) + 1)), "name": names, "other": other},
                     schema=schema)
    path = rt.path("duplicated") + ".parquet"
    with rt.table.io.new_output(path).create() as out:
        pq.write_table(table, out)
    return DataFile.from_args(content=DataFileContent.DATA, file_path=path,
                              file_format=FileFormat.PARQUET, partition=Record(),
                              record_count=len(names),
                              file_size_in_bytes=len(rt.table.io.new_input(path)))


def classify(rt: RowTable, manifests: list[Any], operation: str, sid: int) -> Any:
    body = rt.crafter.body(rt.crafter.snapshot(sid, manifests, operation))
    return classify_commit(body, rt.table.metadata, rt.table.io, limits=CommitLimits())


def test_a_partially_identified_file_is_refused_on_insert(rt: RowTable) -> None:
    sid = next(_ids)
    added = partial_ids(rt, [5], ["n5"])
    manifest = rt.crafter.manifest(sid, [(ADDED, added, 0)])
    with pytest.raises(UnverifiableCommit, match="field ids"):
        classify(rt, [manifest, *rt.crafter.parent_manifests()], "append", sid)


@pytest.mark.parametrize(("operation", "kept"), [("replace", [1, 2, 3, 4]),
                                                 ("overwrite", [1, 2, 3])])
def test_a_partially_identified_file_is_never_read_as_the_rows(rt: RowTable, operation: str,
                                                               kept: list[int]) -> None:
    """As a compaction (REWRITE) or a copy-on-write DELETE: Java would read every name as
    null; the file's rows cannot be compared, so neither holds."""
    [(f1, seq)] = rt.data_files()
    sid = next(_ids)
    added = partial_ids(rt, kept, [f"n{i}" for i in kept])
    manifest = rt.crafter.manifest(sid, [(DELETED, f1, seq), (ADDED, added, 0)])
    try:
        intent = classify(rt, [manifest], operation, sid)
    except UnverifiableCommit as refused:  # the footer check refuses it outright
        assert "field ids" in str(refused)
        return
    assert Action.UPDATE in intent.actions, intent.evidence.row_checks


def test_a_file_giving_one_id_to_two_columns_is_refused(rt: RowTable) -> None:
    """Which of the two a reader takes is its own choice: pyiceberg took the last, so a
    compaction with the real names in it and anything in the first passed as REWRITE."""
    [(f1, seq)] = rt.data_files()
    sid = next(_ids)
    added = duplicated_id(rt, ["x"] * 4, ["n1", "n2", "n3", "n4"])
    manifest = rt.crafter.manifest(sid, [(DELETED, f1, seq), (ADDED, added, 0)])
    with pytest.raises(UnverifiableCommit, match="one Iceberg field id to several columns"):
        classify(rt, [manifest], "replace", sid)
