"""The cheap part of checking a table commit: its top-level shape and size, before any read.

``check_commit_shape`` looks only at the JSON already in memory, so the gate can call it before it
loads the table or asks the policy anything: a body that is not an object, ``requirements`` or
``updates`` that are not lists of objects, an update without a string ``action`` or a requirement
without a string ``type`` is a 400; more than ``CommitLimits.max_updates`` updates (or
requirements), or more than ``CommitLimits.max_snapshots`` ``add-snapshot`` updates (each costs a
manifest list and its manifests to verify), is a 413. ``classify_commit`` runs it too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from proxy.commits.intent import UnverifiableCommit
from proxy.commits.limits import CommitLimits
from proxy.errors import PayloadTooLarge

DEFAULT_LIMITS = CommitLimits()
_NAMES = {"requirements": ("requirement", "type"), "updates": ("update", "action")}


def check_commit_shape(body: Any, limits: CommitLimits = DEFAULT_LIMITS) -> None:
    """Refuse a commit (or ``table-changes`` entry) whose shape or size is wrong, reading nothing.

    Missing or null ``requirements``/``updates`` count as empty lists.
    """
    if not isinstance(body, Mapping):
        raise UnverifiableCommit("a table commit must be a JSON object")
    for key, (name, tag) in _NAMES.items():
        items = body.get(key)
        if items is None:
            continue
        if not isinstance(items, list):
            raise UnverifiableCommit(f"commit {key} must be a list")
        if len(items) > limits.max_updates:
            raise PayloadTooLarge(f"a table commit may carry at most {limits.max_updates} {key}")
        for item in items:
            if not isinstance(item, dict) or not isinstance(item.get(tag), str):
                raise UnverifiableCommit(f"every {name} needs a string {tag!r}")
            if item[tag] != item[tag].lower():  # Java servers lower-case it: one spelling only
                raise UnverifiableCommit(f"{name} {tag} {item[tag]!r:.60} must be lower-case")
    for requirement in body.get("requirements") or []:
        _check_requirement(requirement)
    snapshots = sum(1 for u in body.get("updates") or [] if u["action"] == "add-snapshot")
    if snapshots > limits.max_snapshots:
        raise PayloadTooLarge(f"a table commit may add at most {limits.max_snapshots} snapshots")


_REQUIREMENT_FIELDS: dict[str, dict[str, tuple[type, ...]]] = {
    "assert-create": {},
    "assert-table-uuid": {"uuid": (str,)},
    "assert-ref-snapshot-id": {"ref": (str,), "snapshot-id": (int, type(None))},
    "assert-last-assigned-field-id": {"last-assigned-field-id": (int,)},
    "assert-current-schema-id": {"current-schema-id": (int,)},
    "assert-last-assigned-partition-id": {"last-assigned-partition-id": (int,)},
    "assert-default-spec-id": {"default-spec-id": (int,)},
    "assert-default-sort-order-id": {"default-sort-order-id": (int,)},
}
"""Every requirement of the REST spec and the types of its fields: a backing must never act on a
requirement icegov did not understand the same way."""


def _check_requirement(requirement: dict[str, Any]) -> None:
    kind = requirement["type"]
    fields = _REQUIREMENT_FIELDS.get(kind)
    if fields is None:
        raise UnverifiableCommit(f"unknown requirement type {kind!r:.60}")
    for field, types in fields.items():
        value = requirement.get(field)
        if value is None and type(None) in types:
            continue  # null, or left out as pyiceberg does
        if isinstance(value, bool) or not isinstance(value, types):
            raise UnverifiableCommit(f"requirement {kind} needs {field!r} of the right type")


def updates_of(body: Mapping[str, Any], *actions: str) -> list[Mapping[str, Any]]:
    """The updates of a (shape-checked) commit body with one of ``actions``, in order."""
    return [u for u in body.get("updates") or []
            if isinstance(u, Mapping) and u.get("action") in actions]
