"""create_app: the one place the icegov ASGI app is composed."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from starlette.applications import Starlette
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Lifespan

from proxy.admission.admission import Admission
from proxy.admission.catalogs import CatalogNames
from proxy.admission.intent import check_intents_complete
from proxy.audit import AuditLog
from proxy.backing.auth import backing_auth_from_settings
from proxy.backing.forward import Forwarder
from proxy.backing.httptools_transport import HttptoolsTransport
from proxy.backing.offers import BackingOffers
from proxy.commits import check_classification_complete
from proxy.committer.committer import Committer
from proxy.committer.heads import KnownHeads
from proxy.edge.context import RequestContextMiddleware
from proxy.edge.dispatch import FastLaneApp
from proxy.edge.pipeline import GovernedDispatcher, GovernedHandler
from proxy.gate.enforce import Gate
from proxy.gate.evidence import ChangeClassifier, Ungovern
from proxy.gate.listing import ListingHandlers
from proxy.gate.nesting import NamespacePaths
from proxy.gate.page_tokens import PageTokens
from proxy.governed.answers import GovernedAnswers
from proxy.governed.service import GovernedSnapshots
from proxy.handlers.commits import CommitHandlers
from proxy.handlers.config import ConfigHandler
from proxy.handlers.credentials import CredentialsHandler
from proxy.handlers.health import BackingHandlers, healthz
from proxy.handlers.plans import PlanHandlers
from proxy.handlers.signing import SignerAdverts, SigningHandlers
from proxy.handlers.tables import LoadTableHandler, TableAnswers
from proxy.handlers.views import ViewHandlers
from proxy.idempotency import Idempotency, iso_duration, open_idempotency
from proxy.identity import build_identity
from proxy.identity.authenticator import Authenticator
from proxy.inbound import InboundRequest
from proxy.indexes.service import IndexService
from proxy.keys import key_or_process_key
from proxy.ops.metrics import Metrics
from proxy.planning.manifest_cache import ManifestCache
from proxy.planning.planner import Planner
from proxy.plans.read_context import TableReader
from proxy.plans.service import PlanService
from proxy.policy import PolicyAuthorizer
from proxy.policy.changes import audited
from proxy.reads.read_views import ReadViews
from proxy.routes import RouteTable
from proxy.settings import Settings
from proxy.signing.service import Signer

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
        transport = HttptoolsTransport(settings.max_connections)  # benchmarks/README.md
        return Backing(transport, settings.catalog_uri, [transport.aclose])
    from proxy.catalog import EmbeddedCatalog

    catalog = EmbeddedCatalog.from_settings(settings)
    embedded = httpx.ASGITransport(app=catalog.app)
    return Backing(embedded, EMBEDDED_BASE_URL, [embedded.aclose, catalog.aclose])


def create_app(settings: Settings, backing: Backing | None = None,
               worker: int | None = None) -> Starlette:
    """The icegov app for these settings (``backing`` overrides how the catalog is reached;
    ``worker``: this process's slot when it is one of several workers).

    Fails here, before serving, if an endpoint or a commit update action is ungoverned, if an
    endpoint icegov owns has no handler, or if identity or policy settings are unusable.
    """
    _check_governed()
    identity = build_identity(settings.identity, embedded_catalog=settings.embedded)
    authorizer = PolicyAuthorizer.from_settings(settings.policy)
    metrics = Metrics(worker=worker)
    identity.token_endpoint.on_issued(metrics.observe_token)
    identity.authenticator.reserve(authorizer.is_role)  # an OIDC user is never a policy role
    backing = backing or connect_backing(settings)
    forwarder = _forwarder(settings, backing, metrics)
    audit = AuditLog(settings.audit)
    if settings.audit.policy_records:  # the policy's digest now and at each reload, audited
        authorizer.on_change(audited(audit))
    offers = BackingOffers(forwarder.fetch, settings.endpoints_refresh_seconds)
    idempotency = open_idempotency(settings)
    views = ReadViews(authorizer, settings.planning.mask_capable_clients,
                      settings.planning.mask_capable_principals)
    planner = Planner(ManifestCache(settings.planning.manifest_cache_entries),
                      settings.planning.threads)
    governed = GovernedSnapshots(settings.governed, planner.manifests,
                                 _governed_warehouse(settings), metrics.observe_governed)
    indexes = IndexService(settings.indexes, planner.manifests, settings.file_io)
    answers = TableAnswers(views, authorizer.restricts, authorizer.restricted_anywhere,
                           GovernedAnswers(governed, settings.file_io))
    catalogs = CatalogNames(settings.catalog_name, settings.catalogs,
                            settings.name_case == "lower")
    config = ConfigHandler(forwarder, offers, iso_duration(settings.idempotency.lifetime_seconds)
                           if idempotency is not None else None, answers.disclosure, catalogs)
    heads = KnownHeads(settings.commit_retry.known_head_seconds)  # the gate's and committer's
    signer = _signer(settings, authorizer, audit)
    handlers = _governed_handlers(settings, forwarder, authorizer,
                                  _Reads(views, planner, answers, indexes, signer), config,
                                  identity.token_endpoint, metrics, heads)
    metrics.watch(manifest_cache=lambda: planner.manifests.stats, policy=authorizer, audit=audit,
                  governed=governed)
    dispatcher = GovernedDispatcher(
        RouteTable(), handlers, _forward(forwarder),
        _gate(settings, identity.authenticator, authorizer, offers, forwarder, views,
              catalogs, heads, governed.ungovern), audit,
        settings.max_body_bytes, idempotency=idempotency, metrics=metrics,
        replayers={"commit_table": answers.replayed, "create_table": answers.replayed},
    )
    return FastLaneApp(
        dispatcher, RequestContextMiddleware,
        routes=[Route("/healthz", healthz),
                Route("/readyz", BackingHandlers(forwarder, authorizer).readyz),
                Route("/metrics", metrics.endpoint)],
        lifespan=_lifespan(authorizer, planner, backing, idempotency, audit,
                           (governed, indexes, signer)),
    )


def _check_governed() -> None:
    """Refuse to start when an endpoint or a commit update action is ungoverned."""
    check_intents_complete()
    check_classification_complete()


def _governed_warehouse(settings: Settings) -> str | None:
    """The embedded warehouse as its table locations spell it (governed trees go in it by
    default); None with a backing catalog."""
    if not settings.embedded:
        return None
    if isinstance(settings.warehouse, Path):
        return settings.warehouse.resolve().as_uri()
    return settings.warehouse


def _signer(settings: Settings, authorizer: PolicyAuthorizer, audit: AuditLog) -> Signer | None:
    """The S3 signer when ``signing.enabled`` (fails here without storage credentials)."""
    if not settings.signing.enabled:
        return None
    return Signer(settings.signing, settings.file_io,
                  key_or_process_key(settings.signing.key, "signing-grants"),
                  lambda: authorizer.generation, audit)


def _lifespan(authorizer: PolicyAuthorizer, planner: Planner, backing: Backing,
              idempotency: Idempotency | None, audit: AuditLog,
              services: tuple[GovernedSnapshots, IndexService, Signer | None]
              ) -> Lifespan[Starlette]:
    """Serving: the policy file watched; after it, everything held is closed, the audit last."""

    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        async with authorizer.watching():
            yield
        for service in services:
            if service is not None:
                service.close()
        planner.close()
        await backing.aclose()
        if idempotency is not None:
            await idempotency.close()
        audit.close()

    return lifespan


@dataclass(frozen=True)
class _Reads:
    """What the read handlers share: the principals' read views and the planner."""

    views: ReadViews
    planner: Planner
    answers: TableAnswers
    indexes: IndexService
    signer: Signer | None


def _forwarder(settings: Settings, backing: Backing, metrics: Metrics) -> Forwarder:
    """The one path requests take to the backing, authenticated as the settings say."""
    timeout = settings.timeouts.for_httpx()
    auth = backing_auth_from_settings(settings, backing.transport, backing.base_url, timeout)
    return Forwarder(backing.transport, backing.base_url, auth, timeout,
                     metrics.observe_backing, answer_deadline=settings.timeouts.answer,
                     forward_headers=settings.forward_headers)


def _gate(settings: Settings, authenticator: Authenticator, authorizer: PolicyAuthorizer,
          offers: BackingOffers, forwarder: Forwarder, views: ReadViews,
          catalogs: CatalogNames, heads: KnownHeads, ungovern: Ungovern) -> Gate:
    """The one authorizer seam every governed request passes."""
    return Gate(
        authenticator, authorizer, offers, catalogs,
        ChangeClassifier(forwarder.fetch, forwarder.post_json, settings.commit_limits,
                         settings.file_io, heads, ungovern),
        settings.commit_limits.max_table_changes, views, NamespacePaths(forwarder.fetch),
    )


def _governed_handlers(settings: Settings, forwarder: Forwarder, authorizer: PolicyAuthorizer,
                       reads: _Reads, config: ConfigHandler,
                       token_endpoint: Callable[[InboundRequest], Awaitable[Response]],
                       metrics: Metrics, heads: KnownHeads) -> dict[str, GovernedHandler]:
    """Every endpoint icegov owns, by name (checked complete against the route table)."""
    answers = reads.answers
    commits = CommitHandlers(Committer(forwarder, settings.commit_limits, settings.commit_retry,
                                       metrics, settings.file_io, heads), answers,
                              reads.indexes)
    listing = ListingHandlers(forwarder, authorizer, PageTokens(
        key_or_process_key(settings.planning.task_key, "plan-tasks")))
    handlers = _handlers(forwarder, authorizer, config, token_endpoint, commits, listing)
    handlers.update(_read_handlers(forwarder, reads, settings,
                                   lambda: authorizer.generation, metrics))
    handlers.update(_signing_handlers(reads.signer))
    if reads.signer is not None:
        adverts = SignerAdverts(reads.signer, answers, authorizer)
        handlers["load_table"] = LoadTableHandler(forwarder, answers,
                                                  adverts.advertised).load_table
    view_handlers = ViewHandlers(forwarder, authorizer, reads.views, reads.answers.disclosure)
    handlers.update(load_view=view_handlers.load_view, create_view=view_handlers.create_view,
                    replace_view=view_handlers.replace_view)
    return handlers


def create_worker_app() -> Starlette:
    """uvicorn's app factory for each of ``icegov serve --workers N``: settings from the
    environment the parent prepared, this worker's slot, its own audit file."""
    from proxy.ops.logs import configure_logging
    from proxy.ops.workers import WorkerSetupError, claim_slot, for_worker, in_worker
    from proxy.settings import load_settings

    where = in_worker()
    if where is None:
        raise WorkerSetupError("create_worker_app runs only under `icegov serve --workers N`")
    settings = load_settings()
    configure_logging(settings.log_level)
    logging.getLogger("uvicorn.access").propagate = False  # as `icegov serve`: no access log
    slot = claim_slot(*where)
    return create_app(for_worker(settings, slot.index, where[0]), worker=slot.index)


def _handlers(forwarder: Forwarder, authorizer: PolicyAuthorizer, config: ConfigHandler,
              token_endpoint: Callable[[InboundRequest], Awaitable[Response]],
              commits: CommitHandlers, listing: ListingHandlers) -> dict[str, GovernedHandler]:
    """The endpoints icegov owns, by name (checked complete against the route table)."""

    async def oauth_tokens(inbound: InboundRequest, _: Admission) -> Response:
        return await token_endpoint(inbound)

    return {
        "get_config": config.get_config,
        "oauth_tokens": oauth_tokens,
        "list_namespaces": listing.list_namespaces,
        "list_tables": listing.list_tables,
        "list_views": listing.list_views,
        "commit_table": commits.commit_table,
        "commit_transaction": commits.commit_transaction,
    }


def _read_handlers(forwarder: Forwarder, reads: _Reads, settings: Settings,
                   generation: Callable[[], int], metrics: Metrics) -> dict[str, GovernedHandler]:
    """loadTable (projected for restricted principals) and the planning endpoints."""
    answers = reads.answers
    load = LoadTableHandler(forwarder, answers)
    service = PlanService(TableReader(forwarder.fetch, reads.views, settings.file_io,
                                      answers.governed),
                          reads.planner, settings.planning, generation,
                          on_pruned=metrics.observe_pruned, indexes=reads.indexes)
    metrics.watch(plan_cache=lambda: service.plan_cache_stats)
    plans = PlanHandlers(service)
    credentials = CredentialsHandler(forwarder, answers, service)
    return {
        "load_table": load.load_table,
        "create_table": load.create_table,
        "load_credentials": credentials.load_credentials,
        "plan_table_scan": plans.plan_table_scan,
        "fetch_planning_result": plans.fetch_planning_result,
        "cancel_planning": plans.cancel_planning,
        "fetch_scan_tasks": plans.fetch_scan_tasks,
    }


def _signing_handlers(signer: Signer | None) -> dict[str, GovernedHandler]:
    """The S3 signer endpoints (refusing everything while signing is not enabled)."""
    signing = SigningHandlers(signer)
    return {"sign_s3_request": signing.sign,
            "sign_s3_request_ungranted": signing.sign_ungranted}


def _forward(forwarder: Forwarder) -> GovernedHandler:
    async def forward(inbound: InboundRequest, _: Admission) -> Response:
        return await forwarder.forward(inbound)
    return forward
