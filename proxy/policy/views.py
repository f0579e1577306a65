"""Column and row rules compiled for fast read views (``ReadView``, ``proxy.restrictions``).

A column is a resource one segment below its table. For one principal's subjects and one table,
``ReadIndex.table_rules`` gathers once the rules that can touch the table's columns or rows:

* SELECT **denies** matching the column (``resourceMatch`` with the effect ``deny``: a deny on
  the table, or on anything above it, covers every column) -> the column is denied;
* **masks** matching the column (allow-style matching: what the pattern names) -> masked; two
  different masks -> denied (fail closed); a deny wins over any mask;
* **row filters** matching the table -> ANDed, whichever subjects they come from.

Rules whose pattern matches *any* column name (a wildcard in the column position, or an open
pattern above it) give the verdict of every column; rules naming a column literally refine it
for that name. So a view of 200 columns costs one dictionary lookup per column once the table's
rules are gathered, and an unrestricted table returns at once.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType

from pyiceberg.expressions import And, BooleanExpression

from proxy.governance import Action
from proxy.policy.buckets import Bucket, Key, bucketed
from proxy.policy.effects import Restriction
from proxy.policy.patterns import FRESH
from proxy.policy.rules import Rule
from proxy.resources import Resource
from proxy.restrictions import Mask, ReadView, RowFilter, unrestricted

ColumnRule = Rule | Restriction
"""A rule that can restrict a column: a deny covering SELECT, or a mask."""
Lines = tuple[tuple[int, str], ...]
"""(line number, canonical text) of some rules, for ``ReadView.rules``."""
_MAX_COMBINATIONS = 4096


class ColumnState(StrEnum):
    """What a principal gets of one column (given SELECT on its table)."""

    READABLE = "readable"
    MASKED = "masked"
    DENIED = "denied"


@dataclass(frozen=True, slots=True)
class ColumnVerdict:
    """One column's verdict and the lines behind it (file order)."""

    state: ColumnState
    mask: Mask | None = None
    rules: tuple[ColumnRule, ...] = ()
    conflict: bool = False  # denied because two different masks apply
    table_refused: bool = False  # denied because SELECT on the table is not allowed
    lines: Lines = ()  # (line, text) of ``rules``, computed once

    @property
    def text(self) -> str:
        """``readable``, ``denied`` or the mask as a rule writes it (``mask:show-last-4``)."""
        if self.mask is None:
            return self.state.value
        value = "" if self.mask.value is None else ":" + self.mask.value
        return f"mask:{self.mask.action.value}{value}"

    @property
    def reason(self) -> str:
        """Why, in a few words."""
        if self.conflict:
            return "denied: different masks apply (fail closed)"
        if self.table_refused:
            return "denied: SELECT on the table is not allowed"
        if self.state == ColumnState.DENIED:
            return "denied"
        if self.mask is not None:
            return f"masked ({self.text})"
        return "readable"


READABLE = ColumnVerdict(ColumnState.READABLE)


def verdict_of(rules: Iterable[ColumnRule]) -> ColumnVerdict:
    """The verdict of a column matched by ``rules``: deny wins, then one mask, else readable."""
    ordered = sorted(rules, key=lambda rule: rule.line)
    denies = tuple(rule for rule in ordered if isinstance(rule, Rule))
    if denies:
        once = _once(denies)
        return ColumnVerdict(ColumnState.DENIED, rules=once, lines=_lines(once))
    masks = tuple(rule for rule in ordered
                  if isinstance(rule, Restriction) and rule.mask is not None)
    if not masks:
        return READABLE
    kinds = {(rule.mask.action, rule.mask.value) for rule in masks if rule.mask is not None}
    if len(kinds) > 1:
        return ColumnVerdict(ColumnState.DENIED, rules=masks, conflict=True, lines=_lines(masks))
    return ColumnVerdict(ColumnState.MASKED, masks[0].mask, masks, lines=_lines(masks))


def _lines(rules: Iterable[ColumnRule]) -> Lines:
    return tuple((rule.line, rule.text) for rule in rules)


