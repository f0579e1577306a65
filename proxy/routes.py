"""The Iceberg REST route table, as data.

Every endpoint of the Iceberg REST catalog spec is listed here exactly once. A request that matches
no entry is answered 404 (or 405 for a known path with another method) and never forwarded: deny by
default. Paths are matched on the raw (still percent-encoded) path, so ``%1F`` namespace separators
and ``%2F`` inside names keep their meaning; captured parameters are decoded for callers.

The optional ``{prefix}`` segment is supported everywhere the spec allows it. A path that reads
both ways (``/v1/namespaces/namespaces``) is taken without a prefix.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from urllib.parse import unquote_plus

NAMESPACE_SEPARATOR = "\x1f"


@dataclass(frozen=True)
class Endpoint:
    """One Iceberg REST endpoint.

    ``commit`` marks routes whose outcome is unknown when the backing catalog does not answer
    (502/504 there, never a retryable 503). ``json_body`` marks routes whose body must be JSON.
    ``owned`` marks endpoints icegov answers with a handler of its own (start-up fails when one
    has none); every other endpoint is forwarded, and only if the backing catalog offers it.
    """

    method: str
    template: str
    name: str
    commit: bool = False
    json_body: bool = False
    owned: bool = False

    @property
    def spec(self) -> str:
        """The endpoint as the spec's config ``endpoints`` list spells it."""
        return f"{self.method} {self.template}"


@dataclass(frozen=True)
class RouteMatch:
    """A request matched to an endpoint, with its decoded path parameters."""

    endpoint: Endpoint
    params: dict[str, str] = field(default_factory=dict)

    @property
    def namespace(self) -> tuple[str, ...]:
        """The namespace levels named in the path, as sent (empty when the route has none).

        Not validated here: ``proxy.admission.intent`` validates every level before anything
        uses it.
        """
        raw = self.params.get("namespace")
        return tuple(raw.split(NAMESPACE_SEPARATOR)) if raw is not None else ()

    @property
    def prefix(self) -> str | None:
        """The ``{prefix}`` segment, or None for the unprefixed form."""
        return self.params.get("prefix")


_NS = "/v1/{prefix}/namespaces/{namespace}"
_TABLE = _NS + "/tables/{table}"
_VIEW = _NS + "/views/{view}"

ENDPOINTS: tuple[Endpoint, ...] = (
    Endpoint("GET", "/v1/config", "get_config", owned=True),
    Endpoint("POST", "/v1/oauth/tokens", "oauth_tokens", owned=True),
    Endpoint("GET", "/v1/{prefix}/namespaces", "list_namespaces", owned=True),
    Endpoint("POST", "/v1/{prefix}/namespaces", "create_namespace", json_body=True),
    Endpoint("GET", _NS, "load_namespace"),
    Endpoint("HEAD", _NS, "namespace_exists"),
    Endpoint("DELETE", _NS, "drop_namespace"),
    Endpoint("POST", _NS + "/properties", "update_namespace_properties", json_body=True),
    Endpoint("GET", _NS + "/tables", "list_tables", owned=True),
    Endpoint("POST", _NS + "/tables", "create_table", json_body=True, owned=True),
    Endpoint("POST", _NS + "/register", "register_table", json_body=True),
    Endpoint("GET", _TABLE, "load_table", owned=True),
    Endpoint("HEAD", _TABLE, "table_exists"),
    Endpoint("POST", _TABLE, "commit_table", commit=True, json_body=True, owned=True),
    Endpoint("DELETE", _TABLE, "drop_table"),
    Endpoint("GET", _TABLE + "/credentials", "load_credentials", owned=True),
    Endpoint("POST", _TABLE + "/metrics", "report_metrics", json_body=True),
    Endpoint("POST", _TABLE + "/plan", "plan_table_scan", json_body=True, owned=True),
    Endpoint("GET", _TABLE + "/plan/{plan-id}", "fetch_planning_result", owned=True),
    Endpoint("DELETE", _TABLE + "/plan/{plan-id}", "cancel_planning", owned=True),
    Endpoint("POST", _TABLE + "/tasks", "fetch_scan_tasks", json_body=True, owned=True),
    Endpoint("POST", "/v1/{prefix}/tables/rename", "rename_table", json_body=True),
    Endpoint("POST", "/v1/{prefix}/transactions/commit", "commit_transaction", commit=True,
             json_body=True, owned=True),
    Endpoint("GET", _NS + "/views", "list_views", owned=True),
    Endpoint("POST", _NS + "/views", "create_view", owned=True, json_body=True),
    Endpoint("POST", _NS + "/register-view", "register_view", json_body=True),
    Endpoint("GET", _VIEW, "load_view", owned=True),
    Endpoint("HEAD", _VIEW, "view_exists"),
    Endpoint("POST", _VIEW, "replace_view", commit=True, owned=True, json_body=True),
    Endpoint("DELETE", _VIEW, "drop_view"),
    Endpoint("POST", "/v1/{prefix}/views/rename", "rename_view", json_body=True),
    Endpoint("POST", "/v1/aws/s3/sign", "sign_s3_request_ungranted", owned=True),
    Endpoint("POST", "/v1/aws/s3/sign/{grant}", "sign_s3_request", json_body=True, owned=True),
)

