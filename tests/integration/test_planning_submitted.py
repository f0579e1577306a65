"""``submitted`` plans: answered to clients that poll, never to pyiceberg ≤ 0.12 (issue 8 §1).

A proxy whose ``submit_above_files`` is tiny answers a Java client's large plan ``submitted``,
prepares it in the background and completes it on a poll (any replica could: the plan id is
self-contained); pyiceberg 0.12, recognised by its ``X-Client-Version``, gets a completed plan
for the same scan and reads every row.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from pyiceberg.catalog.rest import RestCatalog

from tests.conftest import proxy_for
from tests.support.http import token
from tests.support.plan_tables import BuiltTable, many_files
from tests.support.settings import ADMIN

JAVA = "Apache Iceberg 1.11.0 (commit 0000000)"
PLANNING = {"shard_files": 2, "submit_above_files": 3}


@pytest.fixture(scope="module")
def running(backend: str, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[tuple[str, BuiltTable]]:
    with proxy_for(backend, tmp_path_factory.mktemp(f"submit-{backend}"),
                   planning=PLANNING) as proxy:
        catalog = RestCatalog("admin", uri=proxy.url, credential=ADMIN)
        catalog.create_namespace("submitted")
        yield proxy.url, many_files(catalog, "submitted.many", 5)


def _client(url: str, version: str) -> httpx.Client:
    return httpx.Client(base_url=url, headers={
        "authorization": f"Bearer {token(url, ADMIN)}", "x-client-version": version})


def _tasks(client: httpx.Client, base: str, answer: dict[str, Any]) -> list[str]:
    paths = [t["data-file"]["file-path"] for t in answer.get("file-scan-tasks", [])]
    for task in answer.get("plan-tasks", []):
        fetched = client.post(f"{base}/tasks", json={"plan-task": task})
        assert fetched.status_code == 200, fetched.text
        paths += _tasks(client, base, fetched.json())
    return paths


def test_a_polling_client_gets_submitted_then_the_plan(running: tuple[str, BuiltTable]) -> None:
    url, many = running
    base = "/v1/namespaces/submitted/tables/many"
    with _client(url, JAVA) as java:
        first = java.post(f"{base}/plan", json={})
        assert first.status_code == 200, first.text
        assert first.json()["status"] == "submitted"
        plan_id = first.json()["plan-id"]
        answer = java.get(f"{base}/plan/{plan_id}").json()
        while answer["status"] == "submitted":  # bounded: each poll waits for the plan
            answer = java.get(f"{base}/plan/{plan_id}").json()
        assert answer["status"] == "completed", answer
        assert sorted(_tasks(java, base, answer)) == sorted(set().union(*many.added.values()))
        assert java.delete(f"{base}/plan/{plan_id}").status_code == 204


def test_pyiceberg_012_never_gets_submitted(running: tuple[str, BuiltTable]) -> None:
    url, _ = running
    with _client(url, "PyIceberg 0.12.0") as old:
        answer = old.post("/v1/namespaces/submitted/tables/many/plan", json={}).json()
    assert answer["status"] == "completed" and answer["plan-tasks"], answer
    server = RestCatalog("server", uri=url, credential=ADMIN,
                         **{"scan-planning-mode": "server"})
    rows = server.load_table("submitted.many").scan().to_arrow()
    assert rows.num_rows == 10
