"""``GET /v1/config``: the backing catalog's config, with the endpoints icegov really serves.

The ``endpoints`` list is what the backing advertises (the spec's default set when it lists
none) and icegov's route table knows — exactly what icegov will forward — so clients never
plan on an endpoint that would be refused — plus the scan-planning endpoints icegov serves itself.

Nothing in ``defaults`` or ``overrides`` may steer a client away from icegov or decide who it
is: the keys clients read for where the catalog is, how they authenticate and which headers,
proxies, TLS settings or signing they use (``STEERING_KEYS``, ``STEERING_PREFIXES``) are dropped
from the backing's answer. A client that took the backing's ``uri`` would send every later
request straight to the backing, around the gate and the audit; its ``oauth2-server-uri`` would
receive the clients' secrets; its ``token``, ``credential`` or ``header.Authorization`` would
make every client someone else.

``idempotency-key-lifetime`` is icegov's own (its store keeps its own final answers), never the
backing's: absent when icegov's Idempotency-Key support is disabled.
"""

from __future__ import annotations

import json
from typing import Any

import structlog
from starlette.responses import JSONResponse, Response

from proxy.admission.admission import Admission
from proxy.admission.catalogs import CatalogNames
from proxy.backing.forward import Forwarder, relayed
from proxy.backing.offers import CONFIG_PATH, BackingOffers
from proxy.commits.operations import DATA_OPERATIONS
from proxy.errors import BackingUnavailable, NotFound
from proxy.inbound import InboundRequest
from proxy.reads.disclosure import Disclosure, disclosed_config
from proxy.routes import FORWARDABLE, PLANNING_SPECS

log = structlog.get_logger("icegov")

LIFETIME = "idempotency-key-lifetime"
STEERING_KEYS = frozenset({"uri", "credential", "token", "oauth2-server-uri", "scope",
                           "audience", "resource", "auth", "ssl", "token-exchange-enabled",
                           "token-refresh-enabled", "token-expires-in-ms"})
"""Client settings (PyIceberg's and Java's REST clients) a backing's config may not set."""
STEERING_PREFIXES = ("header.", "rest.", "auth.", "ssl.", "oauth2.")
"""Families of client settings a backing's config may not set: extra request headers, the
REST client's auth, signing, proxies and TLS (``rest.auth.type``, ``rest.sigv4-enabled``,
``rest.client.proxy.hostname``, …)."""
DATA_OPERATIONS_KEY = "icegov.data-operations"
"""Advertised in ``defaults``: the data operations icegov commits (``commits.operations``)."""


class ConfigHandler:
    """Answers ``GET /v1/config`` from the backing's config."""

    def __init__(self, forwarder: Forwarder, offers: BackingOffers,
                 idempotency_key_lifetime: str | None = None,
                 disclosure: Disclosure | None = None,
                 catalogs: CatalogNames | None = None) -> None:
        """``disclosure``: what of the backing's config a principal may receive (no storage
        secret for one that column or row rules restrict anywhere, as in its loadTable
        answers);
        ``catalogs``: the prefixes icegov serves (a ``?warehouse=`` config of any other
        catalog of the backing is 404, like the catalog itself)."""
        self._forwarder = forwarder
        self._offers = offers
        self._lifetime = idempotency_key_lifetime
        self._disclosure = disclosure
        self._catalogs = catalogs

    async def get_config(self, inbound: InboundRequest, admission: Admission) -> Response:
        upstream = await self._forwarder.fetch(CONFIG_PATH, inbound.query_string, inbound.headers)
        if upstream.status_code != 200:
            if inbound.query_string and upstream.status_code < 500:
                raise NotFound("no such catalog")  # the same for one icegov does not serve
            return relayed(upstream, upstream.content)
        try:
            config = json.loads(upstream.content)
        except ValueError as exc:
            raise BackingUnavailable("backing catalog config is not JSON") from exc
        if not isinstance(config, dict):
            raise BackingUnavailable("backing catalog config is not a JSON object")
        offer = (self._offers.learn(config) if not inbound.query_string
                 else self._offers.parse(config))
        if inbound.query_string:
            await self._require_served(offer.prefix, inbound)
        config["endpoints"] = sorted((offer.endpoints & FORWARDABLE) | PLANNING_SPECS)
        config["defaults"] = {**_without_steering(config.get("defaults"), "defaults"),
                              DATA_OPERATIONS_KEY: ",".join(sorted(DATA_OPERATIONS))}
        config["overrides"] = _without_steering(config.get("overrides"), "overrides")
        if self._disclosure is not None:
            config = disclosed_config(config, self._disclosure.withheld(admission.principal))
        config.pop(LIFETIME, None)
        if self._lifetime is not None:
            config[LIFETIME] = self._lifetime
        return JSONResponse(config)


    async def _require_served(self, prefix: str | None, inbound: InboundRequest) -> None:
        """404 for the config of a catalog (``?warehouse=``) icegov does not serve: its
        settings (storage keys among them) are for a catalog no request may reach."""
        if self._catalogs is None:
            return
        default = await self._offers.current(inbound.headers)
        try:
            self._catalogs.resolve(prefix, default)
        except NotFound:
            raise NotFound("no such catalog") from None


def _without_steering(section: Any, name: str) -> dict[str, Any]:
    """A config section (``defaults`` or ``overrides``) without the client-steering keys; a
    section that is not an object is an empty one."""
    if not isinstance(section, dict):
        return {}
    dropped = sorted(key for key in section if is_steering(key))
    if dropped:
        log.warning("config.steering_dropped", section=name, keys=dropped)
    return {key: value for key, value in section.items() if key not in dropped}


def is_steering(key: str) -> bool:
    """Whether a client setting says where the catalog is or who the client is (and so may
    come from no one but the client itself)."""
    folded = key.lower()
    return folded in STEERING_KEYS or folded.startswith(STEERING_PREFIXES)
