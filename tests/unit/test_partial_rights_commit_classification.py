"""Attacks, round 7: commit classification and verification, by a principal holding only some
table rights (``writer``: INSERT; ``deleter``: DELETE; a maintenance role: REWRITE).

The manifests of every attack below are honest about what they list: what each one abuses is
what the *rest of the Iceberg ecosystem* does later with a value icegov let land unexamined —
snapshot expiry deleting the files a snapshot claims (Java's ``IncrementalFileCleanup``: the
manifest lists of expired snapshots, the ADDED files of expired snapshots that are not ancestors
of ``main``, the statistics files no retained snapshot names), Java readers refusing metadata
whose sequence numbers or ids they cannot represent, writers locked out by a sequence number at
the end of the ``long`` range, incremental readers trusting the snapshot's ``operation``.

Classification-level attacks use the round's helpers (``tests.support.row_files.RowTable``: a
real table ``db.t (id long)`` with ``f1`` (ids 1, 2) and ``f2`` (id 3), crafted commits written
under its location). The gate's own pre-checks (``check_snapshot_order``) run with it, as
``ChangeClassifier`` runs them. End-to-end attacks go through icegov with the demo policy to its
embedded catalog, as ``writer``.

Every finding of the round is fixed (``proxy.commits.held``, ``timeline``, ``diff``'s own row
ids, ``classify``'s claimed rewrites); its test now asserts the fix. Attacks that were refused
from the start keep their passing tests.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.manifest import (
    DataFile,
    DataFileContent,
    FileFormat,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
    write_manifest_list,
)
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC
from pyiceberg.table import Table
from pyiceberg.typedef import Record
from starlette.testclient import TestClient

from proxy.app import create_app
from proxy.catalog import store
from proxy.commits import CommitIntent, UnverifiableCommit, classify_commit
from proxy.commits.snapshots import added_snapshots
from proxy.commits.timeline import check_snapshot_order
from proxy.errors import CommitFailed
from proxy.governance import Action
from tests.support.commit_capture import Crafter, new_data
from tests.support.row_files import RowTable, V3DataManifestWriter
from tests.support.settings import settings_for_tests
from tests.unit import test_commit_lineage as lineage

ADDED, EXISTING, DELETED = (ManifestEntryStatus.ADDED, ManifestEntryStatus.EXISTING,
                            ManifestEntryStatus.DELETED)
SCHEMA = pa.schema([pa.field("id", pa.int64(), False)])
JAVA_LONG_MAX = 2**63 - 1
_ids = itertools.count(77_000)


@pytest.fixture()
def rt(tmp_path: Path) -> RowTable:
    return RowTable.create(tmp_path, SCHEMA, [pa.table({"id": [1, 2]}, schema=SCHEMA),
                                             pa.table({"id": [3]}, schema=SCHEMA)])


def _now() -> int:
    return int(time.time() * 1000)


def snapshot(crafter: Crafter, snapshot_id: int, manifests: list[ManifestFile], *,
             parent: int | None, sequence: int | None, operation: str = "append",
             manifest_list: str | None = None) -> dict[str, Any]:
    """An add-snapshot ``snapshot`` object with a chosen parent and sequence number (None: the
    field left out, as a v1 writer does), its manifest list written under the table unless
    ``manifest_list`` names an existing one."""
    if manifest_list is None:
        manifest_list = str(crafter.folder / f"snap-{snapshot_id}.avro")
        with write_manifest_list(2, crafter.table.io.new_output(manifest_list), snapshot_id,
                                 parent, sequence or 0, "null") as writer:
            writer.add_manifests(manifests)
    raw: dict[str, Any] = {"snapshot-id": snapshot_id, "parent-snapshot-id": parent,
                           "timestamp-ms": _now(), "manifest-list": manifest_list,
                           "summary": {"operation": operation}, "schema-id": 0}
    if sequence is not None:
        raw["sequence-number"] = sequence
    return raw


def commit(raw: dict[str, Any], crafter: Crafter, ref: str | None = "main") -> dict[str, Any]:
    """A commit adding ``raw`` and (unless ``ref`` is None: staged) pointing ``ref`` at it,
    asserting ``main`` where Java and pyiceberg do."""
    updates: list[dict[str, Any]] = [{"action": "add-snapshot", "snapshot": raw}]
    if ref is not None:
        updates.append({"action": "set-snapshot-ref", "ref-name": ref, "type": "branch",
                        "snapshot-id": raw["snapshot-id"]})
    return {"requirements": [{"type": "assert-ref-snapshot-id", "ref": "main",
                              "snapshot-id": crafter.table.metadata.current_snapshot_id}],
            "updates": updates}


def admitted(body: dict[str, Any], table: Table) -> CommitIntent | None:
    """What the gate would need for ``body`` (its pre-checks and classification), or None when
    the commit is refused (400 or 409) whatever the caller's rights."""
    try:
        check_snapshot_order(added_snapshots(body), table.metadata, _now())
        return classify_commit(body, table.metadata, table.io)
    except (UnverifiableCommit, CommitFailed):
        return None


