"""The signing grant: a sealed, short-lived token in the signer endpoint a loadTable advertises.

A grant names the principal it was issued to (name and roles), the table (its resource text and
uuid), the policy generation it was decided under, what the principal may read — the table's
locations, or for a governed principal the governed metadata file its answer named and the view
digest — whether it may write, and when it expires::

    "g1." + base64url(compact JSON) + "." + base64url(HMAC-SHA256)

The MAC covers the version and the claims and is compared in constant time; nothing is parsed
before it checks out. A forged, malformed or expired grant is refused (403): the signer never
signs on claims icegov did not issue, and the handler checks that the caller is the principal
named.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from proxy.errors import Forbidden
from proxy.keys import opened_token, seal_token

MAX_GRANT_CHARS = 16 * 1024
_VERSION = "g1"
_DOMAIN = b"icegov signing grant v1\x00"


@dataclass(frozen=True)
class Grant:
    """What one signer endpoint lets its principal have signed.

    ``roots`` are the table's locations (``location``, ``write.data.path``,
    ``write.metadata.path``), where writes go and where an ungoverned principal reads;
    ``governed`` the governed metadata file a governed principal was served (its reads are
    exactly the files it lists) and ``view`` that view's digest, both empty otherwise."""

    principal: str
    roles: tuple[str, ...]
    table: str
    table_uuid: str
    roots: tuple[str, ...]
    governed: str
    view: str
    write: bool
    generation: int
    expires_at: float

    @property
    def key(self) -> tuple[str, str, str, str]:
        """Who reads what under this grant (the read tally's key)."""
        return (self.principal, self.table, self.governed, self.view)


_FIELDS = ("principal", "roles", "table", "table_uuid", "roots", "governed", "view", "write",
           "generation", "expires_at")


def seal_grant(grant: Grant, key: bytes) -> str:
    """The grant as a token (URL-path safe)."""
    values = [list(v) if isinstance(v, tuple) else v
              for v in (getattr(grant, name) for name in _FIELDS)]
    body = json.dumps(values, separators=(",", ":")).encode()
    return seal_token(_VERSION, _DOMAIN, body, key)


def unseal_grant(token: str, key: bytes, now: float) -> Grant:
    """The grant ``token`` stands for, issued with ``key`` and not expired at ``now``; 403
    otherwise, whatever ``token`` holds."""
    invalid = Forbidden("invalid signing grant: load the table again")
    body = opened_token(token, _VERSION, _DOMAIN, key, MAX_GRANT_CHARS)
    if body is None:
        raise invalid
    grant = _grant(body)
    if grant is None:
        raise invalid
    if now >= grant.expires_at:
        raise Forbidden("the signing grant has expired: load the table again")
    return grant


def _grant(body: bytes) -> Grant | None:
    try:
        values = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if not isinstance(values, list) or len(values) != len(_FIELDS):
        return None
    raw: dict[str, Any] = dict(zip(_FIELDS, values, strict=True))
    strings = ("principal", "table", "table_uuid", "governed", "view")
    if not (all(isinstance(raw[k], str) for k in strings)
            and all(isinstance(raw[k], list) and all(isinstance(v, str) for v in raw[k])
                    for k in ("roles", "roots"))
            and isinstance(raw["write"], bool)
            and isinstance(raw["generation"], int) and not isinstance(raw["generation"], bool)
            and isinstance(raw["expires_at"], int | float)
            and not isinstance(raw["expires_at"], bool) and math.isfinite(raw["expires_at"])):
        return None
    return Grant(**{**raw, "roles": tuple(raw["roles"]), "roots": tuple(raw["roots"])})


