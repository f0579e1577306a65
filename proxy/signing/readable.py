"""The files a governed principal may read: exactly those its governed metadata lists.

For a governed metadata file (named in a grant), the set is that file, every snapshot's
manifest list, every manifest those list, and every live data and delete file those manifests
list — base files referenced in place and governed copies alike. Governed files are named by
their content and never change, so a set is built once per metadata file (read with icegov's
own ``file_io``) and remembered, at most ``capacity`` paths in all.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from pyiceberg.io import load_file_io
from pyiceberg.serializers import FromInputFile

from proxy.commits.confine import canonical_location
from proxy.commits.lru import SizedLru

Paths = frozenset[str]


def governed_paths(metadata_location: str, file_io: Mapping[str, str]) -> Paths:
    """Every file the governed metadata at ``metadata_location`` lists (canonical spelling)."""
    io = load_file_io(dict(file_io), metadata_location)
    metadata = FromInputFile.table_metadata(io.new_input(metadata_location))
    found = {metadata_location}
    for snapshot in metadata.snapshots:
        found.add(snapshot.manifest_list)
        for manifest in snapshot.manifests(io):
            found.add(manifest.manifest_path)
            found.update(entry.data_file.file_path
                         for entry in manifest.fetch_manifest_entry(io, discard_deleted=True))
    return frozenset(canonical_location(path) for path in found)


class GovernedFiles:
    """Remembered governed file sets, one build per metadata file at a time."""

    def __init__(self, file_io: Mapping[str, str], capacity: int = 2_000_000) -> None:
        self._file_io = dict(file_io)
        self._sets: SizedLru[str, Paths] = SizedLru(capacity, len)
        self._building: dict[str, asyncio.Future[Paths]] = {}

    async def paths(self, metadata_location: str) -> Paths:
        """The files ``metadata_location`` lists (read off the event loop)."""
        known = self._sets.get(metadata_location)
        if known is not None:
            return known
        pending = self._building.get(metadata_location)
        if pending is not None:
            return await asyncio.shield(pending)
        future: asyncio.Future[Paths] = asyncio.get_running_loop().create_future()
        self._building[metadata_location] = future
        try:
            paths = await asyncio.to_thread(governed_paths, metadata_location, self._file_io)
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: no "never retrieved" warning when none waits
            raise
        finally:
            self._building.pop(metadata_location, None)
        self._sets.put(metadata_location, paths)
        future.set_result(paths)
        return paths
