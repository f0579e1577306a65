"""Idempotency-Key through the governed pipeline, against a fake backing: replays, bindings,
what is kept and what is released, concurrent requests, expiry, and the advertised lifetime."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy
from starlette.testclient import TestClient

from proxy.app import Backing, create_app
from proxy.idempotency import store as store_module
from tests.support.audit import request_records
from tests.support.errors import assert_error_model
from tests.support.settings import settings_for_tests
from tests.support.upstream import UPSTREAM, Upstream, client_for, icegov_token
from tests.unit.test_pipeline import ALTER, TABLE, loaded_table, table_backing

NAMESPACES = "/v1/namespaces"
CREATE = {"namespace": ["db"], "properties": {}}
ANALYST = "analyst:analyst-secret"


def keyed(key: str | None = None) -> dict[str, str]:
    return {"Idempotency-Key": key or str(uuid.uuid4())}


def idem_client(upstream: Upstream, tmp: Path, **idempotency: Any) -> TestClient:
    return client_for(upstream, tmp, idempotency={"db_uri": f"sqlite:///{tmp / 'keys.db'}",
                                                  **idempotency})


def audit_records(tmp: Path) -> list[dict[str, Any]]:
    return request_records(tmp / "audit.log")


def in_turn(answers: list[httpx.Response]) -> Callable[[httpx.Request], httpx.Response]:
    """Answers ``answers`` one after the other (the last one repeats)."""
    remaining = list(answers)

    def answer(_: httpx.Request) -> httpx.Response:
        return remaining.pop(0) if len(remaining) > 1 else remaining[0]
    return answer


def test_a_retry_replays_the_stored_answer_without_reaching_the_backing(tmp_path: Path) -> None:
    upstream = Upstream(lambda _: httpx.Response(200, json={"namespace": ["db"], "n": 1}))
    headers = keyed()
    with idem_client(upstream, tmp_path) as client:
        first = client.post(NAMESPACES, json=CREATE, headers=headers)
        again = client.post(NAMESPACES, json=CREATE, headers=headers)
    assert first.status_code == again.status_code == 200
    assert again.content == first.content
    assert again.headers["content-type"] == first.headers["content-type"]
    assert again.headers["idempotent-replayed"] == "true"
    assert "idempotent-replayed" not in first.headers
    assert len(upstream.seen) == 1
    records = audit_records(tmp_path)
    assert [r["replayed"] for r in records] == [False, True]
    assert records[1]["decision"] == "allow" and records[1]["status"] == 200


def test_requests_without_a_key_or_on_endpoints_without_one_always_run(tmp_path: Path) -> None:
    upstream = Upstream()
    headers = keyed()
    with idem_client(upstream, tmp_path) as client:
        for _ in range(2):
            assert client.post(NAMESPACES, json=CREATE).status_code == 200
            assert client.get("/v1/namespaces/db", headers=headers).status_code == 200
    assert len(upstream.seen) == 4


def test_a_conflict_is_final_and_replayed(tmp_path: Path) -> None:
    exists = {"error": {"message": "exists", "type": "AlreadyExistsException", "code": 409}}
    upstream = Upstream(lambda _: httpx.Response(409, json=exists))
    headers = keyed()
    with idem_client(upstream, tmp_path) as client:
        answers = [client.post(NAMESPACES, json=CREATE, headers=headers) for _ in range(2)]
    assert [a.status_code for a in answers] == [409, 409]
    assert answers[1].json() == exists
    assert len(upstream.seen) == 1


def test_another_body_with_the_same_key_is_422_and_never_replayed(tmp_path: Path) -> None:
    upstream = Upstream()
    headers = keyed()
    with idem_client(upstream, tmp_path) as client:
        assert client.post(NAMESPACES, json=CREATE, headers=headers).status_code == 200
        other = client.post(NAMESPACES, json={"namespace": ["db2"]}, headers=headers)
        elsewhere = client.delete("/v1/namespaces/db", headers=headers)
    assert_error_model(other, 422, "UnprocessableEntityException")
    assert_error_model(elsewhere, 422, "UnprocessableEntityException")
    assert len(upstream.seen) == 1


def test_another_principal_with_the_same_key_is_422_and_never_replayed(tmp_path: Path) -> None:
    upstream = Upstream()
    headers = keyed()
    with idem_client(upstream, tmp_path) as client:
        assert client.post(NAMESPACES, json=CREATE, headers=headers).status_code == 200
        token = icegov_token(client)  # admin: another principal than the anonymous tester
        other = client.post(NAMESPACES, json=CREATE,
                            headers={**headers, "Authorization": f"Bearer {token}"})
    error = assert_error_model(other, 422, "UnprocessableEntityException")
    assert "tester" not in error["message"]
    assert len(upstream.seen) == 1


def test_a_caller_who_may_not_see_the_table_gets_404_not_the_stored_answer(
        tmp_path: Path) -> None:
    upstream = table_backing(tmp_path, httpx.Response(200, json={"ok": True}))
    headers = keyed()
    with idem_client(upstream, tmp_path) as client:
        assert client.post(TABLE, json=ALTER, headers=headers).status_code == 200
        token = icegov_token(client, ANALYST)
        hidden = client.post(TABLE, json=ALTER,
                             headers={**headers, "Authorization": f"Bearer {token}"})
    assert_error_model(hidden, 404, "NoSuchTableException")


def test_a_replayed_commit_is_neither_classified_nor_sent_again(tmp_path: Path) -> None:
    upstream = table_backing(tmp_path, httpx.Response(200, json={"committed": 1}))
    headers = keyed()
    with idem_client(upstream, tmp_path) as client:
        first = client.post(TABLE, json=ALTER, headers=headers)
        seen = len(upstream.seen)
        again = client.post(TABLE, json=ALTER, headers=headers)
    assert first.status_code == again.status_code == 200
    assert again.content == first.content
    assert len(upstream.seen) == seen  # no table load (evidence), no commit
    records = audit_records(tmp_path)
    assert records[-1]["replayed"] is True and records[-1]["evidence"] == []
    assert records[-1]["new_snapshot_ids"] == []


@pytest.mark.parametrize("failure,status", [
    (httpx.Response(500, text="boom"), 502),
    (httpx.Response(503, text="busy"), 502),
    (httpx.Response(429, json={"error": {"message": "slow down", "type": "T", "code": 429}}),
     429),
])
def test_5xx_and_retryable_answers_are_not_kept_and_a_retry_runs(
        tmp_path: Path, failure: httpx.Response, status: int) -> None:
    upstream = Upstream(in_turn([failure, httpx.Response(200, json={"namespace": ["db"]})]))
    headers = keyed()
    with idem_client(upstream, tmp_path) as client:
        first = client.post(NAMESPACES, json=CREATE, headers=headers)
        retry = client.post(NAMESPACES, json=CREATE, headers=headers)
        replay = client.post(NAMESPACES, json=CREATE, headers=headers)
    assert first.status_code == status
    assert retry.status_code == 200 and "idempotent-replayed" not in retry.headers
    assert replay.status_code == 200 and replay.headers["idempotent-replayed"] == "true"
    assert len(upstream.seen) == 2


def test_a_commit_whose_outcome_is_unknown_releases_its_key(tmp_path: Path) -> None:
    commit = in_turn([httpx.Response(502, text="bad gateway"), httpx.Response(200, json={})])

    def answer(request: httpx.Request) -> httpx.Response:
        if request.method == "GET":
            return httpx.Response(200, json=loaded_table(tmp_path))
        return commit(request)
    upstream = Upstream(answer)
    headers = keyed()
    with idem_client(upstream, tmp_path) as client:
        first = client.post(TABLE, json=ALTER, headers=headers)
        retry = client.post(TABLE, json=ALTER, headers=headers)
    assert_error_model(first, 502, "CommitStateUnknownException")
    assert retry.status_code == 200 and "idempotent-replayed" not in retry.headers
    assert [r.method for r in upstream.seen].count("POST") == 2


def test_a_failure_inside_icegov_releases_the_key(tmp_path: Path) -> None:
    calls: list[int] = []

    def answer(_: httpx.Request) -> httpx.Response:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("a bug")
        return httpx.Response(200, json={"namespace": ["db"]})
    headers = keyed()
    with idem_client(Upstream(answer), tmp_path) as client:
        assert_error_model(client.post(NAMESPACES, json=CREATE, headers=headers), 500)
        assert client.post(NAMESPACES, json=CREATE, headers=headers).status_code == 200
    assert len(calls) == 2


def test_answers_over_the_size_limit_are_not_kept(tmp_path: Path) -> None:
    upstream = Upstream(lambda _: httpx.Response(200, json={"blob": "x" * 200}))
    headers = keyed()
    with idem_client(upstream, tmp_path, max_stored_bytes=100) as client:
        answers = [client.post(NAMESPACES, json=CREATE, headers=headers) for _ in range(2)]
    assert [a.status_code for a in answers] == [200, 200]
    assert len(upstream.seen) == 2


def test_an_expired_answer_is_not_replayed(tmp_path: Path) -> None:
    upstream = Upstream()
    headers = keyed()
    with idem_client(upstream, tmp_path) as client:
        assert client.post(NAMESPACES, json=CREATE, headers=headers).status_code == 200
        engine = sqlalchemy.create_engine(f"sqlite:///{tmp_path / 'keys.db'}")
        with engine.begin() as conn:
            table = sqlalchemy.table(store_module.TABLE_NAME, sqlalchemy.column("expires_at"))
            conn.execute(sqlalchemy.update(table).values(expires_at=0.0))
        engine.dispose()
        again = client.post(NAMESPACES, json=CREATE, headers=headers)
    assert again.status_code == 200 and "idempotent-replayed" not in again.headers
    assert len(upstream.seen) == 2


@pytest.mark.parametrize("value", [
    "not-a-uuid", "0190a5b4-7c2e-7d1a-9b3c", "0190a5b4-7c2e-7d1a-9b3c-4d5e6f708192x",
    "0190a5b47c2e7d1a9b3c4d5e6f708192", "{0190a5b4-7c2e-7d1a-9b3c-4d5e6f708192}",
    "0190a5b4-7c2e-7d1a-9b3c-4d5e6f70819g", "",
])
def test_a_malformed_key_is_400_and_never_forwarded(tmp_path: Path, value: str) -> None:
    upstream = Upstream()
    with idem_client(upstream, tmp_path) as client:
        response = client.post(NAMESPACES, json=CREATE, headers={"Idempotency-Key": value})
    assert_error_model(response, 400, "BadRequestException")
    assert upstream.seen == []


def test_a_key_given_twice_is_400(tmp_path: Path) -> None:
    upstream = Upstream()
    key = str(uuid.uuid4())
    with idem_client(upstream, tmp_path) as client:
        response = client.post(NAMESPACES, json=CREATE,
                               headers=[("Idempotency-Key", key), ("Idempotency-Key", key)])
    assert_error_model(response, 400, "BadRequestException")
    assert upstream.seen == []


def test_keys_are_case_insensitive_uuids(tmp_path: Path) -> None:
    upstream = Upstream()
    key = "017F22E2-79B0-7CC3-98C4-DC0C0C07398F"
    with idem_client(upstream, tmp_path) as client:
        client.post(NAMESPACES, json=CREATE, headers=keyed(key))
        again = client.post(NAMESPACES, json=CREATE, headers=keyed(key.lower()))
    assert again.headers["idempotent-replayed"] == "true"
    assert len(upstream.seen) == 1


@pytest.mark.parametrize("settings,advertised", [
    ({}, "PT30M"),
    ({"lifetime_seconds": 90061}, "PT25H1M1S"),
    ({"enabled": False}, None),
])
def test_config_advertises_icegovs_own_lifetime(
        tmp_path: Path, settings: dict[str, Any], advertised: str | None) -> None:
    upstream = Upstream(config={"defaults": {}, "overrides": {},
                                "idempotency-key-lifetime": "PT1S"})
    with idem_client(upstream, tmp_path, **settings) as client:
        config = client.get("/v1/config").json()
    assert config.get("idempotency-key-lifetime") == advertised


def test_with_idempotency_disabled_keys_are_ignored(tmp_path: Path) -> None:
    upstream = Upstream()
    headers = keyed()
    with idem_client(upstream, tmp_path, enabled=False) as client:
        for _ in range(2):
            assert client.post(NAMESPACES, json=CREATE, headers=headers).status_code == 200
    assert len(upstream.seen) == 2
    assert not (tmp_path / "keys.db").exists()


def test_the_store_is_created_only_when_a_key_arrives(tmp_path: Path) -> None:
    with idem_client(Upstream(), tmp_path) as client:
        assert client.post(NAMESPACES, json=CREATE).status_code == 200
        assert not (tmp_path / "keys.db").exists()
        client.post(NAMESPACES, json=CREATE, headers=keyed())
        assert (tmp_path / "keys.db").exists()


BOUND = 10.0  # seconds: a broken feature fails the test instead of hanging it


async def _until(condition: Callable[[], bool]) -> None:
    """Yield to the event loop until ``condition`` holds (at most ``BOUND`` seconds)."""
    for _ in range(int(BOUND * 1000)):
        if condition():
            return
        await asyncio.sleep(0.001)
    raise AssertionError("condition never held")


def test_concurrent_requests_with_one_key_run_once_and_share_the_answer(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The second request waits (seen pending in the store) until the first one answers."""
    pending_seen: list[str] = []
    real_claim = store_module.IdempotencyStore.claim

    def spying_claim(self: store_module.IdempotencyStore, *args: Any) -> Any:
        outcome = real_claim(self, *args)
        if isinstance(outcome, store_module.Existing) and outcome.answer is None:
            pending_seen.append(args[0])
        return outcome
    monkeypatch.setattr(store_module.IdempotencyStore, "claim", spying_claim)
    asyncio.run(_two_concurrent_creates(tmp_path, pending_seen))


