"""Plans prepared in the background for ``submitted`` answers, by plan id (this replica only:
a poll that reaches another replica plans there, from the same self-contained plan id)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine
from typing import Any

MAX_JOBS = 64


class PlanJobs:
    """At most ``MAX_JOBS`` preparations at once; a finished one is forgotten when polled or
    when another starts."""

    def __init__(self) -> None:
        self._jobs: dict[str, asyncio.Task[Any]] = {}

    def start(self, plan_id: str, work: Coroutine[Any, Any, Any]) -> None:
        """Prepare ``plan_id`` in the background (dropped silently when too many run: the
        poll then plans in the foreground)."""
        self._jobs = {k: t for k, t in self._jobs.items() if not t.done()}
        if len(self._jobs) >= MAX_JOBS:
            work.close()
            return
        self._jobs[plan_id] = asyncio.ensure_future(work)

    async def wait(self, plan_id: str, seconds: float) -> bool:
        """True when ``plan_id`` is not being prepared here or its preparation ended within
        ``seconds`` (its failure then surfaces when the plan is answered again)."""
        task = self._jobs.get(plan_id)
        if task is None:
            return True
        done, _ = await asyncio.wait({task}, timeout=seconds)
        if not done:
            return False
        self._jobs.pop(plan_id, None)
        with contextlib.suppress(Exception, asyncio.CancelledError):
            task.result()
        return True

    def cancel(self, plan_id: str) -> None:
        """Stop preparing ``plan_id``."""
        task = self._jobs.pop(plan_id, None)
        if task is not None:
            task.cancel()
