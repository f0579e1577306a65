"""What an Idempotency-Key is bound to, and which requests may carry one.

The REST spec (``components/parameters/idempotency-key``) gives the optional header to the
mutation endpoints listed in ``IDEMPOTENT_ENDPOINTS`` — and only those: on any other endpoint the
header is ignored. A key is a UUID in its 36-character string form (the spec asks clients for a
UUIDv7; any UUID version is accepted, anything else is 400). It is normalized to lowercase.

A key is bound to the principal that first used it and to the request's fingerprint: the
method, the raw path, the query string and the SHA-256 of the body. The spec requires keys to be
unique and says nothing about a key reused with another request; icegov answers such a reuse
(another body, path, method, or another principal) with 422 ``UnprocessableEntityException``,
as the IETF ``draft-ietf-httpapi-idempotency-key-header`` does, and never replays.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from proxy.errors import BadRequest, IcebergError
from proxy.governance import Principal
from proxy.inbound import InboundRequest

HEADER = b"idempotency-key"

IDEMPOTENT_ENDPOINTS = frozenset({
    "create_namespace", "drop_namespace", "update_namespace_properties",
    "create_table", "register_table", "commit_table", "drop_table", "rename_table",
    "commit_transaction", "cancel_planning",
    "replace_view", "drop_view", "rename_view", "register_view",
})
"""Endpoints (by route-table name) whose spec operation lists the ``Idempotency-Key`` header,
except planning and fetching scan tasks: they change nothing, and their answers carry vended
storage credentials that must not be kept at rest."""

_UUID = re.compile(rb"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")


class InvalidIdempotencyKey(BadRequest):
    """An Idempotency-Key header that is not one UUID string."""


class IdempotencyKeyReused(IcebergError):
    """A key already bound to another request or another principal."""

    status = 422
    error_type = "UnprocessableEntityException"


@dataclass(frozen=True)
class KeyedRequest:
    """A request that carries a valid key: the key, who sent it, and what it asks."""

    key: str
    principal: str
    fingerprint: str


def keyed_request(inbound: InboundRequest, principal: Principal | None) -> KeyedRequest | None:
    """The key binding of ``inbound``, or None when it carries no key or its endpoint takes
    none; 400 for a malformed key or for more than one."""
    if inbound.route.endpoint.name not in IDEMPOTENT_ENDPOINTS:
        return None
    values = [v for k, v in inbound.headers if k.lower() == HEADER]
    if not values:
        return None
    if len(values) > 1:
        raise InvalidIdempotencyKey("Idempotency-Key given more than once")
    value = values[0].strip()
    if not _UUID.fullmatch(value):
        raise InvalidIdempotencyKey("Idempotency-Key must be a UUID string (36 characters)")
    who = f"{principal.source}:{principal.name}" if principal is not None else "public:"
    return KeyedRequest(value.decode("ascii").lower(), who, fingerprint(inbound))


def fingerprint(inbound: InboundRequest) -> str:
    """SHA-256 (hex) over the method, raw path, query string and the body's own SHA-256."""
    digest = hashlib.sha256()
    for part in (inbound.method.encode("ascii"), inbound.raw_path, inbound.query_string,
                 hashlib.sha256(inbound.body).digest()):
        digest.update(len(part).to_bytes(8, "big"))
        digest.update(part)
    return digest.hexdigest()


def iso_duration(seconds: int) -> str:
    """``seconds`` as an ISO-8601 duration: 1800 → ``PT30M``, 90061 → ``PT25H1M1S``."""
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [(hours, "H"), (minutes, "M"), (secs, "S")]
    text = "".join(f"{n}{unit}" for n, unit in parts if n)
    return "PT" + (text or "0S")
