"""The governed pipeline: route → gate → handler (with the admission) → one audit record.

Every request to an Iceberg REST route gets one audit record, written after its outcome is
known (with fail-closed audit, an allowed mutating request gets one more, written before it is
sent on), whatever happened: refused by the route table, denied, hidden, failed in a handler or
inside icegov (a 500 that carries ``X-Request-ID`` like every other answer).

A request with an ``Idempotency-Key`` runs: the coarse gate (authentication, hiding, the coarse
decision) → the key: replay of its stored answer, or a claim → the evidence and final decision
→ the handler → its final answer stored under the key (``proxy.idempotency``). A replay is
audited with ``replayed``.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping

import structlog
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from proxy.admission.admission import Admission
from proxy.audit import AuditLog, AuditRecord, AuditUnavailable
from proxy.audit.record import aggregated
from proxy.backing.forward import relayed
from proxy.backing.tables import BackingRefused
from proxy.committer.heads import Rejudge
from proxy.edge.context import request_id
from proxy.edge.dispatch import internal_error
from proxy.errors import IcebergError, error_response
from proxy.gate.enforce import Coarse, Gate
from proxy.gate.evidence import discard_built
from proxy.idempotency import Claim, Idempotency, Replay
from proxy.inbound import InboundRequest, read_routed
from proxy.ops.metrics import Metrics
from proxy.routes import ENDPOINTS, RouteTable

log = structlog.get_logger("icegov")

GovernedHandler = Callable[[InboundRequest, Admission], Awaitable[Response]]
Replayer = Callable[[Response, InboundRequest, Admission], Awaitable[Response]]
"""Shapes a stored answer for its replay, by endpoint (e.g. projected for a restricted caller)."""


class UnhandledEndpoint(RuntimeError):
    """An endpoint the route table says icegov owns has no handler: refuse to start."""


def check_owned_handled(handlers: Mapping[str, GovernedHandler]) -> None:
    """Fail start-up when an owned endpoint has no handler (it would silently be forwarded)."""
    missing = sorted(e.name for e in ENDPOINTS if e.owned and e.name not in handlers)
    if missing:
        raise UnhandledEndpoint(f"owned endpoints without a handler: {', '.join(missing)}")


class GovernedDispatcher:
    """Pure ASGI app: every Iceberg REST request through the gate to its handler, audited."""

    def __init__(self, routes: RouteTable, handlers: Mapping[str, GovernedHandler],
                 forward: GovernedHandler, gate: Gate, audit: AuditLog,
                 max_body_bytes: int, idempotency: Idempotency | None = None,
                 metrics: Metrics | None = None,
                 replayers: Mapping[str, Replayer] | None = None) -> None:
        check_owned_handled(handlers)
        self._routes = routes
        self._handlers = dict(handlers)
        self._forward = forward
        self._gate = gate
        self._audit = audit
        self._max_body = max_body_bytes
        self._idempotency = idempotency
        self._metrics = metrics
        self._replayers = dict(replayers or {})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        record = _record(scope)
        response = await self._answer(scope, receive, record)
        record.status = response.status_code
        if not aggregated(record):  # a signed read counted in an aggregate (proxy.signing)
            self._audit.write(record)  # before the answer leaves: a caller never outruns it
        if self._metrics is not None:
            self._metrics.observe_request(record, time.perf_counter())
        await response(scope, receive, send)

    async def _answer(self, scope: Scope, receive: Receive, record: AuditRecord) -> Response:
        try:
            return await _answered(self._governed(scope, receive, record), record)
        except Exception as exc:
            record.decision = "error"
            log.exception("unexpected error", error_type=type(exc).__name__,
                          endpoint=record.endpoint)
            return internal_error()

    async def _governed(self, scope: Scope, receive: Receive, record: AuditRecord) -> Response:
        inbound = await read_routed(self._routes, scope, receive, self._max_body)
        record.endpoint = inbound.route.endpoint.name
        coarse = await self._gate.admit_coarse(inbound, record)  # who asks comes first
        self._audit.check_writable(record)  # fail closed: nothing changes unaudited
        keyed = (await self._idempotency.begin(inbound, coarse.principal)
                 if self._idempotency is not None else None)
        if keyed is None:
            return await self._decided(coarse, record)
        if isinstance(keyed, Replay):
            self._gate.recheck(coarse, keyed.answer.rights, record)
            record.decision = "allow"
            record.replayed = True
            replayer = self._replayers.get(inbound.route.endpoint.name)
            response = keyed.response()
            return response if replayer is None else await replayer(
                response, inbound, coarse.admission)
        return await self._claimed(keyed, coarse, record)

    async def _decided(self, coarse: Coarse, record: AuditRecord) -> Response:
        """The evidence and final decision, then the handler. A commit judged on a head this
        replica knew and refused (``Rejudge``, nothing landed) is decided again on fresh loads
        and sent again: icegov never answers its own stale judgement with a 409."""
        try:
            return await self._decided_once(coarse, record, fresh=False)
        except Rejudge:
            return await self._decided_once(coarse, record, fresh=True)

    async def _decided_once(self, coarse: Coarse, record: AuditRecord, fresh: bool) -> Response:
        admission = await self._gate.complete(coarse, record, fresh)
        try:
            self._audit.write_ahead(record)  # fail closed: a change is on record before it is sent
        except AuditUnavailable:
            discard_built(admission.changes)  # files icegov wrote for a change never sent
            raise
        handler = self._handlers.get(coarse.inbound.route.endpoint.name, self._forward)
        return await handler(coarse.inbound, admission)

    async def _claimed(self, claim: Claim, coarse: Coarse, record: AuditRecord) -> Response:
        """Run the request under its key's claim; its final answer (an error ErrorModel among
        them) is stored; a failure inside icegov releases the key."""
        assert self._idempotency is not None
        try:
            response = await _answered(self._decided(coarse, record), record)
        except BaseException:
            await self._idempotency.abandon(claim)
            raise
        rights = tuple((d.action.value, str(d.resource)) for d in record.decisions if d.allowed)
        return await self._idempotency.settle(claim, response, rights)


async def _answered(answer: Awaitable[Response], record: AuditRecord) -> Response:
    """The answer, with icegov's errors as ErrorModel and the backing's refusals relayed."""
    try:
        return await answer
    except IcebergError as exc:
        record.error = exc.message
        return error_response(exc)
    except BackingRefused as refused:
        return relayed(refused.response, refused.response.content)


def _record(scope: Scope) -> AuditRecord:
    headers = dict(scope["headers"])
    raw_path: bytes = scope.get("raw_path") or scope["path"].encode("utf-8")

    def text(name: bytes) -> str | None:
        value = headers.get(name)
        return value.decode("latin-1") if value is not None else None

    return AuditRecord(
        request_id=request_id(scope), method=scope["method"], path=raw_path.decode("latin-1"),
        endpoint="unknown", user_agent=text(b"user-agent"),
        client_version=text(b"x-client-version"),
    )
