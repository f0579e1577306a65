"""Attacks, round 3, against real servers: purges on an object-store warehouse (moto) and a
WebSocket upgrade to a served icegov.

Every attack here is met today (refused or made harmless) and has an ordinary test (the findings
once pinned as strict xfails were fixed and un-marked). The unit half is
``tests/unit/test_purge_roots_pages_view_guard_fast_lane.py``.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from proxy.app import create_app
from tests.support.s3 import S3Store, admin_on_s3, s3_server
from tests.support.servers import serve
from tests.support.settings import settings_for_tests
from tests.unit.test_purge_roots_pages_view_guard_fast_lane import REST_SCHEMA

# -- purges on an object-store warehouse --------------------------------------------------------


@pytest.fixture(scope="module")
def store() -> Iterator[S3Store]:
    with s3_server() as running:
        yield running


@pytest.fixture()
def on_s3(store: S3Store, tmp_path: Path) -> Iterator[httpx.Client]:
    """icegov on its embedded catalog, the warehouse at s3://<bucket>/wh, as the admin."""
    with admin_on_s3(store, tmp_path, "r3s3") as http:
        yield http


@pytest.mark.parametrize("spelled", ["plainly", "encoded"])
@pytest.mark.parametrize("placed_at", ["warehouse", "namespace", "victim"])
def test_a_purge_on_s3_never_deletes_another_live_tables_files(
        on_s3: httpx.Client, store: S3Store, placed_at: str, spelled: str) -> None:
    """A table registered over another's files (at the warehouse, its namespace or its own
    directory) naming them plainly is purged without touching them; named with dot segments
    (encoded or not), the registration is refused."""
    name = f"{placed_at}_{spelled}"
    created = on_s3.post("/v1/namespaces/r3s3/tables", json={"name": f"victim_{name}",
                                                             "schema": REST_SCHEMA})
    assert created.status_code == 200, created.text
    victim = created.json()
    location = victim["metadata"]["location"]
    data = store.put(location.removeprefix(f"{store.bucket_uri}/") + "/data/precious.parquet",
                     b"precious")
    relative = data.removeprefix(f"{store.warehouse}/r3s3/")
    root = {"warehouse": store.warehouse, "namespace": f"{store.warehouse}/r3s3",
            "victim": location}[placed_at]
    thief_dir = f"{store.warehouse}/r3s3/thief_{name}"
    spellings = [data, victim["metadata-location"]] if spelled == "plainly" else [
        f"{thief_dir}/%2e%2e/{relative}", f"{thief_dir}/%252e%252e/{relative}",
        f"{thief_dir}/../{relative}"]
    crafted = {**victim["metadata"], "location": root, "metadata-log": [
        {"metadata-file": spelling, "timestamp-ms": n} for n, spelling in enumerate(spellings)]}
    own = store.put(f"wh/r3s3/thief_{name}/metadata/00000-t.metadata.json",
                    json.dumps(crafted).encode())
    before = set(store.keys(f"wh/r3s3/victim_{name}/"))
    registered = on_s3.post("/v1/namespaces/r3s3/register", json={
        "name": f"thief_{name}", "metadata-location": own})
    assert registered.status_code == (200 if spelled == "plainly" else 400), registered.text
    if registered.status_code == 200:
        dropped = on_s3.delete(f"/v1/namespaces/r3s3/tables/thief_{name}",
                               params={"purgeRequested": "true"})
        assert dropped.status_code == 204, dropped.text
    assert before and before <= set(store.keys(f"wh/r3s3/victim_{name}/"))
    loaded = on_s3.get(f"/v1/namespaces/r3s3/tables/victim_{name}")
    assert loaded.status_code == 200, loaded.text


# -- a WebSocket upgrade --------------------------------------------------------------------------

UPGRADE = ("GET {path} HTTP/1.1\r\nHost: icegov\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
           "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    settings = settings_for_tests(tmp_path_factory.mktemp("r3-ws"), anonymous_admin=True)
    with serve(create_app(settings)) as url:
        yield url


def status_of_upgrade(url: str, path: str) -> int:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(UPGRADE.format(path=path).encode("ascii"))
        head = sock.recv(4096)
    return int(head.split(b" ", 2)[1])


@pytest.mark.parametrize("path", ["/v1/config", "/healthz"])
def test_a_websocket_upgrade_is_refused_without_a_server_error(served: str, path: str) -> None:
    assert status_of_upgrade(served, path) < 500
