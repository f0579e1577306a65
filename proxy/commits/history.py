"""What a new snapshot carries over from its predecessor must be carried over unchanged.

A snapshot's manifest list keeps most of its predecessor's manifests, and its fresh manifests
re-list files of the manifests it drops as EXISTING (still live) or DELETED (removed now). Readers
trust those copies: a kept manifest's sequence number decides which delete files apply to its
files, its file counts let engines skip it, and a re-listed file's bounds drive pruning. A copy
that differs from the original therefore rewrites history while looking like an append (deleted
rows return, rows vanish from filtered reads). So:

* every kept manifest's manifest-list record must equal the predecessor's in every field (path,
  length, spec, content, sequence numbers, added snapshot, file and row counts, partition
  summaries, key metadata; ``first_row_id`` when the predecessor had one: a v3 writer assigns
  one to manifests that lacked it);
* every entry re-listed EXISTING or DELETED must equal the original live entry in every field
  of its data file, its data and file sequence numbers and its partition spec; an EXISTING entry
  also keeps its original snapshot id (a DELETED one carries the new snapshot's id, as Java and
  pyiceberg write it, which ``diff`` checks). ``first_row_id`` is compared when the original
  had one written out;
* an EXISTING or DELETED entry must have an original (no writer re-lists a file it did not
  take from a replaced manifest: an EXISTING one invents a history, e.g. an old sequence
  number; a DELETED one for a file a kept manifest still holds live, or that was never live,
  has snapshot expiry delete a live file), an ADDED entry must not re-add a file a replaced
  manifest held (it would get a new sequence number, so the deletes that applied to it stop
  applying), and no file is listed twice in the fresh manifests (a DELETED entry beside an
  EXISTING one for the same file is a removal expiry acts on while the file stays live);
* a data file a kept manifest still holds live must not be listed live again in a fresh manifest
  (the new listing's sequence number escapes the deletes that apply to the kept one: deleted rows
  return) nor be removed from a replaced manifest (the file stays live, so its removal cannot
  orphan a delete file). ``diff`` reads the kept data manifests for this only while delete files
  are live, since without them a second listing hides no deletion (it is a duplicate, not
  flagged: checking it would read every kept manifest on every append).

Files are identified by physical location (``ContentFile.key``, ``confine.canonical_location``):
``file:/x`` listed beside a live ``file:///x`` is the same file listed again. What the new list
says of the fresh manifests is checked by ``listing``. Each difference is reported as a
reason; ``diff`` marks the snapshot as rewriting history, which
``classify`` turns into an UPDATE that is never verified.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pyiceberg.manifest import (
    MANIFEST_ENTRY_SCHEMAS,
    MANIFEST_LIST_FILE_SCHEMAS,
    ManifestEntryStatus,
    ManifestFile,
)
from pyiceberg.typedef import Record
from pyiceberg.types import StructType

from proxy.commits.manifests import ContentFile, Entry, FileKey, canonical

_Key = FileKey
_LIST_FIELDS = tuple(f.name for f in MANIFEST_LIST_FILE_SCHEMAS[3].fields)
_DATA_FILE_TYPE = MANIFEST_ENTRY_SCHEMAS[3].find_field(2).field_type
assert isinstance(_DATA_FILE_TYPE, StructType)
_FILE_FIELDS = tuple(f.name for f in _DATA_FILE_TYPE.fields)
_ASSIGNABLE = "first_row_id"  # may be filled in where the original had none
_MAX_REPORTED = 3


def kept_manifest_changes(before: Iterable[ManifestFile],
                          after: Iterable[ManifestFile]) -> list[str]:
    """Reasons, one per kept manifest whose list record differs from the predecessor's."""
    originals = {m.manifest_path: m for m in before}
    reasons: list[str] = []
    for manifest in after:
        original = originals.get(manifest.manifest_path)
        if original is None or Record.__eq__(original, manifest):
            continue  # the same values in every field (ManifestFile's own == compares paths only)
        fields = _differing(_LIST_FIELDS, canonical(original), canonical(manifest))
        if fields:
            reasons.append(f"kept manifest {manifest.manifest_path} differs from the parent's "
                           f"manifest list in {', '.join(fields)}")
    return _capped(reasons)


