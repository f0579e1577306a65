"""Which read views are governed, and what names a governed view: its digest.

A view with a row filter or a mask is **governed**: its principal reads governed snapshots
instead of the base table's. The digest names what the governed data depends on — the row
filter, each mask by field id, the denied field ids, and the build rules' version — so two
principals under the same restriction share one governed tree, and a policy change that alters
the restriction yields a new tree (the old one is collected when nothing uses it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pyiceberg.expressions import BooleanExpression
from pyiceberg.schema import Schema
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.types import NestedField

from proxy.errors import Forbidden
from proxy.governed.layout import content_key
from proxy.reads.projection import projected_schema
from proxy.reads.read_views import hidden_ids
from proxy.reads.restrictions_json import mask_applies
from proxy.reads.scan_access import bound_row_filter
from proxy.restrictions import Mask, ReadView

BUILD_RULES = "governed-v1"
"""Bumped whenever what a governed file or manifest holds changes: old trees are then retired."""


def governs(view: ReadView) -> bool:
    """True when ``view``'s principal reads governed snapshots of the table: the view filters
    rows or masks a column."""
    return view.row_filter is not None or bool(view.masks)


@dataclass(frozen=True)
class GovernedView:
    """A governed view of one table, resolved against its current schema.

    ``schema`` is the current schema without the denied columns (ids kept): what governed files
    hold. ``masks`` are by top-level field id; ``denied_ids`` every field id (nested ones too) of
    a denied column in any schema; ``row_filter`` the unbound filter (None: every row)."""

    view: ReadView
    digest: str
    table_uuid: str
    schema: Schema
    row_filter: BooleanExpression | None
    masks: Mapping[int, Mask]
    denied_ids: frozenset[int]

    @property
    def masked_ids(self) -> frozenset[int]:
        return frozenset(self.masks)


def governed_view(view: ReadView, metadata: TableMetadata) -> GovernedView:
    """``view`` (already widened to every schema) as the governed build takes it; 403 when a
    mask cannot be applied to its column's type or masks a partition source (fail closed)."""
    if metadata.format_version > 2:
        raise Forbidden("governed snapshots of format-3 tables cannot be written yet (pyiceberg "
                        "writes no format-3 manifest lists): this table cannot be served under "
                        "a row filter or mask")
    current = metadata.schema()
    schema = projected_schema(current, view.denied)
    masks: dict[int, Mask] = {}
    for field in schema.fields:
        mask = view.masks.get(field.name)
        if mask is not None:
            _check_mask(mask, field)
            masks[field.field_id] = mask
    _check_partitions(metadata, frozenset(masks))
    if view.row_filter is not None:
        bound_row_filter(view, current)  # 403 when it cannot bind (checked again per build)
    denied = hidden_ids(metadata, view.denied)
    digest = content_key(
        BUILD_RULES, str(metadata.table_uuid),
        None if view.row_filter is None else view.row_filter.text,
        sorted((i, m.action.value, m.value) for i, m in masks.items()), sorted(denied))
    return GovernedView(view, digest, str(metadata.table_uuid), schema,
                        None if view.row_filter is None else view.row_filter.expression,
                        masks, denied)


def _check_mask(mask: Mask, field: NestedField) -> None:
    if not mask_applies(mask, field):
        raise Forbidden(f"the mask {mask.action.value} cannot be applied to column "
                        f"{field.name!r} of type {field.field_type}: policy asks for a mask "
                        "icegov cannot apply, so the column cannot be served")


def _check_partitions(metadata: TableMetadata, masked: frozenset[int]) -> None:
    for spec in metadata.partition_specs:
        for part in spec.fields:
            if part.source_id in masked:
                raise Forbidden("a masked column partitions this table: its values are in "
                                "every manifest, so it cannot be served masked")
