"""What one audit record says about one request.

Every request that reaches a governed endpoint produces exactly one record, written after the
outcome is known (status and latency), whether it was allowed, denied, hidden or failed. The
fields are documented in proxy/audit/README.md.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from proxy.governance import Decision, Principal


@dataclass
class AuditRecord:
    """What happened to one request; filled in as the request is handled."""

    request_id: str
    method: str
    path: str
    endpoint: str
    user_agent: str | None = None
    client_version: str | None = None
    principal: Principal | None = None
    resources: tuple[str, ...] = ()  # canonical text of each resource (proxy.resources)
    decisions: tuple[Decision, ...] = ()
    # "public" | "allow" | "deny" | "hidden" | "unauthenticated" | "refused" | "error"
    decision: str = "error"
    error: str | None = None  # the message of the error answered, if any
    evidence: list[dict[str, Any]] = field(default_factory=list)
    status: int | None = None
    replayed: bool = False  # the stored answer of an earlier request with its Idempotency-Key
    started: float = field(default_factory=time.perf_counter)

    def to_event(self) -> dict[str, Any]:
        """The record as the JSON object written to the stream."""
        principal = self.principal
        return {
            "time": utc_now_ms(),
            "request_id": self.request_id,
            "principal": principal.name if principal else None,
            "roles": principal.roles if principal else (),  # tuples are JSON arrays
            "auth": principal.source if principal else None,
            "client": {"user_agent": self.user_agent, "version": self.client_version},
            "method": self.method,
            "path": self.path,
            "endpoint": self.endpoint,
            "resources": self.resources,
            "actions": sorted({str(d.action) for d in self.decisions}),
            "decision": self.decision,
            "rules": [_rule(d) for d in self.decisions],
            "policy_digest": self.policy_digest(),
            "evidence": self.evidence,
            "status": self.status,
            "error": self.error,
            "replayed": self.replayed,
            "new_snapshot_ids": self.new_snapshot_ids(),
            "latency_ms": round((time.perf_counter() - self.started) * 1000, 3),
        }

    def policy_digest(self) -> str | None:
        """The digest of the policy files that decided the request (its last decision's: only a
        reload between two decisions of one request makes them differ); None if none decided."""
        return next((d.policy for d in reversed(self.decisions) if d.policy), None)

    def new_snapshot_ids(self) -> list[int]:
        """Snapshots that landed: the classified commit's snapshots, once it succeeded."""
        if self.status is None or not 200 <= self.status < 300:
            return []
        return [i for e in self.evidence for i in e.get("snapshot_ids", [])]


AGGREGATED: dict[str, Any] = {"aggregated": True}
"""This very object in a record's evidence leaves the record unwritten: its request is counted
in an aggregate record instead (``proxy.signing.tally``). Compared by identity: no request can
forge it."""


def aggregated(record: AuditRecord) -> bool:
    """True when ``record`` is counted in an aggregate record rather than written."""
    return any(entry is AGGREGATED for entry in record.evidence)


_second: tuple[int, str] = (-1, "")


def utc_now_ms() -> str:
    """Now in UTC as ISO 8601 to the millisecond (``2026-11-27T15:29:00.123+00:00``, what
    ``datetime.isoformat(timespec="milliseconds")`` writes), the seconds' text kept per second."""
    global _second
    ns = time.time_ns()
    second, ms = divmod(ns // 1_000_000, 1000)
    kept = _second  # read once: another thread may replace it meanwhile
    if kept[0] != second:
        kept = (second, datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%dT%H:%M:%S"))
        _second = kept
    return f"{kept[1]}.{ms:03d}+00:00"


def _rule(decision: Decision) -> dict[str, Any]:
    return {"action": str(decision.action), "resource": str(decision.resource),
            "allowed": decision.allowed, "rule": decision.rule}
