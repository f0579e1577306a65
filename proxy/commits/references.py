"""What a commit's new snapshots refer to must exist in the table they land on.

A snapshot whose id the table already holds can never land (a catalog refuses a duplicate
``add-snapshot``), and an outcome check would mistake the old snapshot for it. A snapshot naming a
schema the table does not have, or a manifest naming a partition spec the table does not have,
would leave a table that readers cannot load or scan. Each is refused (400) before the commit is
classified, whatever rights the caller holds. A commit that adds schemas or specs itself is
checked against the table's ids plus the ones it adds; ids of a create are the create's own.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pyiceberg.table.metadata import TableMetadata

from proxy.commits.intent import UnverifiableCommit
from proxy.commits.manifests import ManifestReader
from proxy.commits.shape import updates_of
from proxy.commits.snapshots import require_id

UNASSIGNED = -1  # an id the catalog assigns ("the last added")


def check_snapshot_references(body: Mapping[str, Any], base: TableMetadata | None,
                              reader: ManifestReader, manifest_lists: Iterable[str]) -> None:
    """Refuse new snapshots that reuse an id or name a schema or spec the table lacks."""
    if base is None:
        return
    for update in updates_of(body, "add-snapshot"):
        snapshot = _object(update.get("snapshot"))
        snapshot_id = require_id(snapshot.get("snapshot-id"), "add-snapshot snapshot-id")
        if base.snapshot_by_id(snapshot_id) is not None:
            raise UnverifiableCommit(f"snapshot {snapshot_id} already exists in the table")
        schema_id = snapshot.get("schema-id")
        if schema_id is not None and not _known(schema_id, _schema_ids(base, body)):
            raise UnverifiableCommit(f"add-snapshot names schema {schema_id!r:.20}, which the "
                                     "table does not have")
    spec_ids = _spec_ids(base, body)
    for manifest_list in manifest_lists:
        for manifest in reader.claimed_manifests(manifest_list):
            if not _known(manifest.partition_spec_id, spec_ids):
                raise UnverifiableCommit(
                    f"a manifest names partition spec {manifest.partition_spec_id}, which the "
                    "table does not have")


def _object(value: Any) -> Mapping[str, Any]:
    """``value`` when it is a JSON object, else an empty one (its shape is refused elsewhere;
    here it only names no id)."""
    return value if isinstance(value, dict) else {}


def _known(value: Any, ids: set[int] | None) -> bool:
    return ids is None or (isinstance(value, int) and not isinstance(value, bool)
                           and value in ids)


def _schema_ids(base: TableMetadata, body: Mapping[str, Any]) -> set[int] | None:
    """The table's schema ids and those the commit adds (None: one it adds has no id yet)."""
    ids = {s.schema_id for s in base.schemas}
    for update in updates_of(body, "add-schema"):
        added = _object(update.get("schema")).get("schema-id")
        if not isinstance(added, int) or added == UNASSIGNED:
            return None
        ids.add(added)
    return ids


def _spec_ids(base: TableMetadata, body: Mapping[str, Any]) -> set[int] | None:
    """The table's spec ids and those the commit adds (None: one it adds has no id yet)."""
    ids = {s.spec_id for s in base.partition_specs}
    for update in updates_of(body, "add-spec"):
        added = _object(update.get("spec")).get("spec-id")
        if not isinstance(added, int) or added == UNASSIGNED:
            return None
        ids.add(added)
    return ids
