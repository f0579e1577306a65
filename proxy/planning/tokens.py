"""Plan ids and plan tasks as self-contained signed tokens, so any replica can serve them.

A token carries its ``TaskClaims`` (who, which table as of which snapshot, under which policy
generation and read view, the scan request, the manifests it covers, and when it expires)::

    "1." + base64url(zlib(compact JSON of the claims)) + "." + base64url(HMAC-SHA256)

The MAC covers the version and the compressed claims and is compared in constant time. Nothing
is decompressed before the MAC checks out, and never more than ``MAX_CLAIMS_BYTES`` (a forged
zip bomb is refused before inflation; a genuine token is never that large).

Errors: a malformed, forged or wrong-kind token is ``BadRequest`` ("invalid plan task"): the
client sent something icegov never issued. An expired one is ``NoSuchPlanTask`` (or
``NoSuchPlanId`` for plan ids): 404 is what the spec lists for a task or plan that no longer
exists, the one both Java and pyiceberg map to their "no such plan task / plan id" exceptions,
and its message tells the client to plan again; 410 is in no client's vocabulary. The handler
checks that the claims match the caller and the URL.
"""

from __future__ import annotations

import json
import math
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from proxy.errors import BadRequest, NoSuchPlanId, NoSuchPlanTask
from proxy.keys import opened_token, seal_token

MAX_TOKEN_CHARS = 2 * 1024 * 1024
MAX_CLAIMS_BYTES = 1024 * 1024
_VERSION = "1"
_DOMAIN = b"icegov plan token v1\x00"

Kind = Literal["plan", "task"]


@dataclass(frozen=True)
class TaskClaims:
    """What a plan id or plan task stands for.

    ``scan`` is the scan request in canonical ``PlanTableScanRequest`` form
    (``ScanRequest.to_json()``); ``shard`` the data manifest paths a plan task covers (empty for
    a plan id); ``view_key`` the principal's ``ReadView.cache_key()`` at planning time;
    ``expires_at`` epoch seconds; ``nonce`` tells apart plans of the same request.
    """

    kind: Kind
    principal: str
    roles: tuple[str, ...]
    catalog: str
    namespace: tuple[str, ...]
    table: str
    table_uuid: str
    snapshot_id: int | None
    policy_generation: int
    expires_at: float
    scan: Mapping[str, Any] = field(default_factory=dict)
    shard: tuple[str, ...] = ()
    view_key: tuple[Any, ...] = ()
    nonce: str = ""


_KEYS = {"kind": "k", "principal": "p", "roles": "r", "catalog": "c", "namespace": "n",
         "table": "t", "table_uuid": "u", "snapshot_id": "s", "policy_generation": "g",
         "expires_at": "e", "scan": "q", "shard": "m", "view_key": "v", "nonce": "o"}


def seal(claims: TaskClaims, key: bytes) -> str:
    """The signed token of ``claims``; ``BadRequest`` when they are too large for ``unseal``
    to accept (a scan whose filter and select pass ``MAX_CLAIMS_BYTES``)."""
    compact = {short: _jsonable(getattr(claims, name)) for name, short in _KEYS.items()}
    text = json.dumps(compact, separators=(",", ":"), sort_keys=True)  # ASCII: any str encodes
    if len(text) > MAX_CLAIMS_BYTES:
        raise BadRequest(f"this scan is too large to plan on the server: its filter, select "
                         f"and manifests must stay under {MAX_CLAIMS_BYTES} bytes")
    return seal_token(_VERSION, _DOMAIN, zlib.compress(text.encode(), 6), key)


def unseal(token: str, key: bytes, now: float, *, kind: Kind = "task") -> TaskClaims:
    """The claims of a token icegov issued with ``key``, of ``kind``, not expired at ``now``.

    ``BadRequest`` when malformed, forged or of another kind; ``NoSuchPlanTask`` /
    ``NoSuchPlanId`` when expired. Never anything else, whatever ``token`` holds.
    """
    invalid = BadRequest(f"invalid plan {'task' if kind == 'task' else 'id'}")
    body = opened_token(token, _VERSION, _DOMAIN, key, MAX_TOKEN_CHARS)
    if body is None:
        raise invalid
    claims = _claims(_inflate(body), invalid)
    if claims.kind != kind:
        raise invalid
    if now >= claims.expires_at:
        if kind == "task":
            raise NoSuchPlanTask("this plan task has expired; plan the scan again")
        raise NoSuchPlanId("this plan has expired; plan the scan again")
    return claims




def _inflate(body: bytes) -> bytes | None:
    inflater = zlib.decompressobj()
    try:
        data = inflater.decompress(body, MAX_CLAIMS_BYTES)
    except zlib.error:
        return None
    if inflater.unconsumed_tail or not inflater.eof:
        return None
    return data


def _jsonable(value: Any) -> Any:
    if isinstance(value, tuple | list):
        return [_jsonable(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return value


def _tuples(value: Any) -> Any:
    """JSON arrays back to tuples (a view key compares as nested tuples)."""
    if isinstance(value, list):
        return tuple(_tuples(v) for v in value)
    return value


def _claims(data: bytes | None, invalid: BadRequest) -> TaskClaims:
    try:
        raw = json.loads(data) if data is not None else None
    except (ValueError, RecursionError):
        raw = None
    if not isinstance(raw, dict) or set(raw) != set(_KEYS.values()):
        raise invalid
    values = {name: raw[short] for name, short in _KEYS.items()}
    if not _valid(values):
        raise invalid
    return TaskClaims(
        kind=values["kind"], principal=values["principal"], roles=tuple(values["roles"]),
        catalog=values["catalog"], namespace=tuple(values["namespace"]), table=values["table"],
        table_uuid=values["table_uuid"], snapshot_id=values["snapshot_id"],
        policy_generation=values["policy_generation"], expires_at=values["expires_at"],
        scan=values["scan"], shard=tuple(values["shard"]), view_key=_tuples(values["view_key"]),
        nonce=values["nonce"])


def _valid(values: Mapping[str, Any]) -> bool:
    strings = ("principal", "catalog", "table", "table_uuid", "nonce")
    lists = ("roles", "namespace", "shard")
    return (values["kind"] in ("plan", "task")
            and all(isinstance(values[k], str) for k in strings)
            and all(isinstance(values[k], list) and all(isinstance(v, str) for v in values[k])
                    for k in lists)
            and (values["snapshot_id"] is None or _is_int(values["snapshot_id"]))
            and _is_int(values["policy_generation"]) and _is_number(values["expires_at"])
            and isinstance(values["scan"], dict) and isinstance(values["view_key"], list))


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return _is_int(value) or (isinstance(value, float) and math.isfinite(value))
