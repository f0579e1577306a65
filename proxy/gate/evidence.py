"""Evidence for commits: each changed table's current state, and what the change really does,
classified from its manifests (``proxy.commits``) within the limits.

The state is loaded from the backing catalog, or — for a plain commit whose requirements hold on
it — taken from the head this replica's last commit to the table left, while young
(``committer.heads``): the change is then marked ``judged_on_head`` and pinned to that head. A
judgement on a head that is anything but clean (a stale client, an unverifiable commit) is made
again on a fresh load."""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import replace
from functools import partial
from typing import Any

import httpx
from pyiceberg.io import FileIO, load_file_io
from pyiceberg.table.metadata import TableMetadata
from starlette.concurrency import run_in_threadpool

from proxy.admission.admission import ClassifiedChange, DataOperationRequest
from proxy.admission.intent import TableChange
from proxy.backing.tables import (
    NO_FILE_IO,
    TableState,
    io_properties,
    load_table_state,
    table_path,
)
from proxy.commits import (
    UnverifiableCommit,
    check_commit_shape,
    classify_commit,
    creates_table,
)
from proxy.commits.confine import locations_from
from proxy.commits.dependencies import stamp_summaries
from proxy.commits.limits import CommitLimits
from proxy.commits.operations import (
    build_commit,
    check_operation_shape,
    has_data_operation,
    starting_snapshot_id,
)
from proxy.commits.shape import updates_of
from proxy.commits.snapshots import added_snapshots
from proxy.commits.timeline import check_snapshot_order, commit_format
from proxy.commits.written import discard
from proxy.committer.heads import KnownHeads, key_of
from proxy.committer.rebuild import rebuilder_for
from proxy.errors import CommitFailed
from proxy.governance import Action
from proxy.inbound import InboundRequest
from proxy.resources import Resource

Fetch = Callable[[bytes, bytes, tuple[tuple[bytes, bytes], ...]], Awaitable[httpx.Response]]
Post = Fetch  # (path, body, caller headers)
_EMPTY_SCHEMA = {"type": "struct", "schema-id": 0, "fields": []}


Ungovern = Callable[[dict[str, Any], TableMetadata, FileIO, str], dict[str, Any] | None]
"""Rewrites the commit of a principal who reads the table through governed snapshots (of the
view digest given) onto the base table (``proxy.governed.writes``), None when it adds no
snapshot; raises to refuse it."""

GovernedDigest = Callable[[Resource, TableMetadata], str | None]
"""The digest of the governed view the caller reads a table through, None when it reads the
table itself."""

BuildGuard = Callable[[Resource, dict[str, Any], TableMetadata], dict[str, Any] | None]
"""Judges a data operation (its table, body and current metadata) before it is built; raises
to refuse it (``Gate`` refuses filters over columns hidden from the caller), and may return the
body to build instead (its filters respelled as the caller's view names its columns)."""


