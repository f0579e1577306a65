"""What the gate hands a handler: who is calling, what the request does, what was decided, and —
for commits — each table's classified change with the base state it was classified against."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from proxy.backing.tables import TableState
from proxy.commits import CommitIntent
from proxy.governance import Decision, Principal
from proxy.intent import Intent
from proxy.resources import Resource


@dataclass(frozen=True)
class ClassifiedChange:
    """One table's part of a commit, classified against ``base`` (None when it creates)."""

    resource: Resource
    body: dict[str, Any]
    intent: CommitIntent
    base: TableState | None


@dataclass(frozen=True)
class Admission:
    """A request let through the gate."""

    principal: Principal | None
    intent: Intent
    catalog: str
    decisions: tuple[Decision, ...] = ()
    changes: tuple[ClassifiedChange, ...] = ()
