"""Server-side commits: land an admitted commit, rebasing what may be rebased, and never guess
an outcome.

For each try, every table of the commit takes its turn in the replica's queue (``committer.queue``);
a change that icegov may rebuild (a pure append, or a data operation icegov builds itself) is
rebuilt on the newest state the queue knows before it is sent. Then the backing's answer decides:

- 2xx: landed; the queue learns the table's new state from it, and a change that landed as
  classified tells the verification's caches so (its manifest lists are the table's now).
- 409 (ErrorModel) to a change judged on a head this replica knew (``committer.heads``): nothing
  landed; ``Rejudge``: the gate judges the request again on a fresh load and it is sent again.
- any other 409 (ErrorModel): nothing landed. Rebuildable changes are rebuilt on the reloaded
  table and sent again — bounded tries, jittered backoff, a deadline; anything else goes back
  as the 409 it was (the client's isolation level and conflict filters are never sent, so
  nothing else is safe).
- another 4xx ErrorModel: relayed.
- a timeout, a reset, a 5xx or a non-ErrorModel answer: unknown. icegov reloads the tables and
  asks them (``commits.reconcile``): landed (its snapshot ids there *with a manifest list one of
  its tries sent*) → success with the current metadata; its ids held by another commit's
  snapshots → 409, nothing of it landed or can; absent and every change rebuildable (it keeps
  its snapshot-id, so at most one try can land) → try again; otherwise 502/504
  ``CommitStateUnknownException``.

A rebuilt change is classified again against the state it is built on and must need no right
beyond what the gate allowed; the audit evidence of each change says how many tries it took and
whether it was rebased.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import httpx
import structlog
from starlette.concurrency import run_in_threadpool
from starlette.responses import JSONResponse, Response

from proxy.admission.admission import ClassifiedChange
from proxy.backing.forward import Forwarder, relayed
from proxy.backing.tables import NO_FILE_IO, TableState, fetch_table
from proxy.commits.limits import CommitLimits
from proxy.commits.reconcile import Outcome, outcome_of
from proxy.commits.retry import CommitRetry
from proxy.committer.heads import KnownHeads, Rejudge
from proxy.committer.pending import Pending, Unknown
from proxy.committer.pinning import pinned_change
from proxy.committer.queue import TableKey, TableQueue, TableSlot
from proxy.committer.rebuild import rebuilder_for
from proxy.errors import CommitFailed, CommitStateUnknown, CommitTimeout, IcebergError
from proxy.inbound import InboundRequest
from proxy.ops.metrics import Metrics

log = structlog.get_logger("icegov")

Wire = Callable[[Sequence[dict[str, Any]]], bytes | None]


class Committer:
    """Lands admitted commits (one table, or a transaction) on the backing catalog."""

    def __init__(self, forwarder: Forwarder, limits: CommitLimits, retry: CommitRetry,
                 metrics: Metrics | None = None,
                 file_io: Mapping[str, str] = NO_FILE_IO,
                 heads: KnownHeads | None = None) -> None:
        self._heads = heads or KnownHeads(0)
        self._metrics = metrics
        self._file_io = dict(file_io)
        self._forwarder = forwarder
        self._limits = limits
        self._retry = retry
        self._queue = TableQueue()

    async def commit(self, inbound: InboundRequest, changes: Sequence[ClassifiedChange],
                     bodies: Sequence[dict[str, Any]], wire: Wire, single: bool) -> Response:
        """Send ``bodies`` (the pinned changes) until they land or cannot; ``wire`` makes the
        request body (None: the caller's bytes unchanged)."""
        pending = [self._pending(c, b) for c, b in zip(changes, bodies, strict=True)]
        try:
            return await self._land(inbound, pending, wire, single)
        finally:
            self._observe(pending)

    def _pending(self, change: ClassifiedChange, body: dict[str, Any]) -> Pending:
        """``change`` as it will be sent first (``body``); one judged on a known head can fall
        back to its usual pins, and is rebuilt only from those."""
        plain = (pinned_change(change, on_head=False) or change.body) \
            if change.judged_on_head else None
        rebuilder = rebuilder_for(change, plain or body, self._limits)
        return Pending(change, body, change.base, rebuilder, file_io=self._file_io, plain=plain)

    async def _land(self, inbound: InboundRequest, pending: list[Pending], wire: Wire,
                    single: bool) -> Response:
        for p in pending:
            if p.change.stale is not None and p.rebuilder is None:
                p.report(outcome="conflict")
                raise p.change.stale  # built on a state that moved: nothing was sent
        async with self._queue.turn([p.key for p in pending]) as slots:
            return await _Attempts(self, inbound, pending, slots, wire, single).run()

    def _observe(self, pending: Sequence[Pending]) -> None:
        """Count each change's outcome (``unknown`` when none was reported) and rebases."""
        if self._metrics is None:
            return
        for p in pending:
            self._metrics.observe_commit(p.change.intent.evidence.classification,
                                         str(p.change.report.get("outcome", "unknown")),
                                         p.rebased)


class _Attempts:
    """The tries of one commit, holding its tables' turns."""

    def __init__(self, committer: Committer, inbound: InboundRequest, pending: list[Pending],
                 slots: dict[TableKey, TableSlot], wire: Wire, single: bool) -> None:
        self._c = committer
        self._inbound = inbound
        self._pending = pending
        self._slots = slots
        self._wire = wire
        self._single = single
        self._deadline = time.monotonic() + committer._retry.deadline_seconds
        self._losses = 0
        self._unknown: IcebergError | None = None

    @property
    def _rebuildable(self) -> bool:
        return all(p.rebuilder is not None for p in self._pending)

    async def run(self) -> Response:
        while True:
            await self._catch_up()
            for p in self._pending:
                p.tries += 1
                p.refused = False
            try:
                answer = await self._send()
            except Unknown as unknown:
                self._unknown = unknown.error
                answer = None
            if answer is not None:
                return answer
            await self._pause()

    async def _send(self) -> Response | None:
        for p in self._pending:
            p.note_sent()
            self._c._heads.forget(p.key)  # in flight: the head it knew is no longer the table's
        try:
            upstream = await self._c._forwarder.exchange(
                self._inbound, self._wire([p.body for p in self._pending]))
        except (CommitTimeout, CommitStateUnknown) as exc:
            return await self._reconcile(exc)
        status = upstream.status_code
        if status < 300:
            self._landed(upstream)
            return relayed(upstream, upstream.content)
        if status < 500 and _is_error_model(upstream.content):
            for p in self._pending:
                p.refused = True
            if status == 409:
                return await self._conflict(upstream)
            if self._unknown is not None:  # refused now, but an earlier try may have landed
                return await self._reconcile(self._unknown)
            self._report(outcome="refused")
            self._discard()
            return relayed(upstream, upstream.content)
        message = (f"the backing catalog answered {status}: the commit may or may not have "
                   "landed; reload the table before retrying")
        return await self._reconcile((CommitTimeout if status == 504 else
                                      CommitStateUnknown)(message))

    async def _conflict(self, upstream: httpx.Response) -> Response | None:
        """A 409: nothing landed this time. Try again if every change may be rebuilt; a change
        judged on a known head is judged again on a fresh load (``committer.heads``)."""
        if self._unknown is None and any(p.on_head for p in self._pending):
            await self._off_head()  # raises Rejudge unless the changes go on rebuilt
            return None
        if self._unknown is None and not self._may_retry():
            self._report(outcome="conflict")
            self._discard()
            return relayed(upstream, upstream.content)
        try:
            states = await self._reload()
        except IcebergError:
            if self._unknown is not None:  # an earlier try may have landed: never a 409
                raise self._unknown from None
            self._report(outcome="conflict")
            self._discard()
            return relayed(upstream, upstream.content)
        outcome = self._outcome(states) if self._unknown is not None else None
        if outcome is Outcome.LANDED:
            return self._reconciled(states)  # an earlier, unknown try had landed
        if outcome is Outcome.TAKEN:
            raise self._taken()
        if not self._may_retry():
            if self._unknown is not None:  # that earlier try may land yet: never a 409
                self._report(outcome="unknown")
                raise self._unknown
            self._report(outcome="conflict")
            self._discard()
            return relayed(upstream, upstream.content)
        self._learn(states)
        if not any(p.rebuilder is not None and s is not None and p.rebuilder.behind(p.body, s)
                   for p, s in zip(self._pending, states, strict=True)):
            if self._unknown is not None:
                self._report(outcome="unknown")
                raise self._unknown
            self._report(outcome="conflict")  # refused for another reason than a moved head
            self._discard()
            return relayed(upstream, upstream.content)
        return None

    async def _off_head(self) -> None:
        """A 409 to changes judged on a known head. When every change is a rebuildable one
        whose branch moved, they go on as judged fresh: rebuilt on the reloaded table (and
        verified again there). Otherwise the head was stale in what a rebuild cannot mend:
        ``Rejudge`` (the gate judges the request again on a fresh load)."""
        states: list[TableState | None] = []
        if self._may_retry():
            try:
                states = await self._reload()
            except IcebergError:
                states = []
        moved = bool(states) and all(
            p.rebuilder is not None and s is not None and p.rebuilder.behind(p.plain or p.body, s)
            for p, s in zip(self._pending, states, strict=True))
        if not moved:
            self._report(outcome="rejudged")
            self._discard()
            raise Rejudge()
        for p in self._pending:
            p.off_head()
        self._learn(states)

    async def _reconcile(self, error: IcebergError) -> Response | None:
        """The outcome is unknown: the tables say whether it landed."""
        try:
            states = await self._reload()
        except IcebergError:
            raise error from None
        outcome = self._outcome(states)
        if outcome is Outcome.LANDED:
            return self._reconciled(states)
        if outcome is Outcome.TAKEN:
            raise self._taken()
        if outcome is Outcome.ABSENT and self._may_retry():
            self._learn(states)
            raise Unknown(error)
        self._report(outcome="unknown")
        raise error

    def _outcome(self, states: Sequence[TableState | None]) -> Outcome:
        outcomes = {outcome_of(p.body, None if s is None else s.metadata, p.sent)
                    for p, s in zip(self._pending, states, strict=True)}
        outcome = outcomes.pop() if len(outcomes) == 1 else Outcome.UNKNOWN
        if self._c._metrics is not None:
            self._c._metrics.observe_reconciled(outcome.value)
        return outcome

    def _reconciled(self, states: Sequence[TableState | None]) -> Response:
        self._report(outcome="reconciled")
        self._learn(states)
        document = None if states[0] is None else states[0].document
        if self._single and document is not None:
            return JSONResponse(document)
        return Response(status_code=204)

    def _taken(self) -> CommitFailed:
        """Another commit's snapshots hold this commit's snapshot ids: nothing of it landed,
        and no try of it can land now (a duplicate ``add-snapshot`` is refused)."""
        self._report(outcome="conflict")
        self._discard()
        return CommitFailed("the commit's snapshot id is already in the table, added by another "
                           "commit: nothing of this commit landed; retry with a new snapshot id")

    def _may_retry(self) -> bool:
        tries = max(p.tries for p in self._pending)
        return (self._rebuildable and tries < self._c._retry.max_attempts
                and time.monotonic() < self._deadline)

    async def _pause(self) -> None:
        self._losses += 1
        await asyncio.sleep(self._c._retry.backoff_seconds(self._losses))

    async def _catch_up(self) -> None:
        """Rebuild each rebuildable change on the newest state its table's queue knows."""
        for p in self._pending:
            state = self._slots[p.key].state
            if p.rebuilder is None or state is None or \
                    not p.rebuilder.behind(p.plain or p.body, state):
                continue
            p.off_head()  # rebuilt and verified again on ``state``: the usual pins
            try:
                body = await run_in_threadpool(p.rebuilder.rebuild, p.body, state, _now_ms())
            except Exception as exc:
                raise self._cannot_rebuild(exc) from exc
            if p.refused:
                p.discard()  # the try it replaces was refused: its files are nobody's
            p.body, p.base = body, state
            p.rebased += 1

    def _cannot_rebuild(self, exc: Exception) -> IcebergError:
        """The error to answer when a change cannot be built on the table's new state."""
        self._report(outcome="unknown" if self._unknown else "conflict")
        if self._unknown is not None:  # an earlier try may still land: never a 409
            return self._unknown
        self._discard()
        if isinstance(exc, CommitFailed):
            return exc
        log.warning("commit.rebuild_failed", error_type=type(exc).__name__)
        return CommitFailed("the table changed and the commit cannot be built on its new state;"
                            " retry")

    def _discard(self) -> None:
        for p in self._pending:
            p.discard()

    async def _reload(self) -> list[TableState | None]:
        return [await self._load(p) for p in self._pending]

    async def _load(self, p: Pending) -> TableState | None:
        response = await fetch_table(self._c._forwarder.fetch, self._inbound.route.prefix,
                                     p.change.resource, self._inbound.headers)
        if response.status_code == 404:
            return None
        if response.status_code != 200:
            raise CommitStateUnknown(f"the backing catalog answered {response.status_code} "
                                     "reloading the table")
        return p.state_from(response.content)

    def _learn(self, states: Sequence[TableState | None]) -> None:
        for p, state in zip(self._pending, states, strict=True):
            self._slots[p.key].learn(state)

    def _landed(self, upstream: httpx.Response) -> None:
        self._report(outcome="landed")
        for p in self._pending:
            if p.rebased == 0:  # landed as classified: its new lists are the table's now
                p.change.intent.landed()
            self._learn_head(p)
            slot = self._slots[p.key]
            if not (self._single and slot.waited_on):
                slot.learn(None)
                continue
            slot.learn_later(_parser(p, upstream.content))

    def _learn_head(self, p: Pending) -> None:
        """Remember the head ``p`` left (``committer.heads``), aged by the load it descends from."""
        if p.base is None:
            return
        heads = self._c._heads
        observed = p.change.observed_at if p.rebased == 0 else None
        heads.learn(p.key, p.base, p.body, heads.clock() if observed is None else observed)

    def _report(self, **extra: Any) -> None:
        for p in self._pending:
            p.report(**extra)


def _parser(p: Pending, content: bytes) -> Callable[[], TableState | None]:
    def parse() -> TableState | None:
        try:
            return p.state_from(content)
        except IcebergError:
            return None
    return parse


def _is_error_model(body: bytes) -> bool:
    """True for an Iceberg ErrorModel body: ``{"error": {"message", "type", "code"}}``."""
    try:
        parsed = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return False
    error = parsed.get("error") if isinstance(parsed, dict) else None
    return (isinstance(error, dict) and isinstance(error.get("message"), str)
            and isinstance(error.get("type"), str) and isinstance(error.get("code"), int))


def _now_ms() -> int:
    return int(time.time() * 1000)
