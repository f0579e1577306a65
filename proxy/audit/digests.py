"""Signed digests: what the audit files held at a moment, signed with an Ed25519 key.

A chain of hashes shows an edit unless the forger re-seals every record after it, and it cannot
show a cut tail at all. A digest closes both gaps for everything written before it, and needs no
secret to check: ``icegov audit verify --public-key`` holds only the public key. icegov appends
one digest, one JSON line, to the digest file (``<audit file>.digests``) at start-up, every
``digest_every_records`` records or ``digest_every_seconds`` seconds (checked as records are
written, and by a timer while none are: ``tick``, proxy/audit/digest_timer.py; a period in which
no record was written gets no digest, since it would repeat the last), at every rotation and at
shutdown. Each says:

``schema`` (``icegov.audit-digest/1``), ``digest`` (1, 2, … across the digest file), ``time``,
``reason`` (``start``, ``periodic``, ``rotation``, ``shutdown``), ``key_id``, ``last`` (the last
record on disk: ``seq`` and ``hash``), ``files`` (every audit file, rotated ones oldest first,
the live file last: ``name``, ``first_seq``, ``size`` in bytes, ``lines`` and the ``sha256`` of
those bytes), ``prev_signature`` (the digest before's, so digests cannot be dropped or
reordered unnoticed) and ``signature`` (hex Ed25519 over the canonical JSON of all the rest,
as ``chain.canonical`` writes it). Files are hashed incrementally: a file is read once as it
grows, and a rotated file keeps its hash across the rename.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from proxy.audit.chain import canonical
from proxy.audit.files import (
    complete_lines_backwards,
    ends_mid_line,
    last_link_in,
    read_only,
    rotated_files,
)
from proxy.audit.record import utc_now_ms
from proxy.audit.signing import key_id, sign

log = structlog.get_logger("icegov")

DIGEST_SCHEMA = "icegov.audit-digest/1"
_CHUNK = 1024 * 1024


def digest_path_for(audit_file: Path) -> Path:
    """Where the digests of ``audit_file`` go unless set: ``<audit file>.digests``."""
    return audit_file.with_name(audit_file.name + ".digests")


@dataclass
class _Hashing:
    """One file's running hash (keyed by inode, so it survives the file's rotation rename)."""

    offset: int = 0
    lines: int = 0
    hasher: Any = field(default_factory=hashlib.sha256)

    def advance(self, path: Path, size: int) -> None:
        with read_only(path) as handle:
            handle.seek(self.offset)
            while self.offset < size:
                chunk = handle.read(min(_CHUNK, size - self.offset))
                if not chunk:
                    break
                self.hasher.update(chunk)
                self.lines += chunk.count(b"\n")
                self.offset += len(chunk)


class DigestWriter:
    """Writes signed digests of one audit file and its rotated siblings. Not thread-safe by
    itself: ``AuditLog`` calls it under its lock, so no record is written while it hashes."""

    def __init__(self, audit_file: Path, key: Ed25519PrivateKey, path: Path,
                 every_records: int | None = None, every_seconds: float | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._audit_file = audit_file
        self._key = key
        self._key_id = key_id(key.public_key())
        self.path = path
        self._every_records = every_records
        self._every_seconds = every_seconds
        self._clock = clock
        self._hashing: dict[tuple[int, int], _Hashing] = {}
        self._number, self._prev = _resume(path)
        self._since = 0
        self._at = clock()

    @property
    def every_seconds(self) -> float | None:
        """The period of periodic digests in seconds (None: by count only)."""
        return self._every_seconds

    def after_write(self) -> None:
        """One more record is on disk: write a digest when one is due."""
        self._since += 1
        by_count = self._every_records is not None and self._since >= self._every_records
        by_time = (self._every_seconds is not None
                   and self._clock() - self._at >= self._every_seconds)
        if by_count or by_time:
            self.write("periodic")

    def tick(self) -> float | None:
        """The timer's turn: write a periodic digest when ``every_seconds`` have passed since the
        last digest and records were written since (none: it would only repeat the last one).
        Answers the seconds until the next is due (None: no ``every_seconds``, no timer)."""
        if self._every_seconds is None:
            return None
        left = self._every_seconds - (self._clock() - self._at)
        if left > 0:
            return left
        if self._since:
            self.write("periodic")  # a failure is logged; the next tick or record tries again
        return self._every_seconds

    def write(self, reason: str) -> bool:
        """Sign and append a digest of the files as they are now; False (logged) on OSError."""
        try:
            body = self._body(reason)
            body["signature"] = sign(self._key, canonical(body))
            torn = self.path.exists() and ends_mid_line(self.path)  # a write cut short
            with self.path.open("ab") as handle:
                handle.write((b"\n" if torn else b"") + canonical(body) + b"\n")
                handle.flush()
                os.fsync(handle.fileno())
        except OSError as exc:
            log.error("audit.digest_failed", file=str(self.path), reason=reason,
                      error_type=type(exc).__name__, errno=exc.errno)
            return False
        self._number, self._prev = body["digest"], body["signature"]
        self._since, self._at = 0, self._clock()
        return True

    def _body(self, reason: str) -> dict[str, Any]:
        paths = [*rotated_files(self._audit_file), self._audit_file]
        files = [self._entry(p) for p in paths if p.exists()]
        last = next((link for p in reversed(paths) if p.exists()
                     and (link := last_link_in(p)) is not None), None)
        return {"schema": DIGEST_SCHEMA, "digest": self._number + 1, "time": utc_now_ms(),
                "reason": reason, "key_id": self._key_id,
                "last": {"seq": last.seq, "hash": last.hash} if last else None,
                "files": files, "prev_signature": self._prev}

    def _entry(self, path: Path) -> dict[str, Any]:
        stat = path.stat()
        identity = (stat.st_dev, stat.st_ino)
        hashing = self._hashing.get(identity)
        if hashing is None or hashing.offset > stat.st_size:
            hashing = self._hashing[identity] = _Hashing()
        hashing.advance(path, stat.st_size)
        return {"name": path.name, "first_seq": first_seq(path), "size": hashing.offset,
                "lines": hashing.lines, "sha256": hashing.hasher.copy().hexdigest()}


def first_seq(path: Path) -> int | None:
    """The seq of the file's first line, if it is a record."""
    with read_only(path) as handle:
        try:
            record = json.loads(handle.readline())
        except (ValueError, RecursionError):
            return None
    seq = record.get("seq") if isinstance(record, dict) else None
    return seq if type(seq) is int else None


def _resume(path: Path) -> tuple[int, str | None]:
    """The number and signature of the last digest in ``path`` (0, None: none yet)."""
    if not path.exists() or path.stat().st_size == 0:
        return 0, None
    for line in complete_lines_backwards(path):
        try:
            digest = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if (isinstance(digest, dict) and type(digest.get("digest")) is int
                and isinstance(digest.get("signature"), str)):
            return digest["digest"], digest["signature"]
    log.warning("audit.digests_unreadable", file=str(path),
                note="no digest could be read back; numbering starts again at 1")
    return 0, None
