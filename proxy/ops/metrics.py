"""Prometheus metrics: one registry per app, served unauthenticated at ``GET /metrics``.

Every label value is bounded and reveals nothing about who asked for what: endpoint names from
the route table (``unknown`` for unrouted paths), HTTP status codes, audit decisions, commit
classifications (``INSERT``, ``DELETE+INSERT``, …, ``none`` for metadata-only changes) and
outcomes, grant names. Table names, namespaces, principals, request ids and tokens never appear.

What is counted where:

- ``icegov_requests_total{endpoint,status,decision}`` and
  ``icegov_request_duration_seconds{endpoint}``: each governed request once, when its answer is
  ready (``proxy.edge.pipeline``); the duration excludes streaming a large body to the client.
- ``icegov_backing_request_duration_seconds{method}``: each request to the backing catalog, up to
  its response headers, failures included (``proxy.backing.forward``).
- ``icegov_commits_total{classification,outcome}`` (one per table change; outcome ``landed``,
  ``conflict``, ``refused``, ``reconciled`` or ``unknown``), ``icegov_commit_rebases_total`` and
  ``icegov_commit_reconciled_total{outcome}`` (what a reload showed of a commit whose outcome was
  unknown: ``landed``, ``absent``, ``unknown``) from ``proxy.committer.committer``.
- ``icegov_tokens_issued_total{grant}`` (``client_credentials``, ``token_exchange``).
- ``icegov_plan_files_pruned_total{mechanism}``: data files left out of plans answered, by what
  pruned them (``partitions``, ``metrics``, ``dependencies``, ``row_filter``, and the planner's
  other mechanisms: ``proxy.planning.sieve``), from ``proxy.plans.service``.
- Read at scrape time from the components themselves: plan and manifest cache lookups, the
  policy generation and reload failures, audit write failures, the bytes governed-snapshot
  builds read and wrote (``icegov_governed_build_bytes_total{io}``, ``io`` ``read`` or
  ``written``), process CPU and memory.

With several uvicorn workers (``icegov serve --workers N``, ``proxy.ops.workers``) prometheus-client
runs in multiprocess mode: request, commit and token series are summed over every worker,
whichever worker answers the scrape; what the components keep themselves (cache lookups, policy
generation and reload failures, audit write failures) is reported by the answering worker
only, labelled ``worker`` with its slot (0..N-1); process metrics are left out.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector
from starlette.requests import Request
from starlette.responses import Response

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
                   5.0, 10.0, 30.0)
"""Seconds: a proxied loadTable takes about a millisecond, a large commit or plan seconds."""
STALENESS_BUCKETS = (0.0, 1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0, 4 * 3600.0, 24 * 3600.0)
"""Seconds a governed answer lagged its base table (0: current)."""

GRANT_LABELS = {"client_credentials": "client_credentials",
                "urn:ietf:params:oauth:grant-type:token-exchange": "token_exchange"}


class Observed(Protocol):
    """What the pipeline knows of a finished request (an audit record)."""

    endpoint: str
    status: int | None
    decision: str
    started: float  # time.perf_counter() when the request arrived


class Hits(Protocol):
    """Cache counters as the plan and manifest caches report them."""

    @property
    def hits(self) -> int: ...

    @property
    def misses(self) -> int: ...


class PolicyState(Protocol):
    """What the policy authorizer says of itself (``PolicyAuthorizer``)."""

    @property
    def generation(self) -> int: ...

    @property
    def status(self) -> PolicyStatusLike: ...


class GovernedBytes(Protocol):
    """What governed-snapshot builds read and wrote so far (``GovernedSnapshots``)."""

    @property
    def bytes_read(self) -> int: ...

    @property
    def bytes_written(self) -> int: ...


class PolicyStatusLike(Protocol):
    @property
    def last_error_at(self) -> float | None: ...


@dataclass
class Sources:
    """Components read at scrape time (each optional)."""

    plan_cache: Callable[[], Hits] | None = None
    manifest_cache: Callable[[], Hits] | None = None
    policy: PolicyState | None = None
    audit: object | None = None  # its ``failures`` attribute (an int), if it has one
    governed: GovernedBytes | None = None


class Metrics:
    """The app's metrics and its own registry; the ``observe_*`` methods are the hooks."""

    def __init__(self, process: bool = True, worker: int | None = None) -> None:
        """``worker``: this process's slot when it is one of several workers (the counters
        are then kept in ``PROMETHEUS_MULTIPROC_DIR``, shared by every worker)."""
        self.registry = CollectorRegistry()
        r = self.registry
        self._requests = Counter("icegov_requests", "Governed requests answered.",
                                 ("endpoint", "status", "decision"), registry=r)
        self._request_seconds = Histogram(
            "icegov_request_duration_seconds", "Time from a request's arrival to its answer.",
            ("endpoint",), buckets=LATENCY_BUCKETS, registry=r)
        self._backing_seconds = Histogram(
            "icegov_backing_request_duration_seconds",
            "Time for the backing catalog to answer (to its headers).", ("method",),
            buckets=LATENCY_BUCKETS, registry=r)
        self._commits = Counter("icegov_commits", "Table changes committed, by outcome.",
                                ("classification", "outcome"), registry=r)
        self._rebases = Counter("icegov_commit_rebases",
                                "Changes rebuilt on a table's newer state.", registry=r)
        self._reconciled = Counter("icegov_commit_reconciled",
                                   "Commits of unknown outcome checked against the table.",
                                   ("outcome",), registry=r)
        self._tokens = Counter("icegov_tokens_issued", "Access tokens issued.", ("grant",),
                               registry=r)
        self._pruned = Counter("icegov_plan_files_pruned",
                               "Data files left out of answered plans, by what pruned them.",
                               ("mechanism",), registry=r)
        self._governed_stale = Histogram(
            "icegov_governed_staleness_seconds",
            "How long the base table had moved past the governed snapshot an answer served "
            "(0: the base's current snapshot).", buckets=STALENESS_BUCKETS, registry=r)
        self._sources = Sources()
        components = _ComponentCollector(self._sources, worker)
        if worker is None:
            r.register(components)
            if process:
                ProcessCollector(registry=r)
        else:  # scrapes read every worker's files, and this worker's own components
            self.registry = CollectorRegistry()
            MultiProcessCollector(self.registry, os.environ[MULTIPROCESS_DIR])  # type: ignore[no-untyped-call]
            self.registry.register(components)
        # label children resolved once per label values, not per request
        self._request_children: dict[tuple[str, int | None, str], Callable[[], None]] = {}
        self._duration_children: dict[str, Callable[[float], None]] = {}
        self._backing_children: dict[str, Callable[[float], None]] = {}

    def watch(self, *, plan_cache: Callable[[], Hits] | None = None,
              manifest_cache: Callable[[], Hits] | None = None,
              policy: PolicyState | None = None, audit: object | None = None,
              governed: GovernedBytes | None = None) -> None:
        """Components whose counters are read at each scrape (given ones replace earlier)."""
        s = self._sources
        s.governed = governed if governed is not None else s.governed
        s.plan_cache = plan_cache or s.plan_cache
        s.manifest_cache = manifest_cache or s.manifest_cache
        s.policy = policy or s.policy
        s.audit = audit if audit is not None else s.audit

    def observe_request(self, record: Observed, now: float) -> None:
        """One finished governed request (``now``: time.perf_counter() at its answer)."""
        key = (record.endpoint, record.status, record.decision)
        count = self._request_children.get(key)
        if count is None:
            count = self._requests.labels(
                record.endpoint, str(record.status), record.decision).inc
            self._request_children[key] = count
        count()
        duration = self._duration_children.get(record.endpoint)
        if duration is None:
            duration = self._request_seconds.labels(record.endpoint).observe
            self._duration_children[record.endpoint] = duration
        duration(max(0.0, now - record.started))

    def observe_governed(self, stale_seconds: float) -> None:
        """One answer served from governed snapshots, and how stale it was."""
        self._governed_stale.observe(stale_seconds)

    def observe_backing(self, method: str, seconds: float) -> None:
        """One request to the backing catalog and how long it took to answer."""
        observe = self._backing_children.get(method)
        if observe is None:
            observe = self._backing_seconds.labels(method).observe
            self._backing_children[method] = observe
        observe(seconds)

    def observe_commit(self, classification: str | None, outcome: str, rebases: int) -> None:
        """One table change of a commit, once its outcome is known."""
        self._commits.labels(_classification(classification),
                             outcome if outcome in COMMIT_OUTCOMES else "other").inc()
        if rebases:
            self._rebases.inc(rebases)

    def observe_reconciled(self, outcome: str) -> None:
        """What reloading the table showed of a commit whose outcome was unknown."""
        self._reconciled.labels(outcome).inc()

    def observe_token(self, grant: str) -> None:
        """An access token issued under ``grant`` (its OAuth grant_type)."""
        self._tokens.labels(GRANT_LABELS.get(grant, "other")).inc()

    def observe_pruned(self, pruned: Mapping[str, int]) -> None:
        """Files one answered plan (or plan task) left out, per pruning mechanism."""
        for mechanism, files in pruned.items():
            if files > 0:
                label = mechanism if _MECHANISM.fullmatch(mechanism) else "other"
                self._pruned.labels(label).inc(files)

    def exposition(self) -> bytes:
        """The registry in the Prometheus text format."""
        return generate_latest(self.registry)

    async def endpoint(self, _: Request) -> Response:
        """``GET /metrics``."""
        return Response(self.exposition(), media_type=CONTENT_TYPE_LATEST)


