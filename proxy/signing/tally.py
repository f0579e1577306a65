"""The audit of signed reads, aggregated: one record per grant and window, not per range.

A scan signs a request per ranged read, thousands for one table. Every refusal and every write
gets its own audit record; a signed read gets one only when it opens a window for its grant's
key (principal, table, governed metadata, view): the reads signed under that key during the
next ``seconds`` are counted instead of recorded. The counts (reads, distinct objects) go into
the next record of that key, or, when no read follows, into a summary record written once the
window has closed (``due``) or when icegov stops (``drain``). With ``seconds`` 0 every read is
recorded.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

Key = tuple[str, str, str, str]
MAX_OBJECTS = 100_000
"""Distinct objects remembered per window (beyond it, reads are still counted)."""


@dataclass
class _Window:
    opened: float
    reads: int = 0
    objects: set[str] = field(default_factory=set)

    def summary(self, seconds: float) -> dict[str, Any]:
        return {"reads": self.reads, "objects": len(self.objects), "window_seconds": seconds}


class ReadTally:
    """Signed reads counted per key and window."""

    def __init__(self, seconds: float) -> None:
        self._seconds = seconds
        self._windows: dict[Key, _Window] = {}
        self._lock = threading.Lock()

    def count(self, key: Key, location: str, now: float) -> dict[str, Any] | None:
        """None when this read is counted in its key's open window (no record of its own);
        otherwise it opens a window and its record carries the quiet reads of the one
        before (``reads`` 0 when there were none)."""
        with self._lock:
            window = self._windows.get(key)
            if window is not None and now - window.opened < self._seconds:
                window.reads += 1
                if len(window.objects) < MAX_OBJECTS:
                    window.objects.add(location)
                return None
            self._windows[key] = _Window(now)
            return (window or _Window(now)).summary(self._seconds)

    def due(self, now: float) -> list[tuple[Key, dict[str, Any]]]:
        """The closed windows that counted quiet reads, removed: each needs a summary."""
        with self._lock:
            closed = [k for k, w in self._windows.items() if now - w.opened >= self._seconds]
            return [(k, s) for k in closed
                    if (s := self._windows.pop(k).summary(self._seconds))["reads"]]

    def drain(self) -> list[tuple[Key, dict[str, Any]]]:
        """Every window that counted quiet reads, removed (icegov is stopping)."""
        with self._lock:
            windows, self._windows = self._windows, {}
        return [(k, w.summary(self._seconds)) for k, w in windows.items() if w.reads]
