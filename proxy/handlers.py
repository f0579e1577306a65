"""Endpoints icegov answers itself: health, readiness and the catalog config."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse

from proxy.backing.forward import Forwarder
from proxy.backing.offers import CONFIG_PATH
from proxy.errors import BackingUnavailable, IcebergError
from proxy.policy import PolicyAuthorizer


async def healthz(_: Request) -> JSONResponse:
    """The process is up."""
    return JSONResponse({"status": "ok"})


class BackingHandlers:
    """Handlers that need the backing catalog: readiness and ``GET /v1/config``."""

    def __init__(self, forwarder: Forwarder, authorizer: PolicyAuthorizer) -> None:
        self._forwarder = forwarder
        self._authorizer = authorizer

    async def readyz(self, _: Request) -> JSONResponse:
        """Ready when the backing catalog answers its config endpoint without a server error.

        Anyone may ask, so the answer says only ``status``, the policy ``generation`` in force
        and whether the files on disk failed to load (``policy_error``) — never their paths,
        contents or the error text (those are in the log and ``icegov policy check``).
        """
        try:
            response = await self._forwarder.fetch(CONFIG_PATH, b"", ())
        except IcebergError as exc:
            raise BackingUnavailable("backing catalog not reachable") from exc
        if response.status_code >= 500:
            raise BackingUnavailable(f"backing catalog answered {response.status_code}")
        status = self._authorizer.status
        return JSONResponse({"status": "ready", "generation": status.generation,
                             "policy_error": status.last_error is not None})
