"""Notes for the audit record: what a request asks for beyond its rights, as the caller sent it.

A purge, the metadata file a register adopts, the place a create, a commit, a namespace or a
view chooses for files: each names whose files a request touches, which the rights it needed do
not say. Each value is kept whole up to ``NOTED_CHARS``; a longer one keeps its first and last
``KEPT_CHARS`` characters, its length and its SHA-256, so padding in the middle (``/./`` runs a
Hadoop path collapses) cannot push the part that says whose files out of the record.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from typing import Any

from proxy.locations import LOCATION_PROPERTIES, NAMESPACE_LOCATION
from proxy.resources import Resource

NOTED_CHARS = 2048
KEPT_CHARS = 1024

Note = dict[str, Any]


def noted(value: object) -> str:
    """``value`` as text, bounded (see the module's docstring)."""
    text = value if isinstance(value, str) else repr(value)
    if len(text) <= NOTED_CHARS:
        return text
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    return (f"{text[:KEPT_CHARS]}…({len(text)} characters, sha256 {digest})…"
            f"{text[-KEPT_CHARS:]}")


def note(resource: Resource, fields: Iterable[tuple[str, object]]) -> tuple[Note, ...]:
    """One note on ``resource`` with each field that has a value, or none at all."""
    kept = {name: noted(value) for name, value in fields if value is not None}
    return ({"resource": str(resource), **kept},) if kept else ()


def _location_properties(properties: object) -> list[tuple[str, object]]:
    if not isinstance(properties, Mapping):
        return []
    return [(p, properties.get(p)) for p in sorted(LOCATION_PROPERTIES)]


def body_places(resource: Resource, body: Mapping[str, Any]) -> tuple[Note, ...]:
    """A create's or register's ``metadata-location``, ``location`` and ``write.*.path``."""
    return note(resource, [("metadata_location", body.get("metadata-location")),
                           ("location", body.get("location")),
                           *_location_properties(body.get("properties"))])


def change_places(resource: Resource, body: Mapping[str, Any]) -> tuple[Note, ...]:
    """The places a table or view commit sets: ``set-location`` and ``write.*.path``."""
    updates = body.get("updates")
    fields: list[tuple[str, object]] = []
    for update in updates if isinstance(updates, list) else ():
        if not isinstance(update, Mapping):
            continue
        if update.get("action") == "set-location":
            fields.append(("location", update.get("location")))
        elif update.get("action") == "set-properties":
            fields.extend(_location_properties(update.get("updates")))
    return note(resource, fields)


def namespace_places(resource: Resource, properties: object) -> tuple[Note, ...]:
    """The ``location`` a namespace create or properties update sets."""
    value = properties.get(NAMESPACE_LOCATION) if isinstance(properties, Mapping) else None
    return note(resource, [("location", value)])


def purge(resource: Resource, requested: str | None) -> tuple[Note, ...]:
    """A drop's ``purgeRequested`` as sent (absent: no note)."""
    return note(resource, [("purge_requested", requested)])
