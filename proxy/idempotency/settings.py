"""Settings of the Idempotency-Key store (``ICEGOV__IDEMPOTENCY__<FIELD>``)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class IdempotencySettings(BaseModel):
    """How icegov keeps its final answers to requests that carry an ``Idempotency-Key``.

    ``db_uri`` None means: the embedded catalog's database in embedded mode, else a SQLite file
    ``icegov-state.db`` in the working directory. Replicas that share one PostgreSQL database
    share their keys: a request runs on one replica only, and a retry replays on any.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    enabled: bool = True
    lifetime_seconds: int = Field(
        default=1800, gt=0, le=7 * 24 * 3600,
        description="How long a final answer is kept and replayed; advertised in /v1/config "
                    "as idempotency-key-lifetime.")
    db_uri: str | None = Field(
        default=None, description="SQLAlchemy URI of the store (SQLite or PostgreSQL).")
    wait_seconds: float = Field(
        default=60.0, gt=0,
        description="How long a request waits for another one with the same key to finish.")
    claim_seconds: float = Field(
        default=600.0, gt=0,
        description="How long a request in progress holds its key; a claim older than this "
                    "(a replica that died mid-request) may be taken over.")
    max_stored_bytes: int = Field(
        default=16 * 1024 * 1024, gt=0,
        description="Answers with a larger body are not stored (a retry runs again).")
