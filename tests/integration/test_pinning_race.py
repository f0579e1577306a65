"""No check-then-act: a commit judged against one table state is never applied to another.

The embedded catalog is wrapped so that a concurrent append lands at the worst moment: after
icegov loaded and classified the table, just before the backing applies the commit. Without
icegov's pins the backing would apply the unpinned commit on top and silently drop that append.
With them the backing refuses it (409); a pure append is then rebased by icegov and lands on top
of the concurrent one, while any other commit gets its 409 with nothing of it landed.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pytest
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField
from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Receive, Scope, Send

from proxy.app import EMBEDDED_BASE_URL, Backing, create_app
from proxy.catalog import EmbeddedCatalog
from tests.support.commit_capture import wire_json
from tests.support.errors import assert_error_model
from tests.support.http import as_principal
from tests.support.servers import serve
from tests.support.settings import ADMIN, settings_for_tests

SCHEMA = Schema(NestedField(1, "id", LongType(), required=False))


class RacingBacking:
    """Runs ``race`` once, right before the next table commit reaches the catalog."""

    def __init__(self, app: ASGIApp) -> None:
        self._app = app
        self.race: Callable[[], None] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        is_commit = (scope["type"] == "http" and scope["method"] == "POST"
                     and "/tables/" in scope["path"])
        if is_commit and self.race is not None:
            race, self.race = self.race, None
            await run_in_threadpool(race)
        await self._app(scope, receive, send)


def race_on(tmp_path: Path) -> tuple[RacingBacking, EmbeddedCatalog, Any]:
    settings = settings_for_tests(tmp_path)
    embedded = EmbeddedCatalog.from_settings(settings)
    racing = RacingBacking(embedded.app)
    backing = Backing(httpx.ASGITransport(app=racing), EMBEDDED_BASE_URL)
    return racing, embedded, create_app(settings, backing)


def unpinned(table: Any, change: Callable[[Any], None]) -> dict[str, Any]:
    """The REST body of ``change`` made on ``table``, without any requirement."""
    tx = table.transaction()
    change(tx)
    return {"requirements": [], "updates": [wire_json(u) for u in tx._updates]}


@pytest.mark.parametrize("kind", ["append", "delete"])
def test_a_concurrent_append_between_judgement_and_commit_is_never_lost(
        tmp_path: Path, kind: str) -> None:
    racing, embedded, app = race_on(tmp_path)
    with serve(app) as url:
        admin = RestCatalog("admin", uri=url, credential=ADMIN)
        admin.create_namespace_if_not_exists("demo")
        name = f"demo.r{uuid.uuid4().hex[:8]}"
        # format v1: without icegov's pins the backing would apply the stale commit on top
        created = admin.create_table(name, SCHEMA, properties={"format-version": "1"})
        created.append(pa.table({"id": pa.array([1], pa.int64())}))

        writer_view = RestCatalog("w", uri=url, credential=ADMIN).load_table(name)
        if kind == "append":
            body = unpinned(writer_view, lambda tx: tx.append(
                pa.table({"id": pa.array([7], pa.int64())})))
        else:
            body = unpinned(writer_view, lambda tx: tx.delete("id == 1"))

        def concurrent_append() -> None:
            embedded.catalog.load_table(name).append(pa.table({"id": pa.array([100], pa.int64())}))

        racing.race = concurrent_append
        with as_principal(url, ADMIN) as writer:
            response = writer.post(f"/v1/namespaces/demo/tables/{name.split('.')[1]}", json=body)
        assert racing.race is None  # the race really ran
        ids = sorted(admin.load_table(name).scan().to_arrow()["id"].to_pylist())
        if kind == "append":  # rebased by icegov onto the concurrent append
            assert response.status_code == 200, response.text
            assert ids == [1, 7, 100]
        else:  # never rebased: its 409, and the concurrent append survived
            assert_error_model(response, 409, "CommitFailedException")
            assert ids == [1, 100]
