"""Idempotency-Key with real parts: a PostgreSQL server shared by two icegov replicas, and a real
pyiceberg append through icegov in front of both backing catalogs, replayed after it landed."""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pytest
import requests
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField

from proxy.app import create_app
from proxy.idempotency.store import Claimed, Existing, IdempotencyStore, StoredAnswer
from tests.conftest import BACKENDS, proxy_for
from tests.support.http import as_principal, audit_records
from tests.support.postgres import postgres_server
from tests.support.servers import serve
from tests.support.settings import ADMIN, settings_for_tests

SCHEMA = Schema(NestedField(1, "id", LongType(), required=False))
ROWS = pa.table({"id": pa.array([1, 2, 3], pa.int64())})


@pytest.fixture(scope="module")
def pg_uri() -> Iterator[str]:
    with postgres_server() as uri:
        yield uri


@pytest.fixture(scope="module")
def replicas(pg_uri: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    """Two icegov replicas over one embedded catalog, sharing their keys on PostgreSQL."""
    shared = tmp_path_factory.mktemp("replicas")
    with contextlib.ExitStack() as stack:
        urls = [stack.enter_context(serve(create_app(settings_for_tests(
            shared / name, warehouse=shared / "warehouse",
            idempotency={"db_uri": pg_uri})))) for name in ("one", "two")]
        yield urls


def key_header() -> dict[str, str]:
    return {"Idempotency-Key": str(uuid.uuid4())}


def test_concurrent_claims_on_postgresql_have_exactly_one_winner(pg_uri: str) -> None:
    stores = [IdempotencyStore(pg_uri) for _ in range(2)]  # two replicas' stores, racing
    key, racers = str(uuid.uuid4()), 8
    barrier = threading.Barrier(racers)

    def attempt(index: int) -> object:
        barrier.wait()
        return stores[index % 2].claim(key, "token:admin", "f", time.time(), 60.0)
    try:
        with ThreadPoolExecutor(racers) as pool:
            outcomes = list(pool.map(attempt, range(racers)))
    finally:
        for store in stores:
            store.close()
    assert sum(isinstance(o, Claimed) for o in outcomes) == 1


def test_answers_leases_and_expiry_on_postgresql(pg_uri: str) -> None:
    store, key = IdempotencyStore(pg_uri), str(uuid.uuid4())
    answer = StoredAnswer(201, "application/json", b"{}")
    try:
        first = store.claim(key, "token:admin", "f", 0.0, 60.0)
        assert isinstance(first, Claimed)
        assert store.claim(key, "token:admin", "f", 1.0, 60.0) == Existing(
            "token:admin", "f", None)
        taker = store.claim(key, "token:admin", "f", 61.0, 60.0)  # the lease ran out
        assert isinstance(taker, Claimed)
        assert not store.finish(key, first.token, answer, expires_at=100.0)
        assert store.finish(key, taker.token, answer, expires_at=100.0)
        assert store.claim(key, "token:admin", "f", 99.0, 60.0) == Existing(
            "token:admin", "f", answer)
        assert store.purge(now=101.0) >= 1
        assert isinstance(store.claim(key, "token:admin", "f", 101.0, 60.0), Claimed)
    finally:
        store.close()


def test_a_key_used_on_one_replica_replays_on_the_other(replicas: list[str]) -> None:
    name, headers = f"ns_{uuid.uuid4().hex[:8]}", key_header()
    with as_principal(replicas[0], ADMIN) as one, as_principal(replicas[1], ADMIN) as two:
        first = one.post("/v1/namespaces", json={"namespace": [name]}, headers=headers)
        again = two.post("/v1/namespaces", json={"namespace": [name]}, headers=headers)
        other = two.post("/v1/namespaces", json={"namespace": [name + "x"]}, headers=headers)
        assert two.get(f"/v1/namespaces/{name}x").status_code == 404
    assert first.status_code == 200 and "idempotent-replayed" not in first.headers
    assert again.status_code == 200 and again.headers["idempotent-replayed"] == "true"
    assert again.content == first.content
    assert other.status_code == 422
    assert other.json()["error"]["type"] == "UnprocessableEntityException"


def test_one_request_sent_to_two_replicas_at_once_runs_once(replicas: list[str]) -> None:
    """Had both run, one would be a 409 (the namespace exists): both get the first's 200."""
    name, headers = f"ns_{uuid.uuid4().hex[:8]}", key_header()
    barrier = threading.Barrier(2)

    def create(url: str) -> httpx.Response:
        with as_principal(url, ADMIN) as client:
            barrier.wait()
            return client.post("/v1/namespaces", json={"namespace": [name]}, headers=headers)
    with ThreadPoolExecutor(2) as pool:
        answers = list(pool.map(create, replicas))
    assert [a.status_code for a in answers] == [200, 200]
    assert answers[0].content == answers[1].content
    assert sum(a.headers.get("idempotent-replayed") == "true" for a in answers) == 1


def _capture_commits(catalog: RestCatalog, key: str) -> list[requests.Response]:
    """Send ``key`` with every request of ``catalog``'s session and keep its responses."""
    session: requests.Session = catalog._session
    seen: list[requests.Response] = []
    session.headers["Idempotency-Key"] = key

    def keep(response: requests.Response, *_: Any, **__: Any) -> None:
        seen.append(response)
    session.hooks["response"].append(keep)
    return seen


@pytest.mark.parametrize("backend_kind", BACKENDS)
def test_a_landed_append_replays_and_leaves_the_table_unchanged(
        backend_kind: str, tmp_path: Path) -> None:
    keys_db = {"db_uri": f"sqlite:///{tmp_path / 'keys.db'}"}
    with proxy_for(backend_kind, tmp_path, idempotency=keys_db) as proxy:
        catalog = RestCatalog("proxy", uri=proxy.url, credential=ADMIN)
        namespace = f"ns_{uuid.uuid4().hex[:8]}"
        catalog.create_namespace(namespace)
        table = catalog.create_table((namespace, "t"), SCHEMA)
        key = str(uuid.uuid4())
        seen = _capture_commits(catalog, key)
        table.append(ROWS)
        [commit] = [r for r in seen if r.request.method == "POST"
                    and r.request.path_url.endswith(f"/namespaces/{namespace}/tables/t")]
        assert commit.status_code == 200
        landed = catalog.load_table((namespace, "t")).metadata
        with as_principal(proxy.url, ADMIN) as http:
            replay = http.post(commit.request.path_url, content=commit.request.body,
                               headers={"Idempotency-Key": key,
                                        "content-type": "application/json"})
        after = catalog.load_table((namespace, "t"))
        assert replay.status_code == 200 and replay.headers["idempotent-replayed"] == "true"
        assert replay.content == commit.content
        assert [s.snapshot_id for s in after.metadata.snapshots] == [
            s.snapshot_id for s in landed.snapshots]
        assert after.metadata.current_snapshot_id == landed.current_snapshot_id
        assert after.scan().to_arrow().num_rows == len(ROWS)
        record = audit_records(proxy.audit_log)[-2]  # the load that followed is the last
        assert record["replayed"] is True and record["endpoint"] == "commit_table"
