"""Reading files that operators replace while icegov runs (policies, principals): a stamp to
notice changes without reading, and a read that refuses a file caught mid-write."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

RACY_NANOSECONDS = 2_000_000_000
"""For this long after its mtime, a same-size rewrite may leave a file's stamp unchanged."""


class FileChanging(Exception):
    """The file changed while being read; look again on the next check."""


@dataclass(frozen=True)
class FileStamp:
    """What ``stat`` says about a file: enough to notice nearly every change without reading."""

    inode: int
    mtime_ns: int
    size: int

    @property
    def racy(self) -> bool:
        """True while a same-size rewrite could still leave this stamp unchanged."""
        return self.mtime_ns >= time.time_ns() - RACY_NANOSECONDS


def stamp_of(path: Path) -> FileStamp | None:
    """The file's stamp, or None if it cannot be stat-ed."""
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return FileStamp(stat.st_ino, stat.st_mtime_ns, stat.st_size)


def read_stable(path: Path) -> tuple[FileStamp, bytes]:
    """The file's bytes and stamp; ``FileChanging`` if it changed while being read."""
    with path.open("rb") as handle:
        before = os.fstat(handle.fileno())
        data = handle.read()
    stamp = FileStamp(before.st_ino, before.st_mtime_ns, before.st_size)
    if stamp_of(path) != stamp or len(data) != stamp.size:
        raise FileChanging(f"{path} changed while being read")
    return stamp, data
