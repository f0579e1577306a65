"""``icegov policy diff``: the (who, action, resource) grants a policy gains or loses.

Both policies decide with their own compiled index (``RuleIndex.decide``), so the diff is exactly
what the proxy would decide before and after. Only what a change can touch is decided again:

* a rule added or removed (subject ``s``): every candidate acting as ``s`` in either policy, on
  every resource the policies name that the rule's pattern matches (a deny: or lies beneath);
* a role grant added or removed (``m`` holds ``r``): every candidate acting as ``m``, on every
  resource named by a rule of ``r`` or a role ``r`` holds.

Resources are those the rules name, a wildcard standing for a name no rule mentions (shown as
``*``): deciding one such representative is deciding every resource it stands for.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, fields
from operator import attrgetter

from proxy.governance import Action
from proxy.policy.effects import Restriction
from proxy.policy.loader import CompiledPolicy
from proxy.policy.patterns import FRESH, ResourcePattern
from proxy.policy.rules import Grant, Rule
from proxy.policy.whocan import Candidate
from proxy.resources import format_segment

Parts = tuple[str, ...]


@dataclass(frozen=True, order=True)
class GrantChange:
    """One grant gained (``gained``) or lost, with the lines that decide before and after."""

    who: str
    kind: str  # "principal" | "role"
    action: str
    resource: str  # text form; "*" a name no rule mentions
    gained: bool
    old_rule: str | None
    new_rule: str | None


@dataclass(frozen=True)
class PolicyDiff:
    """The grants gained and lost, the lines that changed, and the subjects they touch."""

    changes: tuple[GrantChange, ...]
    lines_added: tuple[str, ...]
    lines_removed: tuple[str, ...]
    touched: frozenset[str]  # the subjects of changed lines (rules, grants, restrictions)

    @property
    def gained(self) -> list[GrantChange]:
        return [c for c in self.changes if c.gained]

    @property
    def lost(self) -> list[GrantChange]:
        return [c for c in self.changes if not c.gained]


def resource_text(parts: Parts) -> str:
    """A resource's text form; a representative's fresh segment shows as ``*``."""
    return ".".join("*" if p == FRESH else format_segment(p) for p in parts)


def representative(pattern: ResourcePattern) -> Parts:
    """One resource the pattern matches, a fresh name for each wildcard."""
    return tuple(FRESH if s is None else s for s in pattern.segments) + (FRESH,) * pattern.open


def diff_policies(old: CompiledPolicy, new: CompiledPolicy,
                  among: Iterable[Candidate]) -> PolicyDiff:
    """Every grant of ``among`` that ``new`` decides differently from ``old``."""
    old_lines, new_lines = _lines(old), _lines(new)
    added, removed = new_lines.keys() - old_lines.keys(), old_lines.keys() - new_lines.keys()
    changed = _changed(old, new)
    touched = frozenset(_subject(item) for item in changed)
    universe = _Universe(old, new)
    people = list(among)
    acting_as: dict[str, list[int]] = defaultdict(list)
    for number, candidate in enumerate(people):
        for subject in _acting(old, candidate) | _acting(new, candidate):
            acting_as[subject].append(number)
    checks: dict[tuple[int, Parts], set[Action]] = defaultdict(set)
    for item in changed:
        affected = acting_as.get(_subject(item), ())
        if affected:
            for parts, actions in universe.reached_by(item, old, new):
                for number in affected:
                    checks[(number, parts)] |= actions
    changes = sorted(_without_beneath(list(_decided_apart(old, new, people, checks))),
                     key=_FIELDS)  # the dataclass order, compared in C
    return PolicyDiff(tuple(changes), tuple(sorted(new_lines[k].text for k in added)),
                      tuple(sorted(old_lines[k].text for k in removed)), touched)


def changed_subjects(old: CompiledPolicy, new: CompiledPolicy) -> frozenset[str]:
    """The subjects of the lines one policy has and the other has not (``PolicyDiff.touched``,
    without deciding anything)."""
    return frozenset(_subject(item) for item in _changed(old, new))


Line = Rule | Grant | Restriction
_FIELDS = attrgetter(*(f.name for f in fields(GrantChange)))


def _changed(old: CompiledPolicy, new: CompiledPolicy) -> list[Line]:
    """The lines added (first) and removed."""
    old_lines, new_lines = _lines(old), _lines(new)
    added, removed = new_lines.keys() - old_lines.keys(), old_lines.keys() - new_lines.keys()
    return [new_lines[k] for k in added] + [old_lines[k] for k in removed]


def _lines(policy: CompiledPolicy) -> dict[str, Line]:
    """Every line by its canonical text (restrictions included: they change reads)."""
    parsed = policy.parsed
    items: list[Line] = [*parsed.rules, *parsed.grants, *parsed.restrictions]
    return {item.text: item for item in items}


def _subject(item: Line) -> str:
    return item.member if isinstance(item, Grant) else item.subject


def _acting(policy: CompiledPolicy, candidate: Candidate) -> frozenset[str]:
    who = candidate.principal
    return policy.index.subjects(who.name, who.roles)


class _Universe:
    """The resources both policies name (representatives), found by literal prefix."""

    def __init__(self, *policies: CompiledPolicy) -> None:
        self.by_prefix: dict[Parts, set[Parts]] = defaultdict(set)
        for policy in policies:
            for rule in policy.parsed.rules:
                self._add(representative(rule.pattern))
                if not rule.allow:
                    self._add((*representative(rule.pattern), FRESH))
            for restriction in policy.parsed.restrictions:
                self._add(representative(restriction.pattern))

    def _add(self, parts: Parts) -> None:
        for size in range(len(parts) + 1):
            self.by_prefix[parts[:size]].add(parts)

    def reached_by(self, item: Line, *policies: CompiledPolicy
                   ) -> Iterator[tuple[Parts, frozenset[Action]]]:
        """The resources (and actions) a changed line can change a decision on."""
        if isinstance(item, Rule):
            pattern = item.pattern
            for parts in self.by_prefix.get(pattern.prefix, ()):
                if pattern.matches(parts) or (not item.allow and any(
                        pattern.matches(parts[:n]) for n in range(1, len(parts)))):
                    yield parts, item.actions
        elif isinstance(item, Grant):
            roles = {item.role}
            for policy in policies:
                roles |= policy.index.subjects(item.role)
            for policy in policies:
                for rule in policy.parsed.rules:
                    if rule.subject in roles:
                        yield from self.reached_by(rule)


def _decided_apart(old: CompiledPolicy, new: CompiledPolicy, people: list[Candidate],
                   checks: dict[tuple[int, Parts], set[Action]]
                   ) -> Iterator[tuple[Parts, GrantChange]]:
    subjects: dict[int, tuple[tuple[str, ...], tuple[str, ...]]] = {}
    old_decide, new_decide = old.index.decide, new.index.decide
    for (number, parts), actions in checks.items():
        if number not in subjects:
            who = people[number].principal
            subjects[number] = (old.index.ruled(old.index.subjects(who.name, who.roles)),
                                new.index.ruled(new.index.subjects(who.name, who.roles)))
        before_subjects, after_subjects = subjects[number]
        for action in actions:
            before = old_decide(before_subjects, action, parts)
            after = new_decide(after_subjects, action, parts)
            if _allows(before) != _allows(after):
                candidate = people[number]
                yield parts, GrantChange(candidate.principal.name, candidate.kind, str(action),
                                         resource_text(parts), _allows(after), _text(before),
                                         _text(after))


def _without_beneath(found: list[tuple[Parts, GrantChange]]) -> Iterator[GrantChange]:
    """The changes, less those beneath a resource that changes the same way by the same
    lines (denying ``t`` also denies its columns: ``t`` is reported, not each column)."""
    same = {(c.who, c.action, c.gained, c.old_rule, c.new_rule, parts) for parts, c in found}
    for parts, change in found:
        key = (change.who, change.action, change.gained, change.old_rule, change.new_rule)
        if not any((*key, parts[:n]) in same for n in range(1, len(parts))):
            yield change


def _allows(rule: Rule | None) -> bool:
    return rule is not None and rule.allow


def _text(rule: Rule | None) -> str | None:
    return None if rule is None else rule.text
