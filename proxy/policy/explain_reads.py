"""``icegov policy explain`` for reads: a table's row filter and column verdicts, a column's
verdict. A column is read when SELECT on its table is allowed and no deny matches the column;
a mask narrows what is returned; two different masks deny the column (fail closed)."""

from __future__ import annotations

from collections.abc import Sequence

from proxy.governance import Principal
from proxy.policy.decisions import column_verdict, table_rules, table_verdicts
from proxy.policy.loader import CompiledPolicy
from proxy.policy.views import ColumnRule, ColumnVerdict
from proxy.resources import Resource, ResourceKind


def read_lines(policy: CompiledPolicy, principal: Principal, resource: Resource,
               columns: Sequence[str], source: str) -> list[str]:
    """The lines explain prints after a SELECT decision (none for catalogs and namespaces)."""
    if resource.kind == ResourceKind.COLUMN:
        verdict = column_verdict(policy, principal, resource)
        return [f"  column:     {verdict.reason}", *_rule_lines(verdict.rules, source)]
    if resource.kind != ResourceKind.TABLE:
        return []
    rules = table_rules(policy, principal, resource)
    lines = [f"  row filter: {'none' if rules.row_filter is None else rules.row_filter.text}"]
    lines += _rule_lines(rules.filter_rules, source)
    if columns:
        verdicts = table_verdicts(policy, principal, resource, columns)
        lines.append("  columns:")
        width = max(len(name) for name in columns)
        for name in columns:
            lines += _column_lines(name, verdicts[name], width, source)
        return lines
    column_rules = [rule for rule in rules.rules if rule not in rules.filter_rules]
    if column_rules:
        lines.append("  column rules (--columns a,b,c shows each column's verdict):")
        lines += _rule_lines(column_rules, source)
    else:
        lines.append("  columns:    no column rule applies: every column is readable")
    return lines


def _column_lines(name: str, verdict: ColumnVerdict, width: int, source: str) -> list[str]:
    head = f"    {name.ljust(width)}  {verdict.reason}"
    return [head, *(f"    {'':{width}}    {source}:{rule.line}: {rule.text}"
                    for rule in verdict.rules)]


def _rule_lines(rules: Sequence[ColumnRule], source: str) -> list[str]:
    return [f"              {source}:{rule.line}: {rule.text}" for rule in rules]
