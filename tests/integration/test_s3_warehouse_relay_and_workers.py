"""Attacks, round 2 (A), on real servers: the embedded catalog on an ``s3://`` warehouse (moto),
icegov over HttptoolsTransport in front of a real HTTP backing, and ``icegov serve --workers``.

Every attack here is met today (refused or made harmless) and is a plain test (the findings once
pinned as strict xfails were fixed and un-marked).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import stat
import subprocess
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from proxy.app import create_app
from proxy.audit.verify import Intact, verify
from proxy.routes import FORWARDABLE
from tests.support.errors import assert_error_model
from tests.support.http import audit_records
from tests.support.s3 import S3Store, admin_on_s3, s3_server
from tests.support.servers import serve
from tests.support.settings import settings_for_tests
from tests.support.workers import ServedWorkers, serving_workers, wait_until
from tests.unit.test_hostile_backing_fileio_purges_audit_writers import (
    REST_SCHEMA,
    register_and_purge,
)

OTHER_BUCKET = "icegov-r2a-other"


# -- the embedded catalog on s3:// -----------------------------------------------------------

@pytest.fixture(scope="module")
def store() -> Iterator[S3Store]:
    with s3_server() as running:
        running.create_bucket(OTHER_BUCKET)
        yield running


@pytest.fixture()
def on_s3(store: S3Store, tmp_path: Path) -> Iterator[httpx.Client]:
    """icegov on its embedded catalog, the warehouse at s3://<bucket>/wh, as the admin."""
    with admin_on_s3(store, tmp_path, "demo") as http:
        yield http


def odd_escapes(store: S3Store) -> list[str]:
    """Spellings of places outside s3://<bucket>/wh that the existing suite does not try."""
    bucket = store.bucket
    return [
        f"s3://{bucket}/wh/./t", f"s3://{bucket}/wh%2F..%2Fescape", f"s3://{bucket}/wh%2F%2E%2E/e",
        f"s3://{bucket}/\uff57h/t", f"s3://{bucket}/wh\u2024\u2024/t", f"s3://{bucket}/wh /t",
        f"s3://{bucket}/ wh/t", f"s3://{bucket}/wh\t/t", f"s3://{bucket}./wh/t",
        f"s3://{bucket.upper()}/wh/t", f"s3://{bucket}:443/wh/t", f"s3://{bucket}/wh\\..\\t",
        f"s3://{bucket}/WH/t", f"s3://{bucket}/wh./t", f"s3://{bucket}/wh/%00/t",
        f"s3:/{bucket}/wh/t", f"s3:///{bucket}/wh/t", f"s3://{OTHER_BUCKET}%2Fwh/t",
        f" s3://{bucket}/wh/t", f"s3://{bucket}/wh/%2e%2e%2f%2e%2e/{OTHER_BUCKET}",
    ]


def view_body(location: str) -> dict[str, Any]:
    version = {"version-id": 1, "timestamp-ms": 1_700_000_000_000, "schema-id": 0,
               "summary": {"engine-name": "test"}, "default-namespace": ["demo"],
               "representations": [{"type": "sql", "sql": "SELECT 1", "dialect": "spark"}]}
    return {"name": "escape_view", "schema": REST_SCHEMA, "view-version": version,
            "properties": {}, "location": location}


def test_odd_spellings_of_places_outside_the_prefix_are_400_and_write_nothing(
        on_s3: httpx.Client, store: S3Store) -> None:
    before = (store.keys(), store.keys(bucket=OTHER_BUCKET))
    for location in odd_escapes(store):
        attempts = [
            ("/v1/namespaces/demo/tables",
             {"name": "escape", "schema": REST_SCHEMA, "location": location}),
            ("/v1/namespaces/demo/tables", {"name": "escape", "schema": REST_SCHEMA,
                                            "properties": {"write.data.path": location}}),
            ("/v1/namespaces", {"namespace": ["escape"], "properties": {"location": location}}),
            ("/v1/namespaces/demo/views", view_body(location)),
        ]
        for path, body in attempts:
            answer = on_s3.post(path, json=body)
            assert answer.status_code == 400, (location, path, answer.text)
            assert_error_model(answer, 400, "BadRequestException")
    assert (store.keys(), store.keys(bucket=OTHER_BUCKET)) == before


@pytest.mark.parametrize("key", [
    "s3.endpoint", "S3.endpoint", "client.region", "py-io-impl", "hf.endpoint", "gcs.service.host",
    "adls.account-host", "hdfs.host", "oss.endpoint", "DEFAULT_SCHEME", "DEFAULT_NETLOC",
    "write.py-location-provider.impl"])
