"""The Idempotency-Key store on SQLite: claims, answers, leases, expiry and purging; key
bindings and the advertised duration."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from proxy.idempotency import iso_duration
from proxy.idempotency.guard import is_final
from proxy.idempotency.keys import fingerprint
from proxy.idempotency.store import (
    Claimed,
    Existing,
    IdempotencyStore,
    StoredAnswer,
    UnsupportedStore,
)
from proxy.inbound import InboundRequest
from proxy.routes import RouteTable

KEY = "0190a5b4-7c2e-7d1a-9b3c-4d5e6f708192"
ANSWER = StoredAnswer(200, "application/json", b'{"ok": true}')
LEASE, LIFETIME = 60.0, 1800.0


@pytest.fixture
def store(tmp_path: Path) -> IdempotencyStore:
    return IdempotencyStore(f"sqlite:///{tmp_path / 'keys.db'}")


def claim(store: IdempotencyStore, now: float, principal: str = "token:a",
          print_: str = "f1") -> Claimed | Existing:
    return store.claim(KEY, principal, print_, now, LEASE)


def test_one_claim_wins_and_the_others_see_it_pending_then_done(
        store: IdempotencyStore) -> None:
    first = claim(store, 0.0)
    assert isinstance(first, Claimed)
    pending = claim(store, 1.0, "token:b", "f2")
    assert pending == Existing("token:a", "f1", None)
    assert store.finish(KEY, first.token, ANSWER, expires_at=LIFETIME)
    assert claim(store, 2.0) == Existing("token:a", "f1", ANSWER)


def test_a_released_key_can_be_claimed_again(store: IdempotencyStore) -> None:
    first = claim(store, 0.0)
    assert isinstance(first, Claimed)
    store.release(KEY, "another-token")
    assert isinstance(claim(store, 1.0), Existing)  # only the holder's token releases
    store.release(KEY, first.token)
    assert isinstance(claim(store, 2.0), Claimed)


def test_a_stale_claim_is_taken_over_and_its_holder_cannot_store(
        store: IdempotencyStore) -> None:
    dead = claim(store, 0.0)
    assert isinstance(dead, Claimed)
    assert isinstance(claim(store, LEASE - 1), Existing)
    taker = claim(store, LEASE + 1)
    assert isinstance(taker, Claimed) and taker.token != dead.token
    assert not store.finish(KEY, dead.token, ANSWER, expires_at=LIFETIME)
    assert store.finish(KEY, taker.token, ANSWER, expires_at=LIFETIME)


def test_a_stored_answer_lives_for_its_lifetime_then_the_key_runs_again(
        store: IdempotencyStore) -> None:
    first = claim(store, 0.0)
    assert isinstance(first, Claimed)
    store.finish(KEY, first.token, ANSWER, expires_at=LIFETIME)
    assert claim(store, LIFETIME - 1) == Existing("token:a", "f1", ANSWER)
    assert isinstance(claim(store, LIFETIME + 1), Claimed)


def test_purge_deletes_only_expired_rows(store: IdempotencyStore) -> None:
    for index, expires in enumerate((10.0, 20.0, 30.0)):
        key = KEY[:-1] + str(index)
        won = store.claim(key, "token:a", "f", 0.0, LEASE)
        assert isinstance(won, Claimed)
        store.finish(key, won.token, ANSWER, expires_at=expires)
    assert store.purge(now=25.0) == 2
    assert store.purge(now=25.0) == 0
    assert isinstance(store.claim(KEY[:-1] + "2", "token:a", "f", 25.0, LEASE), Existing)


def test_two_stores_on_one_database_share_their_keys(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'shared.db'}"
    one, two = IdempotencyStore(uri), IdempotencyStore(uri)
    won = claim(one, 0.0)
    assert isinstance(won, Claimed)
    assert isinstance(claim(two, 0.5), Existing)
    one.finish(KEY, won.token, ANSWER, expires_at=LIFETIME)
    assert claim(two, 1.0) == Existing("token:a", "f1", ANSWER)


def test_the_rights_an_answer_was_given_on_are_kept_with_it(store: IdempotencyStore) -> None:
    won = claim(store, 0.0)
    assert isinstance(won, Claimed)
    rights = (("ALTER", "icegov.demo.t"), ("INSERT", "icegov.demo.t"))
    given = StoredAnswer(200, None, b"{}", rights)
    store.finish(KEY, won.token, given, expires_at=LIFETIME)
    assert claim(store, 1.0) == Existing("token:a", "f1", given)


def test_a_table_kept_by_an_older_icegov_gains_the_rights_column(tmp_path: Path) -> None:
    """Its answers replay with their rights unknown (None); new answers keep theirs."""
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as old:
        old.execute("CREATE TABLE icegov_idempotency (key VARCHAR(36) PRIMARY KEY, principal "
                    "VARCHAR(512) NOT NULL, fingerprint VARCHAR(64) NOT NULL, state VARCHAR(8) "
                    "NOT NULL, claim VARCHAR(36) NOT NULL, status INTEGER, content_type "
                    "VARCHAR(255), body BLOB, created_at FLOAT NOT NULL, "
                    "expires_at FLOAT NOT NULL)")
        old.execute("INSERT INTO icegov_idempotency VALUES (?, 'token:a', 'f1', 'done', 'c', 200,"
                    " NULL, X'7B7D', 0, ?)", (KEY, LIFETIME))
    store = IdempotencyStore(f"sqlite:///{path}")
    assert claim(store, 1.0) == Existing("token:a", "f1", StoredAnswer(200, None, b"{}", None))
    won = store.claim(KEY[:-1] + "0", "token:a", "f", 1.0, LEASE)
    assert isinstance(won, Claimed)
    given = StoredAnswer(204, None, b"", (("DROP_TABLE", "icegov.demo.t"),))
    store.finish(KEY[:-1] + "0", won.token, given, expires_at=LIFETIME)
    assert store.claim(KEY[:-1] + "0", "token:a", "f", 2.0, LEASE) == Existing(
        "token:a", "f", given)


def test_only_sqlite_and_postgresql_are_supported() -> None:
    with pytest.raises(UnsupportedStore):
        IdempotencyStore("mysql://somewhere/db")


@pytest.mark.parametrize("status,final", [
    (200, True), (204, True), (400, True), (403, True), (404, True), (409, True), (422, True),
    (408, False), (419, False), (425, False), (429, False), (500, False), (502, False),
    (503, False), (504, False), (304, False),
])
def test_which_answers_are_final(status: int, final: bool) -> None:
    assert is_final(status) is final


@pytest.mark.parametrize("seconds,text", [
    (1800, "PT30M"), (3600, "PT1H"), (86400, "PT24H"), (90061, "PT25H1M1S"), (45, "PT45S"),
])
def test_lifetimes_are_iso_8601_durations(seconds: int, text: str) -> None:
    assert iso_duration(seconds) == text


def _inbound(method: str, path: str, query: bytes = b"", body: bytes = b"") -> InboundRequest:
    route = RouteTable().match(method, path)
    assert route is not None
    return InboundRequest(method, path.encode(), query, (), body, route)


def test_the_fingerprint_covers_method_path_query_and_body() -> None:
    table = "/v1/namespaces/db/tables/t"
    base = fingerprint(_inbound("DELETE", table))
    assert fingerprint(_inbound("DELETE", table)) == base
    assert fingerprint(_inbound("DELETE", table, b"purgeRequested=true")) != base
    assert fingerprint(_inbound("DELETE", "/v1/namespaces/db/tables/u")) != base
    commit = fingerprint(_inbound("POST", table, body=b"{}"))
    assert commit != fingerprint(_inbound("POST", table, body=b"{ }"))
