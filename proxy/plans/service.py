"""Server-side scan planning: the table's state, the principal's read view, the plan.

icegov plans from the backing's metadata and never forwards a planning request. Every answer is
judged the same way: load the table (the gate already decided the principal may SELECT it), work
out the principal's read view (``proxy.reads.read_views``), refuse a request naming a column outside
that view (400, as a column the table lacks: ``proxy.plans.read_context.judge``), then plan —
bound to the principal's view of the schema — with the principal's row filter pruning manifests and
files, and hand out only what the view allows (statistics of hidden columns stripped).

Plan ids and plan tasks are signed tokens (``proxy.planning.tokens``) that name the principal,
the table (and its uuid), the pinned snapshot, the scan, the policy generation and view, and
an expiry: any replica with the same key serves them, after judging the caller again.

A plan answered with its tasks (and each plan task fetched) says in its audit evidence how many
data files each mechanism pruned (``plan.pruned``: ``proxy.planning.sieve``), and reports them
to ``on_pruned`` (the ``icegov_plan_files_pruned_total`` metric).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from pyiceberg.table.metadata import TableMetadata

from proxy.admission.admission import Admission
from proxy.commits.lru import SizedLru
from proxy.errors import BadRequest, Forbidden, NoSuchPlanId, NoSuchPlanTask, NotFound
from proxy.inbound import InboundRequest
from proxy.indexes.service import IndexService
from proxy.keys import key_or_process_key
from proxy.planning import wire
from proxy.planning.expressions import canonical_json
from proxy.planning.implication import implies
from proxy.planning.plan_cache import PlanCache, PlanCacheStats, PlanKey
from proxy.planning.planner import FileIndex, Plan, Planner, ScanSpec
from proxy.planning.request import ScanRequest, parse_scan_request
from proxy.planning.settings import PlanningSettings
from proxy.planning.tokens import Kind, TaskClaims, seal, unseal
from proxy.plans.jobs import PlanJobs
from proxy.plans.read_context import ReadContext, TableReader, hidden_field_ids, judge, scan_spec
from proxy.reads.read_views import describe
from proxy.reads.scan_access import ColumnNames
from proxy.restrictions import ReadView

Generation = Callable[[], int]
Pruned = Callable[[Mapping[str, int]], None]

MAX_PLAN_ID_CHARS = 4096
"""A plan id travels in URLs (``GET``/``DELETE …/plan/{plan-id}``): longer ones carry a digest."""
_DIGEST = "sha256"  # never a PlanTableScanRequest field
_LARGE_SCANS_KEPT = 1024


@dataclass(frozen=True)
class Scan:
    """A scan being answered: who reads what (``context``), the pinned request, and the
    claims and token (plan id or plan task) it is answered under."""

    context: ReadContext
    request: ScanRequest
    claims: TaskClaims
    token: str

    def spec(self) -> ScanSpec:
        """The scan as the planner takes it, with the principal's row filter."""
        return scan_spec(self.context, self.request)


def pinned(request: ScanRequest, metadata: TableMetadata) -> ScanRequest:
    """The request with the snapshot it reads made explicit (the current one when it names
    none), so its plan tasks read the same snapshot whenever they are fetched."""
    current = metadata.current_snapshot_id
    if current is None:
        return request
    if request.incremental:
        return request if request.end_snapshot_id is not None else replace(
            request, end_snapshot_id=current)
    return request if request.snapshot_id is not None else replace(request, snapshot_id=current)


