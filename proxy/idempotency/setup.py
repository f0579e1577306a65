"""The idempotency store and guard for icegov's settings."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from proxy.idempotency.guard import Idempotency
from proxy.idempotency.store import IdempotencyStore

if TYPE_CHECKING:
    from proxy.settings import Settings

STATE_FILE = "icegov-state.db"


def store_uri(settings: Settings) -> str:
    """Where keys live: the configured URI; else the embedded catalog's database in embedded
    mode, or ``icegov-state.db`` in the working directory when forwarding."""
    configured = settings.idempotency.db_uri
    if configured:
        return configured
    if settings.embedded:
        return settings.embedded_db_uri()
    return f"sqlite:///{Path.cwd() / STATE_FILE}"


def open_idempotency(settings: Settings) -> Idempotency | None:
    """The guard over its store, or None when idempotency is disabled. Nothing is connected
    or created until the first request with a key arrives."""
    if not settings.idempotency.enabled:
        return None
    return Idempotency(IdempotencyStore(store_uri(settings)), settings.idempotency)
