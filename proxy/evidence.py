"""Evidence for commits: each changed table's current state from the backing catalog, and what
the change really does, classified from its manifests (``proxy.commits``) within the limits."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial

import httpx
from pyiceberg.io import FileIO, load_file_io
from starlette.concurrency import run_in_threadpool

from proxy.admission import ClassifiedChange
from proxy.backing.tables import BackingRefused, TableState, parse_table_state, table_path
from proxy.commits import classify_commit, creates_table
from proxy.commits.limits import CommitLimits
from proxy.errors import BackingUnavailable, PayloadTooLarge
from proxy.inbound import InboundRequest
from proxy.intent import TableChange

Fetch = Callable[[bytes, bytes, tuple[tuple[bytes, bytes], ...]], Awaitable[httpx.Response]]


class ChangeClassifier:
    """Loads each changed table once and classifies its change against that state."""

    def __init__(self, fetch: Fetch, limits: CommitLimits) -> None:
        self._fetch = fetch
        self._limits = limits

    async def classify_all(self, inbound: InboundRequest,
                           changes: tuple[TableChange, ...]) -> list[ClassifiedChange]:
        """Every change classified, in order (the first failure stops the rest)."""
        for change in changes:
            check_updates(change, self._limits)
        return [await self._classify(inbound, change) for change in changes]

    async def _classify(self, inbound: InboundRequest, change: TableChange) -> ClassifiedChange:
        if creates_table(change.body):
            intent = await run_in_threadpool(
                partial(classify_commit, limits=self._limits), change.body, None, _DEFAULT_IO)
            return ClassifiedChange(change.resource, change.body, intent, None)
        base = await self.load(inbound, change)
        intent = await run_in_threadpool(
            partial(classify_commit, limits=self._limits), change.body, base.metadata, base.io)
        return ClassifiedChange(change.resource, change.body, intent, base)

    async def load(self, inbound: InboundRequest, change: TableChange) -> TableState:
        """The table's current state at the backing catalog (as the caller would see it)."""
        path = table_path(inbound.route.prefix, change.resource)
        response = await self._fetch(path, b"", inbound.headers)
        if response.status_code >= 500:
            raise BackingUnavailable(
                f"backing catalog answered {response.status_code} loading {change.resource.name};"
                " nothing was committed")
        if response.status_code != 200:
            raise BackingRefused(response)
        return parse_table_state(change.resource, response.content)


def check_updates(change: TableChange, limits: CommitLimits) -> None:
    """Refuse, before any file is read, a commit with more updates than the limit."""
    updates = change.body.get("updates")
    if isinstance(updates, list) and len(updates) > limits.max_updates:
        raise PayloadTooLarge(f"a commit may carry at most {limits.max_updates} updates")


_DEFAULT_IO: FileIO = load_file_io({}, None)
