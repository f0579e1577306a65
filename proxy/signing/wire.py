"""A signing request (``S3SignRequest``) parsed into the one storage request icegov may sign.

Everything the client sends is hostile. The URI must address the store icegov signs for (its
``s3.endpoint``, path-style or virtual-hosted, or AWS's S3 endpoints when none is set), name one
object by a key without empty, ``.`` or ``..`` segments (also percent-encoded) or control
characters, and carry only the query of the operations icegov signs: none for a read or a put,
``uploads`` / ``partNumber`` and ``uploadId`` / ``uploadId`` for a multipart upload, and an
``x-id`` naming that same operation. Headers that turn a request into another one or widen what
it does (``x-amz-copy-source*``, ACLs, redirects, any ``x-amz-*`` not on the allow-list) are
refused. The URI signed is rebuilt from the parsed parts (``StorageRequest.url``), so what is
signed is exactly what was decided, in one spelling.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any
from urllib.parse import unquote, urlsplit

from proxy.errors import BadRequest, Forbidden
from proxy.signing.sigv4 import canonical_query, uri_encode


class Operation(StrEnum):
    """The storage operations icegov signs."""

    READ = "read"                      # GET / HEAD of one object (ranged or not)
    PUT = "put"                        # PUT of a new object
    CREATE_UPLOAD = "create-upload"    # POST ?uploads
    UPLOAD_PART = "upload-part"        # PUT ?partNumber&uploadId
    COMPLETE_UPLOAD = "complete-upload"  # POST ?uploadId

    @property
    def writes(self) -> bool:
        return self is not Operation.READ


_QUERIES: dict[tuple[str, frozenset[str]], tuple[Operation, str]] = {
    ("GET", frozenset()): (Operation.READ, "GetObject"),
    ("HEAD", frozenset()): (Operation.READ, "HeadObject"),
    ("PUT", frozenset()): (Operation.PUT, "PutObject"),
    ("POST", frozenset({"uploads"})): (Operation.CREATE_UPLOAD, "CreateMultipartUpload"),
    ("PUT", frozenset({"partNumber", "uploadId"})): (Operation.UPLOAD_PART, "UploadPart"),
    ("POST", frozenset({"uploadId"})): (Operation.COMPLETE_UPLOAD, "CompleteMultipartUpload"),
}
"""(method, query names without ``x-id``) → the operation, and the ``x-id`` it may carry."""

ALLOWED_AMZ = re.compile(
    r"x-amz-(checksum-[a-z0-9]+|sdk-checksum-algorithm|server-side-encryption[a-z0-9-]*"
    r"|meta-[a-z0-9_.-]+|storage-class|request-payer|expected-bucket-owner|user-agent"
    r"|content-sha256|date|security-token|decoded-content-length|trailer)")
"""The ``x-amz-*`` headers a signed request may carry (any other is refused)."""
_OVERRIDDEN = frozenset({"x-amz-content-sha256", "x-amz-date", "x-amz-security-token",
                         "authorization", "if-none-match"})
"""Headers icegov sets itself on what it signs (the client's are ignored)."""
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_REGION = re.compile(r"[a-z0-9-]{1,40}")
_PART = re.compile(r"[1-9][0-9]{0,4}")


@dataclass(frozen=True)
class Store:
    """The S3 endpoint icegov signs for: ``scheme://host`` (``host`` with its port)."""

    scheme: str
    host: str
    aws: bool = False

    @classmethod
    def from_file_io(cls, file_io: Mapping[str, str]) -> Store:
        """The store of icegov's ``file_io`` (``s3.endpoint``; AWS's S3 when unset)."""
        endpoint = file_io.get("s3.endpoint")
        if not endpoint:
            return cls("https", "", aws=True)
        parts = urlsplit(endpoint)
        if parts.scheme not in ("http", "https") or not parts.netloc or parts.path.strip("/"):
            raise ValueError("s3.endpoint must be http(s)://host[:port] to sign for it")
        return cls(parts.scheme, parts.netloc.lower())

    def bucket_of(self, host: str, region: str) -> str | None:
        """The bucket a virtual-hosted ``host`` names ("" for path-style; None: not ours)."""
        hosts = ({f"s3.{region}.amazonaws.com", "s3.amazonaws.com"} if self.aws
                 else {self.host})
        if host in hosts:
            return ""
        for base in hosts:
            if host.endswith("." + base) and "." not in host[: -len(base) - 1]:
                return host[: -len(base) - 1]
        return None


@dataclass(frozen=True)
class StorageRequest:
    """One object request, parsed: what is decided and signed."""

    method: str
    operation: Operation
    scheme: str
    host: str
    bucket: str
    key: str
    path_style: bool
    query: tuple[tuple[str, str], ...]
    amz_headers: tuple[tuple[str, str], ...]

    @property
    def location(self) -> str:
        """The object as table metadata names it."""
        return f"s3://{self.bucket}/{self.key}"

    @property
    def url(self) -> str:
        """The request's URL in its one canonical spelling (what is signed)."""
        path = (f"/{uri_encode(self.bucket, slash=False)}" if self.path_style else "") + \
            "/" + uri_encode(self.key, slash=True)
        query = canonical_query(list(self.query))
        return f"{self.scheme}://{self.host}{path}" + (f"?{query}" if query else "")


def parse_sign_request(body: Any, store: Store, region: str | None) -> tuple[StorageRequest, str]:
    """The storage request of an ``S3SignRequest`` body and the region to sign for
    (``region``, icegov's own, or the request's when icegov sets none). 400 for a body that is
    not a sign request; 403 for a request icegov signs for no one."""
    if not isinstance(body, dict):
        raise BadRequest("a sign request must be a JSON object")
    method, uri, headers = body.get("method"), body.get("uri"), body.get("headers")
    asked = body.get("region")
    if not (isinstance(method, str) and isinstance(uri, str) and isinstance(asked, str)
            and isinstance(headers, dict)):
        raise BadRequest("a sign request needs 'region', 'uri', 'method' and 'headers'")
    signing_region = region or asked
    if not _REGION.fullmatch(signing_region):
        raise BadRequest("'region' is not an AWS region name")
    flat = _headers(headers)
    parts = urlsplit(uri)
    if parts.scheme != store.scheme or parts.fragment or "@" in parts.netloc:
        raise Forbidden("icegov signs requests to its own store only")
    host = parts.netloc.lower()
    virtual = store.bucket_of(host, signing_region)
    if virtual is None:
        raise Forbidden("icegov signs requests to its own store only")
    bucket, key = _object(parts.path, virtual)
    operation, query = _operation(method.upper(), parts.query)
    return StorageRequest(method.upper(), operation, parts.scheme, host, bucket, key,
                          not virtual, query, _amz(flat)), signing_region


def _headers(headers: dict[Any, Any]) -> dict[str, str]:
    flat: dict[str, str] = {}
    for name, values in headers.items():
        if not isinstance(name, str) or not _TOKEN.fullmatch(name):
            raise BadRequest("a header name in the sign request is not a token")
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise BadRequest("header values in a sign request are lists of strings")
        if name.lower() in flat:
            raise Forbidden(f"header {name!r} is sent twice")
        value = ", ".join(values)
        if _CONTROL.search(value):
            raise Forbidden(f"header {name!r} holds control characters")
        flat[name.lower()] = value
    return flat


def _amz(flat: dict[str, str]) -> tuple[tuple[str, str], ...]:
    for name in flat:
        if name.startswith("x-amz-") and not ALLOWED_AMZ.fullmatch(name):
            raise Forbidden(f"icegov does not sign requests with header {name!r}")
    return tuple(sorted((n, v) for n, v in flat.items()
                        if n.startswith("x-amz-") and n not in _OVERRIDDEN))


def _object(raw_path: str, virtual: str) -> tuple[str, str]:
    """The bucket and key of the URI's path (each segment checked as sent and decoded)."""
    if "//" in raw_path or not raw_path.startswith("/"):
        raise Forbidden("the object path has an empty segment")
    try:
        decoded = unquote(raw_path, errors="strict")
    except UnicodeDecodeError:
        raise Forbidden("the object path is not valid percent-encoded UTF-8") from None
    for text in (raw_path, decoded):
        segments = text[1:].split("/")
        if any(s in ("", ".", "..") for s in segments) or _CONTROL.search(text):
            raise Forbidden("the object path has an empty, '.' or '..' segment")
    if "\\" in decoded or ("%" in decoded and decoded != unquote(decoded)):
        raise Forbidden("the object path is encoded more than once")
    if virtual:
        return virtual, decoded[1:]
    bucket, _, key = decoded[1:].partition("/")
    if not key:
        raise Forbidden("icegov signs requests for objects, not buckets")
    return bucket, key


def _operation(method: str, raw_query: str) -> tuple[Operation, tuple[tuple[str, str], ...]]:
    try:
        pairs = [(unquote(n, errors="strict"), unquote(v, errors="strict"))
                 for n, _, v in (p.partition("=") for p in raw_query.split("&") if raw_query)]
    except UnicodeDecodeError:
        raise Forbidden("the request's query cannot be read") from None
    if any(not name or "+" in name for name, _ in pairs):
        raise Forbidden("the request's query cannot be read")
    names = [name for name, _ in pairs]
    if len(set(names)) != len(names):
        raise Forbidden("a query parameter is sent twice")
    query = dict(pairs)
    x_id = query.pop("x-id", None)
    found = _QUERIES.get((method, frozenset(query)))
    if found is None:
        raise Forbidden(f"icegov signs object reads and new writes only, not {method} with "
                        f"query {sorted(names)}")
    operation, allowed_x_id = found
    if x_id is not None and x_id != allowed_x_id:
        raise Forbidden(f"x-id {x_id!r} does not name the request's operation")
    if query.get("uploads"):
        raise Forbidden("'uploads' takes no value")
    if "partNumber" in query and not _PART.fullmatch(query["partNumber"]):
        raise Forbidden("'partNumber' must be a part number")
    if "uploadId" in query and (not query["uploadId"] or _CONTROL.search(query["uploadId"])):
        raise Forbidden("'uploadId' must name an upload")
    return operation, tuple(sorted(pairs))
