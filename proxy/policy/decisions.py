"""Deciding with a compiled policy: pure functions, no caching (the authorizer adds that)."""

from __future__ import annotations

from dataclasses import dataclass

from proxy.governance import Action, Decision, Principal
from proxy.policy.loader import CompiledPolicy
from proxy.policy.rules import Rule
from proxy.resources import Resource, ResourceKind


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
                    rule=None if rule is None else rule.text)


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
