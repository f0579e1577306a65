"""AWS Signature Version 4 for S3 requests, header-signed with an unsigned payload.

``sign`` computes the ``Authorization`` header of one request (method, URL already in canonical
form, headers to sign) with a set of credentials, as S3 verifies it: the canonical request
(method, URI path as sent, sorted query, lower-cased sorted headers, payload hash), the string
to sign over its SHA-256, and the HMAC chain of the date, region and service. The payload hash
is always ``UNSIGNED-PAYLOAD``: icegov never sees the bodies it signs for (S3 allows it on every
request over TLS, and on plain HTTP to an S3-compatible store).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import quote, urlsplit

UNSIGNED_PAYLOAD = "UNSIGNED-PAYLOAD"
ALGORITHM = "AWS4-HMAC-SHA256"
SERVICE = "s3"


@dataclass(frozen=True)
class Credentials:
    """The storage credentials icegov signs with (never shown to anyone)."""

    access_key: str
    secret_key: str = ""
    session_token: str | None = None

    def __repr__(self) -> str:
        return f"Credentials(access_key={self.access_key!r}, secret_key=***)"


def amz_date(now: float) -> str:
    """``now`` (epoch seconds) as SigV4's ``x-amz-date`` (``20240102T030405Z``)."""
    return datetime.fromtimestamp(now, UTC).strftime("%Y%m%dT%H%M%SZ")


def uri_encode(text: str, *, slash: bool) -> str:
    """S3's URI encoding: every byte but unreserved characters (and ``/`` when ``slash``)."""
    return quote(text, safe="-_.~/" if slash else "-_.~")


def canonical_query(pairs: list[tuple[str, str]]) -> str:
    """The query as SigV4 canonicalises it: each name and value encoded, sorted."""
    encoded = sorted((uri_encode(k, slash=False), uri_encode(v, slash=False)) for k, v in pairs)
    return "&".join(f"{k}={v}" for k, v in encoded)


def sign(method: str, url: str, headers: Mapping[str, str], credentials: Credentials,
         region: str, date: str) -> str:
    """The ``Authorization`` header value for the request.

    ``url`` must already be canonical (path encoded as S3 expects, query as
    ``canonical_query`` spells it): it is signed as it is. ``headers`` are the headers to sign
    (names any case, ``host`` and ``x-amz-date`` among them); ``date`` is their
    ``x-amz-date``."""
    parts = urlsplit(url)
    signed = {name.lower(): " ".join(value.split()) for name, value in headers.items()}
    names = sorted(signed)
    canonical = "\n".join([
        method, parts.path or "/", parts.query,
        "".join(f"{name}:{signed[name]}\n" for name in names),
        ";".join(names), signed.get("x-amz-content-sha256", UNSIGNED_PAYLOAD)])
    scope = f"{date[:8]}/{region}/{SERVICE}/aws4_request"
    to_sign = "\n".join([ALGORITHM, date, scope,
                         hashlib.sha256(canonical.encode("utf-8")).hexdigest()])
    key = _signing_key(credentials.secret_key, date[:8], region)
    signature = hmac.new(key, to_sign.encode("utf-8"), hashlib.sha256).hexdigest()
    return (f"{ALGORITHM} Credential={credentials.access_key}/{scope}, "
            f"SignedHeaders={';'.join(names)}, Signature={signature}")


def _signing_key(secret: str, day: str, region: str) -> bytes:
    key = ("AWS4" + secret).encode("utf-8")
    for part in (day, region, SERVICE, "aws4_request"):
        key = hmac.new(key, part.encode("utf-8"), hashlib.sha256).digest()
    return key