PLANNING = frozenset({"plan_table_scan", "fetch_planning_result", "cancel_planning",
                      "fetch_scan_tasks"})
"""Server-side scan planning: icegov plans from the backing's metadata, never forwards."""

SIGNING = frozenset({"sign_s3_request", "sign_s3_request_ungranted"})
"""S3 remote signing (``proxy.signing``): icegov signs with its own storage credentials."""

SELF_SERVED = frozenset({"get_config", "oauth_tokens"}) | PLANNING | SIGNING
"""Endpoints icegov answers whatever the backing advertises (config, tokens, planning,
signing)."""

PLANNING_SPECS = frozenset(e.spec for e in ENDPOINTS if e.name in PLANNING)
"""The planning endpoints as the config ``endpoints`` list spells them (icegov advertises them)."""

FORWARDABLE = frozenset(e.spec for e in ENDPOINTS if e.name not in SELF_SERVED)
"""Every endpoint icegov may forward, as the config ``endpoints`` list spells it."""

_PARAM = re.compile(r"\{([\w-]+)\}")


def _compile(template: str, with_prefix: bool) -> re.Pattern[str]:
    if not with_prefix:
        template = template.replace("/{prefix}", "")
    literal_parts = _PARAM.split(template)[::2]
    names = _PARAM.findall(template)
    pattern = re.escape(literal_parts[0])
    for name, literal in zip(names, literal_parts[1:], strict=True):
        # the spec spells some parameters with a hyphen ({plan-id}); groups take an underscore
        pattern += f"(?P<{name.replace('-', '_')}>[^/]+)" + re.escape(literal)
    return re.compile(pattern)  # used with fullmatch: "$" also matches before a final "\n"


class MalformedPath(ValueError):
    """A path parameter that is not valid percent-encoded UTF-8."""


def _decoded(raw: dict[str, str]) -> dict[str, str]:
    """Path parameters decoded as Iceberg's own servers decode them (Java ``URLDecoder``: a
    ``+`` is a space, which is also how the Java client sends spaces), so the name authorized is
    the name a Java-based backing acts on; a literal plus arrives as ``%2B``."""
    try:
        return {k: unquote_plus(v, errors="strict") for k, v in raw.items()}
    except UnicodeDecodeError as exc:
        raise MalformedPath("a path parameter is not valid percent-encoded UTF-8") from exc


class RouteTable:
    """Matches (method, raw path) to an endpoint of the table."""

    def __init__(self, endpoints: tuple[Endpoint, ...] = ENDPOINTS) -> None:
        plain = [(_compile(e.template, False), e) for e in endpoints]
        prefixed = [(_compile(e.template, True), e) for e in endpoints if "{prefix}" in e.template]
        self._patterns = plain + prefixed

    def match(self, method: str, raw_path: str) -> RouteMatch | None:
        """The endpoint for this request, or None when the method or path is unknown."""
        for pattern, endpoint in self._patterns:
            if endpoint.method != method:
                continue
            found = pattern.fullmatch(raw_path)
            if found:
                return RouteMatch(endpoint, _decoded(found.groupdict()))
        return None

    def path_known(self, raw_path: str) -> bool:
        """True when some endpoint has this path (with any method)."""
        return any(pattern.fullmatch(raw_path) for pattern, _ in self._patterns)
