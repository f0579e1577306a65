"""A principal's read view of one table, judged against *every* schema the table has had.

Policies name columns; files and old snapshots know fields by id. A field that was ever called
by a hidden name stays hidden under every name it has had (renaming ``ssn`` to ``x`` does not
reveal it, and a dropped ``ssn`` is not readable by time travel): the view's hidden names are
widened to every name their field ids carry in any schema. Fail closed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from pyiceberg.table.metadata import TableMetadata

from proxy.governance import Authorizer, Principal
from proxy.resources import Resource
from proxy.restrictions import Mask, MaskAction, ReadView

Headers = Iterable[tuple[bytes, bytes]]


def column_names(metadata: TableMetadata) -> tuple[str, ...]:
    """Every top-level column name of every schema, sorted (the policy is asked about each)."""
    return tuple(sorted({f.name for schema in metadata.schemas for f in schema.fields}))


def _ids_by_name(metadata: TableMetadata) -> dict[str, set[int]]:
    found: dict[str, set[int]] = {}
    for schema in metadata.schemas:
        for top in schema.fields:
            found.setdefault(top.name, set()).add(top.field_id)
    return found


def _names_by_id(metadata: TableMetadata) -> dict[int, set[str]]:
    found: dict[int, set[str]] = {}
    for schema in metadata.schemas:
        for top in schema.fields:
            found.setdefault(top.field_id, set()).add(top.name)
    return found


def widened(view: ReadView, metadata: TableMetadata) -> ReadView:
    """``view`` with every hidden or masked column widened to all names of its field ids.

    A name that is denied under one of its names is denied under all; a masked field whose other
    name is unmasked keeps the mask under every name (two different masks: denied, fail closed).
    """
    if not (view.denied or view.masks):
        return view
    ids, names = _ids_by_name(metadata), _names_by_id(metadata)

    def aliases(name: str) -> set[str]:
        return {alias for field_id in ids.get(name, ()) for alias in names[field_id]} | {name}

    denied = {alias for name in view.denied for alias in aliases(name)}
    masks: dict[str, Mask] = {}
    for name, mask in view.masks.items():
        for alias in aliases(name):
            if alias in denied:
                continue
            if alias in masks and masks[alias] != mask:
                denied.add(alias)
                continue
            masks[alias] = mask
    kept = {name: mask for name, mask in masks.items() if name not in denied}
    return replace(view, denied=frozenset(denied), masks=kept)


class ReadViews:
    """The read views of principals on tables, from the one authorizer."""

    def __init__(self, authorizer: Authorizer, mask_capable_clients: tuple[str, ...] = (),
                 mask_capable_principals: tuple[str, ...] = ()) -> None:
        self._authorizer = authorizer
        self._mask_capable = mask_capable_clients
        self._mask_trusted = frozenset(mask_capable_principals)

    def view(self, principal: Principal, table: Resource, metadata: TableMetadata) -> ReadView:
        """What ``principal`` may read of ``table`` as ``metadata`` describes it."""
        raw = self._authorizer.read_view(principal, table, column_names(metadata))
        return widened(raw, metadata)

    def of_columns(self, principal: Principal, table: Resource,
                   columns: tuple[str, ...]) -> ReadView:
        """The view of ``columns`` by name only (a table that does not exist yet)."""
        return self._authorizer.read_view(principal, table, columns)

    def applies_masks(self, principal: Principal, headers: Headers) -> bool:
        """True when ``principal`` is one the operator trusts to run clients that apply masks
        (``mask_capable_principals``: a name or a role) and its client says (X-Client-Version)
        it is one of them. The header alone is the caller's own claim: never enough."""
        if not self._mask_capable or not (
                principal.name in self._mask_trusted
                or not self._mask_trusted.isdisjoint(principal.roles)):
            return False
        version = _header(headers, b"x-client-version")
        return version is not None and version.startswith(self._mask_capable)


def _header(headers: Headers, name: bytes) -> str | None:
    for key, value in headers:
        if key.lower() == name:
            return value.decode("latin-1")
    return None


def describe(view: ReadView) -> dict[str, object]:
    """The view as the audit record shows it (column names are not secret to the audit)."""
    masks: Mapping[str, Mask] = view.masks
    return {
        "denied": sorted(view.denied),
        "masked": {name: _mask_text(mask) for name, mask in sorted(masks.items())},
        "row_filter": None if view.row_filter is None else view.row_filter.text,
        "rules": list(view.rules),
    }


def _mask_text(mask: Mask) -> str:
    if mask.action is MaskAction.MASK_TO_FIXED_VALUE:
        return f"{mask.action.value}:{mask.value}"
    return mask.action.value


def hidden_owners(metadata: TableMetadata, hidden: frozenset[str]) -> dict[int, str]:
    """Each field id (nested ones included) of the top-level columns named ``hidden``, in every
    schema the table has had, with the column it lies in."""
    owners: dict[int, str] = {}
    for schema in metadata.schemas:
        for top in schema.fields:
            if top.name in hidden:
                owners.update(dict.fromkeys((top.field_id, *nested_ids(top.field_type)),
                                            top.name))
    return owners


def hidden_ids(metadata: TableMetadata, hidden: frozenset[str]) -> frozenset[int]:
    """Field ids (nested ones included) of the top-level columns named ``hidden``."""
    return frozenset(hidden_owners(metadata, hidden))


def nested_ids(field_type: Any) -> set[int]:
    """Every field id nested in a type (struct fields, list elements, map keys and values)."""
    found: set[int] = set()
    children = list(getattr(field_type, "fields", None) or ())
    children += [getattr(field_type, a) for a in ("element_field", "key_field", "value_field")
                 if getattr(field_type, a, None) is not None]
    for child in children:
        found.add(child.field_id)
        found |= nested_ids(child.field_type)
    return found