def test_properties_that_would_reconfigure_fileio_are_refused_in_commits_too(
        on_s3: httpx.Client, key: str) -> None:
    created = on_s3.post("/v1/namespaces/demo/tables", json={"name": f"p_{abs(hash(key))}",
                                                            "schema": REST_SCHEMA})
    assert created.status_code == 200, created.text
    name = created.json()["metadata"]["location"].rsplit("/", 1)[1]
    answer = on_s3.post(f"/v1/namespaces/demo/tables/{name}", json={
        "requirements": [], "updates": [{"action": "set-properties",
                                         "updates": {key: "http://127.0.0.1:9"}}]})
    if key == "S3.endpoint":  # pyiceberg's keys are case-sensitive: this one configures nothing
        assert answer.status_code in (200, 400)
        return
    assert_error_model(answer, 400, "BadRequestException")
    after = on_s3.get(f"/v1/namespaces/demo/tables/{name}")
    assert after.status_code == 200, after.text
    assert after.json()["metadata-location"] == created.json()["metadata-location"]
    assert key not in after.json()["metadata"].get("properties", {})


def test_purging_a_registered_table_deletes_nothing_in_another_bucket(
        on_s3: httpx.Client, store: S3Store) -> None:
    victim_key = "victim/precious.parquet"
    store._client().put_object(Bucket=OTHER_BUCKET, Key=victim_key, Body=b"precious")
    register_and_purge(on_s3, None, f"s3://{OTHER_BUCKET}/{victim_key}", put=store.put)
    assert victim_key in store.keys(bucket=OTHER_BUCKET)


# -- icegov over HttptoolsTransport in front of a real HTTP backing --------------------------

@dataclass
class Streams:
    started: int = 0
    ended: int = 0


def streaming_backing(streams: Streams) -> Starlette:
    """A backing whose loadNamespace of ``big`` streams without end (unknown length, so icegov
    relays it as a stream); ``small`` answers at once."""
    async def config(_: Request) -> Response:
        return JSONResponse({"defaults": {}, "overrides": {"prefix": "cat"},
                             "endpoints": sorted(FORWARDABLE)})

    async def big(_: Request) -> Response:
        async def endless() -> AsyncIterator[bytes]:
            streams.started += 1
            try:
                yield b'{"namespace": ["big"], "properties": {"x": "'
                while True:
                    yield b"a" * 65536
                    await asyncio.sleep(0.005)  # paces the stream; nothing waits on it
            finally:
                streams.ended += 1
        return StreamingResponse(endless(), media_type="application/json")

    async def small(_: Request) -> Response:
        return JSONResponse({"namespace": ["small"], "properties": {}})

    return Starlette(routes=[Route("/v1/config", config), Route("/v1/cat/namespaces/big", big),
                             Route("/v1/cat/namespaces/small", small)])


def raw_exchange(url: str, request: bytes, read: int = 65536) -> bytes:
    """Send raw bytes to ``url``'s port; the first ``read`` bytes of what comes back."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(request)
        return sock.recv(read)


def test_callers_hanging_up_mid_stream_leave_no_backing_connection_behind(
        tmp_path: Path) -> None:
    streams = Streams()
    with serve(streaming_backing(streams)) as backing_url:
        settings = settings_for_tests(
            tmp_path, anonymous_admin=True, catalog_uri=backing_url, max_connections=2,
            timeouts={"connect": 2, "read": 5, "write": 5, "pool": 2})
        with serve(create_app(settings)) as url:
            for _ in range(4):  # twice the pool: a leaked connection would starve the next
                head = raw_exchange(url, b"GET /v1/cat/namespaces/big HTTP/1.1\r\nhost: x\r\n\r\n")
                assert head.startswith(b"HTTP/1.1 200")
            answer = httpx.get(f"{url}/v1/cat/namespaces/small", timeout=10)
            assert answer.status_code == 200 and answer.json()["namespace"] == ["small"]
    assert streams.started == 4


@pytest.mark.parametrize("header", [
    b"x-a: 1\rx-injected: 1", b"x-a: 1\nx-injected: 1", b"x-a: 1\r\n x-folded: 1",
    b"x-a: nul\x00", b"x a: 1",
], ids=["bare-cr", "bare-lf", "obs-fold", "nul", "space-in-name"])
def test_header_values_that_could_split_the_forwarded_request_never_reach_the_backing(
        tmp_path: Path, header: bytes) -> None:
    streams = Streams()
    seen: list[bytes] = []

    async def record(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            seen.extend(name for name, _ in scope["headers"])
        await backing(scope, receive, send)

    backing = streaming_backing(streams)
    with serve(record) as backing_url:
        settings = settings_for_tests(tmp_path, anonymous_admin=True, catalog_uri=backing_url)
        with serve(create_app(settings)) as url:
            before = len(seen)
            answer = raw_exchange(url, b"GET /v1/cat/namespaces/small HTTP/1.1\r\nhost: x\r\n"
                                  + header + b"\r\nconnection: close\r\n\r\n")
            assert answer.startswith(b"HTTP/1.1 400")
            assert b"x-injected" not in seen[before:] and b"x-folded" not in seen[before:]
            assert len(seen) == before


# -- icegov serve --workers ----------------------------------------------------------------

class Workers(ServedWorkers):
    """The served workers, and what /proc tells of its worker processes."""

    def worker_environment(self) -> dict[str, str]:
        """A worker's environment as it started (the parent set it up after its own start)."""
        raw = Path(f"/proc/{self.worker_pids()[0]}/environ").read_bytes()
        pairs = (item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
        return {k.decode(): v.decode(errors="replace") for k, v in pairs}

    def worker_pids(self) -> list[int]:
        out = subprocess.run(["pgrep", "-P", str(self.process.pid)], capture_output=True,
                             text=True, check=False).stdout.split()
        pids = []
        for pid in map(int, out):
            with contextlib.suppress(OSError):
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
                if b"spawn_main" in cmdline:
                    pids.append(pid)
        return pids


@pytest.fixture(scope="module")
def workers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Workers]:
    with serving_workers(tmp_path_factory.mktemp("r2a-workers"), 2,
                         ICEGOV__LOG_LEVEL="debug") as served:
        yield Workers(served.process, served.url, served.workdir, served.count)


