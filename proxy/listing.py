"""Listings filtered to what the caller can see: namespaces and table/view identifiers."""

from __future__ import annotations

import json
from typing import Any

from starlette.responses import Response

from proxy.admission import Admission
from proxy.backing.forward import Forwarder, relayed
from proxy.errors import BackingUnavailable
from proxy.governance import Authorizer, Principal
from proxy.inbound import InboundRequest
from proxy.resources import Resource


class ListingHandlers:
    """The backing's listing with only the entries the principal can see."""

    def __init__(self, forwarder: Forwarder, authorizer: Authorizer) -> None:
        self._forwarder = forwarder
        self._authorizer = authorizer

    async def list_namespaces(self, inbound: InboundRequest, admission: Admission) -> Response:
        return await self._filtered(inbound, admission, "namespaces", _namespace)

    async def list_tables(self, inbound: InboundRequest, admission: Admission) -> Response:
        return await self._filtered(inbound, admission, "identifiers", _table)

    list_views = list_tables

    async def _filtered(self, inbound: InboundRequest, admission: Admission, key: str,
                        resource_of: Any) -> Response:
        upstream = await self._forwarder.exchange(inbound)
        principal = admission.principal
        if upstream.status_code != 200 or principal is None:
            return relayed(upstream, upstream.content)
        try:
            body = json.loads(upstream.content)
            entries = body[key]
        except (ValueError, TypeError, KeyError) as exc:
            raise BackingUnavailable("the backing catalog's listing is unreadable") from exc
        if not isinstance(entries, list):
            raise BackingUnavailable("the backing catalog's listing is unreadable")
        body[key] = [e for e in entries
                     if self._visible(principal, resource_of(admission.catalog, e))]
        return relayed(upstream, json.dumps(body, separators=(",", ":")).encode())

    def _visible(self, principal: Principal, resource: Resource | None) -> bool:
        return resource is not None and self._authorizer.can_see(principal, resource)


def _namespace(catalog: str, entry: Any) -> Resource | None:
    if not isinstance(entry, list) or not entry or not all(isinstance(x, str) for x in entry):
        return None
    return Resource(catalog, tuple(entry))


def _table(catalog: str, entry: Any) -> Resource | None:
    if not isinstance(entry, dict):
        return None
    namespace = _namespace(catalog, entry.get("namespace"))
    name = entry.get("name")
    if namespace is None or not isinstance(name, str):
        return None
    return namespace.table_named(name)
