"""The table metadata a governed principal is served: the base's, its snapshots governed.

``governed_metadata`` takes the base metadata (already without denied columns) and the governed
snapshots built so far, and returns metadata whose snapshots are exactly those, each pointing at
its governed manifest list, with a summary that counts governed data and records which base
snapshot and view it governs (``icegov.governed-*``, after the materialized-view proposal's
``refresh-state``). Refs and the current snapshot follow the newest governed ancestor when the
base's own is not built yet; refs with none are dropped. Nothing that names a base file or
states base statistics is kept: the metadata log, statistics and partition statistics files
go, and the properties say how fresh the answer is (``Freshness``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from proxy.governed.snapshots import GovernedSnapshot

Json = dict[str, Any]

BASE_SNAPSHOT = "icegov.governed-base-snapshot-id"
VIEW = "icegov.governed-view"
PROPERTY_PREFIX = "icegov.governed."


@dataclass(frozen=True)
class Freshness:
    """How the served governed snapshot relates to the base's current one."""

    served_snapshot_id: int | None
    base_snapshot_id: int | None
    stale_seconds: float

    @property
    def current(self) -> bool:
        return self.served_snapshot_id == self.base_snapshot_id

    def properties(self, digest: str) -> dict[str, str]:
        return {
            f"{PROPERTY_PREFIX}view": digest,
            f"{PROPERTY_PREFIX}base-snapshot-id": str(self.base_snapshot_id),
            f"{PROPERTY_PREFIX}served-snapshot-id": str(self.served_snapshot_id),
            f"{PROPERTY_PREFIX}stale-seconds": f"{self.stale_seconds:.3f}",
        }

    def to_json(self) -> Json:
        return {"served_snapshot_id": self.served_snapshot_id,
                "base_snapshot_id": self.base_snapshot_id,
                "stale_seconds": round(self.stale_seconds, 3)}


def _parents(snapshots: list[Json]) -> dict[int, int | None]:
    return {int(s["snapshot-id"]): s.get("parent-snapshot-id") for s in snapshots}


def newest_built(snapshot_id: int | None, parents: Mapping[int, int | None],
                 built: Mapping[int, GovernedSnapshot]) -> int | None:
    """``snapshot_id`` or its newest ancestor that is built (None: none is)."""
    seen: set[int] = set()
    current = snapshot_id
    while current is not None and current not in seen:
        if current in built:
            return current
        seen.add(current)
        current = parents.get(current)
    return None


def governed_snapshot_json(base: Json, governed: GovernedSnapshot, digest: str) -> Json:
    """One base snapshot's JSON as governed: its manifest list and summary replaced."""
    raw = base.get("summary")
    summary: Json = raw if isinstance(raw, dict) else {}
    return {
        **{k: v for k, v in base.items() if k not in ("summary", "manifest-list", "manifests")},
        "manifest-list": governed.manifest_list,
        "summary": {
            "operation": str(summary.get("operation", "append")),
            "total-data-files": str(governed.data_files),
            "total-records": str(governed.records),
            "total-delete-files": "0",
            "total-position-deletes": "0",
            "total-equality-deletes": "0",
            BASE_SNAPSHOT: str(base["snapshot-id"]),
            VIEW: digest,
        },
    }


def governed_metadata(base: Json, built: Mapping[int, GovernedSnapshot], digest: str,
                      freshness: Freshness) -> Json:
    """``base`` (a TableMetadata JSON without denied columns) with only governed snapshots."""
    snapshots = [s for s in base.get("snapshots") or () if isinstance(s, dict)]
    parents = _parents(snapshots)
    kept = [governed_snapshot_json(s, built[int(s["snapshot-id"])], digest)
            for s in snapshots if int(s["snapshot-id"]) in built]
    refs: Json = {}
    for name, ref in (base.get("refs") or {}).items():
        target = newest_built(ref.get("snapshot-id"), parents, built)
        if target is not None:
            refs[name] = {**ref, "snapshot-id": target}
    current = freshness.served_snapshot_id
    result = {k: v for k, v in base.items()
              if k not in ("statistics", "partition-statistics", "metadata-log")}
    result.update({
        "snapshots": kept,
        "refs": refs,
        "current-snapshot-id": current if current is not None else -1,
        "snapshot-log": [e for e in base.get("snapshot-log") or ()
                         if isinstance(e, dict) and e.get("snapshot-id") in built],
        "metadata-log": [],
        "statistics": [],
        "partition-statistics": [],
        "properties": {**(base.get("properties") or {}), **freshness.properties(digest)},
    })
    if current is None:
        result.pop("current-snapshot-id")
    return result