def test_the_drawn_keys_never_show_in_logs_metrics_or_audit(workers: Workers) -> None:
    environment = workers.worker_environment()
    keys = [environment[name] for name in ("ICEGOV__IDENTITY__SIGNING_KEY",
                                           "ICEGOV__PLANNING__TASK_KEY")]
    assert all(len(key) >= 32 for key in keys)
    token = httpx.post(f"{workers.url}/v1/oauth/tokens", data={
        "grant_type": "client_credentials", "client_id": "admin",
        "client_secret": "admin-secret"}).json()["access_token"]
    httpx.get(f"{workers.url}/v1/namespaces", headers={"authorization": f"Bearer {token}"})
    metrics = httpx.get(f"{workers.url}/metrics").text
    audit = "".join(p.read_text() for p in workers.audit_files())
    for key in keys:
        assert key not in workers.stderr() and key not in metrics and key not in audit
    assert token not in workers.stderr() and token not in audit


def test_the_runtime_directory_is_private(workers: Workers) -> None:
    runtime = Path(workers.worker_environment()["ICEGOV_WORKERS_DIR"])
    assert stat.S_IMODE(runtime.stat().st_mode) == 0o700
    assert runtime.stat().st_uid == os.getuid()
    metrics = Path(workers.worker_environment()["PROMETHEUS_MULTIPROC_DIR"])
    assert metrics.parent == runtime


def test_a_killed_worker_is_replaced_in_its_slot_and_its_chain_resumes(
        workers: Workers) -> None:
    before = workers.worker_pids()
    assert len(before) == 2, workers.stderr()
    os.kill(before[0], signal.SIGKILL)
    wait_until(workers, lambda: len(set(workers.worker_pids()) - set(before)) == 1
               and workers.ready(), "uvicorn to replace the killed worker")
    for _ in range(20):  # fresh connections: both workers, the new one included, answer some
        with httpx.Client(timeout=10) as client:
            assert client.get(f"{workers.url}/v1/config").status_code in (200, 401)
    audits = [p for p in workers.workdir.iterdir()
              if p.name.startswith("audit") and p.suffix == ".log"]
    assert sorted(p.name for p in audits) == ["audit.w0.log", "audit.w1.log"]
    for path in workers.audit_files():
        assert isinstance(verify([path]), Intact), path
    labels = {line.split('worker="')[1].split('"')[0]
              for line in httpx.get(f"{workers.url}/metrics").text.splitlines()
              if 'worker="' in line}
    assert labels <= {"0", "1"}
    assert audit_records(workers.audit_files()[0]) or audit_records(workers.audit_files()[1])


@pytest.mark.parametrize("line", [
    b"DELETE /v1/cat/namespaces/demo/tables/.. HTTP/1.1",
    b"GET /v1/cat/namespaces/demo/tables/.. HTTP/1.1",
    b"HEAD /v1/cat/namespaces/demo/tables/. HTTP/1.1",
    b"DELETE /v1/cat/namespaces/demo/views/.. HTTP/1.1",
    b"GET /v1/cat/namespaces/../tables/t HTTP/1.1",
    b"DELETE /v1/cat/namespaces/demo%1F../tables/t HTTP/1.1",
    b"GET /v1/../namespaces/demo/tables/t HTTP/1.1",
    b"DELETE /v1/./namespaces/demo HTTP/1.1",
    b"GET /v1/cat/namespaces/demo/tables/t/plan/.. HTTP/1.1",
    b"DELETE /v1/cat/namespaces/demo/tables/t/plan/.. HTTP/1.1",
])
def test_dot_segments_never_reach_the_backing(tmp_path: Path, line: bytes) -> None:
    """httpx's ``URL.copy_with(raw_path=...)`` (``Forwarder._url``) removes ``.`` and ``..``
    segments, so a target with them would reach the backing as another path than the one
    icegov authorized: icegov must refuse such names before forwarding anything."""
    seen: list[bytes] = []

    async def record(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and not scope["path"].endswith("/config"):
            seen.append(scope["raw_path"])
        await backing(scope, receive, send)

    backing = streaming_backing(Streams())
    with serve(record) as backing_url:
        settings = settings_for_tests(tmp_path, anonymous_admin=True, catalog_uri=backing_url)
        with serve(create_app(settings)) as url:
            answer = raw_exchange(url, line + b"\r\nhost: x\r\nconnection: close\r\n\r\n")
    assert answer.split(b" ")[1] in (b"400", b"404")
    assert seen == []