def passes_as_insert(intent: CommitIntent | None) -> bool:
    """True if a principal holding only INSERT would be allowed this commit."""
    return intent is not None and intent.actions <= {Action.INSERT}


# 1. A new snapshot naming an existing snapshot's manifest list -------------------------------

@pytest.mark.parametrize("staged", [True, False], ids=["staged", "main"])
def test_a_snapshot_reusing_a_committed_manifest_list_is_not_an_insert(
        rt: RowTable, staged: bool) -> None:
    """HIGH. ``writer`` (INSERT only) adds a snapshot whose ``manifest-list`` is the path of the
    current snapshot's own list (staged, or on ``main`` as an empty append). The list is read
    and shows no change, so the commit passes as a verified INSERT. Java's snapshot expiry
    (``IncrementalFileCleanup`` and ``ReachableFileCleanup``) deletes the manifest list of every
    expired snapshot unconditionally: expiring the staged snapshot (never published, the first
    thing a routine ``expireSnapshots`` drops) deletes the list ``main`` reads, and on ``main``
    expiring the older snapshot deletes the list of the current one. Either way the table can no
    longer be read: a table-destroying change from an INSERT right. The list a new snapshot
    names must be its own new file (not any snapshot's of the table): refused, or at least
    ``MANAGE_SNAPSHOTS``."""
    current = rt.table.current_snapshot()
    assert current is not None
    raw = snapshot(rt.crafter, next(_ids), [], parent=current.snapshot_id,
                   sequence=rt.table.metadata.last_sequence_number + 1,
                   manifest_list=current.manifest_list)
    intent = admitted(commit(raw, rt.crafter, None if staged else "main"), rt.table)
    assert not passes_as_insert(intent), intent and intent.evidence.to_dict()


# 2. A staged snapshot adding a file main holds live --------------------------------------------

@pytest.mark.parametrize("keeps_parent", [True, False], ids=["on-parent", "no-parent"])
def test_a_staged_snapshot_adding_a_live_file_again_is_not_an_insert(
        rt: RowTable, keeps_parent: bool) -> None:
    """HIGH. ``writer`` commits a staged snapshot (no ref moves: write-audit-publish) whose fresh
    manifest lists ``f1`` — a file ``main`` holds live — as ADDED, beside the parent's manifests
    or with no parent at all. With no delete file live, ``diff`` does not look at what kept
    manifests hold (``kept_file_relistings``), ``removed_in_history`` only looks for removed
    files, and a no-parent snapshot has no replaced manifest: a verified INSERT. Java's
    ``IncrementalFileCleanup`` (the default on a table with only ``main``) reverts the ADDED
    files of every expired snapshot that is not an ancestor of ``main``: the next routine
    expiry physically deletes ``f1`` while ``main`` still lists it (reads fail; a DELETE of
    whole files from an INSERT right). A staged snapshot must not add a file the table holds."""
    (f1, _), _ = rt.data_files()
    sid = next(_ids)
    current = rt.table.metadata.current_snapshot_id
    fresh = rt.crafter.manifest(sid, [(ADDED, f1, 0)])
    kept = rt.crafter.parent_manifests() if keeps_parent else []
    raw = snapshot(rt.crafter, sid, [*kept, fresh], parent=current if keeps_parent else None,
                   sequence=rt.table.metadata.last_sequence_number + 1)
    intent = admitted(commit(raw, rt.crafter, ref=None), rt.table)
    assert not passes_as_insert(intent), intent and intent.evidence.to_dict()


