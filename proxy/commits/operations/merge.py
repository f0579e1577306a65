"""Merging small data manifests into an append's new manifest, as Iceberg's merging append does,
so a table written by many small appends keeps a short manifest list.

Per partition spec that the append adds data files to: when the head holds at least
``commit.manifest.min-count-to-merge`` (default 100) data manifests of that spec smaller than
``commit.manifest.target-size-bytes`` (default 8 MiB), counting the new one, all of those are
merged into the new manifest (their live entries become EXISTING). Larger manifests are never
rewritten, so a merge costs at most about ``min-count x target size`` of reading.
``commit.manifest-merge.enabled=false`` turns merging off.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from pyiceberg.manifest import DataFile, DataFileContent, ManifestContent, ManifestFile
from pyiceberg.table.metadata import TableMetadata

_ENABLED, _MIN_COUNT, _TARGET = ("commit.manifest-merge.enabled",
                                 "commit.manifest.min-count-to-merge",
                                 "commit.manifest.target-size-bytes")
_DEFAULT_MIN_COUNT, _DEFAULT_TARGET = 100, 8 * 1024 * 1024


def manifests_to_merge(manifests: Iterable[ManifestFile], added: Iterable[DataFile],
                       metadata: TableMetadata) -> list[ManifestFile]:
    """The head's data manifests to merge into the new manifests of ``added``."""
    properties = metadata.properties
    if properties.get(_ENABLED, "true").lower() == "false":
        return []
    min_count = _int(properties.get(_MIN_COUNT), _DEFAULT_MIN_COUNT)
    target = _int(properties.get(_TARGET), _DEFAULT_TARGET)
    specs = {f.spec_id for f in added if f.content == DataFileContent.DATA}
    small: dict[int, list[ManifestFile]] = defaultdict(list)
    for manifest in manifests:
        if (manifest.content == ManifestContent.DATA and manifest.partition_spec_id in specs
                and manifest.manifest_length < target):
            small[manifest.partition_spec_id].append(manifest)
    return [m for group in small.values() if len(group) + 1 >= min_count for m in group]


def _int(text: str | None, default: int) -> int:
    try:
        return max(int(text), 1) if text is not None else default
    except ValueError:
        return default
