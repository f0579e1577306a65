"""How hard icegov tries to land a commit it may retry (a rebased append, a data operation)."""

from __future__ import annotations

import random

from pydantic import BaseModel, ConfigDict, Field


class CommitRetry(BaseModel):
    """Server-side commit retries (environment ``ICEGOV__COMMIT_RETRY__<FIELD>``).

    Commits to one table queue inside a replica, so these bound only the fights with other
    replicas and other writers of the backing catalog.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_attempts: int = Field(
        default=20, ge=1, description="Tries of one commit (the first included).")
    deadline_seconds: float = Field(
        default=60.0, gt=0, description="No new try starts after this long.")
    backoff_initial_ms: float = Field(
        default=10.0, ge=0, description="Upper bound of the first jittered wait after a loss.")
    backoff_max_ms: float = Field(
        default=2000.0, ge=0, description="Cap of the jittered wait (doubling from the first).")
    known_head_seconds: float = Field(
        default=2.0, ge=0,
        description="How long the head a commit through this replica left may stand in for "
                    "loading the base of the table's next commit, counted from the load it "
                    "descends from (the commit is then pinned to it; 0: always load).")

    def backoff_seconds(self, losses: int) -> float:
        """A full-jitter wait after ``losses`` lost tries (1 for the first)."""
        ceiling = min(self.backoff_max_ms, self.backoff_initial_ms * 2 ** max(losses - 1, 0))
        return random.uniform(0, ceiling) / 1000
