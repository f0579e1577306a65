"""Pin a commit to the base it was classified against (no check-then-act).

icegov judges a commit against the table state it loaded. If the client did not assert that
state, a concurrent change could land in between and the backing would apply the commit to a
different base than the one judged (silently dropping a concurrent append, say). So icegov adds
the requirements the client left out: ``assert-table-uuid`` and ``assert-ref-snapshot-id`` (the
ref's value in the base, ``null`` if it did not exist) for every ref the commit moves or removes.
The backing then refuses (409, nothing landed) if the base moved.

A change judged on a head this replica already knew (``committer.heads``: no loadTable) is pinned
to everything assertable it was judged on: the uuid, current schema id, last assigned field id,
default spec id, last assigned partition id, default sort order id, ``main`` and every ref it
moves (``committer.heads.head_pins``; what cannot be asserted, and why that is safe, is said there).
Requirements the client sent already are not repeated: a head is used only when they all hold
on it.
"""

from __future__ import annotations

from typing import Any

from pyiceberg.table.metadata import TableMetadata

from proxy.admission.admission import ClassifiedChange
from proxy.commits.shape import updates_of
from proxy.committer.heads import head_pins

_REF_UPDATES = frozenset({"set-snapshot-ref", "remove-snapshot-ref"})


def pinned_requirements(body: dict[str, Any], base: TableMetadata,
                        judged_on_head: bool = False) -> list[dict[str, Any]]:
    """The requirements icegov adds to ``body`` (empty when the client pinned everything)."""
    requirements = [r for r in body.get("requirements") or [] if isinstance(r, dict)]
    if judged_on_head:
        sent = {(r.get("type"), r.get("ref")) for r in requirements}
        return [pin for pin in head_pins(base, _moved_refs(body))
                if (pin["type"], pin.get("ref")) not in sent]
    asserted = {r.get("ref") for r in requirements
                if r.get("type") == "assert-ref-snapshot-id" and isinstance(r.get("ref"), str)}
    added: list[dict[str, Any]] = []
    if not any(r.get("type") == "assert-table-uuid" for r in requirements):
        added.append({"type": "assert-table-uuid", "uuid": str(base.table_uuid)})
    for ref in _moved_refs(body):
        if ref not in asserted:
            current = base.refs.get(ref)
            added.append({"type": "assert-ref-snapshot-id", "ref": ref,
                          "snapshot-id": None if current is None else current.snapshot_id})
    return added


def _moved_refs(body: dict[str, Any]) -> list[str]:
    names = (u.get("ref-name") for u in updates_of(body, *_REF_UPDATES))
    return list(dict.fromkeys(n for n in names if isinstance(n, str)))


def pinned_change(change: ClassifiedChange, on_head: bool | None = None) -> dict[str, Any] | None:
    """The change's body with its pins added, or None when nothing needs adding; ``on_head``
    False: only the usual pins, even for a change judged on a known head."""
    if change.base is None:
        return None  # a create: ``assert-create`` already pins it to "no table"
    head = change.judged_on_head if on_head is None else on_head
    added = pinned_requirements(change.body, change.base.metadata, head)
    if not added:
        return None
    return {**change.body, "requirements": [*(change.body.get("requirements") or []), *added]}
