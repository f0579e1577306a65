"""The streaming OCSF export: bounded row groups for a large input, every event round-trips,
rotated siblings are read, a re-export rewrites the same files, a bad line leaves nothing, and
the fixed schema refuses what it cannot hold."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from proxy.audit import ocsf_export
from proxy.audit.chain import Chain
from proxy.audit.files import rotated_files
from proxy.audit.ocsf import DATASTORE_ACTIVITY, to_ocsf
from proxy.audit.ocsf_arrow import Unfit, batch
from proxy.audit.ocsf_export import ExportError, export_ocsf
from tests.support.audit import a_record
from tests.support.ocsf import without_nulls

START = datetime(2026, 11, 27, 12, tzinfo=UTC)


def chain_lines(count: int, days: int = 1) -> list[str]:
    """``count`` sealed records, reads and commits alternating, spread over ``days`` days."""
    chain, out = Chain(None), []
    for n in range(count):
        endpoint, method = ("load_table", "GET") if n % 3 else ("create_namespace", "POST")
        event = a_record(n, method, endpoint).to_event()
        event["event"] = "audit"
        event["time"] = (START + timedelta(days=n % days, milliseconds=n * 100)).isoformat(
            timespec="milliseconds")
        out.append(chain.seal(event)[0] + "\n")
    return out


def back(out: Path) -> list[dict[str, Any]]:
    rows = []
    for folder in ("datastore_activity", "api_activity"):
        if (out / folder).exists():
            rows += pq.read_table(out / folder).to_pylist()
    return rows


def assert_round_trip(lines: list[str], out: Path) -> None:
    rows = {row["metadata"]["uid"]: row for row in back(out)}
    assert len(rows) == len(lines)
    for line in lines:
        expected = to_ocsf(json.loads(line))
        row = without_nulls(rows.pop(expected["metadata"]["uid"]))
        row = {k: v for k, v in row.items() if k not in ("region", "accountId", "eventDay")}
        assert json.loads(row.pop("unmapped")) == expected.pop("unmapped")
        assert row == without_nulls(expected)


def test_a_large_input_is_written_in_bounded_row_groups_and_every_event_round_trips(
        tmp_path: Path) -> None:
    source = tmp_path / "audit.log"
    lines = chain_lines(50_000)
    source.write_text("".join(lines))
    written = export_ocsf([source], tmp_path / "lake", "local", "000000000000",
                          batch_rows=4_000)
    assert len(written) == 2  # one day, two classes
    for path in written:
        meta = pq.ParquetFile(path).metadata
        assert meta.num_row_groups > 1
        assert all(meta.row_group(i).num_rows <= 4_000 for i in range(meta.num_row_groups))
    assert_round_trip(lines, tmp_path / "lake")


def test_rotated_siblings_are_read_first_and_a_re_export_rewrites_the_same_files(
        tmp_path: Path) -> None:
    lines = chain_lines(30)
    live = tmp_path / "audit.log"
    (tmp_path / "audit.log.000000000001-20261127T120000.000000Z").write_text("".join(lines[:10]))
    (tmp_path / "audit.log.000000000011-20261127T130000.000000Z").write_text(
        "".join(lines[10:20]))
    live.write_text("".join(lines[20:]))
    assert len(rotated_files(live)) == 2
    first = export_ocsf([live], tmp_path / "lake", "local", "000000000000")
    assert_round_trip(lines, tmp_path / "lake")
    assert [p.name for p in first] == ["icegov-000000000001-000000000028.parquet",  # api
                                       "icegov-000000000002-000000000030.parquet"]
    contents = {p: pq.read_table(p) for p in first}
    again = export_ocsf([live], tmp_path / "lake", "local", "000000000000")
    assert again == first and {p: pq.read_table(p) for p in again} == contents
    assert sorted(tmp_path.glob("lake/**/*.parquet")) == sorted(first)
    only_live = export_ocsf([live], tmp_path / "live", "local", "000000000000", rotated=False)
    assert sum(pq.ParquetFile(p).metadata.num_rows for p in only_live) == 10


def test_more_partitions_than_may_stay_open_are_finished_and_reopened(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ocsf_export, "MAX_OPEN", 3)
    source = tmp_path / "audit.log"
    lines = chain_lines(120, days=5)  # 10 partitions, interleaved
    source.write_text("".join(lines))
    written = export_ocsf([source], tmp_path / "lake", "local", "000000000000", batch_rows=7)
    assert len(written) > 10 and len(set(written)) == len(written)
    assert_round_trip(lines, tmp_path / "lake")
    assert not list(tmp_path.glob("lake/**/.icegov-export-*"))


def test_a_bad_line_late_in_a_large_input_leaves_nothing_behind(tmp_path: Path) -> None:
    source = tmp_path / "audit.log"
    source.write_text("".join(chain_lines(500)) + '{"not": "a record"}\n')
    out = tmp_path / "lake"
    with pytest.raises(ExportError, match=r"audit\.log:501: not an audit record"):
        export_ocsf([source], out, "local", "000000000000", batch_rows=50)
    assert not out.exists()
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(ExportError):
        export_ocsf([source], out, "local", "000000000000", batch_rows=50)
    assert [p.name for p in out.rglob("*")] == ["keep.txt"]


def test_a_value_that_does_not_fit_its_column_is_named_by_its_line(tmp_path: Path) -> None:
    lines = chain_lines(5)
    record = json.loads(lines[3])
    record["status"] = 2**70  # an int no int64 column holds
    source = tmp_path / "audit.log"
    source.write_text("".join([*lines[:3], json.dumps(record) + "\n", lines[4]]))
    with pytest.raises(ExportError, match=r"audit\.log:4: .*does not fit"):
        export_ocsf([source], tmp_path / "lake", "local", "000000000000")
    assert not (tmp_path / "lake").exists()


def test_the_schema_refuses_a_field_it_has_no_column_for() -> None:
    event = to_ocsf(json.loads(chain_lines(3)[1]))
    assert event["class_uid"] == DATASTORE_ACTIVITY
    assert batch(DATASTORE_ACTIVITY, [event]).num_rows == 1
    with pytest.raises(Unfit, match=r"actor\.user\.email"):
        batch(DATASTORE_ACTIVITY, [{**event, "actor": {"user": {"email": "x"}}}])
    with pytest.raises(Unfit, match="observables"):
        batch(DATASTORE_ACTIVITY, [{**event, "observables": []}])
