"""Commits judged on the head this replica's last commit left (``proxy.committer.heads``).

The embedded catalog is wrapped so every commit icegov forwards is recorded with the backing's
answer. A pyiceberg appender commits through icegov; changes made *elsewhere* (straight at the
catalog, as another replica would) move the schema, the spec or the branch under the head icegov
knows. A commit judged on that stale head always carries its pins, is refused by the backing
(nothing landed), and is judged again on a fresh load: what lands is what a fresh judgement
admits, and a real conflict is still the client's 409.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pytest
from prometheus_client.parser import text_string_to_metric_families
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import CommitFailedException, ValidationException
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from proxy.app import EMBEDDED_BASE_URL, Backing, create_app
from proxy.catalog import EmbeddedCatalog
from tests.conftest import RunningProxy
from tests.support.servers import serve
from tests.support.settings import ADMIN, settings_for_tests

SCHEMA = Schema(NestedField(1, "id", LongType(), required=False))
HEAD_PINS = {"assert-table-uuid", "assert-current-schema-id", "assert-last-assigned-field-id",
             "assert-default-spec-id", "assert-last-assigned-partition-id",
             "assert-default-sort-order-id", "assert-ref-snapshot-id"}


class RecordingBacking:
    """Records each table commit icegov forwards: (its requirements, the backing's status)."""

    def __init__(self, app: ASGIApp) -> None:
        self._app = app
        self.commits: list[tuple[list[dict[str, Any]], int]] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not (scope["type"] == "http" and scope["method"] == "POST"
                and "/tables/" in scope["path"]):
            await self._app(scope, receive, send)
            return
        chunks: list[bytes] = []
        more = True
        while more:
            message = await receive()
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if sent:
                return {"type": "http.disconnect"}
            sent = True
            return {"type": "http.request", "body": b"".join(chunks), "more_body": False}

        requirements = json.loads(b"".join(chunks)).get("requirements") or []

        async def answer(message: Message) -> None:
            if message["type"] == "http.response.start":
                self.commits.append((requirements, message["status"]))
            await send(message)

        await self._app(scope, replay, answer)


def recorded_app(tmp_path: Path) -> tuple[RecordingBacking, EmbeddedCatalog, Any]:
    settings = settings_for_tests(tmp_path)
    embedded = EmbeddedCatalog.from_settings(settings)
    recording = RecordingBacking(embedded.app)
    backing = Backing(httpx.ASGITransport(app=recording), EMBEDDED_BASE_URL)
    return recording, embedded, create_app(settings, backing)


def rows(*ids: int) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64())})


def appender(url: str, name: str) -> Any:
    admin = RestCatalog("admin", uri=url, credential=ADMIN)
    admin.create_namespace_if_not_exists("demo")
    admin.create_table(name, SCHEMA)
    table = RestCatalog("w", uri=url, credential=ADMIN).load_table(name)
    table.append(rows(1))  # judged on a fresh load; icegov now knows the head it left
    return table


def kinds(requirements: list[dict[str, Any]]) -> set[str]:
    return {str(r.get("type")) for r in requirements}


def test_a_commit_judged_on_a_known_head_carries_every_pin(tmp_path: Path) -> None:
    recording, _, app = recorded_app(tmp_path)
    with serve(app) as url:
        name = f"demo.h{uuid.uuid4().hex[:8]}"
        table = appender(url, name)
        table.append(rows(2))
    [(first, _), (second, status)] = recording.commits
    assert "assert-current-schema-id" not in kinds(first)  # a fresh load: the usual pins
    assert kinds(second) == HEAD_PINS and status == 200  # judged on the known head
    pinned = {r["type"]: r for r in second}
    assert pinned["assert-current-schema-id"]["current-schema-id"] == 0
    assert pinned["assert-last-assigned-field-id"]["last-assigned-field-id"] == 1
    assert sorted(table.scan().to_arrow()["id"].to_pylist()) == [1, 2]


def test_a_schema_changed_elsewhere_is_never_committed_on_the_old_judgement(
        tmp_path: Path) -> None:
    recording, embedded, app = recorded_app(tmp_path)
    with serve(app) as url:
        name = f"demo.s{uuid.uuid4().hex[:8]}"
        table = appender(url, name)
        with embedded.catalog.load_table(name).update_schema() as update:  # elsewhere
            update.add_column("note", StringType())
        table.append(rows(2))  # the client's own view is one schema behind: it asserts none
        schema_ids = [r.get("current-schema-id") for reqs, _ in recording.commits
                      for r in reqs if r.get("type") == "assert-current-schema-id"]
        statuses = [status for _, status in recording.commits]
        current = embedded.catalog.load_table(name)
    assert schema_ids == [0] and statuses == [200, 409, 200], recording.commits
    assert current.schema().find_field("note") is not None  # the change elsewhere survived
    assert sorted(current.scan().to_arrow()["id"].to_pylist()) == [1, 2]


