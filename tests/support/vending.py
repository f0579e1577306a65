"""A backing catalog that vends storage credentials: icegov's embedded catalog on an S3 store
(``tests.support.s3``) with what a vending catalog (Lakekeeper, Polaris) adds to every table
answer: ``storage-credentials`` for the table's location carrying the store's keys, endpoint,
path-style access and ``client.region`` (the table ``config`` says nothing of storage, as in
Lakekeeper's answers: a client that loses the credential loses the region with it); with
``in_config``, the same properties in the table ``config`` too.
"""

from __future__ import annotations

import json
import re
from typing import Any

import httpx

from tests.support.s3 import ACCESS_KEY, REGION, SECRET_KEY, S3Store

TABLE_ANSWER = re.compile(rb"/v1/(?:[^/]+/)?namespaces/[^/]+/tables(?:/[^/]+)?$")
"""Paths whose 200 answer is a LoadTableResult (loadTable, createTable) or a commit's."""


def vended_config(store: S3Store) -> dict[str, str]:
    """The storage properties a vending catalog answers with."""
    return {"s3.endpoint": store.endpoint, "s3.path-style-access": "true",
            "client.region": REGION, "s3.access-key-id": ACCESS_KEY,
            "s3.secret-access-key": SECRET_KEY}


def storage_credentials(store: S3Store, location: str) -> list[dict[str, Any]]:
    """The ``storage-credentials`` a vending catalog answers with for a table at ``location``."""
    return [{"prefix": location, "config": vended_config(store)}]


class VendingTransport(httpx.AsyncBaseTransport):
    """``inner`` (the embedded catalog's transport) with credentials vended on every table
    answer."""

    def __init__(self, inner: httpx.AsyncBaseTransport, store: S3Store,
                 in_config: bool = False) -> None:
        self._inner = inner
        self._store = store
        self._in_config = in_config

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self._inner.handle_async_request(request)
        if response.status_code != 200 or not TABLE_ANSWER.search(request.url.raw_path):
            return response
        body = json.loads(await response.aread())
        await response.aclose()
        if isinstance(body, dict) and isinstance(body.get("metadata"), dict):
            if self._in_config:
                body["config"] = {**(body.get("config") or {}), **vended_config(self._store)}
            body["storage-credentials"] = storage_credentials(self._store,
                                                              body["metadata"]["location"])
        headers = [(k, v) for k, v in response.headers.raw
                   if k.lower() not in (b"content-length", b"content-encoding")]
        return httpx.Response(200, headers=headers, content=json.dumps(body).encode())

    async def aclose(self) -> None:
        await self._inner.aclose()