class PlanService:
    """Plans scans for the planning handlers; holds the caches and the token key."""

    def __init__(self, reader: TableReader, planner: Planner, settings: PlanningSettings,
                 generation: Generation, clock: Callable[[], float] = time.time,
                 on_pruned: Pruned | None = None,
                 indexes: IndexService | None = None) -> None:
        self._reader = reader
        self._indexes = indexes
        self._planner = planner
        self._settings = settings
        self._generation = generation
        self._clock = clock
        self._key = key_or_process_key(settings.task_key, "plan-tasks")
        self._plans = PlanCache(settings.plan_cache_plans, implies)
        # recent tasks fragments (JSON bytes): what a warm plan serves without planning again
        self._answers: SizedLru[Any, _Answer] = SizedLru(settings.answer_cache_bytes,
                                                         size=_Answer.size)
        self._on_pruned = on_pruned
        self._jobs = PlanJobs()
        self._large_scans: SizedLru[str, TaskClaims] = SizedLru(_LARGE_SCANS_KEPT)

    @property
    def plan_cache_stats(self) -> PlanCacheStats:
        """Hits, misses and reuses of the plan cache so far (for metrics)."""
        return self._plans.stats

    async def open_scan(self, inbound: InboundRequest, admission: Admission,
                        request: ScanRequest) -> Scan:
        """A new scan: the table now, the caller's view of it, the request judged and pinned."""
        context = await self._reader.for_admission(inbound, admission)
        request = pinned(request, context.metadata)
        judge(context, request)
        claims = TaskClaims(
            kind="plan", principal=context.principal.name, roles=context.principal.roles,
            catalog=admission.catalog, namespace=context.table.namespace,
            table=context.table.table or "", table_uuid=str(context.metadata.table_uuid),
            snapshot_id=request.snapshot_id or request.end_snapshot_id,
            policy_generation=self._generation(),
            expires_at=self._clock() + self._settings.task_ttl_seconds,
            scan=request.to_json(), view_key=(self._view_digest(context.view),),
            nonce=secrets.token_hex(8))
        return Scan(context, request, claims, self._plan_id(claims))

    async def reopen(self, inbound: InboundRequest, admission: Admission, token: str,
                     kind: Kind) -> Scan:
        """The scan a plan id or plan task stands for, judged again for this caller: 404 when
        it is another principal's or another table's, 403 when the policy changed what the
        caller may read since it was planned."""
        claims = self._unseal(token, kind)
        _check_owner(claims, admission, kind)
        claims = self._whole(claims)
        context = await self._reader.for_admission(inbound, admission)
        if str(context.metadata.table_uuid) != claims.table_uuid:
            raise _missing(kind)
        if tuple(claims.view_key) != (self._view_digest(context.view),):
            raise Forbidden("the policy changed what you may read of this table since the "
                            "scan was planned; plan it again")
        request = parse_scan_request(dict(claims.scan))
        judge(context, request)
        return Scan(context, request, claims, token)

    def _view_digest(self, view: ReadView) -> str:
        """The read view a scan was planned under, as a keyed digest: a token is signed, not
        encrypted, and the view's own key names the columns hidden from its holder."""
        text = json.dumps(view.cache_key(), default=str, sort_keys=True)
        return hmac.new(self._key, b"icegov read view\x00" + text.encode(),
                        hashlib.sha256).hexdigest()

    def _plan_id(self, claims: TaskClaims) -> str:
        """The plan id of ``claims``: the whole scan in it when that fits a URL (any replica
        answers it), else its digest, the scan kept in this replica (``_whole``)."""
        token = seal(claims, self._key)
        if len(token) <= MAX_PLAN_ID_CHARS:
            return token
        digest = hashlib.sha256(canonical_json(claims.scan).encode()).hexdigest()
        self._large_scans.put(digest, claims)
        return seal(replace(claims, scan={_DIGEST: digest}), self._key)

    def _whole(self, claims: TaskClaims) -> TaskClaims:
        """``claims`` with its scan, for a plan id that carries only the scan's digest."""
        digest = claims.scan.get(_DIGEST)
        if digest is None:
            return claims
        whole = self._large_scans.get(str(digest))
        if whole is None or replace(whole, scan=claims.scan) != claims:
            raise NoSuchPlanId("this plan's filter is too large to travel in its id and is "
                               "known only to the replica that planned it; plan the scan again")
        return whole

    def _unseal(self, token: str, kind: Kind) -> TaskClaims:
        """A token's claims; a plan id that icegov did not issue is an unknown plan (404, as
        the spec answers unknown plan ids), a plan task that it did not issue is a 400."""
        try:
            return unseal(token, self._key, self._clock(), kind=kind)
        except BadRequest:
            if kind == "plan":
                raise NoSuchPlanId("no such plan") from None
            raise

    async def plan(self, scan: Scan, *, poll: bool) -> bytes:
        """The answer to ``POST …/plan`` (JSON bytes)."""
        shards = await self._shards(scan)
        files = len(shards) * self._settings.shard_files
        audited = self._audit(scan, shards=len(shards))
        if len(shards) <= 1:
            head = wire.completed_plan(scan.token, None, [])
            return with_tasks(head, await self._tasks_fragment(scan, None, audited))
        if poll and files > self._settings.submit_above_files:
            self._jobs.start(scan.token, self._prepare(scan, shards))
            return _dumps(wire.submitted_plan(scan.token))
        return _dumps(wire.completed_plan(scan.token, None, self._task_tokens(scan, shards)))

    async def result(self, scan: Scan) -> bytes:
        """The answer to ``GET …/plan/{id}``: ``submitted`` while this replica still prepares
        it, else the completed plan (planned again where it was not prepared here)."""
        if not await self._jobs.wait(scan.token, self._settings.poll_wait_seconds):
            return _dumps(wire.submitted_plan(None))
        shards = await self._shards(scan)
        audited = self._audit(scan, shards=len(shards))
        if len(shards) <= 1:
            return with_tasks(wire.completed_plan(None, None, []),
                              await self._tasks_fragment(scan, None, audited))
        return _dumps(wire.completed_plan(None, None, self._task_tokens(scan, shards)))

    def check_plan_id(self, plan_id: str, admission: Admission) -> None:
        """404 unless ``plan_id`` is a live plan icegov issued to this caller for this table."""
        _check_owner(self._unseal(plan_id, "plan"), admission, "plan")

    async def cancel(self, inbound: InboundRequest, admission: Admission, plan_id: str) -> None:
        """``DELETE …/plan/{id}``: stops its preparation here; 204 also after it completed."""
        claims = self._unseal(plan_id, "plan")
        _check_owner(claims, admission, "plan")
        self._jobs.cancel(plan_id)

    async def shard_tasks(self, scan: Scan) -> bytes:
        """The answer to ``POST …/tasks``: the file scan tasks of one plan task's shard."""
        audited = self._audit(scan, shard_manifests=len(scan.claims.shard))
        return with_tasks(wire.fetched_tasks(None, []),
                          await self._tasks_fragment(scan, scan.claims.shard, audited))

    async def tasks_fragment(self, scan: Scan, shard: tuple[str, ...] | None) -> bytes:
        """The ``"file-scan-tasks": […], "delete-files": […]`` members of an answer, as JSON
        bytes, for the scan (one shard, or all of it); remembered for repeats."""
        return (await self._answer(scan, shard)).tasks

    async def _tasks_fragment(self, scan: Scan, shard: tuple[str, ...] | None,
                              audited: dict[str, Any]) -> bytes:
        """``tasks_fragment``, with the files it pruned added to the ``audited`` plan evidence
        and reported to the metric."""
        answer = await self._answer(scan, shard)
        audited["pruned"] = dict(answer.pruned)
        if self._on_pruned is not None:
            self._on_pruned(answer.pruned)
        return answer.tasks

    async def _answer(self, scan: Scan, shard: tuple[str, ...] | None) -> _Answer:
        key = self._key_of(scan, shard)
        hidden = (hidden_field_ids(scan.context),
                  hidden_field_ids(scan.context, for_statistics=True))
        answer_key = (key, hidden, scan.context.metadata.current_schema_id)
        cached = self._answers.get(answer_key)
        if cached is None:
            cached = await asyncio.to_thread(self._fragment, scan, key, shard, *hidden)
            self._answers.put(answer_key, cached)
        return cached

    def _fragment(self, scan: Scan, key: PlanKey, shard: tuple[str, ...] | None,
                  hidden: frozenset[int], no_statistics: frozenset[int]) -> _Answer:
        """Plan, judge the deletes, and write the tasks (in a worker thread, collector off):
        no statistics of ``no_statistics`` (hidden and masked columns)."""
        with self._planner.manifests.collector_paused():
            plan = self._plan(scan, key, shard)
            _refuse_hidden_equality_deletes(plan, hidden)
            answer = wire.file_scan_tasks_json(
                plan.tasks, scan.context.metadata, hidden_field_ids=no_statistics,
                stats_fields=_stats_ids(scan, plan))
            return _Answer(_dumps(answer)[1:-1], plan.pruned)

    def _plan(self, scan: Scan, key: PlanKey, shard: tuple[str, ...] | None) -> Plan:
        state, spec = scan.context.state, scan.spec()
        index = self._index(scan, spec)
        return self._plans.plan(
            key, lambda: self._planner.plan(state.metadata, state.io, spec, shard, index),
            lambda wide: self._planner.narrow(state.metadata, spec, wide, index))

    def _index(self, scan: Scan, spec: ScanSpec) -> FileIndex | None:
        """The bloom-filter index pruner of the scan (``proxy.indexes``): never over a column
        denied or masked to the principal; for governed metadata, filters of base files only
        (found for a governed file only at the same path and size), and no sync of its own."""
        if self._indexes is None:
            return None
        context = scan.context
        views = [context.view] + ([context.governed_from] if context.governed_from else [])
        excluded = frozenset().union(*(v.denied | frozenset(v.masks) for v in views))
        return self._indexes.pruner(context.metadata, context.state.io, spec, excluded,
                                    sync=context.governed_from is None)

    def _key_of(self, scan: Scan, shard: tuple[str, ...] | None) -> PlanKey:
        r = scan.request
        view = scan.context.view.cache_key()
        if self._indexes is not None:  # a plan made before filters were built is not reused
            view = (*view, ("indexes", self._indexes.version(scan.context.metadata)))
        return PlanKey.for_scan(scan.context.metadata, scan.spec(), r.filter_key, r.select,
                                r.stats_fields, view, shard)

    async def _shards(self, scan: Scan) -> list[tuple[str, ...]]:
        state = scan.context.state
        return await asyncio.to_thread(self._planner.plan_shards, state.metadata, state.io,
                                       scan.spec(), self._settings.shard_files)

    async def _prepare(self, scan: Scan, shards: list[tuple[str, ...]]) -> None:
        for shard in shards:
            await self.tasks_fragment(scan, shard)

    def _task_tokens(self, scan: Scan, shards: list[tuple[str, ...]]) -> list[str]:
        return [seal(replace(scan.claims, kind="task", shard=shard, nonce=""), self._key)
                for shard in shards]

    def _audit(self, scan: Scan, **plan: Any) -> dict[str, Any]:
        """Adds the plan's audit evidence; returns its ``plan`` member (filled in later)."""
        audited = {"snapshot_id": scan.claims.snapshot_id, **plan}
        scan.context.evidence.append({
            "resource": str(scan.context.table), "read_view": describe(scan.context.policy_view),
            "plan": audited})
        return audited


