"""A data commit may move a ref to its new snapshot, and nothing more.

``set-snapshot-ref`` carries the ref's ``type`` and retention settings (``min-snapshots-to-keep``,
``max-snapshot-age-ms``, ``max-ref-age-ms``) along with its target. Clients send the ref's current
values back unchanged on an ordinary write (Java copies them from the existing ref; pyiceberg
sends nulls for a ref that has none), so only a *difference* is a change of retention or ref kind,
which needs MANAGE_SNAPSHOTS even inside an INSERT (``max-snapshot-age-ms: 1`` lets the next
expiry drop the table's history).

The settings are compared with the ref in the base metadata; a ref that does not exist there (a
new table's ``main``, a new branch) or that the commit removed first (create or replace) must
carry the defaults: type ``branch`` and no retention values. Values compare by JSON type and value
(``true`` is not ``1``).

A tag of the base metadata never moves in a data commit: ``moves_tag`` makes any commit that
points it at a new snapshot need MANAGE_SNAPSHOTS.
"""

from __future__ import annotations

from typing import Any

from pyiceberg.table.refs import SnapshotRef, SnapshotRefType

from proxy.commits.updates import CommitScan

SETTINGS: tuple[str, ...] = ("type", "min-snapshots-to-keep", "max-snapshot-age-ms",
                             "max-ref-age-ms")
"""The fields of ``set-snapshot-ref`` besides its name and target."""

_DEFAULTS: tuple[Any, ...] = ("branch", None, None, None)


def changes_ref_settings(scan: CommitScan, ref: str) -> bool:
    """True if the commit's last ``set-snapshot-ref`` for ``ref`` changes its type or retention."""
    update = scan.ref_settings.get(ref)
    if update is None:
        return False
    claimed = tuple(update.get(name) for name in SETTINGS)
    current = None if scan.base is None else scan.base.refs.get(ref)
    allowed = [_DEFAULTS] if current is None else [_settings(current)]
    if ref in scan.reset_refs:
        allowed.append(_DEFAULTS)
    return not any(_same(claimed, values) for values in allowed)


def moves_tag(scan: CommitScan, ref: str) -> bool:
    """True if ``ref`` is a tag in the base metadata: a tag pins one snapshot (a release, an
    audit point), so pointing it anywhere else, even at the commit's new snapshot, or removing
    and re-creating it, is snapshot management whatever type the commit sends."""
    current = None if scan.base is None else scan.base.refs.get(ref)
    return current is not None and current.snapshot_ref_type == SnapshotRefType.TAG


def _settings(ref: SnapshotRef) -> tuple[Any, ...]:
    return (ref.snapshot_ref_type.value, ref.min_snapshots_to_keep, ref.max_snapshot_age_ms,
            ref.max_ref_age_ms)


def _same(claimed: tuple[Any, ...], values: tuple[Any, ...]) -> bool:
    return all(type(a) is type(b) and a == b for a, b in zip(claimed, values, strict=True))

