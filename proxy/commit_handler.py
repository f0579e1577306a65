"""icegov's own handlers for table commits and transactions: send the commit pinned to the base it
was classified against, and answer with a status the client can trust.

Outcomes: a 2xx lands as the backing answered it; a 4xx ErrorModel (a 409 among them: nothing
landed) is relayed; anything else — a 5xx, or an error that is not ErrorModel JSON — means icegov
cannot tell whether the commit landed, so it answers its own 502 (504 for a backing timeout)
``CommitStateUnknownException`` naming the backing's status. Never 503: clients take that as
"safe to retry", which it is not once the commit was sent.
"""

from __future__ import annotations

import json

import httpx
from starlette.responses import Response

from proxy.admission import Admission
from proxy.backing.forward import Forwarder, relayed
from proxy.errors import CommitStateUnknown, CommitTimeout
from proxy.inbound import InboundRequest
from proxy.pinning import pinned_table_commit, pinned_transaction


class CommitHandlers:
    """``POST .../tables/{t}`` and ``POST .../transactions/commit``."""

    def __init__(self, forwarder: Forwarder) -> None:
        self._forwarder = forwarder

    async def commit_table(self, inbound: InboundRequest, admission: Admission) -> Response:
        [change] = admission.changes
        return await self._send(inbound, pinned_table_commit(change))

    async def commit_transaction(self, inbound: InboundRequest,
                                 admission: Admission) -> Response:
        return await self._send(inbound, pinned_transaction(inbound.json(), admission.changes))

    async def _send(self, inbound: InboundRequest, body: bytes | None) -> Response:
        upstream = await self._forwarder.exchange(inbound, body)
        return commit_outcome(upstream)


def commit_outcome(upstream: httpx.Response) -> Response:
    """The backing's answer to a commit, or ``CommitStateUnknown`` when it proves nothing."""
    status = upstream.status_code
    if status < 400:
        return relayed(upstream, upstream.content)
    if status < 500 and is_error_model(upstream.content):
        return relayed(upstream, upstream.content)
    message = (f"the backing catalog answered {status}: the commit may or may not have landed; "
               "reload the table before retrying")
    raise (CommitTimeout if status == 504 else CommitStateUnknown)(message)


def is_error_model(body: bytes) -> bool:
    """True for an Iceberg ErrorModel body: ``{"error": {"message", "type", "code"}}``."""
    try:
        parsed = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return False
    error = parsed.get("error") if isinstance(parsed, dict) else None
    return (isinstance(error, dict) and isinstance(error.get("message"), str)
            and isinstance(error.get("type"), str) and isinstance(error.get("code"), int))