@dataclass(frozen=True)
class _Answer:
    """A planned answer's tasks fragment (JSON bytes) and the files each mechanism pruned."""

    tasks: bytes
    pruned: Mapping[str, int]

    def size(self) -> int:
        return len(self.tasks)


def _check_owner(claims: TaskClaims, admission: Admission, kind: Kind) -> None:
    """A token serves only its own principal, catalog and table (404 otherwise: whether
    another's plan exists is not the caller's business)."""
    table = admission.intent.needs[0].resource
    principal = admission.principal
    if (principal is None or claims.principal != principal.name
            or claims.catalog != admission.catalog or claims.namespace != table.namespace
            or claims.table != table.table):
        raise _missing(kind)


def _missing(kind: Kind) -> NotFound:
    if kind == "task":
        return NoSuchPlanTask("no such plan task")
    return NoSuchPlanId("no such plan")


def _refuse_hidden_equality_deletes(plan: Plan, hidden: frozenset[int]) -> None:
    """403 when an equality delete keyed on a hidden column applies: a client cannot apply it
    without reading that column, and must not read it (the column is not named)."""
    if not hidden:
        return
    for task in plan.tasks:
        for delete_file in task.delete_files:
            if set(delete_file.equality_ids or ()) & hidden:
                raise Forbidden("rows of this table are deleted by equality deletes on a column "
                                "hidden from you, which you cannot apply; ask for the table to "
                                "be compacted")


def _stats_ids(scan: Scan, plan: Plan) -> frozenset[int] | None:
    """Field ids of the requested ``stats-fields`` (None: none asked), resolved in the schema
    the plan was bound to (the caller's view: ``judge`` refused names it lacks)."""
    names = scan.request.stats_fields
    if names is None:
        return None
    columns = ColumnNames(plan.schema)
    return frozenset(columns.field_id("stats-fields", name, scan.request.case_sensitive)
                     for name in names)


def _dumps(body: Any) -> bytes:
    return json.dumps(body, separators=(",", ":"), allow_nan=False).encode()


def with_tasks(head: dict[str, Any], fragment: bytes) -> bytes:
    """``head`` (an answer without tasks) as JSON bytes with the tasks ``fragment`` spliced in."""
    rest = {k: v for k, v in head.items() if k not in ("file-scan-tasks", "delete-files")}
    opening = _dumps(rest)[:-1]
    return opening + (b"," if rest else b"") + fragment + b"}"


__all__ = ["PlanService", "Scan", "pinned", "with_tasks"]
