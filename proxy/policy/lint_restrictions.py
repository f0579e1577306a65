"""``icegov policy check`` warnings about mask and row-filter lines that load but misfire.

* two different masks that reach the same column for one subject (or a subject and a role it
  always holds): the column is denied, fail closed;
* a mask that a deny always overrides (deny wins over masks);
* a row filter on a text that another line uses as a column: a filter applies only where the
  text names a table, which policy files cannot tell apart from a column;
* ``filter:true``, which filters nothing;
* a row filter over a column that the same subject may not see (its values are declared).
"""

from __future__ import annotations

from collections.abc import Iterator

from proxy.governance import Action
from proxy.planning.filter_json import referenced_columns
from proxy.policy.effects import Restriction
from proxy.policy.index import role_closure
from proxy.policy.patterns import horizon, meets
from proxy.policy.rules import ParsedPolicy, Rule


def restriction_warnings(parsed: ParsedPolicy) -> Iterator[tuple[int, str]]:
    """(line, message) for each suspicious restriction line."""
    closure = role_closure(parsed.grants)
    masks = [r for r in parsed.restrictions if r.mask is not None]
    filters = [r for r in parsed.restrictions if r.row_filter is not None]
    for mask in masks:
        holds = {mask.subject, *closure.get(mask.subject, ())}
        yield from _mask_conflicts(mask, masks, holds, closure)
        yield from _mask_overridden(mask, parsed.rules, holds)
    for row_filter in filters:
        yield from _filter_warnings(row_filter, masks)
        holds = {row_filter.subject, *closure.get(row_filter.subject, ())}
        yield from _filter_over_hidden(row_filter, parsed.rules, masks, holds)


def _mask_conflicts(mask: Restriction, masks: list[Restriction], holds: set[str],
                    closure: dict[str, frozenset[str]]) -> Iterator[tuple[int, str]]:
    """An earlier, different mask that applies whenever this one does, or the reverse."""
    for other in masks:
        if other.line >= mask.line or _same_mask(mask, other):
            continue
        if other.subject not in holds and mask.subject not in closure.get(other.subject, ()):
            continue
        if _overlap(mask, other):
            yield mask.line, (f"conflicts with the mask on line {other.line} ({other.text}) on "
                              "the columns both name: two different masks deny the column "
                              "(fail closed)")
            return


def _same_mask(left: Restriction, right: Restriction) -> bool:
    if left.mask is None or right.mask is None:
        return False
    return (left.mask.action, left.mask.value) == (right.mask.action, right.mask.value)


def _mask_overridden(mask: Restriction, rules: tuple[Rule, ...],
                     holds: set[str]) -> Iterator[tuple[int, str]]:
    for deny in rules:
        if deny.allow or deny.subject not in holds or Action.SELECT not in deny.actions:
            continue
        reach = deny.beneath() or deny
        limit = horizon(mask.pattern, reach.pattern)
        if all(reach.pattern.matches(parts) for parts in meets(mask.pattern, mask.pattern, limit)):
            yield mask.line, (f"never takes effect: the deny on line {deny.line} ({deny.text}) "
                              "covers every column it masks (deny wins over masks)")
            return


def _filter_warnings(row_filter: Restriction,
                     masks: list[Restriction]) -> Iterator[tuple[int, str]]:
    if row_filter.filters_nothing:
        yield row_filter.line, "filters nothing: filter:true lets every row through"
    for mask in masks:
        if mask.pattern == row_filter.pattern:
            yield row_filter.line, (f"line {mask.line} masks the same resource as a column "
                                    f"({mask.text}): a row filter applies only where the text "
                                    "names a table")
            return


def _overlap(left: Restriction, right: Restriction) -> bool:
    limit = horizon(left.pattern, right.pattern)
    return any(True for _ in meets(left.pattern, right.pattern, limit))


def _filter_over_hidden(row_filter: Restriction, rules: tuple[Rule, ...],
                        masks: list[Restriction], holds: set[str]) -> Iterator[tuple[int, str]]:
    """A filter on an exactly named table over a column that a deny or mask of the same
    subject hides: the filter and its literals are declared to that principal anyway
    (``read-restrictions``), and plans prune by the hidden column."""
    if row_filter.row_filter is None or not row_filter.pattern.exact:
        return
    table = tuple(str(s) for s in row_filter.pattern.segments)
    for name in sorted(referenced_columns(row_filter.row_filter)):
        parts = (*table, name.split(".")[0])
        lines = [r.line for r in rules if not r.allow and r.subject in holds
                 and Action.SELECT in r.actions and _reaches(r, parts)]
        lines += [m.line for m in masks if m.subject in holds and m.pattern.matches(parts)]
        if lines:
            yield row_filter.line, (f"filters on column {name!r}, which line {min(lines)} "
                                    "hides from the same subject: the filter and its values "
                                    "are declared to that principal, and plans prune by it")
            return


def _reaches(deny: Rule, parts: tuple[str, ...]) -> bool:
    """The deny matches ``parts`` itself or, as denies do, something above it."""
    beneath = deny.beneath()
    return deny.pattern.matches(parts) or (beneath is not None
                                           and beneath.pattern.matches(parts))
