"""Which delete files apply to a data file, by Iceberg's rules (the spec's "Scan Planning").

* A **position delete file** applies to data files whose data sequence number is less than or
  equal to its own: those of its partition (same spec id and partition values), narrowed by its
  ``file_path`` bounds; or, when it is scoped to one data file (``referenced_data_file``, or equal
  ``file_path`` bounds), only to that file.
* A **deletion vector** (v3, a Puffin blob) applies to its ``referenced_data_file`` when its data
  sequence number is not older than the data file's; a data file with a deletion vector takes no
  position delete files (a v3 writer merges them into the vector), like Iceberg's own index.
* An **equality delete file** applies to data files whose data sequence number is strictly less
  than its own: those of its partition, or every data file when its spec is unpartitioned.

``DeleteIndex`` is built once per plan from the delete manifests' live entries and then only
read, so the planner's threads can share it.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Mapping
from typing import Any

from pyiceberg.manifest import (
    INITIAL_SEQUENCE_NUMBER,
    DataFile,
    DataFileContent,
    FileFormat,
    ManifestEntry,
)
from pyiceberg.partitioning import PartitionSpec

FILE_PATH_FIELD_ID = 2147483546  # the ``file_path`` column of position delete files
_REFERENCED_DATA_FILE = 17  # DataFile position of v3 ``referenced_data_file``
_CONTENT_OFFSET = 18  # DataFile position of v3 ``content_offset``

PartitionKey = tuple[int, tuple[Any, ...]]


def partition_key(data_file: DataFile) -> PartitionKey:
    """The spec id and partition values of a content file, as a hashable key."""
    partition = data_file.partition
    return data_file.spec_id, tuple(partition._data) if partition is not None else ()


def _v3_field(data_file: DataFile, position: int) -> Any:
    values = data_file._data
    return values[position] if len(values) > position else None


def referenced_data_file(delete_file: DataFile) -> str | None:
    """The one data file a position delete file is scoped to: its ``referenced_data_file``,
    or its ``file_path`` bounds when they are equal; None when it may cover several."""
    referenced = _v3_field(delete_file, _REFERENCED_DATA_FILE)
    if isinstance(referenced, str):
        return referenced
    lower, upper = _path_bounds(delete_file)
    if lower is not None and lower == upper:
        try:
            return lower.decode("utf-8")
        except UnicodeDecodeError:
            return None
    return None


def is_deletion_vector(delete_file: DataFile) -> bool:
    """True for a v3 deletion vector (a Puffin blob) rather than a position delete file."""
    return (delete_file.file_format == FileFormat.PUFFIN
            or _v3_field(delete_file, _CONTENT_OFFSET) is not None)


def _path_bounds(delete_file: DataFile) -> tuple[bytes | None, bytes | None]:
    lower, upper = delete_file.lower_bounds, delete_file.upper_bounds
    return ((lower or {}).get(FILE_PATH_FIELD_ID), (upper or {}).get(FILE_PATH_FIELD_ID))


def _may_cover(delete_file: DataFile, data_path: bytes) -> bool:
    """False when the ``file_path`` bounds of a position delete file exclude ``data_path``
    (bounds compare as UTF-8 bytes; a truncated bound still brackets the full value)."""
    lower, upper = _path_bounds(delete_file)
    return (lower is None or lower <= data_path) and (upper is None or data_path <= upper)


class _BySequence:
    """Delete files ordered by data sequence number, for range lookups."""

    __slots__ = ("_files", "_pending", "_sequences")

    def __init__(self) -> None:
        self._pending: list[tuple[int, DataFile]] = []
        self._sequences: list[int] = []
        self._files: list[DataFile] = []

    def add(self, sequence: int, delete_file: DataFile) -> None:
        self._pending.append((sequence, delete_file))

    def seal(self) -> None:
        ordered = sorted(self._pending, key=lambda pair: pair[0])
        self._sequences = [sequence for sequence, _ in ordered]
        self._files = [delete_file for _, delete_file in ordered]
        self._pending = []

    def all(self) -> list[DataFile]:
        return list(self._files)

    def at_or_after(self, sequence: int) -> list[DataFile]:
        """Files whose sequence number is >= ``sequence`` (position deletes)."""
        return self._files[bisect_left(self._sequences, sequence):]

    def after(self, sequence: int) -> list[DataFile]:
        """Files whose sequence number is > ``sequence`` (equality deletes)."""
        return self._files[bisect_right(self._sequences, sequence):]


def _sequence(entry: ManifestEntry) -> int:
    sequence = entry.sequence_number
    return INITIAL_SEQUENCE_NUMBER if sequence is None else sequence


class DeleteIndex:
    """The delete files of one plan, indexed for ``for_data``. Add every delete entry, then
    ``seal`` once; a sealed index is read-only and safe to share between threads."""

    def __init__(self, specs: Mapping[int, PartitionSpec]) -> None:
        self._specs = specs
        self._positions: dict[PartitionKey, _BySequence] = {}
        self._scoped: dict[str, _BySequence] = {}
        self._vectors: dict[str, list[tuple[int, DataFile]]] = {}
        self._equality: dict[PartitionKey, _BySequence] = {}
        self._global = _BySequence()
        self._has_global = False
        self.count = 0

    @property
    def empty(self) -> bool:
        """True when no delete file was added."""
        return self.count == 0

    def add(self, entry: ManifestEntry) -> None:
        """Index one live delete entry (its sequence number and spec id inherited)."""
        delete_file, sequence = entry.data_file, _sequence(entry)
        self.count += 1
        if delete_file.content == DataFileContent.EQUALITY_DELETES:
            self._add_equality(sequence, delete_file)
            return
        target = referenced_data_file(delete_file)
        if is_deletion_vector(delete_file) and target is not None:
            self._vectors.setdefault(target, []).append((sequence, delete_file))
        elif target is not None:
            self._scoped.setdefault(target, _BySequence()).add(sequence, delete_file)
        else:
            key = partition_key(delete_file)
            self._positions.setdefault(key, _BySequence()).add(sequence, delete_file)

    def _add_equality(self, sequence: int, delete_file: DataFile) -> None:
        spec = self._specs.get(delete_file.spec_id)
        if spec is None or spec.is_unpartitioned():
            self._global.add(sequence, delete_file)
            self._has_global = True
        else:
            key = partition_key(delete_file)
            self._equality.setdefault(key, _BySequence()).add(sequence, delete_file)

    def seal(self) -> DeleteIndex:
        """Finish adding; returns the index itself."""
        for group in (*self._positions.values(), *self._scoped.values(),
                      *self._equality.values(), self._global):
            group.seal()
        return self

    def for_data(self, entry: ManifestEntry) -> set[DataFile]:
        """The delete files that apply to a live data entry."""
        if self.count == 0:
            return set()
        data_file, sequence = entry.data_file, _sequence(entry)
        key = partition_key(data_file)
        found: set[DataFile] = set()
        if self._has_global:
            found.update(self._global.after(sequence))
        if equality := self._equality.get(key):
            found.update(equality.after(sequence))
        vector = self._vector_for(data_file.file_path, sequence)
        if vector is not None:
            found.add(vector)
            return found
        if scoped := self._scoped.get(data_file.file_path):
            found.update(scoped.at_or_after(sequence))
        if positions := self._positions.get(key):
            path = data_file.file_path.encode("utf-8")
            found.update(d for d in positions.at_or_after(sequence) if _may_cover(d, path))
        return found

    def _vector_for(self, path: str, sequence: int) -> DataFile | None:
        """The newest deletion vector of ``path`` not older than the data (a table has at
        most one live vector per data file; the newest wins if a crafted one has more)."""
        best: tuple[int, DataFile] | None = None
        for candidate in self._vectors.get(path, ()):
            if candidate[0] >= sequence and (best is None or candidate[0] > best[0]):
                best = candidate
        return None if best is None else best[1]

    def files(self) -> list[DataFile]:
        """Every indexed delete file."""
        groups = (*self._positions.values(), *self._scoped.values(),
                  *self._equality.values(), self._global)
        listed = [f for group in groups for f in group.all()]
        listed.extend(f for vectors in self._vectors.values() for _, f in vectors)
        return listed
