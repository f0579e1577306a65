"""A commit's new snapshots must keep the table's history in order.

Iceberg readers (the Java library, hence Spark) refuse to load metadata whose snapshot log goes
back in time by more than a minute, or whose snapshots carry sequence numbers above the table's
last sequence number. A snapshot stamped before the one it follows (beyond that minute) or
further in the future than the same minute (every honest snapshot after it would then go back in
time), or a format-v2+ snapshot whose sequence number is not the next one (absent, not rising,
or jumping ahead), would make the table unloadable, or lock every other writer out: such a
commit is refused, whatever rights the caller holds. A sequence number that does not rise is
what a client built on a stale base sends, so it is refused as a conflict (409, nothing landed:
the client retries); one absent or jumping ahead is refused (400).
Each snapshot is checked against the table *and* against the snapshots before it in the commit.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pyiceberg.table.metadata import TableMetadata

from proxy.commits.intent import UnverifiableCommit
from proxy.commits.shape import updates_of
from proxy.commits.snapshots import ClaimedSnapshot
from proxy.errors import CommitFailed

DEFAULT_FORMAT = 2
ORDER_TOLERANCE_MS = 60_000  # what Java readers tolerate between snapshot log entries
FUTURE_TOLERANCE_MS = ORDER_TOLERANCE_MS  # more would let one snapshot lock others out


def commit_format(body: Mapping[str, Any], base: TableMetadata | None) -> int:
    """The table's format version once ``body`` lands: its last ``upgrade-format-version``,
    else the base's, else (a create that names none) 2, Java's and PyIceberg's default."""
    upgrades = [u.get("format-version") for u in updates_of(body, "upgrade-format-version")]
    named = [v for v in upgrades if type(v) is int]
    if named:
        return named[-1]
    return base.format_version if base is not None else DEFAULT_FORMAT


def check_snapshot_order(added: Iterable[ClaimedSnapshot], base: TableMetadata | None,
                         now_ms: int, *, format_version: int | None = None) -> None:
    """Refuse the commit's snapshots (in commit order) when out of sequence (409) or time (400)
    order; see the module doc. ``format_version``: the table's once the commit lands
    (``commit_format``; default: the base's, 2 for a create)."""
    last_stamp = _last_logged(base)
    last_sequence = int(getattr(base, "last_sequence_number", 0) or 0)
    if format_version is None:
        format_version = base.format_version if base is not None else DEFAULT_FORMAT
    for snapshot in added:
        if format_version >= 2 or snapshot.sequence_number:  # v1: none, or else the next
            last_sequence = _next_sequence(snapshot.sequence_number, last_sequence)
        stamp = snapshot.timestamp_ms
        if stamp < last_stamp - ORDER_TOLERANCE_MS or stamp > now_ms + FUTURE_TOLERANCE_MS:
            raise UnverifiableCommit(
                "add-snapshot timestamp-ms would put the table's snapshot log out of order "
                "(before the snapshot it follows, or in the future)")
        last_stamp = max(last_stamp, stamp)


def _next_sequence(number: int, last: int) -> int:
    """A format-v2+ snapshot's sequence number (0: absent) after ``last``: exactly the next
    one. Lower is a client built on a stale base (409: retry); absent or higher is what no
    writer sends: a missing number rewinds the table's last sequence number (Java then refuses
    the table), a jump towards the end of the ``long`` range leaves every later writer's
    ``last + 1`` overflowing (400)."""
    if 0 < number <= last:  # first: a stale client must get its 409
        raise CommitFailed(
            f"add-snapshot sequence-number {number} does not rise above the table's last "
            f"sequence number {last}: the table changed, retry")
    if number != last + 1:
        raise UnverifiableCommit(
            f"add-snapshot sequence-number must be the table's next, {last + 1}"
            + ("" if number else " (a table of format 2 or later needs one)"))
    return number


def _last_logged(base: TableMetadata | None) -> int:
    if base is None:
        return 0
    # the log readers check (staged and branch snapshots are not in it)
    return max((entry.timestamp_ms for entry in base.snapshot_log), default=0)
