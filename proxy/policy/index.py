"""The compiled policy: rules indexed by subject and by the literal start of their resource pattern.

A decision looks only at the rules of the caller's subjects (name, token roles, and every role they
hold through ``g`` lines) whose pattern could match (``proxy.policy.buckets``), so each decision
costs a handful of dictionary lookups however many rules the policy has. Column and row rules
(SELECT denies, masks, row filters) are compiled alongside into ``reads``
(``proxy.policy.views.ReadIndex``) for read views.

Semantics (the same as Casbin evaluating ``model.conf``): a deny from any subject wins; otherwise
an allow from any subject allows; otherwise the default deny. A deny also covers everything
beneath what it names (``resourceMatch`` with the effect ``deny``). The deciding rule is the first
matching deny, else the first matching allow, in file order.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator

from proxy.governance import Action
from proxy.policy.buckets import Key, bucketed
from proxy.policy.effects import Restriction
from proxy.policy.patterns import ResourcePattern, horizon, meets
from proxy.policy.rules import Grant, Rule
from proxy.policy.views import ReadIndex


class RuleIndex:
    """Rules and role grants compiled for fast decisions. Immutable once built.

    Resources are given as their segments (``Resource.parts``): the index neither knows nor needs
    whether the last segment names a table or a namespace.
    """

    def __init__(self, rules: Iterable[Rule], grants: Iterable[Grant],
                 restrictions: Iterable[Restriction] = ()) -> None:
        rules = with_denies_beneath(rules)
        self._buckets = bucketed(rules)
        self._allows = bucketed(rule for rule in rules if rule.allow)  # for can_see
        self._denies = bucketed(rule for rule in rules if not rule.allow)
        self._roles = role_closure(grants)
        self.roles = frozenset(role for held in self._roles.values() for role in held)
        """Every role a ``g`` line grants."""
        self.reads = ReadIndex((rule for rule in rules if not rule.allow), restrictions)
        """Column denies, masks and row filters, for read views."""

    def subjects(self, name: str, roles: Iterable[str] = ()) -> frozenset[str]:
        """Every subject a principal acts as: its name, its roles, and the roles those hold."""
        found = {name, *roles}
        for subject in list(found):
            found |= self._roles.get(subject, frozenset())
        return frozenset(found)

    def ruled(self, subjects: Iterable[str]) -> tuple[str, ...]:
        """The subjects that have rules (allow/deny or restrictions), in a stable order."""
        reads = self.reads.subjects
        return tuple(sorted(s for s in subjects if s in self._buckets or s in reads))

    def matching(self, subjects: Iterable[str], action: Action, parts: Key) -> Iterator[Rule]:
        """Every rule of ``subjects`` that matches ``action`` on the resource ``parts``."""
        for subject in subjects:
            bucket = self._buckets.get(subject)
            if bucket is None:
                continue
            for rule in bucket.exact.get(parts, ()):
                if action in rule.actions:
                    yield rule
            for size in range(len(parts)):
                for rule in bucket.wild.get(parts[:size], ()):
                    if action in rule.actions and rule.pattern.matches(parts):
                        yield rule

    def decide(self, subjects: Iterable[str], action: Action, parts: Key) -> Rule | None:
        """The deciding rule (a deny if any matched, else the first allow), or None."""
        allow: Rule | None = None
        deny: Rule | None = None
        for rule in self.matching(subjects, action, parts):
            if rule.allow:
                allow = rule if allow is None or rule.line < allow.line else allow
            else:
                deny = rule if deny is None or rule.line < deny.line else deny
        return deny or allow

    def can_see(self, subjects: Iterable[str], parts: Key, beneath: bool) -> bool:
        """True if some action is allowed on ``parts`` or (with ``beneath``) on a resource
        beneath it."""
        targets = [ResourcePattern(parts, False)]
        if beneath:
            targets.append(ResourcePattern(parts, True))
        denies = [rule for s in subjects if s in self._denies
                  for rule in self._denies[s].reaching(parts)]
        allows = (rule for s in subjects if s in self._allows
                  for rule in self._allows[s].reaching(parts))
        return any(_visible_through(rule, targets, denies) for rule in allows)


def with_denies_beneath(rules: Iterable[Rule]) -> list[Rule]:
    """The rules plus, for every deny on a closed pattern, that deny on everything beneath."""
    rules = list(rules)
    return rules + [b for b in (rule.beneath() for rule in rules) if b is not None]


def role_closure(grants: Iterable[Grant]) -> dict[str, frozenset[str]]:
    """For every member of a ``g`` line, all roles it holds directly or transitively."""
    direct: dict[str, set[str]] = defaultdict(set)
    for grant in grants:
        direct[grant.member].add(grant.role)
    return {member: frozenset(_reachable(member, direct)) for member in direct}


def _reachable(start: str, edges: dict[str, set[str]]) -> set[str]:
    seen: set[str] = set()
    stack = list(edges.get(start, ()))
    while stack:
        node = stack.pop()
        if node not in seen:
            seen.add(node)
            stack.extend(edges.get(node, ()))
    seen.discard(start)
    return seen


def _on_one_path(left: Key, right: Key) -> bool:
    """Cheap filter: is one literal prefix a (segment-wise) prefix of the other?"""
    short, long = sorted((left, right), key=len)
    return long[:len(short)] == short


def _visible_through(rule: Rule, targets: list[ResourcePattern],
                     denies: list[Rule]) -> bool:
    """Does ``rule`` allow some action on a target resource that no deny takes away?"""
    relevant = [d for d in denies
                if d.actions & rule.actions and _on_one_path(d.pattern.prefix, rule.pattern.prefix)]
    limit = horizon(rule.pattern, *targets, *(d.pattern for d in relevant))
    blockings = {frozenset(d.pattern for d in relevant if action in d.actions)
                 for action in rule.actions}
    return any(not any(block.matches(parts) for block in blocking)
               for blocking in blockings
               for target in targets
               for parts in meets(rule.pattern, target, limit))
