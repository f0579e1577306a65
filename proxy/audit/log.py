"""The audit log: seals each record into the chain and writes it to every sink, under one lock.

A sink that cannot be written (``OSError``) is counted in ``failures`` and logged; the stream is
``healthy`` again once a write reaches every sink. With ``fail_closed``, a mutating request is
refused (503) before it reaches the backing catalog while the last write failed; reads still
answer, and their records (the refusals' too) are what finds the sinks writable again.

Where the chain stands is logged to the operational log (stderr, ``proxy.ops.logs``), apart from the
audit stream: ``audit.resumed`` at start (the ``seq`` and ``hash`` the chain continues from, and
the ``file`` they were read from; seq 0 and 64 zeros for a new chain) and ``audit.closed`` at
shutdown (the last ``seq`` and ``hash``). Kept elsewhere, these pin the tail: ``icegov audit verify
--anchor SEQ:HASH`` / ``--expect-last SEQ:HASH`` then finds records cut while icegov was stopped.
"""

from __future__ import annotations

import contextlib
import fcntl
import sys
import threading
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Protocol

import structlog

from proxy.audit.chain import START, Chain
from proxy.audit.digest_timer import DigestTimer
from proxy.audit.digests import DigestWriter, digest_path_for
from proxy.audit.files import AuditFile
from proxy.audit.ocsf_sink import OcsfFile
from proxy.audit.record import AuditRecord
from proxy.audit.settings import AuditSettings
from proxy.audit.signing import load_private
from proxy.errors import IcebergError
from proxy.routes import PLANNING, SIGNING

log = structlog.get_logger("icegov")

READ_METHODS = frozenset({"GET", "HEAD"})
NOT_MUTATING = frozenset({"oauth_tokens"}) | PLANNING | SIGNING
"""POST/DELETE endpoints that change nothing in the catalog: the token endpoint, scan
planning (reads) and S3 signing (a signed write changes storage, never the catalog)."""


class AuditUnavailable(IcebergError):
    """Fail closed: the audit stream cannot be written, so nothing is changed unaudited."""

    status = 503
    error_type = "ServiceUnavailableException"

    def __init__(self) -> None:
        super().__init__("audit log unavailable")


class Sink(Protocol):
    """Where sealed lines go."""

    @property
    def name(self) -> str: ...

    def write(self, line: str, seq: int) -> None: ...

    def close(self) -> None: ...


