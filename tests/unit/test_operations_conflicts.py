"""Conflict validation of data operations between ``base-snapshot-id`` and the branch head.

Each test starts an operation on one head, commits a concurrent change, and builds the
operation again on the new head with the same start: a conflict is ``CommitFailed`` (409,
nothing written to the table), anything else lands with exactly the expected rows.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from proxy.errors import CommitFailed
from tests.unit.test_operations import Tbl, position_deletes


@pytest.fixture()
def tbl(tmp_path: Path) -> Tbl:
    return Tbl(tmp_path)


def _head(tbl: Tbl) -> int:
    head = tbl.table.metadata.current_snapshot_id
    assert head is not None
    return head


def _refused(tbl: Tbl, update: dict[str, Any], start: int | None) -> CommitFailed:
    before = tbl.table.metadata.current_snapshot_id
    with pytest.raises(CommitFailed) as refused:
        tbl.build(update, start=start)
    assert refused.value.status == 409
    tbl.refresh()
    assert tbl.table.metadata.current_snapshot_id == before  # nothing landed
    return refused.value


def _overwrite_a(tbl: Tbl, old: str, isolation: str = "serializable") -> dict[str, Any]:
    return {"action": "overwrite-files", "deleted-data-files": [old],
            "added-data-files": tbl.wire(tbl.write([100])), "isolation-level": isolation,
            "conflict-filter": {"type": "eq", "term": "p", "value": "a"}}


def test_serializable_overwrite_conflicts_with_new_matching_data(tbl: Tbl) -> None:
    [old] = tbl.append([1])
    start = _head(tbl)
    update = _overwrite_a(tbl, old.file_path)
    tbl.append([2], "a")  # concurrent insert into the partition the overwrite read
    refused = _refused(tbl, update, start)
    assert "conflict filter" in refused.message


def test_serializable_overwrite_ignores_data_outside_its_conflict_filter(tbl: Tbl) -> None:
    [old] = tbl.append([1])
    start = _head(tbl)
    update = _overwrite_a(tbl, old.file_path)
    tbl.append([2], "b")
    tbl.land(tbl.build(update, start=start))
    assert tbl.rows() == [(2, "b"), (100, "a")]


def test_snapshot_isolation_overwrite_accepts_new_matching_data(tbl: Tbl) -> None:
    [old] = tbl.append([1])
    start = _head(tbl)
    update = _overwrite_a(tbl, old.file_path, isolation="snapshot")
    tbl.append([2], "a")
    tbl.land(tbl.build(update, start=start))
    assert tbl.rows() == [(2, "a"), (100, "a")]


def test_compaction_in_between_is_not_new_data_but_removes_the_overwritten_file(
        tbl: Tbl) -> None:
    [one] = tbl.append([1])
    [two] = tbl.append([2])
    start = _head(tbl)
    update = _overwrite_a(tbl, one.file_path)
    merged = tbl.write([1, 2])
    tbl.land(tbl.build({"action": "rewrite-files", "added-data-files": tbl.wire(merged),
                        "deleted-data-files": [one.file_path, two.file_path]}))
    refused = _refused(tbl, update, start)
    assert "removed since base-snapshot-id" in refused.message


def test_rewrite_conflicts_with_a_concurrent_delete_of_its_file(tbl: Tbl) -> None:
    [one] = tbl.append([1])
    [two] = tbl.append([2])
    start = _head(tbl)
    update = {"action": "rewrite-files", "added-data-files": tbl.wire(tbl.write([1, 2])),
              "deleted-data-files": [one.file_path, two.file_path]}
    tbl.land(tbl.build({"action": "delete-files", "data-files": [two.file_path]}))
    _refused(tbl, update, start)
    assert tbl.rows() == [(1, "a")]


def test_rewrite_conflicts_with_new_deletes_for_its_files(tbl: Tbl) -> None:
    [data] = tbl.append([1, 2, 3])
    start = _head(tbl)
    update = {"action": "rewrite-files", "added-data-files": tbl.wire(tbl.write([1, 2, 3])),
              "deleted-data-files": [data.file_path]}
    tbl.land(tbl.build({"action": "row-delta",
                        "added-delete-files": [position_deletes(tbl, data, [0])]}))
    refused = _refused(tbl, update, start)
    assert "deleted rows would come back" in refused.message
    assert tbl.rows() == [(2, "a"), (3, "a")]


def test_row_delta_conflicts_when_its_target_file_was_removed(tbl: Tbl) -> None:
    [data] = tbl.append([1, 2])
    start = _head(tbl)
    update = {"action": "row-delta", "added-delete-files": [position_deletes(tbl, data, [0])]}
    tbl.land(tbl.build({"action": "delete-files", "data-files": [data.file_path]}))
    _refused(tbl, update, start)


def test_row_delta_conflicts_with_concurrent_deletes_it_may_overlap(tbl: Tbl) -> None:
    [data] = tbl.append([1, 2, 3])
    start = _head(tbl)
    update = {"action": "row-delta", "added-delete-files": [position_deletes(tbl, data, [0])]}
    tbl.land(tbl.build({"action": "row-delta",
                        "added-delete-files": [position_deletes(tbl, data, [1, 2])]}))
    _refused(tbl, update, start)


def test_delete_of_a_file_already_deleted_concurrently_is_a_conflict(tbl: Tbl) -> None:
    [data] = tbl.append([1])
    tbl.append([2])
    start = _head(tbl)
    update = {"action": "delete-files", "data-files": [data.file_path]}
    tbl.land(tbl.build(update))
    _refused(tbl, update, start)
    assert tbl.rows() == [(2, "a")]


def test_append_never_conflicts(tbl: Tbl) -> None:
    [data] = tbl.append([1])
    start = _head(tbl)
    update = {"action": "append-files", "data-files": tbl.wire(tbl.write([3]))}
    tbl.land(tbl.build({"action": "delete-files", "data-files": [data.file_path]}))
    tbl.land(tbl.build(update, start=start))
    assert tbl.rows() == [(3, "a")]


def test_a_start_that_is_no_ancestor_of_the_head_is_a_conflict(tbl: Tbl) -> None:
    tbl.append([1])
    first = _head(tbl)
    tbl.append([2])
    stray = _head(tbl)
    tbl.table.manage_snapshots().rollback_to_snapshot(first).commit()
    tbl.refresh()
    tbl.append([3])  # the branch moved on without ``stray``
    _refused(tbl, {"action": "delete-files", "row-filter": {"type": "eq", "term": "p",
                                                             "value": "b"}}, stray)


def test_base_snapshot_id_in_the_body_starts_the_window(tbl: Tbl) -> None:
    [old] = tbl.append([1])
    start = _head(tbl)
    tbl.append([2], "a")
    update = {**_overwrite_a(tbl, old.file_path), "base-snapshot-id": start}
    _refused(tbl, update, start)  # the default start reads it from the body
    with pytest.raises(CommitFailed):
        tbl.build(update)
