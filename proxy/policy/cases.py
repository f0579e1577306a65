"""Policy test cases (``icegov policy test FILE``): expected decisions, written in YAML.

A case file is a YAML list; each case is a mapping::

    - name: writers append to the demo tables      # optional, shown on failure
      principal: writer
      roles: [writer]                              # optional: roles the caller's token carries
      action: INSERT                               # one action (not a group, not "*")
      resource: icegov.demo.events
      expect: allow                                # allow | deny
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

from proxy.governance import Action, Decision, Principal
from proxy.policy.decisions import decide
from proxy.policy.loader import CompiledPolicy

REQUIRED = frozenset({"principal", "action", "resource", "expect"})
OPTIONAL = frozenset({"name", "roles"})


class CaseError(ValueError):
    """A case file that is not a list of well-formed cases."""


@dataclass(frozen=True)
class Case:
    """One expected decision."""

    number: int  # 1-based position in the file
    name: str | None
    principal: Principal
    action: Action
    resource: str
    expect_allow: bool

    def describe(self) -> str:
        """The case in one line, e.g. ``#3 writer [writer] INSERT icegov.demo.events``."""
        roles = f" [{', '.join(self.principal.roles)}]" if self.principal.roles else ""
        label = f" ({self.name})" if self.name else ""
        return f"#{self.number}{label} {self.principal.name}{roles} {self.action} {self.resource}"


@dataclass(frozen=True)
class Failure:
    """A case whose decision was not the expected one."""

    case: Case
    decision: Decision

    def __str__(self) -> str:
        want = "allow" if self.case.expect_allow else "deny"
        got = "allow" if self.decision.allowed else "deny"
        why = self.decision.rule or "no rule matched: default deny"
        return f"{self.case.describe()}: expected {want}, got {got} ({why})"


def parse_cases(text: str) -> list[Case]:
    """Cases from YAML text; raises ``CaseError`` naming the first bad case."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise CaseError(f"not valid YAML: {exc}") from None
    if not isinstance(data, list) or not data:
        raise CaseError("expected a non-empty YAML list of cases")
    return [_case(number, item) for number, item in enumerate(data, start=1)]


def _case(number: int, item: Any) -> Case:
    if not isinstance(item, dict):
        raise CaseError(f"case #{number}: expected a mapping, got {type(item).__name__}")
    keys = set(item)
    if missing := REQUIRED - keys:
        raise CaseError(f"case #{number}: missing {', '.join(sorted(missing))}")
    if unknown := keys - REQUIRED - OPTIONAL:
        raise CaseError(f"case #{number}: unknown key(s) {', '.join(sorted(map(str, unknown)))}")
    principal = Principal(_text(number, "principal", item["principal"]),
                          tuple(_roles(number, item.get("roles", []))))
    name = None if item.get("name") is None else str(item["name"])
    return Case(number, name, principal, _action(number, item["action"]),
                _text(number, "resource", item["resource"]), _expect(number, item["expect"]))


def _text(number: int, key: str, value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise CaseError(f"case #{number}: {key} must be a non-empty string")
    return value


def _roles(number: int, value: Any) -> list[str]:
    if not isinstance(value, list):
        raise CaseError(f"case #{number}: roles must be a list of strings")
    return [_text(number, "roles", role) for role in value]


def _action(number: int, value: Any) -> Action:
    try:
        return Action(value)
    except ValueError:
        raise CaseError(f"case #{number}: unknown action {value!r} (a case names one action: "
                        f"{', '.join(Action)})") from None


def _expect(number: int, value: Any) -> bool:
    if value not in ("allow", "deny"):
        raise CaseError(f"case #{number}: expect must be 'allow' or 'deny', got {value!r}")
    return bool(value == "allow")


def run_cases(policy: CompiledPolicy, cases: list[Case]) -> list[Failure]:
    """The cases whose decision differs from the expectation."""
    failures = []
    for case in cases:
        decision = decide(policy, case.principal, case.action, case.resource)
        if decision.allowed != case.expect_allow:
            failures.append(Failure(case, decision))
    return failures
