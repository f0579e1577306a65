"""Policy test cases (``icegov policy test FILE``): expected decisions, written in YAML.

A case file is a YAML list; each case is a mapping::

    - name: writers append to the demo tables      # optional, shown on failure
      principal: writer
      roles: [writer]                              # optional: roles the caller's token carries
      action: INSERT                               # one action (not a group, not "*")
      resource: icegov.demo.events                 # the text form: icegov."demo.priv".t
      expect: allow                                # allow | deny

    - name: the analyst does not see the payroll table
      principal: analyst
      roles: [analyst]
      table: icegov.sales.payroll                  # catalog: | namespace: | table: | column:
      expect: hidden                               # visible | hidden (no action)

``resource`` is a catalog (one segment), a namespace (two) or a table (three or more); the typed
keys say the kind where it matters, which it does for ``visible``/``hidden`` (a table is visible
only through rights on itself, a namespace also through rights on anything beneath it), so those
cases must use a typed key.

Read cases (a ``table:`` with a mapping ``expect`` of column verdicts and row filter, or a
``column:`` with ``expect: readable | denied | mask:…``) are described in
``proxy.policy.read_cases``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

from proxy.governance import Action, Principal
from proxy.policy.decisions import can_see, decide
from proxy.policy.loader import CompiledPolicy
from proxy.policy.patterns import PatternError, resource_from_text
from proxy.policy.read_cases import (
    ReadCaseError,
    ReadExpectation,
    column_expectation,
    is_column_verdict,
    read_mismatches,
    table_expectation,
)
from proxy.resources import Resource, ResourceKind

RESOURCE_KEYS: dict[str, ResourceKind | None] = {
    "resource": None, "catalog": ResourceKind.CATALOG, "namespace": ResourceKind.NAMESPACE,
    "table": ResourceKind.TABLE, "column": ResourceKind.COLUMN}
DECISIONS = ("allow", "deny")
VISIBILITIES = ("visible", "hidden")
REQUIRED = frozenset({"principal", "expect"})
OPTIONAL = frozenset({"name", "roles", "action"}) | RESOURCE_KEYS.keys()


class CaseError(ValueError):
    """A case file that is not a list of well-formed cases."""


@dataclass(frozen=True)
class Case:
    """One expected decision (``action`` set) or visibility (``action`` None)."""

    number: int  # 1-based position in the file
    name: str | None
    principal: Principal
    action: Action | None
    resource: Resource
    expect: str  # allow | deny | visible | hidden | reads
    reads: ReadExpectation | None = None  # column verdicts and row filter (expect "reads")

    def describe(self) -> str:
        """The case in one line, e.g. ``#3 writer [writer] INSERT icegov.demo.events``."""
        roles = f" [{', '.join(self.principal.roles)}]" if self.principal.roles else ""
        label = f" ({self.name})" if self.name else ""
        what = self.action or ("READS" if self.reads else f"SEES {self.resource.kind}")
        return f"#{self.number}{label} {self.principal.name}{roles} {what} {self.resource}"


@dataclass(frozen=True)
class Failure:
    """A case whose outcome was not the expected one."""

    case: Case
    got: str
    why: str | None = None  # the deciding rule, for decisions

    def __str__(self) -> str:
        if self.case.reads is not None:
            return f"{self.case.describe()}: {self.got}"
        because = f" ({self.why})" if self.why else ""
        return f"{self.case.describe()}: expected {self.case.expect}, got {self.got}{because}"


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
    if isinstance(item["expect"], dict) or is_column_verdict(item["expect"]):
        return _read_case(number, item, principal, name)
    expect = _expect(number, item["expect"])
    action = _case_action(number, item, expect)
    return Case(number, name, principal, action, _resource(number, item, expect), expect)


def _read_case(number: int, item: dict[Any, Any], principal: Principal,
               name: str | None) -> Case:
    """A case expecting column verdicts (``table:`` + mapping, or ``column:`` + verdict)."""
    key = "table" if isinstance(item["expect"], dict) else "column"
    if "action" in item:
        raise CaseError(f"case #{number}: a read case names no action (it is about SELECT)")
    if key not in item or len([k for k in RESOURCE_KEYS if k in item]) != 1:
        shape = "a mapping" if key == "table" else "a column verdict"
        raise CaseError(f"case #{number}: an expect of {shape} needs exactly one resource "
                        f"key, {key}:")
    resource = _resource(number, item, "reads")
    try:
        reads = table_expectation(item["expect"]) if key == "table" else \
            column_expectation(resource.column or "", item["expect"])
    except ReadCaseError as exc:
        raise CaseError(f"case #{number}: {exc}") from None
    return Case(number, name, principal, None, resource, "reads", reads)


def _case_action(number: int, item: dict[Any, Any], expect: str) -> Action | None:
    if expect in VISIBILITIES:
        if "action" in item:
            raise CaseError(f"case #{number}: a {expect} case names no action (it asks whether "
                            "the principal holds any right)")
        return None
    if "action" not in item:
        raise CaseError(f"case #{number}: missing action")
    return _action(number, item["action"])


def _resource(number: int, item: dict[Any, Any], expect: str) -> Resource:
    given = [key for key in RESOURCE_KEYS if key in item]
    if len(given) != 1:
        raise CaseError(f"case #{number}: name the resource with exactly one of "
                        f"{', '.join(RESOURCE_KEYS)}")
    key = given[0]
    if key == "resource" and expect in VISIBILITIES:
        raise CaseError(f"case #{number}: a {expect} case says what it looks at: use catalog:, "
                        "namespace:, table: or column: instead of resource:")
    try:
        return resource_from_text(_text(number, key, item[key]), RESOURCE_KEYS[key])
    except PatternError as exc:
        raise CaseError(f"case #{number}: {exc}") from None


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


def _expect(number: int, value: Any) -> str:
    if value not in (*DECISIONS, *VISIBILITIES):
        raise CaseError(f"case #{number}: expect must be 'allow', 'deny', 'visible', "
                        f"'hidden', a column verdict (readable, denied, mask:<action>) or a "
                        f"mapping of columns and row-filter, got {value!r}")
    return str(value)


def run_cases(policy: CompiledPolicy, cases: list[Case]) -> list[Failure]:
    """The cases whose outcome differs from the expectation."""
    failures = [_failure(policy, case) for case in cases]
    return [failure for failure in failures if failure is not None]


def _failure(policy: CompiledPolicy, case: Case) -> Failure | None:
    if case.reads is not None:
        found = read_mismatches(policy, case.principal, case.resource, case.reads)
        return Failure(case, "; ".join(found)) if found else None
    if case.action is None:
        got = "visible" if can_see(policy, case.principal, case.resource) else "hidden"
        return None if got == case.expect else Failure(case, got)
    decision = decide(policy, case.principal, case.action, case.resource)
    got = "allow" if decision.allowed else "deny"
    why = decision.rule or "no rule matched: default deny"
    return None if got == case.expect else Failure(case, got, why)