def _once(rules: tuple[Rule, ...]) -> tuple[Rule, ...]:
    """One rule per line (a deny and its copy covering what lies beneath share a line)."""
    seen: dict[int, Rule] = {}
    for rule in rules:
        seen.setdefault(rule.line, rule)
    return tuple(seen.values())


_NO_VERDICTS: Mapping[str, ColumnVerdict] = MappingProxyType({})


@dataclass(frozen=True)
class TableRules:
    """The column and row rules of one set of subjects on one table."""

    table: Resource
    default: ColumnVerdict = READABLE  # the verdict of a column no rule names literally
    named: Mapping[str, ColumnVerdict] = field(default_factory=lambda: _NO_VERDICTS)
    row_filter: RowFilter | None = None
    filter_rules: tuple[Restriction, ...] = ()  # every filter rule behind ``row_filter``
    row_filter_lines: Lines = ()  # (line, text) of ``filter_rules``
    rules: tuple[ColumnRule, ...] = ()  # every rule gathered, file order

    def verdict(self, column: str) -> ColumnVerdict:
        """The verdict of one top-level column."""
        return self.named.get(column, self.default)

    def view(self, columns: Iterable[str]) -> ReadView:
        """The ``ReadView`` of ``columns`` (the table's top-level columns)."""
        if self.default is READABLE and not self.named:
            if self.row_filter is None:
                return unrestricted(self.table)
            return ReadView(self.table, row_filter=self.row_filter,
                            rules=tuple(text for _, text in self.row_filter_lines))
        denied: list[str] = []
        masks: dict[str, Mask] = {}
        lines: dict[int, str] = {}
        for column in columns:
            verdict = self.named.get(column, self.default)
            if verdict is READABLE:
                continue
            if verdict.mask is not None:
                masks[column] = verdict.mask
            else:
                denied.append(column)
            lines.update(verdict.lines)
        if self.row_filter is not None:
            lines.update(self.row_filter_lines)
        return ReadView(self.table, frozenset(denied), MappingProxyType(masks), self.row_filter,
                        tuple(text for _, text in sorted(lines.items())))


