"""No check-then-act: a commit judged against one table state is never applied to another.

The embedded catalog is wrapped so that a concurrent append lands at the worst moment: after
icegov loaded and classified the table, just before the backing applies the commit. Without
icegov's pins the backing would apply the unpinned commit on top and silently drop that append.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path

import httpx
import pyarrow as pa
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


def test_a_concurrent_append_between_judgement_and_commit_is_never_lost(tmp_path: Path) -> None:
    settings = settings_for_tests(tmp_path)
    embedded = EmbeddedCatalog.from_settings(settings)
    racing = RacingBacking(embedded.app)
    backing = Backing(httpx.ASGITransport(app=racing), EMBEDDED_BASE_URL)
    with serve(create_app(settings, backing)) as url:
        admin = RestCatalog("admin", uri=url, credential=ADMIN)
        admin.create_namespace_if_not_exists("demo")
        name = f"demo.r{uuid.uuid4().hex[:8]}"
        # format v1: without icegov's pins the backing would apply the stale commit on top
        created = admin.create_table(name, SCHEMA, properties={"format-version": "1"})
        created.append(pa.table({"id": pa.array([1], pa.int64())}))

        writer_view = RestCatalog("w", uri=url, credential="writer:writer-secret").load_table(name)
        tx = writer_view.transaction()
        tx.append(pa.table({"id": pa.array([7], pa.int64())}))
        body = {"requirements": [], "updates": [wire_json(u) for u in tx._updates]}

        def concurrent_append() -> None:
            embedded.catalog.load_table(name).append(pa.table({"id": pa.array([100], pa.int64())}))

        racing.race = concurrent_append
        with as_principal(url, "writer:writer-secret") as writer:
            response = writer.post(f"/v1/namespaces/demo/tables/{name.split('.')[1]}", json=body)
        assert racing.race is None  # the race really ran
        assert_error_model(response, 409, "CommitFailedException")
        ids = sorted(admin.load_table(name).scan().to_arrow()["id"].to_pylist())
        assert ids == [1, 100]  # the concurrent append survived; nothing of the refused one
