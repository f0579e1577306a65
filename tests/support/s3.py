"""An S3-compatible object store for the tests, and the settings that put icegov's embedded
catalog on it.

The store is moto's S3 server (``moto[server]``, ``ThreadedMotoServer``) on a loopback port with
one bucket; ``S3Store.properties`` are the FileIO properties that reach it (pyiceberg's PyArrow
FileIO speaks S3 to it). ``embedded_on_s3`` gives the settings (``warehouse``, ``file_io``,
``catalog_db_uri``) that make icegov's unchanged embedded catalog keep its warehouse at
``s3://<bucket>/wh``.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import httpx
from moto.server import ThreadedMotoServer

BUCKET = "icegov-tests"
REGION = "us-east-1"
ACCESS_KEY = "test-access-key"
SECRET_KEY = "test-secret-key"


@dataclass(frozen=True)
class S3Store:
    """A running S3-compatible server with one bucket."""

    endpoint: str
    bucket: str = BUCKET

    @property
    def properties(self) -> dict[str, str]:
        """FileIO properties that read and write this store."""
        return {"s3.endpoint": self.endpoint, "s3.region": REGION,
                "s3.access-key-id": ACCESS_KEY, "s3.secret-access-key": SECRET_KEY}

    @property
    def bucket_uri(self) -> str:
        return f"s3://{self.bucket}"

    @property
    def warehouse(self) -> str:
        """The tests' warehouse prefix in the bucket."""
        return f"{self.bucket_uri}/wh"

    def keys(self, prefix: str = "", bucket: str | None = None) -> list[str]:
        """Every object key under ``prefix`` in the bucket (or in another ``bucket``)."""
        client = self._client()
        pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket or self.bucket,
                                                                  Prefix=prefix)
        return [item["Key"] for page in pages for item in page.get("Contents", [])]

    def put(self, key: str, body: bytes) -> str:
        """Write an object under ``key`` in the bucket; its ``s3://`` location."""
        self._client().put_object(Bucket=self.bucket, Key=key, Body=body)
        return f"s3://{self.bucket}/{key}"

    def create_bucket(self, name: str) -> None:
        self._client().create_bucket(Bucket=name)

    def _client(self) -> Any:
        return boto3.client("s3", endpoint_url=self.endpoint, region_name=REGION,
                            aws_access_key_id=ACCESS_KEY, aws_secret_access_key=SECRET_KEY)


@contextlib.contextmanager
def s3_server() -> Iterator[S3Store]:
    """moto's S3 server on 127.0.0.1 (a free port) with the test bucket; stopped on exit."""
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        store = S3Store(f"http://{host}:{port}")
        store._client().create_bucket(Bucket=store.bucket)
        yield store
    finally:
        server.stop()


def embedded_on_s3(store: S3Store, workdir: Path) -> dict[str, Any]:
    """Settings overrides for icegov's own embedded catalog with its warehouse on ``store``:
    the warehouse URI, the FileIO properties that reach the store, and a SQLite database in
    ``workdir`` (an object-store warehouse has no default database)."""
    return {"warehouse": store.warehouse, "file_io": store.properties,
            "catalog_db_uri": f"sqlite:///{workdir / 'catalog.db'}"}


@contextlib.contextmanager
def admin_on_s3(store: S3Store, workdir: Path, namespace: str) -> Iterator[httpx.Client]:
    """icegov on its embedded catalog with the warehouse at ``s3://<bucket>/wh``, as the admin,
    with ``namespace`` created."""
    from proxy.app import create_app
    from tests.support.http import as_principal
    from tests.support.servers import serve
    from tests.support.settings import ADMIN, settings_for_tests

    settings = settings_for_tests(workdir, **embedded_on_s3(store, workdir))
    with serve(create_app(settings)) as url, as_principal(url, ADMIN) as http:
        http.post("/v1/namespaces", json={"namespace": [namespace]})
        yield http
