"""Plans kept for reuse: exact repeats, and narrower scans planned from a wider cached plan.

A ``PlanKey`` says everything a plan depends on: the table (uuid) and the snapshot actually
planned, the normalised filter, select, case sensitivity, stats fields, the principal's policy
view (``ReadView.cache_key()``: two principals with different restrictions never share a plan),
the incremental range and schema choice, and the shard. Two keys that differ only by their
filter are in the same *family*: when a request's filter implies the filter of a cached plan of
its family (every row it selects, the cached scan selected too), the request is planned from
the cached tasks (``narrow``) instead of from manifests — seed 000's subset-scan reuse.

The cache is a bounded LRU (by plans and by tasks held), thread-safe, with hit, miss and reuse
counters. Whether one filter implies another is decided by a callable given to the cache
(``proxy.planning.expressions.implies``), which must only say True when it is sure.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from pyiceberg.expressions import AlwaysTrue, BooleanExpression
from pyiceberg.table.metadata import TableMetadata

from proxy.planning.inferred import dependencies_key
from proxy.planning.planner import Plan
from proxy.planning.scope import ScanSpec

Implies = Callable[[BooleanExpression, BooleanExpression], bool]


@dataclass(frozen=True, slots=True)
class PlanKey:
    """What a cached plan depends on. ``filter`` (the unbound scan filter) is carried for the
    implication test only; equality and hashing use ``filter_key``, its normalised form."""

    table_uuid: str
    snapshot_id: int | None
    filter_key: str
    select: tuple[str, ...] | None
    case_sensitive: bool
    stats_fields: tuple[str, ...] | None
    view: tuple[object, ...]
    scope: tuple[object, ...] = ()
    shard: tuple[str, ...] | None = None
    filter: BooleanExpression = field(default=AlwaysTrue(), compare=False, hash=False)

    @classmethod
    def for_scan(cls, metadata: TableMetadata, spec: ScanSpec, filter_key: str,
                 select: tuple[str, ...] | None, stats_fields: tuple[str, ...] | None,
                 view: tuple[object, ...], shard: tuple[str, ...] | None = None) -> PlanKey:
        """The key of planning ``spec`` on ``metadata`` (the snapshot a scan without one reads
        is resolved here, so a cached plan never outlives a commit)."""
        snapshot = spec.snapshot_id
        if snapshot is None and not spec.incremental:
            snapshot = metadata.current_snapshot_id
        end = spec.end_snapshot_id
        if spec.incremental and end is None:
            end = metadata.current_snapshot_id
        scope = (spec.use_snapshot_schema, spec.start_snapshot_id, end, spec.incremental,
                 tuple(sorted(spec.hidden)),  # the schema the plan was bound to
                 dependencies_key(metadata) if spec.dependencies else "")
        return cls(str(metadata.table_uuid), snapshot, filter_key, select, spec.case_sensitive,
                   stats_fields, view, scope, shard, spec.filter)

    @property
    def family(self) -> PlanKey:
        """This key without its filter: the plans a narrower scan may be planned from."""
        return replace(self, filter_key="", filter=AlwaysTrue())


@dataclass(frozen=True, slots=True)
class PlanCacheStats:
    """Exact hits, misses (planned from manifests) and reuses (planned from a wider plan)."""

    hits: int
    misses: int
    reuses: int


class PlanCache:
    """At most ``max_plans`` plans holding at most ``max_tasks`` tasks in all; ``implies``
    (narrow, wide) decides subset reuse."""

    def __init__(self, max_plans: int, implies: Implies, max_tasks: int = 2_000_000) -> None:
        self._max_plans = max_plans
        self._max_tasks = max_tasks
        self._implies = implies
        self._plans: OrderedDict[PlanKey, Plan] = OrderedDict()
        self._families: dict[PlanKey, set[PlanKey]] = {}
        self._tasks = 0
        self._lock = threading.Lock()
        self._hits = self._misses = self._reuses = 0

    @property
    def stats(self) -> PlanCacheStats:
        with self._lock:
            return PlanCacheStats(self._hits, self._misses, self._reuses)

    def plan(self, key: PlanKey, fresh: Callable[[], Plan],
             narrow: Callable[[Plan], Plan]) -> Plan:
        """The plan of ``key``: cached, else ``narrow`` of the smallest cached plan of its
        family whose filter ``key.filter`` implies, else ``fresh()``; kept either way."""
        with self._lock:
            found = self._plans.get(key)
            if found is not None:
                self._plans.move_to_end(key)
                self._hits += 1
                return found
            wider = self._widest_match(key)
            if wider is None:
                self._misses += 1
            else:
                self._reuses += 1
        planned = fresh() if wider is None else narrow(wider)
        self.put(key, planned)
        return planned

    def get(self, key: PlanKey) -> Plan | None:
        """The plan cached under exactly ``key`` (not counted)."""
        with self._lock:
            found = self._plans.get(key)
            if found is not None:
                self._plans.move_to_end(key)
            return found

    def put(self, key: PlanKey, plan: Plan) -> None:
        """Keep ``plan`` under ``key``, evicting the least recently used beyond the bounds."""
        if len(plan.tasks) > self._max_tasks or self._max_plans <= 0:
            return
        with self._lock:
            self._drop(key)
            self._plans[key] = plan
            self._families.setdefault(key.family, set()).add(key)
            self._tasks += len(plan.tasks)
            while len(self._plans) > self._max_plans or self._tasks > self._max_tasks:
                self._drop(next(iter(self._plans)))

    def _widest_match(self, key: PlanKey) -> Plan | None:
        """The smallest cached plan of ``key``'s family that ``key.filter`` narrows."""
        best: tuple[int, PlanKey, Plan] | None = None
        for candidate in self._families.get(key.family, ()):
            plan = self._plans[candidate]
            if best is not None and len(plan.tasks) >= best[0]:
                continue
            if self._narrows(key.filter, candidate.filter):
                best = (len(plan.tasks), candidate, plan)
        if best is None:
            return None
        self._plans.move_to_end(best[1])
        return best[2]

    def _narrows(self, narrow: BooleanExpression, wide: BooleanExpression) -> bool:
        try:
            return self._implies(narrow, wide)
        except Exception:  # reuse is an optimisation: a failing test only costs a fresh plan
            return False

    def _drop(self, key: PlanKey) -> None:
        plan = self._plans.pop(key, None)
        if plan is None:
            return
        self._tasks -= len(plan.tasks)
        family = self._families.get(key.family)
        if family is not None:
            family.discard(key)
            if not family:
                del self._families[key.family]
