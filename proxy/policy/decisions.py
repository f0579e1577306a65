"""Deciding with a compiled policy: pure functions, no caching (the authorizer adds that)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from proxy.governance import Action, Decision, Principal
from proxy.policy.loader import CompiledPolicy
from proxy.policy.rules import Rule
from proxy.policy.views import ColumnState, ColumnVerdict, TableRules
from proxy.resources import Resource, ResourceKind
from proxy.restrictions import ReadView


def subjects_of(policy: CompiledPolicy, principal: Principal) -> tuple[str, ...]:
    """The principal's subjects that have rules: name, token roles and inherited roles."""
    index = policy.index
    return index.ruled(index.subjects(principal.name, principal.roles))


def decide(policy: CompiledPolicy, principal: Principal, action: Action, resource: Resource,
           subjects: tuple[str, ...] | None = None) -> Decision:
    """The policy's decision, naming the deciding line (None for the default deny)."""
    if subjects is None:
        subjects = subjects_of(policy, principal)
    rule = policy.index.decide(subjects, action, resource.parts)
    return Decision(allowed=rule is not None and rule.allow, action=action, resource=resource,
                    rule=None if rule is None else rule.text, policy=policy.files.digest)


@dataclass(frozen=True)
class Explanation:
    """A decision with its workings: who the principal acts as, and every rule that matched."""

    decision: Decision
    subjects: tuple[str, ...]  # every subject, with or without rules
    matched: tuple[Rule, ...]  # in file order
    deciding: Rule | None


def can_see(policy: CompiledPolicy, principal: Principal, resource: Resource,
            subjects: tuple[str, ...] | None = None) -> bool:
    """True if some right is allowed on ``resource`` or, for a catalog or namespace, on
    anything beneath it (for a table or a column only rights on it count)."""
    if subjects is None:
        subjects = subjects_of(policy, principal)
    beneath = resource.kind in (ResourceKind.CATALOG, ResourceKind.NAMESPACE)
    return policy.index.can_see(subjects, resource.parts, beneath)


def explain(policy: CompiledPolicy, principal: Principal, action: Action,
            resource: Resource) -> Explanation:
    """Why the policy decides as it does for this principal, action and resource."""
    index = policy.index
    subjects = index.subjects(principal.name, principal.roles)
    matched = sorted(index.matching(index.ruled(subjects), action, resource.parts),
                     key=lambda rule: rule.line)
    deciding = index.decide(index.ruled(subjects), action, resource.parts)
    return Explanation(decide(policy, principal, action, resource), tuple(sorted(subjects)),
                       tuple(matched), deciding)


def table_rules(policy: CompiledPolicy, principal: Principal, table: Resource,
                subjects: tuple[str, ...] | None = None) -> TableRules:
    """The column and row rules that apply to ``principal`` reading ``table``."""
    if table.kind != ResourceKind.TABLE:
        raise ValueError(f"{table} is a {table.kind}, not a table")
    if subjects is None:
        subjects = subjects_of(policy, principal)
    return policy.index.reads.table_rules(subjects, table)


def read_view(policy: CompiledPolicy, principal: Principal, table: Resource,
              columns: Iterable[str], subjects: tuple[str, ...] | None = None) -> ReadView:
    """What ``principal`` may read of ``table``'s top-level ``columns``: denied columns (a deny
    of SELECT on the column, or above it), masked ones, and the row filter (the AND of every
    filter rule of every subject). SELECT on the table itself is decided apart (``decide``)."""
    return table_rules(policy, principal, table, subjects).view(columns)


def column_verdict(policy: CompiledPolicy, principal: Principal, column: Resource,
                   subjects: tuple[str, ...] | None = None) -> ColumnVerdict:
    """One column's verdict as a reader gets it: denied unless SELECT on its table is allowed
    (the deciding deny, if any, is the verdict's rule), else the column's own verdict."""
    if column.kind != ResourceKind.COLUMN or column.column is None:
        raise ValueError(f"{column} is a {column.kind}, not a column")
    if subjects is None:
        subjects = subjects_of(policy, principal)
    table = Resource(column.catalog, column.namespace, column.table)
    return table_verdicts(policy, principal, table, (column.column,), subjects)[column.column]


def table_verdicts(policy: CompiledPolicy, principal: Principal, table: Resource,
                   columns: Iterable[str],
                   subjects: tuple[str, ...] | None = None) -> dict[str, ColumnVerdict]:
    """Each column's verdict as a reader gets it (see ``column_verdict``)."""
    if subjects is None:
        subjects = subjects_of(policy, principal)
    rule = policy.index.decide(subjects, Action.SELECT, table.parts)
    if rule is None or not rule.allow:
        refused = ColumnVerdict(ColumnState.DENIED, rules=() if rule is None else (rule,),
                                table_refused=True)
        return dict.fromkeys(columns, refused)
    rules = table_rules(policy, principal, table, subjects)
    return {column: rules.verdict(column) for column in columns}


def same_restrictions(policy: CompiledPolicy, source: Resource, destination: Resource) -> bool:
    """True when every subject's column and row rules (and SELECT denies) on ``source`` are
    the same on ``destination``: renaming a table from one to the other sheds none of them
    (rules name tables, so a rename could otherwise move a table out of its restrictions)."""
    reads = policy.index.reads
    return all(_shape(reads.table_rules((s,), source)) == _shape(reads.table_rules((s,),
                                                                                   destination))
               for s in reads.subjects)


def _shape(rules: TableRules) -> tuple[object, ...]:
    """What a table's rules do, without where they were written."""
    def verdict(v: ColumnVerdict) -> tuple[object, ...]:
        return (v.state, None if v.mask is None else (v.mask.action, v.mask.value))

    named = tuple(sorted((name, verdict(v)) for name, v in rules.named.items()))
    row = None if rules.row_filter is None else rules.row_filter.text
    return (verdict(rules.default), named, row)
