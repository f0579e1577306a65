"""An S3 gateway for the tests that enforces authentication: a reverse proxy in front of
moto's S3 server (which checks no signature) that verifies every request's AWS Signature
Version 4 against the test store's keys and forwards only the valid ones.

A request is valid when it carries a SigV4 signature, in its ``Authorization`` header or as a
presigned query (``X-Amz-Signature``), made with a known access key for the scope it names, at
a time within ``SKEW_SECONDS`` (a presigned URL: before it expires), and the signature matches
the one botocore's own signer (``S3SigV4Auth``) computes over the request as it arrives: the
method, the raw path and query, exactly the headers it says it signed, and the payload hash
(checked against the body when it is a SHA-256). Anything else is answered 403 with S3's XML
error, and moto never sees it. ``S3Gateway.refused`` counts the refusals.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import http.client
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest, HTTPHeaders
from botocore.credentials import Credentials

from tests.support.s3 import ACCESS_KEY, SECRET_KEY, S3Store, s3_server

SKEW_SECONDS = 15 * 60
UNSIGNED = {"UNSIGNED-PAYLOAD", "STREAMING-UNSIGNED-PAYLOAD-TRAILER"}
_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade",
               "proxy-authorization", "proxy-authenticate"}


class Refused(Exception):
    """A request the gateway does not forward (the reason goes into S3's XML error)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Signature:
    """The parts of a SigV4 signature, from a header or a presigned query."""

    access_key: str
    scope: str          # date/region/service/aws4_request
    signed_headers: tuple[str, ...]
    signature: str
    date: str           # x-amz-date
    expires: int | None  # presigned only
    query: str          # the raw query the signature covers


def _header_signature(authorization: str, headers: Mapping[str, str], query: str) -> Signature:
    algorithm, _, rest = authorization.partition(" ")
    if algorithm != "AWS4-HMAC-SHA256":
        raise Refused("AccessDenied", "only AWS4-HMAC-SHA256 signatures are accepted")
    fields = dict(part.strip().partition("=")[::2] for part in rest.split(","))
    try:
        access_key, _, scope = fields["Credential"].partition("/")
        names = tuple(fields["SignedHeaders"].split(";"))
        signature = fields["Signature"]
    except KeyError:
        raise Refused("AuthorizationHeaderMalformed", "the Authorization header is malformed") \
            from None
    return Signature(access_key, scope, names, signature, headers.get("x-amz-date", ""), None,
                     query)


def _query_signature(query: str) -> Signature:
    pairs = parse_qsl(query, keep_blank_values=True)
    values = dict(pairs)
    if len(values) != len(pairs) or values.get("X-Amz-Algorithm") != "AWS4-HMAC-SHA256":
        raise Refused("AuthorizationQueryParametersError", "the presigned query is malformed")
    try:
        access_key, _, scope = values["X-Amz-Credential"].partition("/")
        names = tuple(values["X-Amz-SignedHeaders"].split(";"))
        covered = "&".join(p for p in query.split("&")
                           if not p.startswith("X-Amz-Signature="))
        return Signature(access_key, scope, names, values["X-Amz-Signature"],
                         values["X-Amz-Date"], int(values["X-Amz-Expires"]), covered)
    except (KeyError, ValueError):
        raise Refused("AuthorizationQueryParametersError", "the presigned query is malformed") \
            from None


class _ExactHeaders(S3SigV4Auth):
    """botocore's S3 signer over exactly the headers a signature names."""

    def __init__(self, credentials: Credentials, region: str, headers: HTTPHeaders) -> None:
        super().__init__(credentials, "s3", region)
        self._exact = headers

    def headers_to_sign(self, request: AWSRequest) -> HTTPHeaders:
        return self._exact

    def payload(self, request: AWSRequest) -> str:
        return "UNSIGNED-PAYLOAD"  # presigned S3 requests; header ones name their hash


@dataclass
class Verifier:
    """Checks SigV4 signatures against a set of known keys (access key → secret)."""

    keys: Mapping[str, str]
    clock: Any = time.time

    def check(self, method: str, raw_path: str, headers: Mapping[str, str],
              body: bytes) -> None:
        """Nothing when the request is validly signed; ``Refused`` otherwise. ``headers`` are
        lower-cased names."""
        path, _, query = raw_path.partition("?")
        if "authorization" in headers:
            found = _header_signature(headers["authorization"], headers, query)
        elif "X-Amz-Signature=" in query:
            found = _query_signature(query)
        else:
            raise Refused("AccessDenied", "the request is not signed")
        secret = self.keys.get(found.access_key)
        if secret is None:
            raise Refused("InvalidAccessKeyId", "the access key is not known")
        self._check_time(found)
        day, region, service, terminal = [*found.scope.split("/"), "", "", "", ""][:4]
        if day != found.date[:8] or service != "s3" or terminal != "aws4_request":
            raise Refused("AuthorizationHeaderMalformed", "the credential scope is wrong")
        exact = self._signed_headers(found, headers, body)
        auth = _ExactHeaders(Credentials(found.access_key, secret), region, exact)
        request = AWSRequest(method=method, url=f"http://{headers.get('host', '')}{path}"
                             + (f"?{found.query}" if found.query else ""), headers=exact)
        request.context["timestamp"] = found.date
        expected = auth.signature(auth.string_to_sign(request, auth.canonical_request(request)),
                                  request)
        if not hmac.compare_digest(expected, found.signature):
            raise Refused("SignatureDoesNotMatch", "the request signature does not match")

    def _check_time(self, found: Signature) -> None:
        try:
            signed_at = datetime.strptime(found.date, "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
        except ValueError:
            raise Refused("AccessDenied", "the request has no valid x-amz-date") from None
        age = self.clock() - signed_at.timestamp()
        limit = found.expires if found.expires is not None else SKEW_SECONDS
        if age > limit or age < -SKEW_SECONDS:
            raise Refused("AccessDenied", "the request's signature has expired")

    @staticmethod
    def _signed_headers(found: Signature, headers: Mapping[str, str],
                        body: bytes) -> HTTPHeaders:
        if "host" not in found.signed_headers:
            raise Refused("AccessDenied", "the host header must be signed")
        exact = HTTPHeaders()
        for name in found.signed_headers:
            if name not in headers:
                raise Refused("AccessDenied", f"signed header {name!r} is missing")
            exact[name] = headers[name]
        sha = headers.get("x-amz-content-sha256")
        if found.expires is None:
            if sha is None or "x-amz-content-sha256" not in found.signed_headers:
                raise Refused("AccessDenied", "x-amz-content-sha256 must be signed")
            if sha not in UNSIGNED and sha != hashlib.sha256(body).hexdigest():
                raise Refused("XAmzContentSHA256Mismatch", "the payload hash does not match")
        return exact


def refusal_xml(error: Refused) -> bytes:
    """S3's XML error body for a refusal."""
    return ("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>"
            f"{error.code}</Code><Message>{error}</Message></Error>").encode()


@dataclass
class S3Gateway:
    """A running gateway: its ``endpoint`` and the number of requests it ``refused``."""

    endpoint: str
    refused: list[str] = field(default_factory=list)


def _handler(upstream: str, verifier: Verifier, gateway: S3Gateway) -> type:
    target = urlsplit(upstream)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _body(self) -> bytes:
            if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
                return self._chunked()
            length = int(self.headers.get("Content-Length") or 0)
            return self.rfile.read(length) if length else b""

        def _chunked(self) -> bytes:
            parts = []
            while size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16):
                parts.append(self.rfile.read(size))
                self.rfile.readline()
            while self.rfile.readline().strip():
                pass  # trailers
            return b"".join(parts)

        def _handle(self) -> None:
            body = self._body()
            headers = {name.lower(): value for name, value in self.headers.items()}
            try:
                verifier.check(self.command, self.path, headers, body)
            except Refused as refused:
                gateway.refused.append(f"{self.command} {self.path}: {refused.code}: {refused}")
                self._answer(403, {"Content-Type": "application/xml"}, refusal_xml(refused))
                return
            self._forward(body)

        def _forward(self, body: bytes) -> None:
            connection = http.client.HTTPConnection(target.hostname or "", target.port,
                                                    timeout=60)
            try:
                forwarded = {name: value for name, value in self.headers.items()
                             if name.lower() not in _HOP_BY_HOP}
                connection.request(self.command, self.path, body=body, headers=forwarded)
                response = connection.getresponse()
                payload = response.read()
                headers = {name: value for name, value in response.getheaders()
                           if name.lower() not in _HOP_BY_HOP | {"content-length"}}
                self._answer(response.status, headers, payload,
                             length=response.getheader("Content-Length"))
            finally:
                connection.close()

        def _answer(self, status: int, headers: Mapping[str, str], payload: bytes,
                    length: str | None = None) -> None:
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            head = self.command == "HEAD"
            self.send_header("Content-Length", length if head and length else str(len(payload)))
            self.end_headers()
            if not head:
                self.wfile.write(payload)

        do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _handle

    return Handler


@contextlib.contextmanager
def s3_gateway(upstream: str, keys: Mapping[str, str]) -> Iterator[S3Gateway]:
    """A gateway on 127.0.0.1 (a free port) in front of ``upstream`` that forwards only
    requests signed with one of ``keys`` (access key → secret key); stopped on exit."""
    gateway = S3Gateway("")
    server = ThreadingHTTPServer(("127.0.0.1", 0),
                                 _handler(upstream, Verifier(dict(keys)), gateway))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        gateway.endpoint = f"http://127.0.0.1:{server.server_address[1]}"
        yield gateway
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def gated_s3_server() -> Iterator[tuple[S3Store, S3Gateway]]:
    """moto's S3 server with the test bucket behind a gateway that enforces the test keys'
    signatures: the store as every client must reach it (through the gateway), and the
    gateway."""
    with s3_server() as moto, s3_gateway(moto.endpoint, {ACCESS_KEY: SECRET_KEY}) as gateway:
        yield S3Store(gateway.endpoint, moto.bucket), gateway