class ReadIndex:
    """Denies of SELECT, masks and row filters, by subject, for ``table_rules``."""

    def __init__(self, denies: Iterable[Rule], restrictions: Iterable[Restriction]) -> None:
        restrictions = list(restrictions)
        column_rules: list[ColumnRule] = [rule for rule in denies
                                          if not rule.allow and Action.SELECT in rule.actions]
        column_rules += [rule for rule in restrictions if rule.mask is not None]
        self._columns: dict[str, Bucket[ColumnRule]] = bucketed(column_rules)
        self._filters: dict[str, Bucket[Restriction]] = bucketed(
            rule for rule in restrictions
            if rule.row_filter is not None and not rule.filters_nothing)
        self.subjects = frozenset(self._columns) | frozenset(self._filters)
        self._combined: dict[tuple[int, ...], tuple[RowFilter | None, Lines]] = {}
        self._verdicts: dict[tuple[int, ...], ColumnVerdict] = {}

    def _verdict(self, rules: list[ColumnRule]) -> ColumnVerdict:
        """``verdict_of``, remembered by the rules' lines (a deny and its copy covering what
        lies beneath share a line and a verdict)."""
        key = tuple(sorted(rule.line for rule in rules))
        found = self._verdicts.get(key)
        if found is None:
            if len(self._verdicts) >= _MAX_COMBINATIONS:
                self._verdicts.clear()
            found = self._verdicts[key] = verdict_of(rules)
        return found

    def _row_filter(self, rules: list[Restriction]) -> tuple[RowFilter | None, Lines]:
        """``combined_filter`` of ``rules`` and their lines, remembered by the lines (the
        expressions are immutable; a few principals' combinations recur)."""
        key = tuple(rule.line for rule in rules)
        found = self._combined.get(key)
        if found is None:
            if len(self._combined) >= _MAX_COMBINATIONS:
                self._combined.clear()
            found = combined_filter(rules), _lines(rules)
            self._combined[key] = found
        return found

    def named_segments(self, subjects: Iterable[str], masks_shown: bool = False
                       ) -> frozenset[str]:
        """The last literal segments of ``subjects``' column rules (SELECT denies and masks),
        lowercased: the names of the columns, tables or namespaces they hide or mask.

        ``masks_shown``: the client applies masks itself, so a masked column is in its
        loadTable answer and only denies hide names; unless two different masks apply
        anywhere (a column under both is denied: fail closed, so every name counts)."""
        denied: set[str] = set()
        masked: set[str] = set()
        kinds: set[tuple[object, object]] = set()
        for subject in subjects:
            bucket = self._columns.get(subject)
            if bucket is None:
                continue
            for rules in (*bucket.exact.values(), *bucket.wild.values()):
                # a rule ending in a wildcard (``….customers.*``) hides what lies beneath its
                # last literal segment: that name stands for all of it
                for rule in rules:
                    last = rule.pattern.segments[-1] if rule.pattern.segments else None
                    if last is None:
                        continue
                    mask = rule.mask if isinstance(rule, Restriction) else None
                    (denied if mask is None else masked).add(last.lower())
                    if mask is not None:
                        kinds.add((mask.action, mask.value))
        if masks_shown and len(kinds) <= 1:
            return frozenset(denied)
        return frozenset(denied | masked)

    def table_rules(self, subjects: Iterable[str], table: Resource) -> TableRules:
        """Gather what restricts ``table`` for ``subjects`` (all of a principal's subjects)."""
        parts = table.parts
        every: list[ColumnRule] = []
        by_column: dict[str, list[ColumnRule]] = defaultdict(list)
        filters: list[Restriction] = []
        for subject in subjects:
            if (bucket := self._columns.get(subject)) is not None:
                _gather_columns(bucket, parts, every, by_column)
            if (found := self._filters.get(subject)) is not None:
                filters += [rule for rule in found.reaching(parts) if rule.pattern.matches(parts)]
        if not (every or by_column or filters):
            return TableRules(table)
        filters.sort(key=lambda rule: rule.line)
        named = {column: self._verdict(every + rules) for column, rules in by_column.items()}
        gathered = sorted([*every, *(r for rules in by_column.values() for r in rules), *filters],
                          key=lambda rule: rule.line)
        row_filter, filter_lines = self._row_filter(filters)
        return TableRules(table, self._verdict(every), MappingProxyType(named), row_filter,
                          tuple(filters), filter_lines, tuple(gathered))


def _gather_columns(bucket: Bucket[ColumnRule], parts: Key, every: list[ColumnRule],
                    by_column: dict[str, list[ColumnRule]]) -> None:
    """Split the rules that can match a column of ``parts`` into those matching every column
    and those naming one column. An exact pattern names a column when it is ``parts`` plus one
    segment; a wildcard pattern matching ``FRESH`` (a name no pattern names) matches any name."""
    size = len(parts)
    probe = (*parts, FRESH)
    for rule in bucket.wild_above(parts):
        pattern = rule.pattern
        if pattern.matches(probe):
            every.append(rule)
        elif not pattern.open and len(pattern.segments) == size + 1:
            name = pattern.segments[size]
            if name is not None and pattern.matches((*parts, name)):
                by_column[name].append(rule)
    for name, rules in bucket.exact_children(parts):
        by_column[name] += rules


def combined_filter(rules: list[Restriction]) -> RowFilter | None:
    """The AND of the filter rules (file order; the same expression text counted once)."""
    chosen: dict[str, Restriction] = {}
    for rule in rules:
        chosen.setdefault(rule.filter_text, rule)
    if not chosen:
        return None
    kept = list(chosen.values())
    expressions: list[BooleanExpression] = [r.row_filter for r in kept if r.row_filter is not None]
    if len(kept) == 1:
        return RowFilter(expressions[0], kept[0].filter_text, (kept[0].text,))
    text = " AND ".join(f"({rule.filter_text})" for rule in kept)
    return RowFilter(And(*expressions), text, tuple(rule.text for rule in kept))
