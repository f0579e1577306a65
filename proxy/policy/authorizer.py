"""``PolicyAuthorizer``: the Casbin policy behind the ``Authorizer`` seam, cached and hot-reloaded.

A loaded policy and its decision caches form one *generation*. A reload builds the next generation
completely (read, validate, compile) and then replaces the current one with a single assignment, so
a request is decided entirely by the old policy or entirely by the new one, never by a mixture or a
half-written file, and no stale cached decision survives a reload. A policy that fails to load
leaves the current generation in place and is reported in ``status`` and the log.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import threading
import time
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, replace
from typing import Any

import structlog

from proxy.governance import Action, Decision, Principal
from proxy.ops.stablefiles import FileChanging
from proxy.policy import decisions
from proxy.policy.changes import PolicyChange, PolicyListener
from proxy.policy.loader import CompiledPolicy, compile_files, load, read_files
from proxy.policy.rules import PolicyError
from proxy.policy.settings import PolicySettings
from proxy.policy.views import READABLE, TableRules
from proxy.resources import Resource
from proxy.restrictions import ReadView

log = structlog.get_logger("icegov")


@dataclass(frozen=True)
class PolicyStatus:
    """What policy is in force, and whether the files on disk could be loaded."""

    generation: int  # 1 for the policy loaded at start-up, +1 per successful reload
    loaded_at: float  # epoch seconds of the current generation's load
    digest: str  # sha256 over model.conf and policy.csv as loaded
    rules: int
    grants: int
    last_error: str | None = None  # why the files on disk are not in force; None if they are
    last_error_at: float | None = None

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready view for /readyz and metrics."""
        return {"generation": self.generation, "loaded_at": self.loaded_at,
                "digest": self.digest, "rules": self.rules, "grants": self.grants,
                "last_error": self.last_error, "last_error_at": self.last_error_at}


class _Generation:
    """One loaded policy with its own bounded decision caches (closures: no reference cycle)."""

    def __init__(self, policy: CompiledPolicy, cache_size: int, number: int) -> None:
        self.policy = policy
        self.number = number
        cached = functools.lru_cache(maxsize=cache_size)

        @cached
        def subjects(principal: Principal) -> tuple[str, ...]:
            return decisions.subjects_of(policy, principal)

        @cached
        def decide(principal: Principal, action: Action, resource: Resource) -> Decision:
            return decisions.decide(policy, principal, action, resource, subjects(principal))

        @cached
        def can_see(principal: Principal, resource: Resource) -> bool:
            return decisions.can_see(policy, principal, resource, subjects(principal))

        @cached
        def table_rules(principal: Principal, table: Resource) -> TableRules:
            return decisions.table_rules(policy, principal, table, subjects(principal))

        @cached
        def read_view(principal: Principal, table: Resource,
                      columns: tuple[str, ...]) -> ReadView:
            return table_rules(principal, table).view(columns)

        self.decide, self.can_see, self.read_view = decide, can_see, read_view
        self.subjects = subjects
        self.table_rules = table_rules


