"""The digest timer: a daemon thread that asks for a periodic digest while no record is written.

``DigestWriter.after_write`` writes a periodic digest only when a record is written, so without
traffic the records after the last digest would stay unprovable for as long as icegov is idle.
The timer calls ``tick`` (``AuditLog`` takes its lock and asks its ``DigestWriter``), which writes
a digest when one is due and answers how many seconds to wait before asking again, or None to
stop (the audit log was closed or is gone). ``stop`` wakes the thread at once and waits for it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import structlog

log = structlog.get_logger("icegov")

_ON_ERROR_SECONDS = 1.0
"""How long to wait after a tick that raised before trying again."""


class DigestTimer:
    """Calls ``tick`` in a daemon thread until it answers None or ``stop`` is called: once at
    start, then again after as many seconds as each tick answers."""

    def __init__(self, tick: Callable[[], float | None],
                 name: str = "icegov-audit-digests") -> None:
        self._tick = tick
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    @property
    def running(self) -> bool:
        """Whether the thread is alive."""
        return self._thread.is_alive()

    def start(self) -> DigestTimer:
        """Start the thread (once); answers the timer."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Wake the thread and wait until it has ended (a tick under way finishes first). Never
        call it while holding a lock the tick takes."""
        self._stopping.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()

    def _run(self) -> None:
        delay: float | None = 0.0
        while delay is not None and not self._stopping.wait(max(delay, 0.0)):
            try:
                delay = self._tick()
            except Exception:  # a bug must not end the digests silently: log it and go on
                log.exception("audit.digest_timer_failed")
                delay = _ON_ERROR_SECONDS
