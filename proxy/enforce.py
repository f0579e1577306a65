"""The gate every governed request passes: authenticate → intent → authorize → (handle) → audit.

A denied request is answered 403 naming the action and resource (never policy internals) and
never reaches the backing catalog. A table or namespace on which the principal holds no right at
all is answered 404 as if absent, while the audit record says what really happened.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import httpx
from starlette.responses import Response

from proxy.audit import AuditLog, AuditRecord
from proxy.commit_intents import CommitClassifier
from proxy.errors import Forbidden, NoSuchNamespace, NoSuchTable
from proxy.forward import Forwarder, relayable_headers
from proxy.governance import Authorizer, Decision, Principal, resource_path
from proxy.identity import Authenticator
from proxy.inbound import InboundRequest
from proxy.intent import Intent, Need, intent_of


@dataclass
class Admission:
    """A request let through the gate: who is calling and what it was decided it may do."""

    principal: Principal | None
    intent: Intent
    decisions: tuple[Decision, ...] = ()
    evidence: list[dict[str, Any]] = field(default_factory=list)


class Gate:
    """Decides, for each inbound request, whether it may proceed; records every decision."""

    def __init__(self, authenticator: Authenticator, authorizer: Authorizer, forwarder: Forwarder,
                 catalog: str, audit: AuditLog) -> None:
        self._authenticator = authenticator
        self._authorizer = authorizer
        self._forwarder = forwarder
        self._commits = CommitClassifier(forwarder, catalog)
        self._catalog = catalog
        self.audit = audit

    async def admit(self, inbound: InboundRequest, record: AuditRecord) -> Admission:
        """Let the request through or raise 401/403/404; fills ``record`` as it goes."""
        intent = intent_of(inbound, self._catalog)
        if intent.public:
            record.decision = "public"
            return Admission(None, intent)
        record.decision = "unauthenticated"
        principal = self._authenticator.authenticate(inbound.headers)
        record.principal = principal
        needs, evidence = await self._needs(inbound, intent)
        record.evidence = evidence
        decisions = tuple(self._authorizer.decide(principal, n.action, n.resource) for n in needs)
        record.decisions = decisions
        record.resources = tuple(dict.fromkeys(n.resource for n in needs)) or (
            (intent.hide,) if intent.hide else ())
        self._check(principal, intent, decisions, record)
        record.decision = "allow"
        return Admission(principal, intent, decisions, evidence)

    async def _needs(self, inbound: InboundRequest,
                     intent: Intent) -> tuple[tuple[Need, ...], list[dict[str, Any]]]:
        if not intent.commit:
            return intent.needs, []
        commits = await self._commits.classify(inbound)
        needs = tuple(Need(action, c.resource) for c in commits
                      for action in sorted(c.intent.actions))
        return needs, [{"resource": c.resource, **c.intent.to_dict()} for c in commits]

    def _check(self, principal: Principal, intent: Intent, decisions: tuple[Decision, ...],
               record: AuditRecord) -> None:
        denied = [d for d in decisions if not d.allowed]
        if not denied:
            return
        if intent.hide and not self._authorizer.can_see(principal, intent.hide,
                                                        table=intent.hides_table):
            record.decision = "hidden"
            missing = NoSuchTable if intent.hides_table else NoSuchNamespace
            raise missing(f"{intent.hide.split('.', 1)[-1]} does not exist")
        record.decision = "deny"
        first = denied[0]
        raise Forbidden(f"{principal.name} may not {first.action} on {first.resource}")

    async def listing(self, inbound: InboundRequest, admission: Admission) -> Response:
        """The backing catalog's listing with only the entries the principal can see."""
        upstream = await self._forwarder.exchange(inbound)
        if upstream.status_code != 200 or admission.principal is None:
            return _relayed(upstream, upstream.content)
        body = json.loads(upstream.content)
        principal = admission.principal
        if admission.intent.listing == "namespaces":
            body["namespaces"] = [ns for ns in body.get("namespaces", []) if
                                  self._authorizer.can_see(principal, self._ns(ns))]
        else:
            body["identifiers"] = [i for i in body.get("identifiers", []) if
                                   self._authorizer.can_see(principal, self._table(i), table=True)]
        return _relayed(upstream, json.dumps(body, separators=(",", ":")).encode())

    def _ns(self, levels: list[str]) -> str:
        return resource_path(self._catalog, tuple(levels))

    def _table(self, identifier: dict[str, Any]) -> str:
        return resource_path(self._catalog, tuple(identifier.get("namespace", [])),
                             str(identifier.get("name")))


def _relayed(upstream: httpx.Response, body: bytes) -> Response:
    """``body`` with the upstream status and headers (decoded, so no content-encoding)."""
    response = Response(body, status_code=upstream.status_code)
    response.raw_headers = [
        *(h for h in relayable_headers(upstream) if h[0] not in _RECOMPUTED),
        (b"content-length", str(len(body)).encode()),
    ]
    return response


_RECOMPUTED = frozenset({b"content-length", b"content-encoding"})
