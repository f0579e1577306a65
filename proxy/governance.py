"""The vocabulary shared by identity, intent, policy and audit: principals, actions, decisions.

Resources are typed (``proxy.resources.Resource``: catalog, namespace levels, table, column), never
dotted strings: a name containing a dot stays one segment.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Protocol

from proxy.resources import Resource

if TYPE_CHECKING:
    from proxy.restrictions import ReadView


class Action(StrEnum):
    """Everything a request can do, as a policy names it."""

    # data
    SELECT = "SELECT"
    INSERT = "INSERT"
    DELETE = "DELETE"
    UPDATE = "UPDATE"
    REWRITE = "REWRITE"
    MANAGE_SNAPSHOTS = "MANAGE_SNAPSHOTS"
    # table metadata and lifecycle
    ALTER = "ALTER"
    CREATE_TABLE = "CREATE_TABLE"
    DROP_TABLE = "DROP_TABLE"
    RENAME_TABLE = "RENAME_TABLE"
    REGISTER_TABLE = "REGISTER_TABLE"
    # namespaces and catalog
    CREATE_NAMESPACE = "CREATE_NAMESPACE"
    DROP_NAMESPACE = "DROP_NAMESPACE"
    ALTER_NAMESPACE = "ALTER_NAMESPACE"
    LIST = "LIST"
    DESCRIBE = "DESCRIBE"


TABLE_ACTIONS: frozenset[Action] = frozenset({
    Action.SELECT, Action.INSERT, Action.DELETE, Action.UPDATE, Action.REWRITE,
    Action.MANAGE_SNAPSHOTS, Action.ALTER, Action.DROP_TABLE, Action.RENAME_TABLE,
    Action.DESCRIBE,
})
"""Every right a principal can hold on a table: the bar for an update icegov does not know."""


@dataclass(frozen=True)
class Principal:
    """Who is calling: a name and the roles/groups the policy grants rights to."""

    name: str
    roles: tuple[str, ...] = ()
    source: str = "token"  # "token" (icegov-issued), "oidc", or "anonymous"


@dataclass(frozen=True)
class Decision:
    """A policy's answer for one (principal, action, resource), with the rule that decided."""

    allowed: bool
    action: Action
    resource: Resource
    rule: str | None = None  # the policy line that decided; None for the default deny
    policy: str | None = field(default=None, compare=False)  # digest of the policy that decided


@dataclass(frozen=True)
class Verdict:
    """All decisions for one request: allowed only if every needed action is allowed."""

    decisions: tuple[Decision, ...] = field(default_factory=tuple)

    @property
    def allowed(self) -> bool:
        return all(d.allowed for d in self.decisions)

    @property
    def denied(self) -> tuple[Decision, ...]:
        return tuple(d for d in self.decisions if not d.allowed)


class Authorizer(Protocol):
    """The one seam where icegov asks whether a principal may do something."""

    def decide(self, principal: Principal, action: Action, resource: Resource) -> Decision:
        """Allow or deny one action on one resource, naming the rule that decided."""

    def can_see(self, principal: Principal, resource: Resource) -> bool:
        """True if the principal holds any right on ``resource`` or, for a catalog or namespace,
        on anything beneath it (for a table only rights on the table itself count)."""

    def read_view(self, principal: Principal, table: Resource,
                  columns: tuple[str, ...]) -> ReadView:
        """What the principal may read of ``table``'s ``columns`` (its top-level fields): the
        denied and masked columns and the row filter (SELECT on the table is decided apart)."""

    def same_restrictions(self, source: Resource, destination: Resource) -> bool:
        """True when every subject's column and row rules on ``source`` are the same on
        ``destination`` (a rename between them sheds none)."""

    def restricted_anywhere(self, principal: Principal) -> bool:
        """True when some SELECT deny, mask or row filter applies to the principal anywhere."""
