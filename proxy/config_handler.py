"""``GET /v1/config``: the backing catalog's config, with the endpoints icegov really serves.

The ``endpoints`` list is what the backing advertises (the spec's default set when it lists
none) and icegov's route table knows — exactly what icegov will forward — so clients never
plan on an endpoint that would be refused — plus the scan-planning endpoints icegov serves itself.

``idempotency-key-lifetime`` is icegov's own (its store keeps its own final answers), never the
backing's: absent when icegov's Idempotency-Key support is disabled.
"""

from __future__ import annotations

import json

from starlette.responses import JSONResponse, Response

from proxy.admission import Admission
from proxy.backing.forward import Forwarder, relayed
from proxy.backing.offers import CONFIG_PATH, BackingOffers
from proxy.commits.operations import DATA_OPERATIONS
from proxy.errors import BackingUnavailable
from proxy.inbound import InboundRequest
from proxy.routes import FORWARDABLE, PLANNING_SPECS

LIFETIME = "idempotency-key-lifetime"
DATA_OPERATIONS_KEY = "icegov.data-operations"
"""Advertised in ``defaults``: the data operations icegov commits (``commits.operations``)."""


class ConfigHandler:
    """Answers ``GET /v1/config`` from the backing's config."""

    def __init__(self, forwarder: Forwarder, offers: BackingOffers,
                 idempotency_key_lifetime: str | None = None) -> None:
        self._forwarder = forwarder
        self._offers = offers
        self._lifetime = idempotency_key_lifetime

    async def get_config(self, inbound: InboundRequest, _: Admission) -> Response:
        upstream = await self._forwarder.fetch(CONFIG_PATH, inbound.query_string, inbound.headers)
        if upstream.status_code != 200:
            return relayed(upstream, upstream.content)
        try:
            config = json.loads(upstream.content)
        except ValueError as exc:
            raise BackingUnavailable("backing catalog config is not JSON") from exc
        if not isinstance(config, dict):
            raise BackingUnavailable("backing catalog config is not a JSON object")
        offer = (self._offers.learn(config) if not inbound.query_string
                 else self._offers.parse(config))
        config["endpoints"] = sorted((offer.endpoints & FORWARDABLE) | PLANNING_SPECS)
        defaults = config.get("defaults")
        config["defaults"] = {**(defaults if isinstance(defaults, dict) else {}),
                              DATA_OPERATIONS_KEY: ",".join(sorted(DATA_OPERATIONS))}
        config.pop(LIFETIME, None)
        if self._lifetime is not None:
            config[LIFETIME] = self._lifetime
        return JSONResponse(config)
