"""Replicas on one PostgreSQL catalog: a purge on one holds off the writes that adopt files on
another, and waits for theirs (``proxy.catalog.adoption``), on a real PostgreSQL server."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from proxy.catalog import store
from proxy.catalog.adoption import AdoptionLock
from tests.support.http import wait_for
from tests.support.postgres import postgres_server


@pytest.fixture(scope="module")
def pg_uri() -> Iterator[str]:
    with postgres_server() as uri:
        yield uri


def replica_locks(pg_uri: str, warehouse: Path) -> tuple[AdoptionLock, AdoptionLock]:
    """The adoption locks two icegov processes on one catalog hold (one per process)."""
    return (AdoptionLock(store.open_catalog(pg_uri, warehouse)),
            AdoptionLock(store.open_catalog(pg_uri, warehouse)))


def waiting_for_advisory_locks(pg_uri: str) -> int:
    engine = create_engine(pg_uri)
    try:
        with engine.connect() as connection:
            return int(connection.execute(text(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"))
                .scalar_one())
    finally:
        engine.dispose()


def second_waits_for_first(pg_uri: str, first: AbstractContextManager[None],
                           second: Callable[[], AbstractContextManager[None]]) -> list[str]:
    """Hold ``first``; in another thread take ``second()``; the order the two finished in."""
    order: list[str] = []

    def take_second() -> None:
        with second():
            order.append("second")

    racer = threading.Thread(target=take_second)
    with first:
        racer.start()
        wait_for(lambda: waiting_for_advisory_locks(pg_uri) == 1, what="the other replica to wait")
        order.append("first")
    racer.join(timeout=60)
    assert not racer.is_alive()
    return order


def test_a_purge_on_one_replica_holds_off_an_adopting_write_on_another(
        pg_uri: str, tmp_path: Path) -> None:
    purging, writing = replica_locks(pg_uri, tmp_path / "warehouse")
    assert second_waits_for_first(pg_uri, purging.purging(), writing.adopting) == [
        "first", "second"]


def test_a_purge_waits_for_an_adopting_write_on_another_replica(
        pg_uri: str, tmp_path: Path) -> None:
    writing, purging = replica_locks(pg_uri, tmp_path / "warehouse")
    assert second_waits_for_first(pg_uri, writing.adopting(), purging.purging) == [
        "first", "second"]


def test_writes_on_two_replicas_share_the_lock(pg_uri: str, tmp_path: Path) -> None:
    one, two = replica_locks(pg_uri, tmp_path / "warehouse")
    with one.adopting(), two.adopting():
        assert waiting_for_advisory_locks(pg_uri) == 0