def test_a_spec_changed_elsewhere_is_never_committed_on_the_old_judgement(
        tmp_path: Path) -> None:
    recording, embedded, app = recorded_app(tmp_path)
    with serve(app) as url:
        name = f"demo.p{uuid.uuid4().hex[:8]}"
        table = appender(url, name)
        with embedded.catalog.load_table(name).update_spec() as update:  # elsewhere
            update.add_identity("id")
        try:
            table.append(rows(2))
            landed = True
        except CommitFailedException:
            landed = False
        statuses = [status for _, status in recording.commits]
        current = embedded.catalog.load_table(name)
    assert statuses[:2] == [200, 409], recording.commits  # the stale judgement never landed
    assert current.spec().spec_id == 1
    ids = sorted(current.scan().to_arrow()["id"].to_pylist())
    assert ids == ([1, 2] if landed else [1])


def test_a_branch_moved_elsewhere_rebases_an_append_verified_on_the_new_head(
        tmp_path: Path) -> None:
    recording, embedded, app = recorded_app(tmp_path)
    with serve(app) as url:
        name = f"demo.b{uuid.uuid4().hex[:8]}"
        table = appender(url, name)
        embedded.catalog.load_table(name).append(rows(100))  # elsewhere
        table.append(rows(2))
        statuses = [status for _, status in recording.commits]
        current = embedded.catalog.load_table(name)
    # refused on the head's pins; the branch moved: rebuilt on the reloaded head (verified
    # there again, with the usual pins only) and landed
    assert statuses == [200, 409, 200], recording.commits
    assert "assert-current-schema-id" not in kinds(recording.commits[2][0])
    assert sorted(current.scan().to_arrow()["id"].to_pylist()) == [1, 2, 100]


def test_a_head_gone_stale_elsewhere_costs_the_client_no_409(tmp_path: Path) -> None:
    """A schema change whose own requirements still hold at the backing: refused on the stale
    head's pin of ``main`` (moved elsewhere), judged again on a fresh load, and landed."""
    recording, embedded, app = recorded_app(tmp_path)
    with serve(app) as url:
        name = f"demo.n{uuid.uuid4().hex[:8]}"
        table = appender(url, name)
        embedded.catalog.load_table(name).append(rows(100))  # elsewhere
        with table.update_schema() as update:
            update.add_column("note", StringType())
        statuses = [status for _, status in recording.commits]
        current = embedded.catalog.load_table(name)
    assert statuses == [200, 409, 200], recording.commits
    assert current.schema().find_field("note") is not None
    assert sorted(current.scan().to_arrow()["id"].to_pylist()) == [1, 100]


def test_a_real_conflict_on_a_known_head_is_the_clients_409_with_nothing_landed(
        tmp_path: Path) -> None:
    recording, embedded, app = recorded_app(tmp_path)
    with serve(app) as url:
        name = f"demo.c{uuid.uuid4().hex[:8]}"
        table = appender(url, name)
        embedded.catalog.load_table(name).append(rows(100))  # elsewhere
        with pytest.raises((CommitFailedException, ValidationException)):
            table.overwrite(rows(5))  # pyiceberg retries on its 409, then gives up
        current = embedded.catalog.load_table(name)
    # judged on the head: pinned and refused; judged fresh: the client's own conflict (its 409
    # from icegov, not sent); nothing of it ever landed
    statuses = [status for _, status in recording.commits]
    assert statuses[:2] == [200, 409] and 200 not in statuses[1:], recording.commits
    assert sorted(current.scan().to_arrow()["id"].to_pylist()) == [1, 100]


def rejudged(url: str) -> float:
    """How many table changes icegov judged again after a 409 on a known head (its metrics)."""
    text = httpx.get(f"{url}/metrics").text
    return sum(s.value for family in text_string_to_metric_families(text)
               for s in family.samples
               if s.name == "icegov_commits_total" and s.labels.get("outcome") == "rejudged")


def test_the_reference_catalog_honours_every_head_pin(proxy: RunningProxy, backend: str) -> None:
    """Iceberg's own REST handlers: a head-judged append's pins all hold when nothing moved
    (no judgement again), and a schema moved straight at the catalog is refused on the stale
    head, judged again and landed."""
    if backend != "reference":
        pytest.skip("the embedded catalog is covered above, commit by commit")
    assert proxy.backing_url is not None
    name = f"demo.r{uuid.uuid4().hex[:8]}"
    table = appender(proxy.url, name)
    table.append(rows(2))
    table.append(rows(3))
    assert rejudged(proxy.url) == 0  # Java accepted the pins of both head judgements
    elsewhere = RestCatalog("direct", uri=proxy.backing_url)
    with elsewhere.load_table(name).update_schema() as update:
        update.add_column("note", StringType())
    table.append(rows(4))
    assert rejudged(proxy.url) == 1
    current = elsewhere.load_table(name)
    assert current.schema().find_field("note") is not None
    assert sorted(current.scan().to_arrow()["id"].to_pylist()) == [1, 2, 3, 4]