def test_a_main_snapshot_adding_a_live_file_again_from_a_dropped_manifest_is_refused(
        rt: RowTable) -> None:
    """Holds: the same re-add on ``main`` that drops ``f1``'s manifest is history rewritten
    (``ADDED entry re-adds``), an UPDATE."""
    (f1, _), (f2, _) = rt.data_files()
    sid = next(_ids)
    kept = [m for m in rt.crafter.parent_manifests()
            if f2.file_path in {e.data_file.file_path for e in m.fetch_manifest_entry(rt.table.io)}]
    fresh = rt.crafter.manifest(sid, [(ADDED, f1, 0)])
    raw = snapshot(rt.crafter, sid, [*kept, fresh], parent=rt.table.metadata.current_snapshot_id,
                   sequence=rt.table.metadata.last_sequence_number + 1)
    intent = admitted(commit(raw, rt.crafter), rt.table)
    assert intent is not None and intent.actions == {Action.UPDATE}
    assert "re-adds" in (intent.evidence.mismatch or "")


# 3. Statistics naming a data file -----------------------------------------------------------

@pytest.mark.parametrize("action,key", [("set-statistics", "statistics"),
                                        ("set-partition-statistics", "partition-statistics")])
def test_statistics_naming_a_live_data_file_are_refused(rt: RowTable, action: str,
                                                        key: str) -> None:
    """MEDIUM. A principal holding REWRITE (compaction, "data-equivalent rewrites") sets the
    statistics of an old snapshot to ``statistics-path: <f1>``, a live data file: confinement
    only asks that it lie under the table's location. Java's expiry
    (``FileCleanupStrategy.expiredStatisticsFilesLocations``) deletes every statistics file the
    expired snapshots named and the retained ones do not: expiring that old snapshot deletes
    ``f1`` (rows gone, reads of ``main`` fail). A statistics file must not be a file the table's
    manifests name (nor its metadata or manifest lists): refused."""
    (f1, _), _ = rt.data_files()
    old = rt.table.metadata.snapshots[0].snapshot_id
    body = {"requirements": [], "updates": [{"action": action, "snapshot-id": old, key: {
        "snapshot-id": old, "statistics-path": f1.file_path, "file-size-in-bytes": 10,
        "file-footer-size-in-bytes": 1, "blob-metadata": []}}]}
    intent = admitted(body, rt.table)
    assert intent is None, intent.evidence.to_dict()


def test_statistics_outside_the_table_are_refused(rt: RowTable, tmp_path: Path) -> None:
    """Holds: a statistics-path outside the table's locations is refused (confinement)."""
    old = rt.table.metadata.snapshots[0].snapshot_id
    body = {"requirements": [], "updates": [{"action": "set-statistics", "snapshot-id": old,
                                             "statistics": {
        "snapshot-id": old, "statistics-path": (tmp_path / "elsewhere.puffin").as_uri(),
        "file-size-in-bytes": 10, "file-footer-size-in-bytes": 1, "blob-metadata": []}}]}
    assert admitted(body, rt.table) is None


# 4. Sequence numbers and ids a Java reader or writer cannot carry on from ------------------------

