"""What the new manifest list says of a fresh manifest must be what its entries show.

A manifest-list record is the writer's summary of one manifest, and readers act on it without
opening the manifest: file counts let engines skip it, its ``sequence_number`` is the data
sequence number its ADDED entries inherit (which delete files apply to them), its
``min_sequence_number`` is the floor below which Java's next commit drops delete files as
expired, and its partition summaries prune it from filtered scans. A forged record therefore
hides rows or brings deleted ones back while the entries look like an append. So, for every
fresh manifest (one the new snapshot adds), recomputed from its entries:

* ``added/existing/deleted_files_count`` and ``..._rows_count`` equal the entries' (a null count,
  allowed in v1, is "unknown" to readers, who then open the manifest);
* ``sequence_number`` is the new snapshot's (its ``sequence-number``, 0 when absent as in v1);
  an ADDED entry's file sequence number is that too, and its data sequence number is not above
  it (compaction may keep an older one);
* ``min_sequence_number`` is not above the lowest data sequence number of a live entry (the
  snapshot's own when none is live). Lower is harmless and what some writers produce;
* each partition field summary covers the entries: ``contains_null`` true if an entry's value is
  null, ``contains_nan`` not false if one is NaN, and, when a value is neither, both bounds set
  and the values within them (decoded with the table's partition type for the manifest's spec;
  where the spec is not in the table yet, a create or a spec added by the same commit, only that
  the bounds are set). Strings compare by UTF-16 code unit as Java does; UUID bounds are only
  required to be set (implementations order them differently).

``added_snapshot_id`` and ``content`` are checked elsewhere (``diff``, ``manifests``). Each
difference is a reason; ``diff`` marks the snapshot as rewriting history (an UPDATE).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any
from uuid import UUID

from pyiceberg.conversions import from_bytes
from pyiceberg.manifest import ManifestEntryStatus, ManifestFile, PartitionFieldSummary
from pyiceberg.types import PrimitiveType, StringType, StructType, UUIDType

from proxy.commits.manifests import Entry

_PARTITION = 3  # position of ``partition`` in an entry's canonical data-file record
_NAN = ("NaN",)  # ``manifests.canonical``'s NaN marker


def fresh_record_changes(manifest: ManifestFile, entries: Sequence[Entry], sequence_number: int,
                         partition_types: Mapping[int, StructType]) -> list[str]:
    """Reasons, one per field of ``manifest``'s list record that its ``entries`` contradict."""
    fields = [*_count_fields(manifest, entries), *_sequence_fields(manifest, entries,
                                                                   sequence_number)]
    fields += _partition_fields(manifest, entries,
                                partition_types.get(manifest.partition_spec_id))
    if not fields:
        return []
    return [f"manifest list record of new manifest {manifest.manifest_path} disagrees with its "
            f"entries in {', '.join(dict.fromkeys(fields))}"]


def _count_fields(manifest: ManifestFile, entries: Sequence[Entry]) -> list[str]:
    claimed = {
        ManifestEntryStatus.ADDED: ("added", manifest.added_files_count,
                                    manifest.added_rows_count),
        ManifestEntryStatus.EXISTING: ("existing", manifest.existing_files_count,
                                       manifest.existing_rows_count),
        ManifestEntryStatus.DELETED: ("deleted", manifest.deleted_files_count,
                                      manifest.deleted_rows_count),
    }
    fields: list[str] = []
    for status, (name, files, rows) in claimed.items():
        listed = [e for e in entries if e.status == status]
        if files is not None and files != len(listed):
            fields.append(f"{name}_files_count")
        if rows is not None and rows != sum(e.file.records for e in listed):
            fields.append(f"{name}_rows_count")
    return fields


def _sequence_fields(manifest: ManifestFile, entries: Sequence[Entry],
                     sequence_number: int) -> list[str]:
    fields: list[str] = []
    if manifest.sequence_number != sequence_number:
        fields.append("sequence_number")
    added = [e for e in entries if e.status == ManifestEntryStatus.ADDED]
    if any(e.file_sequence_number != sequence_number for e in added):
        fields.append("file_sequence_number of an ADDED entry")
    if any((e.file.sequence_number or 0) > sequence_number for e in added):
        fields.append("sequence_number of an ADDED entry")
    floor = min((e.file.sequence_number or 0 for e in entries if e.live),
                default=sequence_number)
    if manifest.min_sequence_number > floor:
        fields.append("min_sequence_number")
    return fields


def _partition_fields(manifest: ManifestFile, entries: Sequence[Entry],
                      partition_type: StructType | None) -> list[str]:
    summaries: list[PartitionFieldSummary] = list(manifest.partitions or [])
    if not summaries or not entries:
        return []  # no summary: readers open the manifest
    values = [e.record[_PARTITION] for e in entries]
    if any(not isinstance(v, tuple) or len(v) != len(summaries) for v in values):
        return ["partitions (field count)"]
    types = _field_types(partition_type, len(summaries))
    return [f"partitions[{i}]" for i, summary in enumerate(summaries)
            if not _covers(summary, [v[i] for v in values], types[i])]


def _field_types(partition_type: StructType | None, count: int) -> list[PrimitiveType | None]:
    if partition_type is None or len(partition_type.fields) != count:
        return [None] * count
    return [f.field_type if isinstance(f.field_type, PrimitiveType) else None
            for f in partition_type.fields]


def _covers(summary: PartitionFieldSummary, values: list[Any],
            field_type: PrimitiveType | None) -> bool:
    """True if ``summary`` says nothing that ``values`` (one partition field) contradict."""
    if summary.contains_null is not True and any(v is None for v in values):
        return False
    if summary.contains_nan is False and any(_is_nan(v) for v in values):
        return False
    present = [v for v in values if v is not None and not _is_nan(v)]
    if not present:
        return True
    if summary.lower_bound is None or summary.upper_bound is None:
        return False  # readers take a missing bound for "every value is null"
    if field_type is None or isinstance(field_type, UUIDType):
        return True
    try:
        lower = _ordered(field_type, from_bytes(field_type, summary.lower_bound))
        upper = _ordered(field_type, from_bytes(field_type, summary.upper_bound))
        ordered = [_ordered(field_type, v) for v in present]
        return bool(lower <= min(ordered) and max(ordered) <= upper)
    except Exception:  # undecodable bound or a value of another type: not covered
        return False


def _ordered(field_type: PrimitiveType, value: Any) -> Any:
    """``value`` in a form Python orders as Iceberg's Java comparators do."""
    if isinstance(field_type, StringType) and isinstance(value, str):
        return value.encode("utf-16-be", errors="surrogatepass")
    if isinstance(value, UUID):
        return value.bytes
    return value


def _is_nan(value: Any) -> bool:
    return value == _NAN or (isinstance(value, float) and math.isnan(value))
