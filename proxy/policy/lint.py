"""``icegov policy check``: errors that stop a policy from loading, and warnings about dead rules.

Warnings are for lines that load but cannot do what their author meant:

* a duplicate of an earlier line;
* an allow that never takes effect, because a deny of the same subject (or of a role that subject
  always holds through ``g`` lines) covers every action and resource it allows;
* a deny that overrides nothing: no rule anywhere allows anything it denies (a deny of SELECT
  on a column counts as overriding the SELECT allowed on its table);
* a ``g`` line granting a role that has no rules (directly or through roles it holds);
* a ``g`` line whose member and role are the same name (names and roles share one namespace,
  so it does nothing), and role grants that form a cycle;
* masks and row filters that misfire (``proxy.policy.lint_restrictions``).
"""

from __future__ import annotations

from collections.abc import Iterator

from proxy.governance import Action
from proxy.policy.effects import Restriction
from proxy.policy.index import role_closure
from proxy.policy.lint_restrictions import restriction_warnings
from proxy.policy.loader import PolicyFiles
from proxy.policy.model import check_model
from proxy.policy.patterns import ResourcePattern, horizon, meets
from proxy.policy.rules import Grant, ParsedPolicy, Problem, Rule, parse_policy


def check(files: PolicyFiles) -> list[Problem]:
    """Every error and warning for a pair of policy files, errors first, each in line order."""
    problems = check_model(files.model_text, str(files.model_path))
    parsed = parse_policy(files.policy_text, str(files.policy_path))
    problems += parsed.problems
    problems += lint(parsed, str(files.policy_path))
    return sorted(problems, key=lambda p: (p.severity != "error", p.line or 0))


def lint(parsed: ParsedPolicy, source: str) -> list[Problem]:
    """Warnings about rules and grants that load but have no effect."""
    checks = (_duplicates, _shadowed_allows, _idle_denies, _grant_warnings,
              restriction_warnings)
    return [Problem(source, line, message, "warning")
            for check in checks for line, message in check(parsed)]


def _duplicates(parsed: ParsedPolicy) -> Iterator[tuple[int, str]]:
    first: dict[str, int] = {}
    items: list[Rule | Grant | Restriction] = [*parsed.rules, *parsed.grants,
                                               *parsed.restrictions]
    for item in items:
        seen = first.setdefault(item.text, item.line)
        if seen != item.line:
            yield item.line, f"duplicate of line {seen}"


def _shadowed_allows(parsed: ParsedPolicy) -> Iterator[tuple[int, str]]:
    closure = role_closure(parsed.grants)
    denies = [rule for rule in parsed.rules if not rule.allow]
    for allow in (rule for rule in parsed.rules if rule.allow):
        holders = {allow.subject, *closure.get(allow.subject, ())}
        for deny in denies:
            if deny.subject in holders and _covers(deny, allow):
                yield allow.line, (f"never takes effect: the deny on line {deny.line} "
                                   f"({deny.text}) covers everything it allows")
                break


def _idle_denies(parsed: ParsedPolicy) -> Iterator[tuple[int, str]]:
    allows = [rule for rule in parsed.rules if rule.allow]
    for deny in (rule for rule in parsed.rules if not rule.allow):
        if not any(_overlap(deny, allow) or _denies_a_column(deny, allow) for allow in allows):
            yield deny.line, "overrides nothing: no rule allows any action it denies, " \
                             "so it has no effect (everything not allowed is denied anyway)"


def _grant_warnings(parsed: ParsedPolicy) -> Iterator[tuple[int, str]]:
    closure = role_closure(parsed.grants)
    subjects = {rule.subject for rule in parsed.rules}
    for grant in parsed.grants:
        yield from _grant_warning(grant, closure, subjects)


def _grant_warning(grant: Grant, closure: dict[str, frozenset[str]],
                   subjects: set[str]) -> Iterator[tuple[int, str]]:
    if grant.member == grant.role:
        yield grant.line, (f"has no effect: '{grant.member}' already gets the rules of subject "
                           f"'{grant.role}' (principal names and roles share one namespace)")
    elif grant.member in closure.get(grant.role, ()):
        yield grant.line, f"role cycle: '{grant.role}' already holds '{grant.member}'"
    if not ({grant.role} | closure.get(grant.role, frozenset())) & subjects:
        yield grant.line, f"role '{grant.role}' has no rules: this grant gives nothing"


def _covers(deny: Rule, allow: Rule) -> bool:
    """Does ``deny`` match every (action, resource) that ``allow`` matches?"""
    if not allow.actions <= deny.actions:
        return False
    limit = horizon(allow.pattern, deny.pattern)
    return all(deny.pattern.matches(parts) for parts in _instances(allow.pattern, limit))


def _overlap(deny: Rule, allow: Rule) -> bool:
    """Is there an (action, resource) that both rules match?"""
    if not deny.actions & allow.actions:
        return False
    limit = horizon(allow.pattern, deny.pattern)
    return any(True for _ in meets(deny.pattern, allow.pattern, limit))


def _denies_a_column(deny: Rule, allow: Rule) -> bool:
    """Does ``deny`` take a column away from a SELECT that ``allow`` grants on its table? (A
    column is read when SELECT on the table is allowed and no deny matches the column.)"""
    if Action.SELECT not in deny.actions & allow.actions:
        return False
    if deny.pattern.open or len(deny.pattern.segments) < 4:
        return False
    table = ResourcePattern(deny.pattern.segments[:-1], False)
    limit = horizon(allow.pattern, table)
    return any(True for _ in meets(table, allow.pattern, limit))


def _instances(pattern: ResourcePattern, limit: int) -> Iterator[tuple[str, ...]]:
    """One representative resource per length that ``pattern`` matches (see ``meets``)."""
    return meets(pattern, pattern, limit)
