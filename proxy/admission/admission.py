"""What the gate hands a handler: who is calling, what the request does, what was decided, and —
for commits — each table's classified change with the base state it was classified against."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from proxy.admission.intent import Intent
from proxy.backing.tables import TableState
from proxy.commits import CommitIntent
from proxy.errors import IcebergError
from proxy.governance import Decision, Principal
from proxy.resources import Resource


@dataclass(frozen=True)
class DataOperationRequest:
    """A data operation icegov builds itself (``commits.operations``): what the client sent, the
    start of its conflict window, and the snapshot every build of it adds."""

    body: dict[str, Any]
    start_snapshot_id: int | None
    snapshot_id: int
    retryable: bool


@dataclass(frozen=True)
class ClassifiedChange:
    """One table's part of a commit, classified against ``base`` (None when it creates).

    ``report`` is this change's entry in the audit record's evidence: the gate fills it with the
    classification, the committer adds how the change landed (tries, rebased, outcome).
    """

    resource: Resource
    body: dict[str, Any]
    intent: CommitIntent
    base: TableState | None
    stale: IcebergError | None = None  # the base moved: the conflict to answer if not rebuilt
    operation: DataOperationRequest | None = None  # ``body`` was built by icegov from it
    rewritten: bool = False  # ``body`` is icegov's rewrite of the caller's (``proxy.governed``,
    # or summaries stamped: ``proxy.commits.dependencies``)
    judged_on_head: bool = False  # ``base`` is a head this replica knew (``committer.heads``)
    observed_at: float | None = None  # when ``base``'s oldest part was loaded (monotonic)
    report: dict[str, Any] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        if not self.report:
            self.report.update(resource=str(self.resource), **self.intent.to_dict())


@dataclass(frozen=True)
class Admission:
    """A request let through the gate."""

    principal: Principal | None
    intent: Intent
    catalog: str
    decisions: tuple[Decision, ...] = ()
    changes: tuple[ClassifiedChange, ...] = ()
    evidence: list[dict[str, Any]] = field(default_factory=list, compare=False)
    """The audit record's evidence list: a handler appends what it learned (e.g. a read view)."""