MULTIPROCESS_DIR = "PROMETHEUS_MULTIPROC_DIR"
COMMIT_OUTCOMES = frozenset({"landed", "conflict", "refused", "reconciled", "unknown", "rejudged"})
_CLASSES = frozenset({"INSERT", "DELETE", "UPDATE", "REWRITE"})
_MECHANISM = re.compile(r"[a-z_]{1,32}")  # the planner's own names (``proxy.planning.sieve``)


def _classification(value: str | None) -> str:
    """A commit classification as a label: its known parts only (bounded), ``none`` if absent."""
    if not value:
        return "none"
    return value if set(value.split("+")) <= _CLASSES else "other"


class _ComponentCollector(Collector):
    """Counters the components keep themselves, read at scrape time."""

    def __init__(self, sources: Sources, worker: int | None = None) -> None:
        self._sources = sources
        self._labels: tuple[str, ...] = () if worker is None else ("worker",)
        self._values: list[str] = [] if worker is None else [str(worker)]
        self._reload_failures = 0
        self._last_failure_at: float | None = None

    def describe(self) -> Iterable[Metric]:
        return [*self._lookups(), *self._policy_families(), self._governed_family()]

    def collect(self) -> Iterable[Metric]:
        s, own = self._sources, self._values
        plans, manifests = self._lookups()
        if s.plan_cache is not None:
            self._add_hits(plans, s.plan_cache())
        if s.manifest_cache is not None:
            self._add_hits(manifests, s.manifest_cache())
        generation, failing, failures = self._policy_families()
        if s.policy is not None:
            generation.add_metric(own, s.policy.generation)
            failing.add_metric(own, 1 if s.policy.status.last_error_at is not None else 0)
            failures.add_metric(own, self._count_reload_failures(s.policy))
        audit_failures = getattr(s.audit, "failures", 0)
        audit = CounterMetricFamily("icegov_audit_write_failures",
                                    "Audit records that could not be written.",
                                    labels=self._labels)
        audit.add_metric(own, audit_failures if isinstance(audit_failures, int) else 0)
        governed = self._governed_family()
        if s.governed is not None:
            governed.add_metric([*own, "read"], s.governed.bytes_read)
            governed.add_metric([*own, "written"], s.governed.bytes_written)
        return [plans, manifests, generation, failing, failures, audit, governed]

    def _governed_family(self) -> CounterMetricFamily:
        return CounterMetricFamily(
            "icegov_governed_build_bytes",
            "Bytes governed-snapshot builds gave their copies to read (base data and delete "
            "files) and wrote (governed data files).", labels=(*self._labels, "io"))

    def _lookups(self) -> tuple[CounterMetricFamily, CounterMetricFamily]:
        plans = CounterMetricFamily(
            "icegov_plan_cache_lookups",
            "Plan cache lookups: exact hit, miss (planned from manifests), reuse of a wider plan.",
            labels=(*self._labels, "result"))
        manifests = CounterMetricFamily(
            "icegov_manifest_cache_lookups", "Manifest cache lookups by result.",
            labels=(*self._labels, "result"))
        return plans, manifests

    def _policy_families(self) -> tuple[GaugeMetricFamily, GaugeMetricFamily,
                                        CounterMetricFamily]:
        return (
            GaugeMetricFamily("icegov_policy_generation",
                              "Policy generation in force (1 at start, +1 per reload).",
                              labels=self._labels),
            GaugeMetricFamily("icegov_policy_reload_failing",
                              "1 while the policy files on disk cannot be loaded.",
                              labels=self._labels),
            CounterMetricFamily("icegov_policy_reload_failures",
                                "Policy reloads that failed (the last good policy stayed).",
                                labels=self._labels),
        )

    def _add_hits(self, family: CounterMetricFamily, stats: Hits) -> None:
        own = self._values
        family.add_metric([*own, "hit"], stats.hits)
        family.add_metric([*own, "miss"], stats.misses)
        reuses = getattr(stats, "reuses", None)
        if isinstance(reuses, int):
            family.add_metric([*own, "reuse"], reuses)

    def _count_reload_failures(self, policy: PolicyState) -> int:
        """The authorizer's own count if it keeps one, else each new failure seen at a scrape
        (a failure fixed between two scrapes goes unseen)."""
        own = getattr(policy, "reload_failures", None)
        if isinstance(own, int):
            return own
        failed_at = policy.status.last_error_at
        if failed_at is not None and failed_at != self._last_failure_at:
            self._reload_failures += 1
        self._last_failure_at = failed_at
        return self._reload_failures


__all__ = ["LATENCY_BUCKETS", "Metrics", "Observed"]
