"""Reading files that operators replace while icegov runs (policies, principals): a stamp to
notice changes without reading, and a read that refuses a file caught mid-write."""

from __future__ import annotations

import os
import stat
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


MAX_BYTES = 64 * 1024 * 1024
"""The largest file read: a policy or principals file is far smaller."""


class NotARegularFile(OSError):
    """The path names a FIFO, a device, a socket or a directory (or a file over ``MAX_BYTES``),
    which a read could block on or never finish."""


def read_stable(path: Path) -> tuple[FileStamp, bytes]:
    """The file's bytes and stamp; ``FileChanging`` if it changed while being read,
    ``NotARegularFile`` (before anything is read) if it is not a regular file.

    The file is opened without blocking (a FIFO's open would wait for a writer) and checked to
    be a regular file of bounded size before it is read (a FIFO or ``/dev/zero`` never ends)."""
    descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        before = os.fstat(descriptor)
        if not stat.S_ISREG(before.st_mode) or before.st_size > MAX_BYTES:
            raise NotARegularFile(f"{path} is not a regular file of at most {MAX_BYTES} bytes")
    except BaseException:
        os.close(descriptor)
        raise
    with os.fdopen(descriptor, "rb") as handle:
        data = handle.read(MAX_BYTES + 1)
    stamp = FileStamp(before.st_ino, before.st_mtime_ns, before.st_size)
    if stamp_of(path) != stamp or len(data) != stamp.size:
        raise FileChanging(f"{path} changed while being read")
    return stamp, data
