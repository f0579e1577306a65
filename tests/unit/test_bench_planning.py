"""The planning benchmark's own pieces: the table it builds, local planning, its REST client."""

from __future__ import annotations

import gc
import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import httpx
import pytest
from pyiceberg.conversions import from_bytes
from pyiceberg.types import LongType, StringType

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "planning.py"


def load_benchmark() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_planning", BENCHMARK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_planning"] = module
    spec.loader.exec_module(module)
    return module


bench = load_benchmark()
table_module = sys.modules["planning_table"]  # the table builder the benchmark imports
SHAPE = bench.TableShape(manifests=3, entries=100)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    workdir = tmp_path_factory.mktemp("planning")
    return workdir, bench.ensure_table(workdir, SHAPE)


def test_data_files_carry_their_region_and_decodable_bounds_for_every_column() -> None:
    first, other = table_module.data_file("file:///t", 0), table_module.data_file("file:///t", 51)
    assert first.partition[0] == "region-00" and other.partition[0] == "region-01"
    assert "/region=region-01/" in other.file_path
    assert set(first.lower_bounds) == set(first.upper_bounds) == set(range(1, 9))
    low, high = (from_bytes(LongType(), b[1]) for b in (other.lower_bounds, other.upper_bounds))
    assert low == 51 * 30_000 and high == low + other.record_count - 1
    assert from_bytes(StringType(), other.lower_bounds[2]) == "region-01"


def test_built_table_has_the_shape_asked_for(built: tuple[Path, str]) -> None:
    workdir, identifier = built
    table = bench.warehouse_catalog(workdir).load_table(identifier)
    manifests = table.current_snapshot().manifests(table.io)
    assert len(manifests) == SHAPE.manifests
    assert {m.added_files_count for m in manifests} == {SHAPE.entries}
    assert table.spec().fields[0].name == "region"


def test_a_finished_build_is_reused(built: tuple[Path, str]) -> None:
    workdir, identifier = built
    before = bench.warehouse_catalog(workdir).load_table(identifier).metadata_location
    assert bench.ensure_table(workdir, SHAPE) == identifier
    assert bench.warehouse_catalog(workdir).load_table(identifier).metadata_location == before


def test_local_planning_returns_every_file_or_only_the_selected_region(
        built: tuple[Path, str]) -> None:
    workdir, identifier = built
    catalog = bench.warehouse_catalog(workdir)
    full = bench.plan_locally(catalog, identifier, bench.SCANS["full"])
    region = bench.plan_locally(catalog, identifier, bench.SCANS["region"])
    assert len(full.paths) == SHAPE.files
    assert region.paths == {p for p in full.paths if "/region=region-07/" in p}
    assert len(region.paths) == SHAPE.files // 50


def test_local_planning_can_pause_the_collector_and_restores_it(built: tuple[Path, str]) -> None:
    workdir, identifier = built
    catalog = bench.warehouse_catalog(workdir)
    paused = bench.plan_locally(catalog, identifier, bench.SCANS["full"], collector=False)
    assert len(paused.paths) == SHAPE.files
    assert gc.isenabled()


def task(path: str) -> dict[str, object]:
    return {"data-file": {"file-path": path, "content": "data"}}


class FakePlanner:
    """A REST planner answering 'submitted' once, then plan tasks, one of which hands out more."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str, dict[str, object] | None]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        is_json = request.headers.get("content-type") == "application/json"
        body = json.loads(request.content) if is_json else None
        self.requests.append((request.method, request.url.path, body))
        path = request.url.path
        if path == "/v1/oauth/tokens":
            return httpx.Response(200, json={"access_token": "t", "token_type": "bearer"})
        if path == "/v1/config":
            return httpx.Response(200, json={"defaults": {}, "overrides": {"prefix": "p"}})
        if request.method == "POST" and path.endswith("/plan"):
            return httpx.Response(200, json={"status": "submitted", "plan-id": "id-1"})
        if request.method == "GET" and path.endswith("/plan/id-1"):
            return httpx.Response(200, json={"status": "completed", "plan-id": "id-1",
                                             "plan-tasks": ["a", "b"],
                                             "file-scan-tasks": [task("f0")]})
        if path.endswith("/tasks"):
            more = {"a": {"plan-tasks": ["c"]}}.get(str(body and body["plan-task"]), {})
            return httpx.Response(200, json={"file-scan-tasks": [task(f"f-{body}")], **more})
        return httpx.Response(204)


def test_client_polls_fetches_every_plan_task_and_closes_the_plan() -> None:
    planner = FakePlanner()
    client = bench.PlanClient("http://icegov", "bench.t", 2, httpx.MockTransport(planner))
    try:
        planned = bench.plan_through(client, bench.SCANS["region"])
    finally:
        client.close()
    assert len(planned.paths) == 4 and "f0" in planned.paths
    plan = next(body for method, path, body in planner.requests if path.endswith("/plan"))
    assert plan == {"select": [f.name for f in bench.SCHEMA.fields], "case-sensitive": True,
                    "filter": {"type": "eq", "term": "region", "value": "region-07"}}
    fetched = sorted(str(body["plan-task"]) for _, path, body in planner.requests
                     if path.endswith("/tasks") and body)
    assert fetched == ["a", "b", "c"]
    assert ("DELETE", "/v1/p/namespaces/bench/tables/t/plan/id-1", None) in planner.requests


def test_a_refused_plan_fails_the_run_with_its_status() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/plan"):
            return httpx.Response(403, json={"error": {"message": "no"}})
        return FakePlanner()(request)

    client = bench.PlanClient("http://icegov", "bench.t", 1, httpx.MockTransport(refuse))
    with pytest.raises(RuntimeError, match="403"):
        client.plan(bench.SCANS["full"])
    client.close()


def test_results_flag_plans_that_differ_from_local_planning() -> None:
    results = bench.Results()
    results.record("full", "L", bench.Planned(2.0, {"a", "b"}))
    results.record("full", "C", bench.Planned(1.0, {"a", "b"}))
    assert not results.problems
    results.record("full", "W", bench.Planned(0.1, {"a"}))
    assert results.problems == ["full (W): 1 files, 0 not planned locally, 1 missing"]
    line = bench.table_lines(results, SHAPE)[2]
    assert "| 0.50 met |" in line and "| 0.05 met |" in line
    results.record("full", "G", bench.Planned(1.25, {"a", "b"}))
    assert bench.table_lines(results, SHAPE)[2].endswith("| 1,250 | 0.80 |")
