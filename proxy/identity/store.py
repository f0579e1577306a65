"""The principals in force: the principals file, re-read when it changes.

Every request carrying an icegov token is judged by the file as it is *now*: a principal removed
from it gets 401 and changed roles apply at once, whatever the token says (the authenticator asks
``principal(name)`` on every request). Checking is cheap: at most once per ``check_seconds`` the
file is stat-ed (inode, mtime, size); only a changed stamp — or a file modified within the last
two seconds, whose stamp cannot be trusted to change again — makes it read and hash the file, and
only a changed hash makes it parse. A new version replaces the old one in a single assignment, so
a request sees one version or the other, never a mix.

A file that breaks later (bad YAML, bad entry, unreadable, deleted) is logged and the last good
version stays in force; at start-up a bad file raises ``PrincipalsFileError`` and a missing one
means no principals until it appears. Tokens from an external OIDC issuer name principals that
are not in this file: they are not affected.
"""

from __future__ import annotations

import hashlib
import math
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import structlog

from proxy.governance import Principal
from proxy.identity.principals import PrincipalEntry, PrincipalsFileError, parse_principals
from proxy.ops.stablefiles import FileChanging, FileStamp, read_stable, stamp_of

log = structlog.get_logger("icegov.identity")



@dataclass(frozen=True)
class PrincipalsVersion:
    """One good version of the file: its digest, its entries and their principals by name."""

    digest: str | None
    entries: Mapping[str, PrincipalEntry]
    principals: Mapping[str, Principal]
    names: frozenset[str]
    """Every principal and every role the file names."""

    @classmethod
    def of(cls, digest: str | None, entries: Mapping[str, PrincipalEntry]) -> PrincipalsVersion:
        principals = {name: entry.principal() for name, entry in entries.items()}
        names = frozenset(principals).union(*(p.roles for p in principals.values()))
        return cls(digest, dict(entries), principals, names)


class PrincipalStore:
    """The principals file's entries in force, refreshed on lookup (every ``check_seconds``).

    ``path=None`` means no principals at all: no client credentials, and no icegov token names a
    principal that exists.
    """

    def __init__(self, path: Path | None, *, check_seconds: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._path = path
        self._check_seconds = check_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._checked_at = -math.inf
        self._seen_stamp: FileStamp | None = None
        self._seen_digest: str | None = None
        self._version = PrincipalsVersion.of(None, {})
        if path is not None:
            self._load_initial(path)

    def get(self, name: str) -> PrincipalEntry | None:
        """The entry for ``name`` in the current file, or None if there is no such principal."""
        self._refresh_if_due()
        return self._version.entries.get(name)

    def principal(self, name: str) -> Principal | None:
        """The principal ``name`` with its roles as the current file says, or None if removed."""
        self._refresh_if_due()
        return self._version.principals.get(name)

    def names(self, name: str) -> bool:
        """Whether ``name`` is a principal or a role of the current file."""
        self._refresh_if_due()
        return name in self._version.names

    def __len__(self) -> int:
        return len(self._version.entries)

    @property
    def digest(self) -> str | None:
        """SHA-256 of the file version in force (None when there is none)."""
        return self._version.digest

    def refresh(self) -> bool:
        """Check the file now; True if a new version is in force."""
        if self._path is None:
            return False
        with self._lock:
            self._checked_at = self._clock()
            return self._check(self._path)

    def _refresh_if_due(self) -> None:
        if self._path is None or self._clock() - self._checked_at < self._check_seconds:
            return
        if not self._lock.acquire(blocking=False):
            return  # another thread is checking; the version in force stands meanwhile
        try:
            self._checked_at = self._clock()
            self._check(self._path)
        finally:
            self._lock.release()

    def _load_initial(self, path: Path) -> None:
        try:
            stamp, data = read_stable(path)
        except FileNotFoundError:
            log.warning("principals file does not exist; no client can get a token until it does",
                        path=str(path))
            return
        except (OSError, FileChanging) as exc:
            raise PrincipalsFileError(
                f"principals file {path} cannot be read: {_reason(exc)}") from None
        self._seen_stamp, self._seen_digest = stamp, _digest(data)
        self._version = PrincipalsVersion.of(self._seen_digest, _parse(data, path))
        self._checked_at = self._clock()

    def _check(self, path: Path) -> bool:
        stamp = stamp_of(path)
        if stamp == self._seen_stamp and not (stamp is not None and stamp.racy):
            return False
        if stamp is None:
            self._seen_stamp = None
            log.error("principals.reload_failed", path=str(path),
                      error="the file is missing; keeping the last good version")
            return False
        try:
            stamp, data = read_stable(path)
        except FileChanging:
            return False
        except OSError as exc:
            self._seen_stamp = stamp
            log.error("principals.reload_failed", path=str(path), error=_reason(exc))
            return False
        self._seen_stamp = stamp
        return self._adopt(data, path)

    def _adopt(self, data: bytes, path: Path) -> bool:
        digest = _digest(data)
        if digest == self._seen_digest:
            return False
        self._seen_digest = digest
        try:
            entries = _parse(data, path)
        except PrincipalsFileError as exc:
            log.error("principals.reload_failed", path=str(path), error=str(exc),
                      kept=self._version.digest and self._version.digest[:12])
            return False
        self._version = PrincipalsVersion.of(digest, entries)
        log.info("principals.reloaded", path=str(path), count=len(entries), digest=digest[:12])
        return True


def _parse(data: bytes, path: Path) -> dict[str, PrincipalEntry]:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise PrincipalsFileError(f"principals file {path} is not UTF-8 text") from None
    return parse_principals(text, str(path))


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _reason(exc: Exception) -> str:
    if isinstance(exc, OSError):
        return exc.strerror or type(exc).__name__
    return str(exc)
