"""A fake backing catalog for unit tests (httpx.MockTransport) and a proxy in front of it."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from starlette.testclient import TestClient

from proxy.app import Backing, create_app
from proxy.routes import FORWARDABLE
from tests.support.settings import ADMIN, settings_for_tests

UPSTREAM = "http://backing.test/catalog"


ALL_ENDPOINTS = sorted(FORWARDABLE)


class Upstream:
    """A fake backing catalog that records what reached it (its config aside: it advertises
    every endpoint and the prefix ``cat``, unless ``config`` says otherwise)."""

    def __init__(self, answer: Callable[[httpx.Request], httpx.Response] | None = None,
                 config: dict[str, Any] | bool | None = None) -> None:
        self.seen: list[httpx.Request] = []
        self.configs: list[httpx.Request] = []
        self._answer = answer or (lambda _: httpx.Response(200, json={"ok": True}))
        self._config = config if config is not None else {
            "defaults": {}, "overrides": {"prefix": "cat"}, "endpoints": ALL_ENDPOINTS}

    def __call__(self, request: httpx.Request) -> httpx.Response:
        request.read()
        if request.url.path.endswith("/v1/config") and self._config is not False:
            self.configs.append(request)
            return httpx.Response(200, json=self._config)
        self.seen.append(request)
        return self._answer(request)


def client_for(upstream: Upstream, tmp: Path | None = None, **settings: Any) -> TestClient:
    """A proxy in front of ``upstream``; callers without a token act as an admin."""
    workdir = tmp or Path(tempfile.mkdtemp(prefix="icegov-unit-"))
    settings = settings_for_tests(workdir, anonymous_admin=True, catalog_uri=UPSTREAM, **settings)
    app = create_app(settings, Backing(httpx.MockTransport(upstream), UPSTREAM))
    return TestClient(app, raise_server_exceptions=False)


def icegov_token(client: TestClient, credential: str = ADMIN) -> str:
    client_id, secret = credential.split(":")
    response = client.post("/v1/oauth/tokens", data={
        "grant_type": "client_credentials", "client_id": client_id, "client_secret": secret})
    assert response.status_code == 200, response.text
    return str(response.json()["access_token"])
