"""Read cases for ``icegov policy test``: expected column verdicts and row filters.

Two shapes (next to the decision and visibility cases of ``proxy.policy.cases``)::

    - name: the analyst reads customers without ssn, email masked
      principal: analyst
      roles: [analyst]
      table: icegov.demo.customers
      expect:
        columns: {id: readable, ssn: denied, email: "mask:show-last-4"}
        row-filter: none                 # or the expected expression: region = 'eu'

    - principal: analyst
      roles: [analyst]
      column: icegov.demo.customers.ssn
      expect: denied                     # readable | denied | mask:<action>[:<value>]

A column is readable when SELECT on its table is allowed and no deny matches it; the row filter
is compared as an expression (``a = 1 and b = 2`` equals ``(a = 1) AND (b = 2)``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from proxy.governance import Principal
from proxy.policy.decisions import read_view, table_verdicts
from proxy.policy.effects import MASK_PREFIX, mask_from_effect, parse_row_filter
from proxy.policy.loader import CompiledPolicy
from proxy.policy.views import ColumnState, ColumnVerdict
from proxy.resources import Resource

VERDICTS = tuple(state.value for state in ColumnState if state != ColumnState.MASKED)
NO_FILTER = "none"
READ_KEYS = frozenset({"columns", "row-filter"})


class ReadCaseError(ValueError):
    """An expectation that is not well formed (the caller adds the case number)."""


@dataclass(frozen=True)
class ReadExpectation:
    """Expected verdicts of some columns and, optionally, the expected row filter."""

    columns: tuple[tuple[str, str], ...] = ()  # (column, readable | denied | mask:…)
    row_filter: str | None = None  # the expected expression text; None: no filter
    checks_filter: bool = False


def is_column_verdict(value: Any) -> bool:
    """True for ``readable``, ``denied`` and ``mask:…`` expectations."""
    return isinstance(value, str) and (value in VERDICTS or value.startswith(MASK_PREFIX))


def column_expectation(column: str, value: str) -> ReadExpectation:
    """The expectation of a ``column:`` case."""
    return ReadExpectation(((column, _verdict(column, value)),))


def table_expectation(value: Mapping[Any, Any]) -> ReadExpectation:
    """The expectation of a ``table:`` case whose ``expect`` is a mapping."""
    if not value or set(value) - READ_KEYS:
        raise ReadCaseError("a read expectation is a mapping with 'columns' and/or "
                            "'row-filter'")
    columns = value.get("columns", {})
    if not isinstance(columns, dict):
        raise ReadCaseError("'columns' maps column names to readable, denied or mask:<action>")
    pairs = tuple((str(name), _verdict(str(name), verdict)) for name, verdict in columns.items())
    if "row-filter" not in value:
        return ReadExpectation(pairs)
    expected = value["row-filter"]
    if expected is None or expected == NO_FILTER:
        return ReadExpectation(pairs, None, True)
    if not isinstance(expected, str):
        raise ReadCaseError("'row-filter' is an expression or 'none'")
    try:
        parse_row_filter(expected)
    except ValueError as exc:
        raise ReadCaseError(str(exc)) from None
    return ReadExpectation(pairs, expected, True)


def _verdict(column: str, value: Any) -> str:
    if not is_column_verdict(value):
        raise ReadCaseError(f"column {column}: expected readable, denied or mask:<action>, "
                            f"got {value!r}")
    if value.startswith(MASK_PREFIX):
        try:
            mask = mask_from_effect(value)
        except ValueError as exc:
            raise ReadCaseError(f"column {column}: {exc}") from None
        return ColumnVerdict(ColumnState.MASKED, mask).text  # canonical: no stray spaces
    return str(value)


def read_mismatches(policy: CompiledPolicy, principal: Principal, resource: Resource,
                    expected: ReadExpectation) -> list[str]:
    """What differs from the expectation, one message per column or filter."""
    table = Resource(resource.catalog, resource.namespace, resource.table)
    names = [name for name, _ in expected.columns]
    verdicts = table_verdicts(policy, principal, table, names)
    found = []
    for name, want in expected.columns:
        got = verdicts[name]
        if got.text != want:
            lines = ", ".join(f"line {rule.line}" for rule in got.rules)
            by = f" by {lines}" if lines else ""
            found.append(f"column {name}: expected {want}, got {got.reason}{by}")
    if expected.checks_filter:
        found += _filter_mismatch(read_view(policy, principal, table, ()).row_filter,
                                  expected.row_filter)
    return found


def _filter_mismatch(row_filter: Any, expected: str | None) -> list[str]:
    got = NO_FILTER if row_filter is None else row_filter.text
    if expected is None:
        return [] if row_filter is None else [f"row filter: expected none, got {got}"]
    if row_filter is not None and row_filter.expression == parse_row_filter(expected):
        return []
    return [f"row filter: expected {expected}, got {got}"]
