"""The files a data operation adds: under the table (symbolic links resolved, ``confine``),
distinct, and what their declarations claim (``footers``: present with the declared size; for
Parquet, the declared number of rows, columns that fit the declared content and column metrics
the footer proves).

A location outside the table is refused before anything is opened; the rest is the one checker
every commit path shares (``footers.check_added_files``), so an operation's appends are held to
what an ordinary commit's added files are.
"""

from __future__ import annotations

from collections.abc import Iterable

from pyiceberg.io import FileIO
from pyiceberg.manifest import DataFile
from pyiceberg.table.metadata import TableMetadata

from proxy.commits.columns import FileRules
from proxy.commits.confine import canonical_location, shown_path, table_locations
from proxy.commits.footers import check_added_files as check_footers
from proxy.commits.intent import UnverifiableCommit
from proxy.commits.limits import CommitLimits


def check_added_files(files: Iterable[DataFile], metadata: TableMetadata, io: FileIO,
                      limits: CommitLimits) -> None:
    """Refuse (400) any added file that is outside the table, named twice, or not what it is
    declared to be (``footers.check_added_files``)."""
    locations = table_locations(metadata, {})
    seen: set[str] = set()
    added = list(files)
    for data_file in added:
        path = data_file.file_path
        locations.require(path, "content file")
        key = canonical_location(path)
        if key in seen:
            raise UnverifiableCommit(f"content file {shown_path(path)} is added twice")
        seen.add(key)
    check_footers(added, FileRules.of(metadata), io, table_uuid=str(metadata.table_uuid),
                  limits=limits)
