"""The Idempotency-Key protocol around one request: claim the key, or wait for the request that
holds it and replay its answer; once the request ran, keep its final answer or let the key go.

Final answers (kept and replayed for the lifetime) are 2xx and the deterministic 4xx, 409
included. Not final, so never kept: 5xx, and the 4xx that say "try again" (408, 419, 425, 429)
— on those the claim is released and a retry with the same key runs the request again.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TypeVar

import structlog
from anyio import to_thread
from sqlalchemy.exc import SQLAlchemyError
from starlette.responses import Response

from proxy.errors import CommitTimeout, IcebergError
from proxy.governance import Principal
from proxy.idempotency.keys import IdempotencyKeyReused, KeyedRequest, keyed_request
from proxy.idempotency.settings import IdempotencySettings
from proxy.idempotency.store import Claimed, IdempotencyStore, StoredAnswer
from proxy.inbound import InboundRequest
from proxy.reads.disclosure import EVERY_SECRET, disclosed, dumps

log = structlog.get_logger("icegov")

RETRYABLE_4XX = frozenset({408, 419, 425, 429})
PURGE_EVERY_SECONDS = 60.0
_FIRST_POLL, _MAX_POLL = 0.01, 0.25
R = TypeVar("R")


MAX_CONTENT_TYPE_CHARS = 255
"""The longest ``Content-Type`` a stored answer keeps (the store's column)."""


class KeyInProgress(IcebergError):
    """Another request with this key is still running after the wait."""

    status = 504
    error_type = "GatewayTimeoutException"


class CommitKeyInProgress(CommitTimeout):
    """A commit with this key is still running after the wait: its outcome is unknown."""


class StoreUnavailable(IcebergError):
    """The idempotency store could not be reached; the request did not run."""

    status = 503
    error_type = "ServiceUnavailableException"


def is_final(status: int) -> bool:
    """True for an answer kept and replayed: 2xx and the 4xx that do not invite a retry."""
    return 200 <= status < 300 or (400 <= status < 500 and status not in RETRYABLE_4XX)


@dataclass(frozen=True)
class Replay:
    """The stored final answer of an earlier request with the same key."""

    answer: StoredAnswer

    def response(self) -> Response:
        headers = {"idempotent-replayed": "true"}
        if self.answer.content_type:
            headers["content-type"] = self.answer.content_type
        return Response(self.answer.body, status_code=self.answer.status, headers=headers)


@dataclass(frozen=True)
class Claim:
    """This request holds its key (``token`` proves it): settle it with the answer."""

    keyed: KeyedRequest
    token: str


class Idempotency:
    """Keys, waits and stored answers for the requests that carry an ``Idempotency-Key``."""

    def __init__(self, store: IdempotencyStore, settings: IdempotencySettings,
                 clock: Callable[[], float] = time.time) -> None:
        self._store = store
        self._settings = settings
        self._clock = clock
        self._last_purge = float("-inf")

    async def begin(self, inbound: InboundRequest,
                    principal: Principal | None) -> Replay | Claim | None:
        """None when the request carries no key (or takes none); else a replay of the key's
        final answer, or the claim under which this request runs. 400 for a malformed key,
        422 for a key bound to another request or principal, 504 when the request holding
        the key is still running after ``wait_seconds``, 503 when the store is unreachable."""
        keyed = keyed_request(inbound, principal)
        if keyed is None:
            return None
        await self._purge_now_and_then()
        deadline = time.monotonic() + self._settings.wait_seconds
        delay = _FIRST_POLL
        while True:
            outcome = await self._call(partial(
                self._store.claim, keyed.key, keyed.principal, keyed.fingerprint,
                self._clock(), self._settings.claim_seconds))
            if isinstance(outcome, Claimed):
                return Claim(keyed, outcome.token)
            if (outcome.principal, outcome.fingerprint) != (keyed.principal, keyed.fingerprint):
                raise IdempotencyKeyReused(
                    "this Idempotency-Key was already used for another request")
            if outcome.answer is not None:
                return Replay(outcome.answer)
            if time.monotonic() >= deadline:
                raise _in_progress(inbound)
            await asyncio.sleep(delay)
            delay = min(delay * 2, _MAX_POLL)

    async def settle(self, claim: Claim, response: Response,
                     rights: tuple[tuple[str, str], ...] = ()) -> Response:
        """Keep ``response`` under the claim's key if it is final, else let the key go;
        returns the response to send (read whole when it was streamed). ``rights``, the
        (action, resource) rights the answer was given on, are kept with it: a replay is
        only for a caller who still holds them."""
        if not is_final(response.status_code):
            await self.abandon(claim)
            return response
        body = await _whole_body(response)
        whole = _rebuilt(response, body)
        if len(body) > self._settings.max_stored_bytes:
            log.warning("idempotency.answer_too_large", key=claim.keyed.key, size=len(body))
            await self.abandon(claim)
            return whole
        content_type = response.headers.get("content-type")
        if content_type is not None and len(content_type) > MAX_CONTENT_TYPE_CHARS:
            content_type = None  # the store's column is bounded; a replay answers without it
        answer = StoredAnswer(response.status_code, content_type, at_rest(body), rights)
        expires = self._clock() + self._settings.lifetime_seconds
        try:
            stored = await self._call(partial(
                self._store.finish, claim.keyed.key, claim.token, answer, expires))
        except StoreUnavailable:
            await self.abandon(claim)
            return whole
        if not stored:
            log.warning("idempotency.claim_lost", key=claim.keyed.key)
        return whole

    async def abandon(self, claim: Claim) -> None:
        """Release the claim's key without an answer (a retry runs the request again)."""
        try:
            await self._call(partial(self._store.release, claim.keyed.key, claim.token))
        except StoreUnavailable:
            log.warning("idempotency.release_failed", key=claim.keyed.key)

    async def close(self) -> None:
        await to_thread.run_sync(self._store.close)

    async def _purge_now_and_then(self) -> None:
        now = time.monotonic()
        if now - self._last_purge < PURGE_EVERY_SECONDS:
            return
        self._last_purge = now
        with contextlib.suppress(StoreUnavailable):  # the claim that follows reports it
            await self._call(partial(self._store.purge, self._clock()))

    async def _call(self, call: Callable[[], R]) -> R:
        try:
            return await to_thread.run_sync(call)
        except SQLAlchemyError as exc:
            log.warning("idempotency.store_error", error_type=type(exc).__name__)
            raise StoreUnavailable("the idempotency store is unavailable") from exc


def _in_progress(inbound: InboundRequest) -> IcebergError:
    message = "a request with this Idempotency-Key is still in progress"
    if inbound.route.endpoint.commit:
        return CommitKeyInProgress(message + "; its outcome is unknown")
    return KeyInProgress(message)


async def _whole_body(response: Response) -> bytes:
    iterator = getattr(response, "body_iterator", None)
    if iterator is None:
        return bytes(response.body)
    chunks = [c.encode() if isinstance(c, str) else bytes(c) async for c in iterator]
    if response.background is not None:
        await response.background()
    return b"".join(chunks)


def _rebuilt(response: Response, body: bytes) -> Response:
    """A plain response with ``body`` and the original status and headers."""
    if getattr(response, "body_iterator", None) is None:
        return response
    rebuilt = Response(body, status_code=response.status_code)
    rebuilt.raw_headers = [
        *(h for h in response.raw_headers if h[0].lower() != b"content-length"),
        (b"content-length", str(len(body)).encode()),
    ]
    return rebuilt


def at_rest(body: bytes) -> bytes:
    """``body`` as it may be kept at rest: a JSON answer without its vended credentials
    (``reads.disclosure``'s ``EVERY_SECRET``: the secret ``config`` values and those of the
    ``storage-credentials``; a replay answers the table without them, and the client loads them
    afresh); any other answer, and one that holds none, byte for byte."""
    try:
        answer = json.loads(body)
    except (ValueError, RecursionError):
        return body
    if not isinstance(answer, dict):
        return body
    kept = disclosed(answer, EVERY_SECRET)
    if kept == answer:
        return body  # nothing that could hold a credential: kept byte for byte
    return dumps(kept)
