"""A new snapshot's timestamp must keep the table's snapshot log in order.

Iceberg readers (the Java library, hence Spark) refuse to load metadata whose snapshot log goes
back in time by more than a minute. A snapshot stamped long before the table's last one, or far
in the future (every honest snapshot after it would then go back in time), would make the table
unloadable for everyone: such a commit is refused, whatever rights the caller holds.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pyiceberg.table.metadata import TableMetadata

from proxy.commits.intent import UnverifiableCommit

ORDER_TOLERANCE_MS = 60_000  # what Java readers tolerate between snapshot log entries
FUTURE_TOLERANCE_MS = 15 * 60_000  # clock skew between a client and icegov


def check_snapshot_times(body: Mapping[str, Any], base: TableMetadata | None,
                         now_ms: int) -> None:
    """Refuse (400) an ``add-snapshot`` stamped before the table's last snapshot (beyond the
    readers' tolerance) or too far in the future."""
    floor = _last_logged(base) - ORDER_TOLERANCE_MS
    ceiling = now_ms + FUTURE_TOLERANCE_MS
    for update in body.get("updates") or []:
        if not isinstance(update, Mapping) or update.get("action") != "add-snapshot":
            continue
        snapshot = update.get("snapshot")
        stamp = snapshot.get("timestamp-ms") if isinstance(snapshot, Mapping) else None
        if isinstance(stamp, bool) or not isinstance(stamp, int):
            raise UnverifiableCommit("add-snapshot needs an integer timestamp-ms")
        if stamp < floor or stamp > ceiling:
            raise UnverifiableCommit(
                "add-snapshot timestamp-ms would put the table's snapshot log out of order "
                "(before its last snapshot, or in the future)")


def _last_logged(base: TableMetadata | None) -> int:
    if base is None:
        return 0
    stamps = [entry.timestamp_ms for entry in base.snapshot_log]
    stamps += [snapshot.timestamp_ms for snapshot in base.snapshots]
    return max(stamps, default=0)
