"""The audit file: append-only lines, rotated by size or age, resumed across restarts.

A rotated file is renamed ``<name>.<first seq, 12 digits>-<UTC time>``, so the rotated files
sort in chain order by name and ``icegov audit verify audit.log.* audit.log`` checks them all.
The next file's first record chains from the last record of the one before. On start, the chain
resumes from the last complete line of the file, or of the newest rotated file when the file
itself is gone (logged as ``audit.live_file_missing``: icegov never removes it). A line left
incomplete by a crash is closed with a newline first, so it stands alone (and ``verify`` names
it) instead of swallowing the next record.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import stat
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, BinaryIO

import structlog

from proxy.audit.chain import Link, link_of

log = structlog.get_logger("icegov")

_CHUNK = 64 * 1024
_ROTATED = re.compile(r"\.[0-9]{12}-[0-9]{8}T[0-9]{6}(\.[0-9]+)?Z")


def read_only(path: Path) -> BinaryIO:
    """``path`` opened to read bytes, only when it is a regular file; else OSError ("not a
    regular file"). Opening a FIFO waits for a writer and a device may never end: an audit,
    digest or key file named by mistake or by a hostile hand is refused, never waited on."""
    descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO opens without a writer
    try:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        os.set_blocking(descriptor, True)
        return os.fdopen(descriptor, "rb")
    except BaseException:
        os.close(descriptor)
        raise


def complete_lines_backwards(path: Path) -> Iterator[bytes]:
    """The newline-terminated lines of ``path``, last first (a partial last line is skipped)."""
    with read_only(path) as handle:
        pos = handle.seek(0, os.SEEK_END)
        pending = b""  # the end part of a line whose beginning is not read yet
        seen_newline = False
        while pos > 0:
            step = min(_CHUNK, pos)
            pos -= step
            handle.seek(pos)
            parts = (handle.read(step) + pending).split(b"\n")
            pending, complete = parts[0], parts[1:]
            if not seen_newline:
                if not complete:  # still inside a partial last line
                    pending = b""
                    continue
                complete.pop()  # what follows the last newline: nothing, or a partial line
                seen_newline = True
            yield from reversed(complete)
        if seen_newline:
            yield pending


def last_link_in(path: Path) -> Link | None:
    """The last sealed record's link in ``path`` (damaged lines after it are passed over)."""
    for line in complete_lines_backwards(path):
        link = link_of(line)
        if link is not None:
            return link
    return None


def ends_mid_line(path: Path) -> bool:
    """Whether the file's last line lacks its newline (a write cut short)."""
    with read_only(path) as handle:
        if handle.seek(0, os.SEEK_END) == 0:
            return False
        handle.seek(-1, os.SEEK_END)
        return handle.read(1) != b"\n"


def rotated_files(path: Path) -> list[Path]:
    """The rotated siblings of ``path``, oldest first."""
    siblings = path.parent.glob(f"{path.name}.*")
    return sorted(p for p in siblings if _ROTATED.fullmatch(p.name[len(path.name):]))


def rotation_suffix(name: str) -> str:
    """What rotation appended to a file's name (``.<first seq>-<UTC time>``); ValueError when
    ``name`` is no rotated file's."""
    found = _ROTATED.search(name)
    if found is None or found.end() != len(name):
        raise ValueError(f"{name!r} is not a rotated file's name")
    return found.group(0)


class AuditFile:
    """The file sink. Not thread-safe by itself (``AuditLog`` holds one lock)."""

    def __init__(self, path: Path, rotate_bytes: int | None = None,
                 rotate_seconds: float | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.path = path
        self._rotate_bytes = rotate_bytes
        self._rotate_seconds = rotate_seconds
        self._clock = clock
        self._handle: IO[bytes] | None = None
        self._lock: IO[bytes] | None = None
        self._size = 0
        self._opened_at = 0.0
        self._first_seq: int | None = None
        self.resumed_from: Path | None = None
        self._rotation_listeners: list[Callable[[Path], object]] = []
        path.parent.mkdir(parents=True, exist_ok=True)
        self._hold_lock()
        self._set_legacy_aside()
        self._warn_if_live_file_missing()
        self._resumed = self._chain_end()
        self._open()

    @property
    def name(self) -> str:
        return str(self.path)

    def on_rotate(self, listener: Callable[[Path], object]) -> None:
        """Call ``listener`` with the rotated file's new path after every rotation (once the new
        file is open, before the record that was due is written), in the order added. An
        ``OSError`` it raises is logged (``audit.rotation_listener_failed``), never the write's."""
        self._rotation_listeners.append(listener)

    def last_link(self) -> Link | None:
        """Where the chain on disk ended when the file was opened (None: nothing written yet)."""
        return self._resumed

    def _chain_end(self) -> Link | None:
        """The file's last record, else the newest rotated file's (noted in ``resumed_from``)."""
        for candidate in (self.path, *reversed(rotated_files(self.path))):
            link = last_link_in(candidate) if candidate.exists() else None
            if link is not None:
                self.resumed_from = candidate
                return link
        return None

    def _warn_if_live_file_missing(self) -> None:
        """icegov always leaves the live file in place (rotation reopens it at once), so its
        absence next to rotated files means it was deleted, with whatever records it held."""
        if self.path.exists():
            return
        rotated = rotated_files(self.path)
        if rotated:
            log.warning("audit.live_file_missing", file=str(self.path),
                        newest_rotated=str(rotated[-1]),
                        note="the live audit file is gone; the chain resumes from the newest "
                             "rotated file, and records written after it are lost")

    def write(self, line: str, seq: int) -> None:
        """Append one line (rotating first when due); raises OSError when it cannot."""
        data = (line + "\n").encode("ascii")
        if self._handle is None:
            self._open()
        if self._due(len(data)):
            self._rotate()
        assert self._handle is not None
        try:
            _write_all(self._handle, data)
        except OSError:
            self._abandon_partial()
            raise
        self._size += len(data)
        if self._first_seq is None:
            self._first_seq = seq

    def reopen(self) -> Link | None:
        """After ``close``: take the lock again and say where the chain on disk ends now (another
        writer may have appended while the lock was free); OSError when it cannot."""
        self._hold_lock()
        self._resumed = self._chain_end()
        if self._handle is None:
            self._open()
        return self._resumed

    def close(self) -> None:
        """Close the file and give up the writer's lock (a later write takes both again)."""
        self._close_handle()
        if self._lock is not None:
            self._lock.close()  # closing the descriptor releases the flock
            self._lock = None

    def _close_handle(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None

    def _hold_lock(self) -> None:
        """Become the file's one writer (an exclusive flock on ``<file>.lock``, which never
        moves on rotation); OSError EBUSY while another process or sink holds it, since two
        writers would interleave two chains into a file that no longer verifies."""
        if self._lock is not None:
            return
        real = Path(os.path.realpath(self.path))  # one lock per file, however it is named
        lock = real.with_name(real.name + ".lock").open("ab")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            raise OSError(errno.EBUSY, "another icegov process is writing this audit file",
                          str(self.path)) from None
        self._lock = lock

    def _open(self) -> None:
        self._hold_lock()
        handle = self.path.open("ab", buffering=0)
        try:
            self._size = handle.seek(0, os.SEEK_END)
            if self._size and ends_mid_line(self.path):
                log.warning("audit.file_repaired", file=str(self.path),
                            note="the last line was incomplete; it was closed with a newline")
                _write_all(handle, b"\n")
                self._size += 1
        except OSError:
            handle.close()
            raise
        self._handle = handle
        self._opened_at = self._clock()
        self._first_seq = _first_seq(self.path) if self._size else None

    def _due(self, incoming: int) -> bool:
        if self._size == 0:
            return False
        too_big = self._rotate_bytes is not None and self._size + incoming > self._rotate_bytes
        too_old = (self._rotate_seconds is not None
                   and self._clock() - self._opened_at >= self._rotate_seconds)
        return too_big or too_old

    def _rotate(self) -> None:
        self._close_handle()  # the lock stays held: no other writer slips in between
        first = self._first_seq or 0
        target = self.path.with_name(f"{self.path.name}.{first:012d}-{_stamp()}")
        os.rename(self.path, target)
        log.info("audit.rotated", file=str(target))
        self._open()
        for listener in self._rotation_listeners:
            try:
                listener(target)
            except OSError as exc:
                log.error("audit.rotation_listener_failed", file=str(target),
                          error_type=type(exc).__name__, errno=exc.errno)

    def _abandon_partial(self) -> None:
        """After a failed write: cut the file back to its last whole line when possible and
        reopen on the next write (which closes a partial line that could not be cut)."""
        with contextlib.suppress(OSError):
            os.truncate(self.path, self._size)
        if self._handle is not None:
            with contextlib.suppress(OSError):
                self._handle.close()
            self._handle = None

    def _set_legacy_aside(self) -> None:
        """Move a file of version-1 records (no chain) aside, so the chain starts clean. A file
        holding any v2 record is never set aside (a torn or junk first line does not make it
        legacy): its chain resumes and verification shows the damage."""
        if not self.path.exists() or self.path.stat().st_size == 0:
            return
        with read_only(self.path) as handle:
            first = handle.readline()
        if not first.endswith(b"\n") or last_link_in(self.path) is not None:
            return
        target = self.path.with_name(f"{self.path.name}.legacy-{_stamp()}")
        os.rename(self.path, target)
        log.warning("audit.legacy_file", moved_to=str(target),
                    note="the file holds no icegov.audit/2 records; a new chain starts")


def _write_all(handle: IO[bytes], data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = handle.write(view)
        view = view[written or 0:]
        if not written:
            raise OSError("short write")


def _first_seq(path: Path) -> int | None:
    with read_only(path) as handle:
        link = link_of(handle.readline())
    return link.seq if link else None


def _stamp() -> str:
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%fZ")