def test_a_sequence_number_at_the_end_of_the_long_range_is_refused(rt: RowTable) -> None:
    """MEDIUM (denial of service). ``writer`` appends one row in a snapshot whose
    ``sequence-number`` is ``2**63 - 1`` (its manifests say the same, so ``listing`` agrees):
    ``timeline`` only asks that it rise. The backing sets ``last-sequence-number`` to it; every
    later writer (Java ``nextSequenceNumber()``, icegov's own rebase: last + 1) overflows to a
    negative number that does not rise above it, so no commit to the table succeeds again until
    an operator rewrites its metadata. A new snapshot's sequence number must be the table's last
    plus one (plus its position in the commit): refused otherwise."""
    sid = next(_ids)
    fresh = rt.crafter.manifest(sid, [(ADDED, rt.write_data("n", pa.table({"id": [9]})), 0)])
    raw = snapshot(rt.crafter, sid, [*rt.crafter.parent_manifests(), fresh],
                   parent=rt.table.metadata.current_snapshot_id, sequence=JAVA_LONG_MAX)
    intent = admitted(commit(raw, rt.crafter), rt.table)
    assert intent is None, intent.evidence.to_dict()


def test_a_sequence_number_that_does_not_rise_is_a_conflict(rt: RowTable) -> None:
    """Holds: a stale sequence number on main is refused (409)."""
    sid = next(_ids)
    fresh = rt.crafter.manifest(sid, [(ADDED, rt.write_data("n", pa.table({"id": [9]})), 0)])
    raw = snapshot(rt.crafter, sid, [*rt.crafter.parent_manifests(), fresh],
                   parent=rt.table.metadata.current_snapshot_id,
                   sequence=rt.table.metadata.last_sequence_number)
    with pytest.raises(CommitFailed):
        check_snapshot_order(added_snapshots(commit(raw, rt.crafter)), rt.table.metadata, _now())


@dataclass
class Embedded:
    """icegov with the demo policy over its embedded catalog, a table ``demo.t`` with two
    appends made directly in that catalog, and bearer headers for ``admin`` and ``writer``."""

    client: TestClient
    catalog: SqlCatalog
    crafter: Crafter
    admin: dict[str, str]
    writer: dict[str, str]

    def load(self) -> Table:
        return self.catalog.load_table(("demo", "t"))

    def post(self, body: dict[str, Any]) -> Any:
        return self.client.post("/v1/namespaces/demo/tables/t", json=body, headers=self.writer)


def _login(client: TestClient, who: str) -> dict[str, str]:
    answer = client.post("/v1/oauth/tokens", data={
        "grant_type": "client_credentials", "client_id": who, "client_secret": f"{who}-secret",
        "scope": "catalog"})
    return {"authorization": f"Bearer {answer.json()['access_token']}"}


@pytest.fixture()
def embedded(tmp_path: Path) -> Iterator[Embedded]:
    settings = settings_for_tests(tmp_path)
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        admin, writer = _login(client, "admin"), _login(client, "writer")
        assert client.post("/v1/namespaces", json={"namespace": ["demo"]},
                           headers=admin).status_code == 200
        catalog = store.open_catalog(settings.embedded_db_uri(), settings.warehouse)
        table = catalog.create_table(("demo", "t"), SCHEMA)
        for ids in ([1, 2], [3]):
            table.append(pa.table({"id": ids}, schema=SCHEMA))
        table = catalog.load_table(("demo", "t"))
        folder = Path(table.location().removeprefix("file://")) / "metadata"
        yield Embedded(client, catalog, Crafter(catalog, table, folder), admin, writer)