async def _two_concurrent_creates(tmp_path: Path, pending_seen: list[str]) -> None:
    entered, release = asyncio.Event(), asyncio.Event()
    calls: list[httpx.Request] = []

    async def backing(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/v1/config"):
            return httpx.Response(200, json={"defaults": {}, "overrides": {}})
        calls.append(request)
        entered.set()
        await release.wait()
        return httpx.Response(200, json={"namespace": ["db"], "call": len(calls)})

    settings = settings_for_tests(
        tmp_path, anonymous_admin=True, catalog_uri=UPSTREAM,
        idempotency={"db_uri": f"sqlite:///{tmp_path / 'keys.db'}"})
    app = create_app(settings, Backing(httpx.MockTransport(backing), UPSTREAM))
    headers = keyed()
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://icegov") as client:
        first = asyncio.create_task(client.post(NAMESPACES, json=CREATE, headers=headers))
        await asyncio.wait_for(entered.wait(), BOUND)
        second = asyncio.create_task(client.post(NAMESPACES, json=CREATE, headers=headers))
        try:
            await _until(lambda: bool(pending_seen))
        finally:
            release.set()
        answers = await asyncio.wait_for(asyncio.gather(first, second), BOUND)
    assert len(calls) == 1
    assert [a.status_code for a in answers] == [200, 200]
    assert answers[0].content == answers[1].content
    assert answers[1].headers["idempotent-replayed"] == "true"


def test_a_wait_that_outlasts_the_deadline_is_504_and_runs_nothing(
        tmp_path: Path) -> None:
    asyncio.run(_wait_times_out(tmp_path))


async def _wait_times_out(tmp_path: Path) -> None:
    entered, release = asyncio.Event(), asyncio.Event()
    calls: list[httpx.Request] = []

    async def backing(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/v1/config"):
            return httpx.Response(200, json={"defaults": {}, "overrides": {}})
        calls.append(request)
        entered.set()
        await release.wait()
        return httpx.Response(200, json={"ok": True})

    settings = settings_for_tests(
        tmp_path, anonymous_admin=True, catalog_uri=UPSTREAM,
        idempotency={"db_uri": f"sqlite:///{tmp_path / 'keys.db'}", "wait_seconds": 0.05})
    app = create_app(settings, Backing(httpx.MockTransport(backing), UPSTREAM))
    headers = keyed()
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://icegov") as client:
        first = asyncio.create_task(client.post(NAMESPACES, json=CREATE, headers=headers))
        await asyncio.wait_for(entered.wait(), BOUND)
        try:
            waiting = await asyncio.wait_for(
                client.post(NAMESPACES, json=CREATE, headers=headers), BOUND)
        finally:
            release.set()
        assert (await asyncio.wait_for(first, BOUND)).status_code == 200
    assert_error_model(waiting, 504, "GatewayTimeoutException")
    assert len(calls) == 1
