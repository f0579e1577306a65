"""What a principal may read of one table: the vocabulary shared by policy, planning, loadTable
projection and the write checks.

A ``ReadView`` is a decision, not a request: the policy (``proxy.policy``) produces it for a
principal and a table's columns; the planner, the loadTable projection and the commit gate consume
it. Columns are the table's **top-level** fields, by name: a rule on a struct covers its nested
fields. A denied column is never handed out; a masked column is handed out only to a client that
applies masks (none today: for every other client it is removed like a denied one, fail closed);
the row filter is an Iceberg expression over the table's columns, applied by icegov where it can
(plan pruning) and declared where it cannot (``read-restrictions``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType

from pyiceberg.expressions import AlwaysTrue, BooleanExpression

from proxy.resources import Resource


class MaskAction(StrEnum):
    """The REST spec's column projection actions (``read-restrictions``)."""

    REPLACE_WITH_NULL = "replace-with-null"
    MASK_TO_FIXED_VALUE = "mask-to-fixed-value"
    MASK_ALPHANUM = "mask-alphanum"
    SHOW_FIRST_4 = "show-first-4"
    SHOW_LAST_4 = "show-last-4"
    TRUNCATE_TO_YEAR = "truncate-to-year"
    TRUNCATE_TO_MONTH = "truncate-to-month"
    SHA_256 = "sha-256"


@dataclass(frozen=True, slots=True)
class Mask:
    """A mask on one column: the action, its value (only ``mask-to-fixed-value`` has one) and
    the policy line that imposed it."""

    action: MaskAction
    value: str | None = None
    rule: str | None = None


@dataclass(frozen=True, slots=True)
class RowFilter:
    """The rows a principal may read: ``expression`` (unbound, over column names) is the AND of
    every row-filter rule that applies; ``text`` is how the rules wrote it; ``rules`` are the
    policy lines."""

    expression: BooleanExpression
    text: str
    rules: tuple[str, ...] = ()


_NO_MASKS: Mapping[str, Mask] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class ReadView:
    """What ``principal`` may read of ``table`` (SELECT on the table itself is decided apart).

    ``denied`` and ``masks`` name top-level columns; ``rules`` are the policy lines behind every
    restriction (for the audit record). An unrestricted view has neither.
    """

    table: Resource
    denied: frozenset[str] = frozenset()
    masks: Mapping[str, Mask] = field(default_factory=lambda: _NO_MASKS)
    row_filter: RowFilter | None = None
    rules: tuple[str, ...] = ()
    governed: str | None = None
    """Set on the view a reader of governed snapshots plans with (``proxy.governed``): the
    digest of the governed data, whose rows are already filtered and columns masked."""

    @property
    def restricted(self) -> bool:
        """True when anything at all is withheld or filtered."""
        return bool(self.denied or self.masks or self.row_filter is not None
                    or self.governed is not None)

    def hidden(self, applies_masks: bool = False) -> frozenset[str]:
        """The columns a client must not receive: the denied ones, and the masked ones unless
        the client applies masks itself."""
        return self.denied if applies_masks else self.denied | frozenset(self.masks)

    @property
    def filter_expression(self) -> BooleanExpression:
        """The row filter, ``AlwaysTrue`` when rows are not filtered."""
        return AlwaysTrue() if self.row_filter is None else self.row_filter.expression

    def cache_key(self) -> tuple[object, ...]:
        """What distinguishes this view from another in a cache key (plans, projections)."""
        masks = tuple(sorted((c, m.action.value, m.value) for c, m in self.masks.items()))
        row = None if self.row_filter is None else self.row_filter.text
        return (tuple(sorted(self.denied)), masks, row, self.governed)


def unrestricted(table: Resource) -> ReadView:
    """The view of a principal that no column or row rule restricts."""
    return ReadView(table)
