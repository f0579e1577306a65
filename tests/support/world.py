"""An attacker's view of a running proxy: the admin's catalog and one raw HTTP client per
principal, for the attack suites."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
from pyiceberg.catalog.rest import RestCatalog

from tests.conftest import RunningProxy
from tests.support.http import as_principal
from tests.support.settings import ADMIN


@dataclass
class World:
    """The proxy, the admin's catalog and one raw HTTP client per principal."""

    proxy: RunningProxy
    admin: RestCatalog
    clients: dict[str, httpx.Client] = field(default_factory=dict)

    def as_(self, credential: str) -> httpx.Client:
        if credential not in self.clients:
            self.clients[credential] = as_principal(self.proxy.url, credential)
        return self.clients[credential]

    def plan(self, credential: str, table: str, body: Any,
             namespace: str = "demo") -> httpx.Response:
        return self.as_(credential).post(f"/v1/namespaces/{namespace}/tables/{table}/plan",
                                         json=body)

    def commit(self, credential: str, table: str, *updates: dict[str, Any],
               namespace: str = "demo") -> httpx.Response:
        return self.as_(credential).post(f"/v1/namespaces/{namespace}/tables/{table}", json={
            "requirements": [], "updates": list(updates)})


@contextlib.contextmanager
def world_of(proxy: RunningProxy) -> Iterator[World]:
    """The world of ``proxy``; its clients closed at the end."""
    world = World(proxy, RestCatalog("admin", uri=proxy.url, credential=ADMIN))
    try:
        yield world
    finally:
        for client in world.clients.values():
            client.close()
