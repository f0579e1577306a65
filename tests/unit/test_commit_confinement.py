"""A commit may reference only the table's own files, and its verification is bounded.

Attacks: listing another table's manifest (its rows become readable here) or data file (a purge
of this table deletes it), probing icegov's host (``/etc/passwd`` vs a missing file must look the
same), escaping with ``..``; legit commits must pass whichever way the location is spelled
(``/x``, ``file:/x``, ``file:///x``). Limits: manifests per list, entries per commit, updates.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pyarrow as pa
import pytest
from pyiceberg.manifest import DataFileContent, ManifestEntryStatus
from pyiceberg.table.metadata import TableMetadata

from proxy.commits import (
    CommitLimits,
    CommitTooLarge,
    UnverifiableCommit,
    check_commit_shape,
    classify_commit,
    table_locations,
)
from proxy.commits.confine import parse_location
from proxy.errors import PayloadTooLarge
from proxy.governance import Action
from tests.support.commit_capture import Crafter, content_file, new_data
from tests.unit.test_classify_crafted import confined_crafter

ADDED = ManifestEntryStatus.ADDED
OUTSIDE = "is not under the table's locations"
_ids = itertools.count(9000)
SCHEMA = pa.schema([("id", pa.int64())])


@pytest.fixture()
def crafter(tmp_path: Path) -> Crafter:
    return confined_crafter(tmp_path)


def local(location: str) -> Path:
    return Path(urlparse(location).path)


def other_table(crafter: Crafter) -> Any:
    """Another table in the same warehouse, with one append."""
    other = crafter.catalog.create_table("db.other", SCHEMA)
    other.append(pa.table({"id": [42]}, schema=SCHEMA))
    return other


def append_body(crafter: Crafter, manifests: list[Any]) -> dict[str, Any]:
    sid = next(_ids)
    return crafter.body(crafter.snapshot(sid, manifests, "append"))


def with_list(crafter: Crafter, manifest_list: str) -> dict[str, Any]:
    body = append_body(crafter, crafter.parent_manifests())
    body["updates"][0]["snapshot"]["manifest-list"] = manifest_list
    return body


def refusal(crafter: Crafter, body: dict[str, Any]) -> str:
    with pytest.raises(UnverifiableCommit) as exc:
        crafter.classify(body)
    assert exc.value.status == 400
    return exc.value.message


def test_another_tables_manifest_is_refused(crafter: Crafter) -> None:
    other = other_table(crafter)
    [foreign] = other.current_snapshot().manifests(other.io)
    message = refusal(crafter, append_body(crafter, [foreign, *crafter.parent_manifests()]))
    assert OUTSIDE in message and "manifest" in message


def test_another_tables_data_file_is_refused(crafter: Crafter) -> None:
    other = other_table(crafter)
    [foreign] = [e.data_file for m in other.current_snapshot().manifests(other.io)
                 for e in m.fetch_manifest_entry(other.io)]
    sid = next(_ids)
    smuggled = crafter.manifest(sid, [(ADDED, foreign, 0)])
    body = crafter.body(crafter.snapshot(sid, [smuggled, *crafter.parent_manifests()], "append"))
    assert "data file" in refusal(crafter, body)


def test_a_sibling_directory_sharing_the_prefix_is_not_the_table(crafter: Crafter) -> None:
    sibling = crafter.catalog.create_table("db.t2", SCHEMA)  # location .../db/t2 next to .../db/t
    sibling.append(pa.table({"id": [1]}, schema=SCHEMA))
    assert sibling.location().startswith(crafter.table.location())
    snapshot = sibling.current_snapshot()
    assert snapshot is not None
    assert OUTSIDE in refusal(crafter, with_list(crafter, snapshot.manifest_list))


def test_delete_file_referencing_another_tables_file_is_refused(crafter: Crafter) -> None:
    other = other_table(crafter)
    [target] = [e.data_file.file_path for m in other.current_snapshot().manifests(other.io)
                for e in m.fetch_manifest_entry(other.io)]
    delete = content_file(f"{crafter.table.location()}/data/d.parquet", 1,
                          DataFileContent.POSITION_DELETES, target)
    sid = next(_ids)
    manifest = crafter.manifest(sid, [(ADDED, delete, 0)], deletes=True)
    body = crafter.body(crafter.snapshot(sid, [manifest, *crafter.parent_manifests()], "delete"))
    assert "referenced data file" in refusal(crafter, body)


def test_host_files_and_missing_files_look_the_same(crafter: Crafter, tmp_path: Path) -> None:
    probes = ["/etc/passwd", "/nonexistent/x.avro", "file:///etc/passwd", str(tmp_path / "c.db")]
    messages = {refusal(crafter, with_list(crafter, p)).replace(repr(p), "<path>")
                for p in probes}
    assert len(messages) == 1, messages
    assert "root:" not in next(iter(messages))


def test_unreadable_files_inside_the_table_look_the_same(crafter: Crafter) -> None:
    metadata = local(crafter.table.location()) / "metadata"
    (metadata / "garbage.avro").write_bytes(b"root:x:0:0:root:/root:/bin/bash\n")
    (metadata / "folder.avro").mkdir()
    probes = [str(metadata / name) for name in ("garbage.avro", "missing.avro", "folder.avro")]
    messages = {refusal(crafter, with_list(crafter, p)).replace(repr(p), "<path>")
                for p in probes}
    assert messages == {"cannot verify the commit: manifest list <path> could not be read as "
                        "an Iceberg manifest file"}


@pytest.mark.parametrize("escape", [
    "{loc}/metadata/../../other/metadata/x.avro",
    "{loc}/../t/metadata/x.avro",
    "{loc}/metadata/%2e%2e/%2E%2E/x.avro",
    "{loc}/./metadata/x.avro",
    "{loc}/metadata/x.avro\x00",
    "metadata/x.avro",
    "//{host}/metadata/x.avro",
])
def test_dot_segments_and_odd_forms_are_refused(crafter: Crafter, escape: str) -> None:
    location = crafter.table.location()
    path = escape.format(loc=location, host=local(location).as_posix().lstrip("/"))
    assert OUTSIDE in refusal(crafter, with_list(crafter, path))


@pytest.mark.parametrize("spelling", ["file:{path}", "file://{path}", "{path}"])
def test_legit_commit_passes_however_the_location_is_spelled(
        crafter: Crafter, spelling: str) -> None:
    sid = next(_ids)
    added = crafter.manifest(sid, [(ADDED, new_data("s", 1), 0)])
    snapshot = crafter.snapshot(sid, [added, *crafter.parent_manifests()], "append")
    snapshot["manifest-list"] = spelling.format(path=local(snapshot["manifest-list"]))
    intent = crafter.classify(crafter.body(snapshot))
    assert intent.actions == {Action.INSERT} and intent.evidence.verified


def test_java_style_table_location_admits_pyiceberg_paths(crafter: Crafter) -> None:
    base = crafter.table.metadata
    java = base.model_copy(update={"location": f"file:{local(base.location)}"})
    sid = next(_ids)
    added = crafter.manifest(sid, [(ADDED, new_data("j", 1), 0)])
    body = crafter.body(crafter.snapshot(sid, [added, *crafter.parent_manifests()], "append"))
    assert classify_commit(body, java, crafter.table.io).actions == {Action.INSERT}


@pytest.mark.parametrize(("root", "path", "admitted"), [
    ("s3://bucket/wh/t", "s3://bucket/wh/t/data/f.parquet", True),
    ("s3://bucket/wh/t", "s3://other/wh/t/data/f.parquet", False),
    ("s3://bucket/wh/t", "s3a://bucket/wh/t/data/f.parquet", False),
    ("s3://bucket/wh/t", "s3://bucket/wh/t2/f.parquet", False),
    ("file:/wh/t", "file:///wh/t/m.avro", True),
    ("/wh/t/", "file:/wh/t/m.avro", True),
    ("file:///wh/t", "file://host/wh/t/m.avro", False),
    ("file:///wh/t", "/wh/t", True),
    ("/", "/etc/passwd", False),  # a root that is everything is no root
    ("file:///", "/etc/passwd", False),
    ("s3://bucket", "s3://bucket/t/data/f.parquet", True),
    ("s3://bucket/", "s3://bucket2/f.parquet", False),
    ("/wh/t", "/wh/t/a%2F..%2F..%2Fx", False),
])
def test_location_comparison(root: str, path: str, admitted: bool) -> None:
    body = {"updates": [{"action": "set-location", "location": root}]}
    assert table_locations(None, body).admits(path) is admitted


def test_create_takes_its_locations_from_the_body() -> None:
    body = {"updates": [
        {"action": "set-location", "location": "file:///wh/t"},
        {"action": "set-properties", "updates": {"write.data.path": "s3://b/data",
                                                 "write.metadata.path": "/meta/t"}}]}
    locations = table_locations(None, body)
    assert all(locations.admits(p) for p in ("/wh/t/x", "s3://b/data/f", "/meta/t/m.avro"))
    assert not locations.admits("/meta/other")
    assert parse_location("relative/x") is None


def test_create_without_a_location_may_reference_no_file(crafter: Crafter) -> None:
    snapshot = crafter.table.current_snapshot()
    assert snapshot is not None
    body = {"requirements": [{"type": "assert-create"}], "updates": [
        {"action": "add-snapshot", "snapshot": {
            "snapshot-id": 1, "sequence-number": 1, "timestamp-ms": 1,
            "manifest-list": snapshot.manifest_list, "summary": {"operation": "append"}}},
        {"action": "set-snapshot-ref", "ref-name": "main", "type": "branch", "snapshot-id": 1}]}
    with pytest.raises(UnverifiableCommit, match=OUTSIDE):
        classify_commit(body, None, crafter.table.io)
    body["updates"][:0] = [
        {"action": "set-location", "location": crafter.table.location()},
        {"action": "add-schema", "schema": json.loads(crafter.table.schema().model_dump_json())}]
    # read, no longer refused (its borrowed list's records name other snapshots and sequence
    # numbers, so it is an UPDATE: ``listing``)
    assert Action.CREATE_TABLE in classify_commit(body, None, crafter.table.io).actions


def test_other_properties_do_not_widen_the_table(crafter: Crafter) -> None:
    base: TableMetadata = crafter.table.metadata
    widened = base.model_copy(update={"properties": {**base.properties, "owner": "/"}})
    assert not table_locations(widened, {}).admits("/etc/passwd")


def test_too_many_manifests_in_a_list(crafter: Crafter) -> None:
    body = append_body(crafter, crafter.parent_manifests())
    limits = CommitLimits(max_manifests=1)
    with pytest.raises(CommitTooLarge, match="more than 1 manifests"):
        classify_commit(body, crafter.table.metadata, crafter.table.io, limits=limits)
    ok = classify_commit(body, crafter.table.metadata, crafter.table.io,
                         limits=CommitLimits(max_manifests=2))
    assert ok.evidence.verified


def test_too_many_manifests_opened_for_one_commit(crafter: Crafter) -> None:
    sid = next(_ids)
    fresh = [crafter.manifest(sid, [(ADDED, new_data(f"m{i}", 1), 0)]) for i in range(3)]
    body = crafter.body(crafter.snapshot(sid, [*fresh, *crafter.parent_manifests()], "append"))
    table = crafter.table
    with pytest.raises(CommitTooLarge, match="open more than 2 manifests"):
        classify_commit(body, table.metadata, table.io, limits=CommitLimits(max_manifests_read=2))
    assert classify_commit(body, table.metadata, table.io,
                           limits=CommitLimits(max_manifests_read=3)).evidence.verified


def test_too_many_entries_read_for_one_commit(crafter: Crafter) -> None:
    sid = next(_ids)
    added = crafter.manifest(sid, [(ADDED, new_data(f"e{i}", 1), 0) for i in range(3)])
    body = crafter.body(crafter.snapshot(sid, [added, *crafter.parent_manifests()], "append"))
    table = crafter.table
    with pytest.raises(CommitTooLarge, match="more than 2 manifest entries") as exc:
        classify_commit(body, table.metadata, table.io, limits=CommitLimits(max_entries=2))
    assert exc.value.status == 400
    assert classify_commit(body, table.metadata, table.io,
                           limits=CommitLimits(max_entries=3)).evidence.verified


def test_too_many_updates_is_413_before_anything_is_read(crafter: Crafter) -> None:
    body = {"updates": [{"action": "set-properties", "updates": {}}] * 3,
            "requirements": []}
    limits = CommitLimits(max_updates=2)
    with pytest.raises(PayloadTooLarge) as exc:
        check_commit_shape(body, limits)
    assert exc.value.status == 413
    with pytest.raises(PayloadTooLarge):
        classify_commit(body, crafter.table.metadata, crafter.table.io, limits=limits)
    with pytest.raises(PayloadTooLarge):
        check_commit_shape({"requirements": [{"type": "assert-create"}] * 3}, limits)
    check_commit_shape(json.loads(json.dumps(body)), CommitLimits(max_updates=3))


@pytest.mark.parametrize("body", [
    [], "x", {"updates": "x"}, {"updates": [1]}, {"requirements": [{"type": None}]},
])
def test_malformed_shape_is_400(body: Any) -> None:
    with pytest.raises(UnverifiableCommit):
        check_commit_shape(body)
