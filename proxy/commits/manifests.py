"""Reading manifest lists and manifests, to see what a snapshot really contains.

Manifests are read with the v3 entry schema (a superset of v1/v2), so deletion vectors keep their
``content_offset`` and file-scoped deletes their ``referenced_data_file``. Manifest lists are read
afresh (pyiceberg's process-wide manifest cache is bypassed: a list is a claim to check, and a
cached record from another list must not stand in for it). Any read failure is an
``UnverifiableCommit``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from pyiceberg.avro.file import AvroFile
from pyiceberg.io import FileIO
from pyiceberg.manifest import (
    MANIFEST_ENTRY_SCHEMAS,
    DataFile,
    DataFileContent,
    FileFormat,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
    read_manifest_list,
)

from proxy.commits.intent import UnverifiableCommit

T = TypeVar("T")

_DELETE_FILE_PATH_FIELD = 2147483546  # ``file_path`` of a position delete file's rows
_REFERENCED_DATA_FILE = 17  # positions in the v3 data_file struct
_CONTENT_OFFSET = 18
_MAX_REASON = 200


@dataclass(frozen=True)
class ContentFile:
    """One data or delete file as a manifest entry lists it (DVs are told apart by offset)."""

    path: str
    content: DataFileContent
    records: int
    offset: int | None = None
    sequence_number: int | None = None
    referenced_data_file: str | None = None

    @property
    def key(self) -> tuple[bool, str, int | None]:
        """Identity across manifests: data-or-delete, location and (for DVs) offset."""
        return (self.is_data, self.path, self.offset)

    @property
    def is_data(self) -> bool:
        return self.content == DataFileContent.DATA


@dataclass(frozen=True)
class Entry:
    """A manifest entry: its status, the snapshot it names (inherited if null) and its file."""

    status: ManifestEntryStatus
    snapshot_id: int | None
    file: ContentFile

    @property
    def live(self) -> bool:
        return self.status != ManifestEntryStatus.DELETED


def read_manifests(io: FileIO, manifest_list: str) -> tuple[ManifestFile, ...]:
    """The manifests a manifest list names, read fresh from ``manifest_list``."""
    what = f"manifest list {manifest_list}"
    return _guarded(what, lambda: tuple(read_manifest_list(io.new_input(manifest_list))))


def read_entries(io: FileIO, manifest: ManifestFile) -> tuple[Entry, ...]:
    """Every entry of ``manifest`` (deleted ones included), with inherited values filled in."""
    raw = _guarded(f"manifest {manifest.manifest_path}", lambda: _read_raw(io, manifest))
    return tuple(_entry(manifest, e) for e in raw)


def _read_raw(io: FileIO, manifest: ManifestFile) -> list[ManifestEntry]:
    with AvroFile[ManifestEntry](
        io.new_input(manifest.manifest_path),
        MANIFEST_ENTRY_SCHEMAS[3],
        read_types={-1: ManifestEntry, 2: DataFile},
        read_enums={0: ManifestEntryStatus, 101: FileFormat, 134: DataFileContent},
    ) as reader:
        return list(reader)


def _guarded(what: str, read: Callable[[], T]) -> T:
    try:
        return read()
    except Exception as exc:  # any I/O or decoding failure means: not verifiable
        raise UnverifiableCommit(
            f"cannot verify the commit: {what} is unreadable ({_reason(exc)})") from exc


def _reason(exc: Exception) -> str:
    """I/O errors say what went wrong; decoding errors only their type (their text can quote
    bytes of whatever file the client pointed at)."""
    if isinstance(exc, OSError):
        return (str(exc) or type(exc).__name__)[:_MAX_REASON]
    return f"not a readable Avro file: {type(exc).__name__}"


def _entry(manifest: ManifestFile, raw: ManifestEntry) -> Entry:
    data_file = raw.data_file
    _check_content(manifest, data_file)
    sequence = raw.sequence_number
    if sequence is None and raw.status == ManifestEntryStatus.ADDED:
        sequence = manifest.sequence_number
    file = ContentFile(
        path=data_file.file_path,
        content=DataFileContent(data_file.content),
        records=data_file.record_count,
        offset=data_file[_CONTENT_OFFSET],
        sequence_number=sequence,
        referenced_data_file=_referenced_data_file(data_file),
    )
    snapshot_id = raw.snapshot_id if raw.snapshot_id is not None else manifest.added_snapshot_id
    return Entry(ManifestEntryStatus(raw.status), snapshot_id, file)


def _check_content(manifest: ManifestFile, data_file: DataFile) -> None:
    is_data = data_file.content == DataFileContent.DATA
    if is_data != (manifest.content == ManifestContent.DATA):
        raise UnverifiableCommit(
            f"cannot verify the commit: manifest {manifest.manifest_path} of content "
            f"{manifest.content.name} lists {data_file.file_path} of content "
            f"{DataFileContent(data_file.content).name}")


def _referenced_data_file(data_file: DataFile) -> str | None:
    """The one data file a delete file applies to, if it is file-scoped (or a DV)."""
    if data_file.content == DataFileContent.DATA:
        return None
    referenced: str | None = data_file[_REFERENCED_DATA_FILE]
    if referenced is not None:
        return referenced
    lower = (data_file.lower_bounds or {}).get(_DELETE_FILE_PATH_FIELD)
    upper = (data_file.upper_bounds or {}).get(_DELETE_FILE_PATH_FIELD)
    if lower is None or lower != upper:
        return None
    return lower.decode("utf-8", errors="replace")
