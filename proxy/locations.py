"""The Iceberg properties that say where files go: shared by the gate, commit verification and
the embedded catalog, so all three mean the same keys."""

from __future__ import annotations

LOCATION_PROPERTIES: tuple[str, ...] = (
    "write.data.path", "write.metadata.path", "write.object-storage.path",
    "write.folder-storage.path",
)
"""Table properties that name a root the table writes files under."""

NAMESPACE_LOCATION = "location"
"""The namespace property a catalog places the namespace's new tables under."""
