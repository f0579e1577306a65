"""``icegov policy who-can``: every principal and role that may do one action on one resource.

Answers come from the compiled policy's own decisions (``proxy.policy.decisions``): each
candidate is decided exactly as a request would be, so who-can never disagrees with the proxy.
Candidates are the principals of the principals file (their name and roles) and every role or
subject the policy names (decided as a caller holding just that role). For SELECT on a table the
read restrictions that narrow the answer (column denies, masks, the row filter) come with it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from proxy.governance import Action, Principal
from proxy.policy.decisions import decide, subjects_of, table_rules
from proxy.policy.loader import CompiledPolicy
from proxy.policy.views import ColumnRule
from proxy.resources import Resource, ResourceKind


@dataclass(frozen=True)
class Candidate:
    """Someone who-can asks about: a principal of the principals file, or a role."""

    principal: Principal
    kind: str  # "principal" | "role"


@dataclass(frozen=True)
class Answer:
    """One candidate that may do the action, the rule that allows it, and read restrictions."""

    candidate: Candidate
    rule: str  # the deciding allow line, canonical text
    line: int
    restrictions: tuple[ColumnRule, ...] = ()  # column denies, masks, row filters (SELECT)
    row_filter: str | None = None  # the AND of every filter that applies


def candidates(policy: CompiledPolicy,
               principals: Mapping[str, Sequence[str]]) -> list[Candidate]:
    """The principals (name -> token roles), then every role and rule subject of the policy."""
    found = [Candidate(Principal(name, tuple(roles)), "principal")
             for name, roles in sorted(principals.items())]
    parsed = policy.parsed
    names = {g.role for g in parsed.grants} | {g.member for g in parsed.grants}
    names |= {r.subject for r in parsed.rules} | {r.subject for r in parsed.restrictions}
    found += [Candidate(Principal(name, ()), "role") for name in sorted(names - principals.keys())]
    return found


def merged(*groups: list[Candidate]) -> list[Candidate]:
    """Candidates by name, in first-seen order: a principal (with its roles) wins over a role
    of the same name."""
    by_name: dict[str, Candidate] = {}
    for group in groups:
        for candidate in group:
            known = by_name.get(candidate.principal.name)
            if known is None or candidate.kind == "principal":
                by_name[candidate.principal.name] = candidate
    return list(by_name.values())


def who_can(policy: CompiledPolicy, action: Action, resource: Resource,
            among: Iterable[Candidate]) -> list[Answer]:
    """Every candidate the policy allows ``action`` on ``resource``, with why."""
    answers = []
    for candidate in among:
        subjects = subjects_of(policy, candidate.principal)
        decision = decide(policy, candidate.principal, action, resource, subjects)
        if not decision.allowed:
            continue
        deciding = policy.index.decide(subjects, action, resource.parts)
        assert deciding is not None  # an allowed decision has its allow
        answers.append(_answer(policy, candidate, action, resource, subjects,
                               deciding.text, deciding.line))
    return answers


def _answer(policy: CompiledPolicy, candidate: Candidate, action: Action, resource: Resource,
            subjects: tuple[str, ...], rule: str, line: int) -> Answer:
    if action != Action.SELECT or resource.kind != ResourceKind.TABLE:
        return Answer(candidate, rule, line)
    rules = table_rules(policy, candidate.principal, resource, subjects)
    row = None if rules.row_filter is None else rules.row_filter.text
    return Answer(candidate, rule, line, tuple(rules.rules), row)


def answer_lines(answers: Sequence[Answer], action: Action, resource: Resource,
                 source: str) -> list[str]:
    """What who-can prints: one block per candidate allowed."""
    if not answers:
        return [f"nobody may {action} on {resource}"]
    lines = [f"{len(answers)} may {action} on {resource}:"]
    for answer in answers:
        who = answer.candidate.principal
        roles = f" (roles: {', '.join(who.roles)})" if who.roles else ""
        lines.append(f"  {answer.candidate.kind} {who.name}{roles}")
        lines.append(f"    allowed by: {source}:{answer.line}: {answer.rule}")
        if answer.row_filter is not None:
            lines.append(f"    row filter: {answer.row_filter}")
        lines += [f"    restricted: {source}:{rule.line}: {rule.text}"
                  for rule in answer.restrictions]
    return lines