class PolicyAuthorizer:
    """The ``proxy.governance.Authorizer`` backed by ``model.conf`` + ``policy.csv``."""

    def __init__(self, policy: CompiledPolicy, settings: PolicySettings) -> None:
        self._settings = settings
        self._generation = _Generation(policy, settings.decision_cache_size, 1)
        self._status = _status_for(policy, 1)
        self._reload_lock = threading.Lock()
        self._failed: str | None = None  # the last failure reported, to warn once per failure
        self.reload_failures = 0  # failed reloads (each distinct failure once) since start-up
        self._listeners: list[PolicyListener] = []

    @classmethod
    def from_settings(cls, settings: PolicySettings) -> PolicyAuthorizer:
        """Load the policy named by ``settings``; raises ``PolicyError``/``OSError`` if unusable."""
        return cls(load(settings.model_path, settings.policy_path), settings)

    @property
    def policy(self) -> CompiledPolicy:
        """The policy currently in force."""
        return self._generation.policy

    @property
    def generation(self) -> int:
        """The policy generation in force (1 at start-up, +1 per reload): part of every cache
        key built from this policy's decisions (plans, projections, plan tasks).

        A reload swaps the policy and its number in one assignment: read the generation
        *before* asking for a view, and the view is never older than the number read."""
        return self._generation.number

    @property
    def status(self) -> PolicyStatus:
        """Generation, load time and last load error, for /readyz and metrics."""
        return self._status

    def decide(self, principal: Principal, action: Action, resource: Resource) -> Decision:
        """Allow or deny one action on one resource, naming the rule that decided."""
        return self._generation.decide(principal, action, resource)

    def can_see(self, principal: Principal, resource: Resource) -> bool:
        """True if the principal may do something on ``resource`` or, for a catalog or a
        namespace, on anything beneath it.

        For a table (``resource.kind`` TABLE) only rights on the table itself count, likewise for
        a column: ``icegov.sales.*`` allows ``icegov.sales.payroll.x`` (which a deny on
        ``icegov.sales.payroll`` does not cover), so the *namespace* ``sales.payroll`` is visible
        while the *table* ``payroll`` in ``sales`` is not.
        """
        return self._generation.can_see(principal, resource)

    def read_view(self, principal: Principal, table: Resource,
                  columns: Iterable[str]) -> ReadView:
        """What ``principal`` may read of ``table``'s top-level ``columns``: denied and masked
        columns, the row filter, and the lines behind them (``decisions.read_view``). Remembered
        per policy generation; the table's rules are gathered once for any set of columns."""
        return self._generation.read_view(principal, table, tuple(columns))

    def is_role(self, name: str) -> bool:
        """Whether the policy in force grants ``name`` as a role (a ``g`` line's role)."""
        return name in self._generation.policy.index.roles

    def restricted_anywhere(self, principal: Principal) -> bool:
        """True when some SELECT deny, mask or row filter applies to the principal anywhere."""
        generation = self._generation  # one generation for both lookups
        return not generation.policy.index.reads.subjects.isdisjoint(
            generation.subjects(principal))

    def hidden_names(self, principal: Principal, masks_shown: bool = False) -> frozenset[str]:
        """Lowercased names that the principal's column rules (SELECT denies, masks) end in:
        what a view's definition must not name for the principal to load it (``masks_shown``:
        for a client that applies masks itself, masked columns are not hidden from it)."""
        subjects = decisions.subjects_of(self.policy, principal)
        return self.policy.index.reads.named_segments(subjects, masks_shown)

    def same_restrictions(self, source: Resource, destination: Resource) -> bool:
        """True when no subject's column or row rules differ between the two tables."""
        return decisions.same_restrictions(self.policy, source, destination)

    def restricts(self, principal: Principal, table: Resource) -> bool:
        """True when some column or row rule applies to ``principal`` on ``table`` (whatever its
        columns): only then must a loadTable answer be read and projected."""
        rules = self._generation.table_rules(principal, table)
        return not (rules.default is READABLE and not rules.named and rules.row_filter is None)

    def cache_info(self) -> dict[str, int]:
        """Decision cache counters of the current generation (reset by every reload)."""
        info = self._generation.decide.cache_info()
        return {"hits": info.hits, "misses": info.misses, "size": info.currsize}

    def on_change(self, listener: PolicyListener) -> None:
        """Call ``listener`` now with the policy in force (``before`` None) and after every
        reload that installs a new one (e.g. ``proxy.policy.changes.audited``)."""
        with self._reload_lock:
            self._listeners.append(listener)
            self._tell(None)

    def _tell(self, before: str | None) -> None:
        files = self._generation.policy.files
        change = PolicyChange(self._status.generation, before, files)
        for listener in self._listeners:
            try:
                listener(change)
            except Exception as exc:  # a listener must not undo a reload
                log.exception("policy.listener_failed", error=str(exc))

    def reload_if_changed(self) -> bool:
        """Load the files if their contents changed; True if a new policy is now in force."""
        with self._reload_lock:
            return self._reload()

    def _reload(self) -> bool:
        paths = self._settings.model_path, self._settings.policy_path
        try:
            files = read_files(*paths)
            if files.digest == self._status.digest:
                self._clear_error()
                return False
            policy = compile_files(files)
        except FileChanging:
            return False  # being written right now: the next poll sees the finished file
        except (OSError, PolicyError) as exc:
            self._record_error(str(exc))
            return False
        self._install(policy)
        return True

    def _install(self, policy: CompiledPolicy) -> None:
        before = self._status.digest
        generation = self._status.generation + 1
        self._generation = _Generation(policy, self._settings.decision_cache_size, generation)
        self._status = _status_for(policy, generation)
        self._failed = None
        log.info("policy.reloaded", generation=generation, rules=self._status.rules,
                 grants=self._status.grants, digest=self._status.digest[:12])
        self._tell(before)

    def _record_error(self, message: str) -> None:
        if message != self._failed:
            self.reload_failures += 1  # each distinct failure once (metrics export it)
            self._failed = message
            self._status = replace(self._status, last_error=message, last_error_at=time.time())
            log.warning("policy.reload_failed", error=message, generation=self._status.generation,
                        kept="the last good policy stays in force")

    def _clear_error(self) -> None:
        if self._status.last_error is not None:
            self._failed = None
            self._status = replace(self._status, last_error=None, last_error_at=None)

    async def watch(self, stop: asyncio.Event) -> None:
        """Poll the files every ``reload_interval_seconds`` until ``stop`` is set."""
        while not await _wait(stop, self._settings.reload_interval_seconds):
            try:
                await asyncio.to_thread(self.reload_if_changed)
            except Exception as exc:  # the watcher must outlive any surprise
                log.exception("policy.watch_failed", error=str(exc))

    @contextlib.asynccontextmanager
    async def watching(self) -> AsyncIterator[None]:
        """Run ``watch`` in the background for the duration of the block (an app lifespan)."""
        stop = asyncio.Event()
        task = asyncio.create_task(self.watch(stop), name="icegov-policy-watch")
        try:
            yield
        finally:
            stop.set()
            await task


async def _wait(stop: asyncio.Event, seconds: float) -> bool:
    """Wait up to ``seconds``; True if ``stop`` was set."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), timeout=seconds)
    return stop.is_set()


def _status_for(policy: CompiledPolicy, generation: int) -> PolicyStatus:
    return PolicyStatus(generation=generation, loaded_at=time.time(),
                        digest=policy.files.digest,
                        rules=len(policy.parsed.rules) + len(policy.parsed.restrictions),
                        grants=len(policy.parsed.grants))
