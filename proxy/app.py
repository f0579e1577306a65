"""create_app: the one place the icegov ASGI app is composed."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import httpx
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import Route

from proxy.audit import AuditLog
from proxy.backing_auth import backing_auth_from_settings
from proxy.commits import check_classification_complete
from proxy.context import RequestContextMiddleware
from proxy.dispatch import IcebergDispatcher, iceberg_app
from proxy.enforce import Gate
from proxy.forward import Forwarder
from proxy.handlers import BackingHandlers, healthz
from proxy.identity import build_identity
from proxy.intent import check_intents_complete
from proxy.policy import PolicyAuthorizer
from proxy.routes import RouteTable
from proxy.settings import Settings

EMBEDDED_BASE_URL = "http://embedded-catalog"


@dataclass
class Backing:
    """The backing catalog as the proxy reaches it: a transport, a base URL, and cleanup."""

    transport: httpx.AsyncBaseTransport
    base_url: str
    closers: list[Callable[[], Awaitable[None]]] = field(default_factory=list)

    async def aclose(self) -> None:
        for close in self.closers:
            await close()


def connect_backing(settings: Settings) -> Backing:
    """A remote catalog over a pooled HTTP transport, or the embedded one in-process."""
    if settings.catalog_uri is not None:
        limits = httpx.Limits(max_connections=settings.max_connections,
                              max_keepalive_connections=settings.max_connections)
        transport = httpx.AsyncHTTPTransport(limits=limits, retries=0)
        return Backing(transport, settings.catalog_uri, [transport.aclose])
    from proxy.catalog import EmbeddedCatalog

    catalog = EmbeddedCatalog.from_settings(settings)
    embedded = httpx.ASGITransport(app=catalog.app)
    return Backing(embedded, EMBEDDED_BASE_URL, [embedded.aclose, catalog.aclose])


def create_app(settings: Settings, backing: Backing | None = None) -> Starlette:
    """The icegov app for these settings (``backing`` overrides how the catalog is reached).

    Fails here, before serving, if an endpoint or a commit update action is ungoverned, or if
    identity or policy settings are unusable.
    """
    check_intents_complete()
    check_classification_complete()
    identity = build_identity(settings.identity, embedded_catalog=settings.embedded)
    authorizer = PolicyAuthorizer.from_settings(settings.policy)
    backing = backing or connect_backing(settings)
    timeout = httpx.Timeout(**settings.timeouts.model_dump())
    auth = backing_auth_from_settings(settings, backing.transport, backing.base_url, timeout)
    forwarder = Forwarder(backing.transport, backing.base_url, auth, timeout)
    audit = AuditLog(settings.audit)
    gate = Gate(identity.authenticator, authorizer, forwarder, settings.catalog_name, audit)
    handlers = BackingHandlers(forwarder, authorizer)
    dispatcher = IcebergDispatcher(
        RouteTable(),
        {"get_config": handlers.config, "oauth_tokens": identity.token_endpoint},
        forwarder.forward, settings.max_body_bytes, gate,
    )

    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        async with authorizer.watching():
            yield
        await backing.aclose()
        audit.close()

    return iceberg_app(
        dispatcher,
        routes=[Route("/healthz", healthz), Route("/readyz", handlers.readyz)],
        middleware=[Middleware(RequestContextMiddleware)],
        lifespan=lifespan,
    )