def relisted_entry_changes(fresh: Iterable[Entry], originals: Mapping[_Key, Entry]) -> list[str]:
    """Reasons, one per fresh entry that invents or alters history: an EXISTING or DELETED entry
    that differs from (or has no) original live entry, an ADDED one that re-adds a held file,
    a file listed twice in the fresh manifests."""
    reasons: list[str] = []
    seen: set[_Key] = set()
    for entry in fresh:
        if entry.file.key in seen:
            reasons.append(f"{entry.file.path} is listed more than once in the new manifests")
        seen.add(entry.file.key)
        original = originals.get(entry.file.key)
        if original is None or entry.status == ManifestEntryStatus.ADDED:
            reasons += _unoriginal(entry, original)
            continue
        fields = _entry_differences(entry, original)
        if fields:
            reasons.append(f"{entry.status.name} entry for {entry.file.path} differs from the "
                           f"original entry in {', '.join(fields)}")
    return _capped(reasons)


def kept_file_relistings(fresh: Iterable[Entry], dropped_live: Iterable[ContentFile],
                         held: Mapping[str, frozenset[_Key]]) -> list[str]:
    """Reasons, one per data file that a kept manifest (``held``: path -> live file keys) still
    holds live and that the snapshot lists live in a fresh manifest or removes."""
    relisted = {e.file.key: e for e in fresh if e.live and e.file.is_data}
    removed = {f.key: f for f in dropped_live if f.is_data and f.key not in relisted}
    wanted = relisted.keys() | removed.keys()
    holders: dict[_Key, str] = {}
    for manifest_path, keys in held.items():
        for key in keys & wanted:
            holders.setdefault(key, manifest_path)
    reasons = [f"{relisted[key].status.name} entry lists {relisted[key].file.path} again, which "
               f"kept manifest {holder} still holds live (deletes that apply to it would not "
               "apply to the new listing)"
               for key, holder in holders.items() if key in relisted]
    reasons += [f"{removed[key].path} is removed while kept manifest {holder} still holds it "
                "live" for key, holder in holders.items() if key in removed]
    return _capped(reasons)


def _unoriginal(entry: Entry, original: Entry | None) -> list[str]:
    """An ADDED entry for a file the parent held, or an EXISTING or DELETED one for a file no
    replaced manifest held live (a DELETED one would let snapshot expiry delete a file that is
    still live, or was never the table's)."""
    if entry.status == ManifestEntryStatus.ADDED and original is not None:
        return [f"ADDED entry re-adds {entry.file.path}, which a replaced manifest holds"]
    if entry.status != ManifestEntryStatus.ADDED and original is None:
        return [f"{entry.status.name} entry for {entry.file.path}, which no replaced manifest "
                "held live"]
    return []


def _entry_differences(entry: Entry, original: Entry) -> list[str]:
    fields = _differing(_FILE_FIELDS, original.record, entry.record)
    tracked = [("sequence_number", original.file.sequence_number, entry.file.sequence_number),
               ("file_sequence_number", original.file_sequence_number,
                entry.file_sequence_number),
               ("partition_spec_id", original.spec_id, entry.spec_id)]
    if entry.status == ManifestEntryStatus.EXISTING:
        tracked.append(("snapshot_id", original.snapshot_id, entry.snapshot_id))
    return fields + [name for name, old, new in tracked if old != new]


def _differing(names: Sequence[str], old: Any, new: Any) -> list[str]:
    """Names of the fields whose values differ (``first_row_id`` only if it was set)."""
    old_values, new_values = tuple(old), tuple(new)
    if len(old_values) != len(new_values):
        return ["record shape"]
    return [name for name, a, b in zip(names, old_values, new_values, strict=False)
            if a != b and not (name == _ASSIGNABLE and a is None)]


def _capped(reasons: list[str]) -> list[str]:
    if len(reasons) <= _MAX_REPORTED:
        return reasons
    return [*reasons[:_MAX_REPORTED], f"(and {len(reasons) - _MAX_REPORTED} more such changes)"]