def _java_loadable(table: Table) -> list[str]:
    """What Java's ``TableMetadata`` refuses in ``table``'s metadata (empty: loadable): a
    snapshot above ``last-sequence-number`` (``validateSnapshots``), an id or sequence number
    outside a Java ``long`` (``JsonUtil.getLong``)."""
    metadata = table.metadata
    problems = [f"snapshot {s.snapshot_id} has sequence number {s.sequence_number} above "
                f"last-sequence-number {metadata.last_sequence_number}"
                for s in metadata.snapshots
                if (s.sequence_number or 0) > metadata.last_sequence_number]
    problems += [f"snapshot id {s.snapshot_id} is not a Java long" for s in metadata.snapshots
                 if not -2**63 <= s.snapshot_id <= JAVA_LONG_MAX]
    return problems


def test_a_staged_snapshot_without_a_sequence_number_never_rewinds_the_table(
        embedded: Embedded) -> None:
    """HIGH (denial of service, end to end). ``writer`` sends a staged snapshot (no ref) with no
    ``parent-snapshot-id`` and no ``sequence-number`` to a format-2 table. ``timeline`` skips
    the sequence check for an absent number (0: "format v1"), and the parentless snapshot
    escapes the builders' own check, which both pyiceberg and Java waive for a snapshot without
    a parent; both then set ``last-sequence-number`` to the snapshot's 0. The embedded catalog
    stores it: the table's snapshots 1 and 2 now lie above its last sequence number, so Java
    (Spark) refuses to load the table (``Invalid snapshot with sequence number ... greater than
    last sequence number``), and pyiceberg writers hand out sequence numbers that existing
    deletes outrank. In a format-2 table every new snapshot needs a sequence number above the
    last one: refused, and the table left as it was."""
    table = embedded.load()
    sid = next(_ids)
    fresh = embedded.crafter.manifest(sid, [(ADDED, _data_file(embedded), 0)])
    raw = snapshot(embedded.crafter, sid, [fresh], parent=None, sequence=None)
    answer = embedded.post({"requirements": [], "updates": [
        {"action": "add-snapshot", "snapshot": raw}]})
    after = embedded.load()
    assert 400 <= answer.status_code < 500, (answer.status_code, answer.text[:300])
    assert after.metadata.last_sequence_number == table.metadata.last_sequence_number
    assert not _java_loadable(after)


def test_a_snapshot_id_beyond_a_java_long_is_refused(embedded: Embedded) -> None:
    """Holds (end to end). ``writer`` stages a snapshot whose ``snapshot-id`` is ``2**63``:
    ``require_id`` accepts any JSON integer and pyiceberg's catalog would store it (Java's
    ``JsonUtil.getLong`` could then not parse the table), but icegov's JSON parser refuses any
    integer outside the signed 64-bit range (400) before anything else."""
    table = embedded.load()
    current = table.metadata.current_snapshot_id
    raw = snapshot(embedded.crafter, 2**63, embedded.crafter.parent_manifests(), parent=current,
                   sequence=table.metadata.last_sequence_number + 1)
    raw["snapshot-id"] = 2**63
    answer = embedded.post({"requirements": [], "updates": [
        {"action": "add-snapshot", "snapshot": raw}]})
    assert 400 <= answer.status_code < 500, (answer.status_code, answer.text[:300])
    assert not _java_loadable(embedded.load())


def _data_file(embedded: Embedded) -> Any:
    """A real one-row data file under ``demo.t``'s location."""
    rows = RowTable(embedded.catalog, embedded.crafter)
    return rows.write_data("staged", pa.table({"id": [42]}))


def test_a_writer_appends_through_icegov(embedded: Embedded) -> None:
    """The baseline of the end-to-end attacks: an honest append by ``writer`` lands."""
    table = embedded.load()
    sid = next(_ids)
    fresh = embedded.crafter.manifest(sid, [(ADDED, _data_file(embedded), 0)])
    raw = snapshot(embedded.crafter, sid, [*embedded.crafter.parent_manifests(), fresh],
                   parent=table.metadata.current_snapshot_id,
                   sequence=table.metadata.last_sequence_number + 1)
    answer = embedded.post(commit(raw, embedded.crafter))
    assert answer.status_code == 200, answer.text[:300]
    assert embedded.load().metadata.current_snapshot_id == sid