class StreamSink:
    """A text stream (stdout), one flushed line per record. With ``shared_by`` (a lock file
    every process writing the same stream holds while it writes: ``icegov serve --workers``),
    a line goes out whole, however long, never split by another process's."""

    def __init__(self, stream: IO[str], name: str = "stdout",
                 shared_by: Path | None = None) -> None:
        self._stream = stream
        self._name = name
        self._shared_by = shared_by
        self._lock: IO[bytes] | None = None

    @property
    def name(self) -> str:
        return self._name

    def write(self, line: str, seq: int) -> None:
        with self._held():
            try:
                self._stream.write(line + "\n")
                self._stream.flush()
            except ValueError as exc:  # a closed stream
                raise OSError("stream closed") from exc

    @contextlib.contextmanager
    def _held(self) -> Iterator[None]:
        if self._shared_by is None:
            yield
            return
        if self._lock is None:
            self._lock = self._shared_by.open("ab")
        fcntl.flock(self._lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(self._lock, fcntl.LOCK_UN)

    def close(self) -> None:
        """The stream belongs to the process; it is left open (the lock file is closed)."""
        if self._lock is not None:
            self._lock.close()
            self._lock = None


def is_mutating(method: str, endpoint: str) -> bool:
    """Whether a request may change the catalog (what fail-closed refuses)."""
    return method not in READ_METHODS and endpoint not in NOT_MUTATING


class AuditLog:
    """Writes each audit record, sealed into the hash chain, to every sink."""

    def __init__(self, settings: AuditSettings, sinks: list[Sink] | None = None) -> None:
        self.fail_closed = settings.fail_closed
        self.failures = 0
        self._healthy = True
        self._sinks: list[Sink] = (sinks if sinks is not None
                                   else _sinks(settings))
        files = [s for s in self._sinks if isinstance(s, AuditFile)]
        for ocsf in (s for s in self._sinks if isinstance(s, OcsfFile)):
            for file in files[:1]:
                file.on_rotate(ocsf.rotate)  # the OCSF file rotates with the audit file
        last = files[0].last_link() if files else None
        self._chain = Chain(settings.key_bytes(), last or START, settings.writer)
        self._lock = threading.Lock()
        self._closed = False
        self._digests = _digests(settings, files[0] if files else None)
        self._timer = _digest_timer(self)
        if self._sinks:
            resumed_from = files[0].resumed_from if files else None
            log.info("audit.resumed", seq=self._chain.last.seq, hash=self._chain.last.hash,
                     file=str(resumed_from) if resumed_from else None,
                     sinks=[sink.name for sink in self._sinks])

    @property
    def healthy(self) -> bool:
        """False while the last write failed on some sink."""
        return self._healthy

    def check_writable(self, record: AuditRecord) -> None:
        """Refuse the record's request (``AuditUnavailable``, decision ``refused``) when it is
        mutating, icegov fails closed and the last write failed; called before the request
        reaches the gate or its handler, so a refused change never reaches the backing."""
        if self.fail_closed and not self._healthy and is_mutating(record.method,
                                                                  record.endpoint):
            record.decision = "refused"
            raise AuditUnavailable()

    def write_ahead(self, record: AuditRecord) -> None:
        """Fail closed: record an allowed mutating request before it is sent on (its
        ``status`` still null), and refuse it (``AuditUnavailable``) when that record cannot
        be written. A sink that dies after this leaves the change recorded as sent, outcome
        unknown, never unrecorded."""
        if not (self.fail_closed and is_mutating(record.method, record.endpoint)):
            return
        self.write(record)
        if not self._healthy:
            record.decision = "refused"
            raise AuditUnavailable()

    def write(self, record: AuditRecord) -> None:
        """Seal one record and append it to every sink (one flushed line each)."""
        event = record.to_event()
        event["event"] = "audit"
        with self._lock:
            if self._closed:
                self._reopen()
            line, seq = self._chain.seal(event)
            written = [self._write_to(sink, line, seq) for sink in self._sinks]
            self._healthy = all(written)
            if self._digests is not None:
                self._digests.after_write()

    def tick_digests(self) -> float | None:
        """The digest timer's turn, under the lock: a periodic digest when one is due (records
        written, ``digest_every_seconds`` passed); the seconds until the next look, None once
        closed or without digests (the timer then ends)."""
        with self._lock:
            if self._closed or self._digests is None:
                return None
            return self._digests.tick()

    def _reopen(self) -> None:
        """A write after close: the file sink is reopened and the chain continues from where the
        file ends now (if it cannot be reopened, the write fails and is counted)."""
        self._closed = False
        if self._timer is None or not self._timer.running:
            self._timer = _digest_timer(self)
        files = [s for s in self._sinks if isinstance(s, AuditFile)]
        if not files:
            return
        try:
            link = files[0].reopen()
        except OSError:
            return
        self._chain.last = link or START

    def close(self) -> None:
        """Close every sink and log where the chain ended (``audit.closed``)."""
        timer, self._timer = self._timer, None
        if timer is not None:
            timer.stop()  # outside the lock: its tick takes it
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._sinks:
                log.info("audit.closed", seq=self._chain.last.seq, hash=self._chain.last.hash)
            if self._digests is not None:
                self._digests.write("shutdown")
            for sink in self._sinks:
                with contextlib.suppress(OSError):
                    sink.close()

    def _write_to(self, sink: Sink, line: str, seq: int) -> bool:
        try:
            sink.write(line, seq)
        except OSError as exc:
            self.failures += 1
            log.error("audit.write_failed", sink=sink.name, seq=seq,
                      error_type=type(exc).__name__, errno=exc.errno)
            return False
        return True


def _digests(settings: AuditSettings, file: AuditFile | None) -> DigestWriter | None:
    """Signed digests of the audit file when a signing key is set (fails here, before serving,
    when the key cannot be read); the first one is written now, the next at each rotation."""
    if settings.signing_key is None or file is None:
        return None
    writer = DigestWriter(file.path, load_private(settings.signing_key),
                          settings.digest_file or digest_path_for(file.path),
                          settings.digest_every_records, settings.digest_every_seconds)
    file.on_rotate(lambda _rotated: writer.write("rotation"))
    writer.write("start")
    return writer


def _digest_timer(audit: AuditLog) -> DigestTimer | None:
    """While ``audit`` writes signed digests every so many seconds, a timer that writes them
    while no record is written too. It holds the log weakly: a log dropped unclosed ends it."""
    if audit._digests is None or audit._digests.every_seconds is None:
        return None
    ref = weakref.ref(audit)

    def tick() -> float | None:
        alive = ref()
        return None if alive is None else alive.tick_digests()

    return DigestTimer(tick).start()


def _sinks(settings: AuditSettings) -> list[Sink]:
    sinks: list[Sink] = []
    if settings.file is not None:
        sinks.append(AuditFile(settings.file, settings.rotate_bytes, settings.rotate_seconds))
    if settings.stdout:
        sinks.append(StreamSink(sys.stdout, shared_by=settings.stdout_lock))
    if settings.ocsf_file is not None:
        sinks.append(OcsfFile(settings.ocsf_file))
    return sinks
