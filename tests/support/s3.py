"""An S3-compatible object store for the tests, and a backing REST catalog whose warehouse is on it.

The store is moto's S3 server (``moto[server]``, ``ThreadedMotoServer``) on a loopback port with
one bucket; ``S3Store.properties`` are the FileIO properties that reach it (pyiceberg's PyArrow
FileIO speaks S3 to it).

The backing catalog is the embedded catalog's REST handlers over a pyiceberg ``SqlCatalog`` whose
warehouse is ``s3://<bucket>/wh``. The embedded catalog confines every location to a *local*
warehouse directory (``proxy.catalog.locations.Warehouse``) and refuses ``s3://``; for this
backing, ``confine_to_object_store`` swaps that confinement for one with the same checks over the
bucket's warehouse prefix. Only the backing catalog is changed: icegov in front of it is the
unchanged governed proxy, forwarding to it in-process.
"""

from __future__ import annotations

import contextlib
import logging
import posixpath
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto.server import ThreadedMotoServer
from pyiceberg.catalog.sql import SqlCatalog

from proxy.catalog import create_catalog_app
from proxy.catalog.app import CatalogApp
from proxy.catalog.locations import Warehouse
from proxy.errors import BadRequest

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
    def warehouse(self) -> str:
        return f"s3://{self.bucket}/wh"

    def keys(self, prefix: str = "") -> list[str]:
        """Every object key in the bucket under ``prefix``."""
        client = self._client()
        pages = client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket,
                                                                  Prefix=prefix)
        return [item["Key"] for page in pages for item in page.get("Contents", [])]

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


class ObjectStoreWarehouse(Warehouse):
    """The embedded catalog's location checks (``proxy.catalog.locations.Warehouse``) over an
    object-store warehouse: every location must lie under the warehouse URI's prefix."""

    def __init__(self, catalog: SqlCatalog) -> None:  # no super(): the root is a URI
        self.object_root = str(catalog.properties["warehouse"]).rstrip("/")

    def path(self, location: str) -> Path | None:
        """Never a local path (register, which needs one, is refused)."""
        return None

    def check(self, location: str, what: str) -> None:
        scheme, sep, rest = location.partition("://")
        normal = f"{scheme}{sep}{posixpath.normpath(rest)}" if sep else ""
        root = self.object_root
        inside = normal == location.rstrip("/") and (
            normal == root or normal.startswith(root + "/"))
        if not inside:
            raise BadRequest(f"{what} must be a location in this catalog's warehouse")


def confine_to_object_store(monkeypatch: pytest.MonkeyPatch) -> None:
    """The embedded catalog's handlers check locations with ``ObjectStoreWarehouse``."""
    for module in ("proxy.catalog.tables", "proxy.catalog.namespaces", "proxy.catalog.store"):
        monkeypatch.setattr(f"{module}.Warehouse", ObjectStoreWarehouse)


def s3_catalog(store: S3Store, db_path: Path) -> SqlCatalog:
    """A SqlCatalog (SQLite at ``db_path``) whose warehouse is on ``store``."""
    return SqlCatalog("s3-backing", uri=f"sqlite:///{db_path}", warehouse=store.warehouse,
                      **store.properties)


def s3_catalog_app(catalog: SqlCatalog, max_body_bytes: int = 16 * 1024 * 1024) -> CatalogApp:
    """The embedded catalog's REST app over ``catalog`` (call ``confine_to_object_store``)."""
    return create_catalog_app(catalog, max_body_bytes)