# 5. The operation a snapshot claims ---------------------------------------------------------

def test_an_insert_claiming_replace_is_not_admitted_as_an_insert(rt: RowTable) -> None:
    """LOW. ``writer`` appends rows in a snapshot whose summary says ``operation: replace``. The
    classification is right (INSERT) and the mismatch is in the audit evidence, but the commit
    lands as sent: Spark's streaming source (``SparkMicroBatchStream``) and other incremental
    consumers skip ``replace`` snapshots as compactions, so the inserted rows never reach them
    (a CDC pipeline silently misses data). A claimed operation that is not compatible with
    what the manifests show should be refused (or need the right the claim names)."""
    sid = next(_ids)
    fresh = rt.crafter.manifest(sid, [(ADDED, rt.write_data("n", pa.table({"id": [9]})), 0)])
    raw = snapshot(rt.crafter, sid, [*rt.crafter.parent_manifests(), fresh],
                   parent=rt.table.metadata.current_snapshot_id,
                   sequence=rt.table.metadata.last_sequence_number + 1, operation="replace")
    intent = admitted(commit(raw, rt.crafter), rt.table)
    assert not passes_as_insert(intent), intent and intent.evidence.to_dict()


# 6. Format-3 row ids carried by the data file itself -------------------------------------------

def test_an_added_data_file_naming_existing_row_ids_rewrites_history(tmp_path: Path) -> None:
    """MEDIUM. In a format-3 table (``next-row-id`` 10; rows 0..2 assigned), ``writer`` appends
    one file whose manifest-list record, ``first-row-id`` and ``added-rows`` are exactly what
    ``lineage`` expects (10, 1) — but whose manifest entry carries ``first_row_id: 0`` in the
    data file itself. Java's ``ManifestReader`` assigns inherited row ids only to files whose
    ``first_row_id`` is null, so readers give the new row ``_row_id`` 0, an existing row's id:
    row-lineage consumers (CDC by ``_row_id``) take the INSERT for an UPDATE of someone else's
    row — what ``lineage`` refuses at the manifest level is open one level down. An ADDED entry
    must leave ``first_row_id`` null (or equal to the id its manifest assigns it): otherwise
    history is rewritten (UPDATE)."""
    crafter = lineage.confined_crafter(tmp_path)
    base = lineage.v3_base(crafter, next_row_id=10)
    sid = next(_ids)
    written = new_data(f"forged-{sid}", 1)  # a real one-row file, as its entry says
    forged = DataFile.from_args(
        _table_format_version=3, content=DataFileContent.DATA, file_format=FileFormat.PARQUET,
        file_path=written.file_path, partition=Record(), record_count=1,
        file_size_in_bytes=written.file_size_in_bytes, first_row_id=0)
    out = crafter.table.io.new_output(str(crafter.folder / f"m-{sid}.avro"))
    with V3DataManifestWriter(UNPARTITIONED_PARTITION_SPEC, crafter.table.schema(), out, sid,
                               "null") as writer:
        writer.add_entry(ManifestEntry.from_args(_table_format_version=3, status=ADDED,
                                                 snapshot_id=sid, data_file=forged))
    sequence = base.last_sequence_number + 1
    records = [lineage.with_row_id(writer.to_manifest_file(), 10, sequence),
               *lineage.read_list(crafter.table.io, lineage._main_list(base))]
    raw = {"snapshot-id": sid, "parent-snapshot-id": base.current_snapshot_id,
           "sequence-number": sequence, "timestamp-ms": 1, "schema-id": 0,
           "manifest-list": lineage.write_v3_list(crafter, records),
           "summary": {"operation": "append"}, "first-row-id": 10, "added-rows": 1}
    intent = lineage.classify_v3(crafter, base, raw)
    assert intent.actions == {Action.UPDATE}, intent.evidence.to_dict()
    assert not intent.evidence.verified