class ChangeClassifier:
    """Loads each changed table once and classifies its change against that state."""

    def __init__(self, fetch: Fetch, post: Post, limits: CommitLimits,
                 file_io: Mapping[str, str] = NO_FILE_IO,
                 heads: KnownHeads | None = None, ungovern: Ungovern | None = None) -> None:
        self._ungovern = ungovern
        self._heads = heads  # judge on a head this replica's last commit left (``committer.heads``)
        self._fetch = fetch
        self._post = post
        self._limits = limits
        self._file_io = dict(file_io)  # icegov's FileIO settings (``Settings.file_io``)
        self._create_io: FileIO = load_file_io(io_properties(file_io), None)

    async def classify_all(self, inbound: InboundRequest, changes: tuple[TableChange, ...],
                           guard: BuildGuard | None = None,
                           fresh: bool = False,
                           governed: GovernedDigest | None = None) -> list[ClassifiedChange]:
        """Every change classified, in order (the first failure stops the rest); ``guard``
        judges each data operation on its table's state before icegov builds it; ``fresh``:
        every base loaded, no known head used; ``governed``: which governed view the caller
        reads each table through, if any (a commit built on one is rewritten onto the base
        table first)."""
        for change in changes:
            check_commit_shape(change.body, self._limits)
            if has_data_operation(change.body):
                if creates_table(change.body):
                    raise UnverifiableCommit("a data operation cannot create its table")
                check_operation_shape(change.body, self._limits)
        classified: list[ClassifiedChange] = []
        try:
            for change in changes:
                classified.append(stamped(await self._classify(inbound, change, guard, fresh,
                                                               governed)))
        except Exception:
            discard_built(classified)  # a transaction refused: its built operations go too
            raise
        return classified

    async def _classify(self, inbound: InboundRequest, change: TableChange,
                        guard: BuildGuard | None, fresh: bool,
                        governed: GovernedDigest | None = None) -> ClassifiedChange:
        if creates_table(change.body):
            check_snapshot_order(added_snapshots(change.body), None, _now_ms(),
                                 format_version=commit_format(change.body, None))
            intent = await run_in_threadpool(
                partial(classify_commit, limits=self._limits), change.body, None, self._create_io)
            if await self._chooses_location(inbound, change):
                intent = replace(intent, actions=intent.actions | {Action.REGISTER_TABLE})
            return ClassifiedChange(change.resource, change.body, intent, None)
        if self._ungovern is None or has_data_operation(change.body):
            governed = None
        on_head = None if fresh or governed else await self._on_known_head(change)
        if on_head is not None:
            return on_head
        observed_at = (self._heads.clock if self._heads is not None else time.monotonic)()
        base = await self.load(inbound, change)
        rewritten = False
        digest = governed(change.resource, base.metadata) if governed is not None else None
        if digest is not None and self._ungovern is not None:
            rebuilt = await run_in_threadpool(self._ungovern, change.body, base.metadata, base.io,
                                              digest)
            if rebuilt is not None:
                change, rewritten = replace(change, body=rebuilt), True
        if has_data_operation(change.body):
            judged = guard(change.resource, change.body, base.metadata) if guard else None
            if judged is not None:
                change = replace(change, body=judged)
            return await self._build(change, base)
        stale = _stale(change.body, base)
        try:
            intent = await run_in_threadpool(
                partial(classify_commit, limits=self._limits), change.body, base.metadata,
                base.io)
        except UnverifiableCommit:
            behind = stale or _built_behind(change.body, base.metadata)
            if behind is not None:  # a client behind the table: its conflict comes first
                raise behind from None
            raise
        return ClassifiedChange(change.resource, change.body, intent, base, stale,
                                observed_at=observed_at, rewritten=rewritten)

    async def _on_known_head(self, change: TableChange) -> ClassifiedChange | None:
        """The change judged on the head this replica's last commit to the table left, when
        ``committer.heads`` allows it; None (load the base) when not, or when the head would give
        anything but a clean judgement (a stale client, an unverifiable commit)."""
        if self._heads is None or has_data_operation(change.body):
            return None
        head = self._heads.usable(key_of(change.resource), change.body)
        if head is None or _stale(change.body, head.state) is not None:
            return None
        try:
            intent = await run_in_threadpool(
                partial(classify_commit, limits=self._limits), change.body,
                head.state.metadata, head.state.io)
        except UnverifiableCommit:
            return None  # said again, or not, on a fresh load
        return ClassifiedChange(change.resource, change.body, intent, head.state,
                                judged_on_head=True, observed_at=head.observed_at)

    def refuse_stale(self, classified: Iterable[ClassifiedChange]) -> None:
        """A change built on an older state of its table that icegov cannot rebuild gets its
        conflict (409) before any decision: the client retries on the new state."""
        for change in classified:
            if change.stale is not None and \
                    rebuilder_for(change, change.body, self._limits) is None:
                discard_built(classified)
                change.report.update(tries=0, rebased=False, outcome="conflict")
                raise change.stale

    async def _build(self, change: TableChange, base: TableState) -> ClassifiedChange:
        """A data operation: icegov builds the standard commit, then classifies what it built
        (governed by what the manifests show, like any other commit)."""
        start = starting_snapshot_id(change.body, base.metadata)
        built = await run_in_threadpool(partial(
            build_commit, start_snapshot_id=start, now_ms=_now_ms(), limits=self._limits),
            change.body, base.metadata, base.io)
        intent = await run_in_threadpool(
            partial(classify_commit, limits=self._limits), built.body, base.metadata, base.io)
        request = DataOperationRequest(change.body, start, built.snapshot_id, built.retryable)
        return ClassifiedChange(change.resource, built.body, intent, base, operation=request)

    async def _chooses_location(self, inbound: InboundRequest, change: TableChange) -> bool:
        """Does a create commit place the table elsewhere than the catalog would? The catalog is
        asked with a stage-create (which creates nothing); no answer counts as "elsewhere"."""
        wanted = created_location(change.body)
        if wanted is None:
            return False
        probe = {"name": change.resource.table, "stage-create": True,
                 "schema": _first_schema(change.body)}
        path = table_path(inbound.route.prefix, change.resource).rsplit(b"/", 1)[0]
        response = await self._post(path, json.dumps(probe).encode(), inbound.headers)
        try:
            assigned = json.loads(response.content)["metadata"]["location"]
        except (ValueError, KeyError, TypeError):
            return True
        return response.status_code != 200 or not same_location(wanted, assigned)

    async def load(self, inbound: InboundRequest, change: TableChange) -> TableState:
        """The table's current state at the backing catalog (as the caller would see it)."""
        return await load_table_state(self._fetch, inbound.route.prefix, change.resource,
                                      inbound.headers, self._file_io)


