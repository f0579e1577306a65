"""The files icegov wrote for a commit it built (a rebased append, a data operation), and their
removal once that commit provably did not land (refused, or superseded by a later try after a
conflict). Only icegov's own files are ever removed: the snapshot's manifest list and the
manifests it adds; the client's files and every manifest carried from the table stay.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import structlog
from pyiceberg.io import FileIO
from pyiceberg.manifest import read_manifest_list

from proxy.commits.shape import updates_of

log = structlog.get_logger("icegov")


def written_files(body: Mapping[str, Any], io: FileIO) -> list[str]:
    """The manifest lists of ``body``'s new snapshots and the manifests each adds."""
    files: list[str] = []
    for update in updates_of(body, "add-snapshot"):
        snapshot = update.get("snapshot") or {}
        manifest_list = snapshot.get("manifest-list")
        if not isinstance(manifest_list, str):
            continue
        own = snapshot.get("snapshot-id")
        files.extend(m.manifest_path for m in read_manifest_list(io.new_input(manifest_list))
                     if m.added_snapshot_id == own)
        files.append(manifest_list)
    return files


def discard(body: Mapping[str, Any], io: FileIO) -> None:
    """Remove the files icegov wrote for ``body`` (which did not land); best effort."""
    try:
        for path in written_files(body, io):
            io.delete(path)
    except Exception as exc:  # a leftover file is harmless; never fail an answer for it
        log.warning("commit.discard_failed", error_type=type(exc).__name__)
