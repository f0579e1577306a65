"""Idempotency-Key support (REST spec): icegov's final answers, kept and replayed per key.

``Idempotency`` (in ``guard``) runs the protocol around a request; ``IdempotencyStore`` keeps
claims and answers in SQLite or PostgreSQL; ``open_idempotency`` builds both from settings.

Room: below the edge, gate, handlers, services and admission; it may import identity, policy, reads
and every room below them, and the shared vocabulary.
"""

from __future__ import annotations

from proxy.idempotency.guard import Claim, Idempotency, Replay, is_final
from proxy.idempotency.keys import IDEMPOTENT_ENDPOINTS, iso_duration
from proxy.idempotency.settings import IdempotencySettings
from proxy.idempotency.setup import open_idempotency, store_uri
from proxy.idempotency.store import IdempotencyStore

__all__ = [
    "IDEMPOTENT_ENDPOINTS", "Claim", "Idempotency", "IdempotencySettings", "IdempotencyStore",
    "Replay", "is_final", "iso_duration", "open_idempotency", "store_uri",
]