def stamped(change: ClassifiedChange) -> ClassifiedChange:
    """``change`` with its new snapshots' summaries carrying icegov's column-dependency stamps
    and no client's (``proxy.commits.dependencies``)."""
    body = stamp_summaries(change.body, change.intent.dependency_stamps)
    return change if body is change.body else replace(change, body=body, rewritten=True)


def discard_built(changes: Iterable[ClassifiedChange]) -> None:
    """Remove the files icegov wrote for data operations that will not be sent."""
    for change in changes:
        if change.operation is not None and change.base is not None:
            discard(change.body, change.base.io)


def _stale(body: dict[str, Any], base: TableState) -> CommitFailed | None:
    """The conflict when ``body`` was built on an older state of the table than ``base`` (its
    sequence numbers do not rise): kept for the committer, which may rebase a pure append."""
    try:
        check_snapshot_order(added_snapshots(body), base.metadata, _now_ms(),
                             format_version=commit_format(body, base.metadata))
    except CommitFailed as conflict:
        return conflict
    return None


def _built_behind(body: dict[str, Any], metadata: TableMetadata) -> CommitFailed | None:
    """The conflict when a branch the commit moves to a snapshot of its own was built on an
    older snapshot of the table than the branch's head (a client behind the table, which
    format v1's missing sequence numbers do not show): asked only of a commit that could not be
    verified on the current state."""
    added = {s.snapshot_id: s for s in added_snapshots(body)}
    for update in updates_of(body, "set-snapshot-ref"):
        bottom, seen = added.get(update.get("snapshot-id")), set()  # type: ignore[arg-type]
        while bottom is not None and bottom.parent_id in added and bottom.snapshot_id not in seen:
            seen.add(bottom.snapshot_id)
            bottom = added[bottom.parent_id]
        head = metadata.refs.get(str(update.get("ref-name")))
        if (bottom is not None and bottom.parent_id is not None and head is not None
                and head.snapshot_id != bottom.parent_id
                and metadata.snapshot_by_id(bottom.parent_id) is not None):
            return CommitFailed("the table changed since the commit was made (its branch is no "
                                "longer at the snapshot the commit was built on); retry")
    return None


def created_location(body: dict[str, Any]) -> str | None:
    """The location a create commit sets (its last ``set-location``), if any."""
    moves = updates_of(body, "set-location")
    if not moves:
        return None
    location = moves[-1].get("location")
    return location if isinstance(location, str) else ""


def same_location(left: str, right: str) -> bool:
    """The same directory, however spelled (``file:/x``, ``file:///x/``, ``/x``)."""
    one, other = locations_from([left]), locations_from([right])
    return bool(one.roots and other.roots) and one.admits(right) and other.admits(left)


def _first_schema(body: dict[str, Any]) -> Any:
    schemas = updates_of(body, "add-schema")
    return (schemas[0].get("schema") if schemas else None) or _EMPTY_SCHEMA


def _now_ms() -> int:
    return int(time.time() * 1000)

