"""Endpoints icegov answers itself: health, readiness and the catalog config."""

from __future__ import annotations

import asyncio
import time

import structlog
from starlette.requests import Request
from starlette.responses import JSONResponse

from proxy.backing.forward import Forwarder
from proxy.backing.offers import CONFIG_PATH, config_in, parse_offer
from proxy.errors import BackingUnavailable, IcebergError
from proxy.policy import PolicyAuthorizer


async def healthz(_: Request) -> JSONResponse:
    """The process is up."""
    return JSONResponse({"status": "ok"})


log = structlog.get_logger("icegov")

READY_CHECK_SECONDS = 1.0
"""How long one look at the backing answers ``/readyz`` for: probes from anyone, however
many, cost the backing at most one request a second."""


class BackingHandlers:
    """Handlers that need the backing catalog: readiness."""

    def __init__(self, forwarder: Forwarder, authorizer: PolicyAuthorizer) -> None:
        self._forwarder = forwarder
        self._authorizer = authorizer
        self._looking = asyncio.Lock()
        self._looked_at = float("-inf")
        self._unavailable: BackingUnavailable | None = None

    async def readyz(self, _: Request) -> JSONResponse:
        """Ready when the backing catalog answers its config endpoint (asked at most once per
        ``READY_CHECK_SECONDS``; callers meanwhile share the answer) with 200 and a JSON object,
        what every governed request needs first; a 401/403 counts as ready only when the
        backing is meant to see callers' own tokens rather than icegov's.

        Anyone may ask, so the answer says only ``status``, the policy ``generation`` in force
        and whether the files on disk failed to load (``policy_error``) — never their paths,
        contents or the error text (those are in the log and ``icegov policy check``).
        """
        async with self._looking:
            if time.monotonic() - self._looked_at >= READY_CHECK_SECONDS:
                self._unavailable = await self._look()
                self._looked_at = time.monotonic()
        if self._unavailable is not None:
            raise self._unavailable
        status = self._authorizer.status
        return JSONResponse({"status": "ready", "generation": status.generation,
                             "policy_error": status.last_error is not None})

    async def _look(self) -> BackingUnavailable | None:
        try:
            response = await self._forwarder.fetch(CONFIG_PATH, b"", ())
        except IcebergError as exc:  # unreachable, or it refused icegov's own credential
            log.warning("readyz.backing_not_ready", error=exc.message)
            return BackingUnavailable("backing catalog not ready (see icegov's log)")
        status = response.status_code
        if status in (401, 403) and not self._forwarder.speaks_for_itself:
            return None  # the backing is meant to see callers' tokens, not icegov's look
        try:
            parse_offer(config_in(response), time.monotonic())  # what every request needs
        except BackingUnavailable as exc:
            log.warning("readyz.backing_not_ready", status=status, error=exc.message)
            return BackingUnavailable(f"backing catalog answered {status} without a config")
        return None
