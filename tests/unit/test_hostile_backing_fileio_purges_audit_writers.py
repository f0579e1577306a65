"""Attacks, round 2 (A): a hostile backing against HttptoolsTransport, FileIO properties and
purges on the embedded catalog, and two writers on one audit file.

Every attack here is met today (refused or made harmless) and is a plain test (the findings once
pinned as strict xfails were fixed and un-marked).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.testclient import TestClient

from proxy.app import create_app
from proxy.backing.auth import PassThroughAuth
from proxy.backing.forward import Forwarder
from proxy.backing.httptools_transport import HttptoolsTransport
from proxy.errors import BackingTimeout
from tests.support.audit import refused_or_intact
from tests.support.settings import settings_for_tests
from tests.support.virtual_time import run_in_virtual_time
from tests.unit.test_transport_contract import (
    OK,
    Answer,
    Hold,
    ScriptedBacking,
    fetch,
    run_with,
)

FORGED = b"HTTP/1.1 200 OK\r\ncontent-length: 6\r\n\r\nforged"
SHORT = {"timeout": httpx.Timeout(5, read=1).as_dict()}
REST_SCHEMA = {"type": "struct", "schema-id": 0, "fields": [
    {"id": 1, "name": "id", "type": "long", "required": False}]}


def _get(backing: ScriptedBacking) -> httpx.Request:
    return httpx.Request("GET", backing.url(), extensions=SHORT)


# -- a hostile backing: answers that must be refused ----------------------------------------

@pytest.mark.parametrize("answer", [
    pytest.param(b"HTTP/1.1 200 OK\r\nx-a: 1\r\n x-b: 2\r\ncontent-length: 2\r\n\r\nok",
                 id="obs-fold"),
    pytest.param(b"HTTP/1.1 200 OK\nx-a: 1\ncontent-length: 2\n\nok", id="bare-lf"),
    pytest.param(b"HTTP/1.1 200 OK\r\nx-a: 1\ncontent-length: 2\r\n\r\nok", id="one-bare-lf"),
    pytest.param(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
                 b"fffffffffffffffff1\r\nok\r\n0\r\n\r\n", id="chunk-size-overflow"),
    pytest.param(b"HTTP/1.1 200 OK\r\ncontent-length: 99999999999999999999999\r\n\r\nok",
                 id="length-overflow"),
    pytest.param(b"HTTP/1.1 200 OK\r\ncontent-length: +2\r\n\r\nok", id="signed-length"),
    pytest.param(b"HTTP/1.1 200 OK\r\ncontent-length: 2, 2\r\n\r\nok", id="length-list"),
    pytest.param(b"HTTP/1.1 200 OK\r\ncontent-length : 2\r\n\r\nok", id="space-before-colon"),
    pytest.param(b"HTTP/1.1 200 OK\r\ntransfer-encoding : chunked\r\ncontent-length: 2\r\n\r\nok",
                 id="te-space-before-colon"),
    pytest.param(b"HTTP/1.1 200 OK\r\ntransfer-encoding: identity\r\ncontent-length: 2\r\n\r\nok",
                 id="te-identity-and-length"),
    pytest.param(b"HTTP/1.1 200 OK\r\nx-a: a\rb\r\ncontent-length: 2\r\n\r\nok", id="bare-cr"),
    pytest.param(b"HTTP/1.1 200 OK\r\nx-a: a\x00b\r\ncontent-length: 2\r\n\r\nok", id="nul"),
    pytest.param(b"HTTP/1.1 200 OK\r\nx-a: a\x01b\r\ncontent-length: 2\r\n\r\nok", id="ctl"),
    pytest.param(b"HTTP/1.1 200 OK\r\nx-a: a\x7fb\r\ncontent-length: 2\r\n\r\nok", id="del"),
    pytest.param(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nok\r\n"
                 b"0\r\ncontent-length: 99\r\n\r\n", id="length-in-trailers"),
    pytest.param(b"HTTP/1.1 100 Continue\r\ncontent-length: 3\r\n\r\nabc" + OK,
                 id="interim-with-body"),
])
def test_malformed_answers_fail_and_the_next_request_gets_a_fresh_answer(answer: bytes) -> None:
    bodies: list[bytes] = []

    async def steps(transport: httpx.AsyncBaseTransport, backing: ScriptedBacking) -> None:
        with pytest.raises(httpx.RemoteProtocolError) as caught:
            await fetch(transport, _get(backing))
        assert "backing" in str(caught.value)  # icegov's own words, not the parser's
        bodies.append((await fetch(transport, _get(backing))).content)

    backing = run_with("httptools", (Answer(answer),), steps, max_connections=1)
    assert bodies == [b"ok"] and backing.connections == 2


@pytest.mark.parametrize("head", [
    b"HTTP/1.1 304 Not Modified\r\ncontent-length: 6\r\n\r\n",
    b"HTTP/1.1 204 No Content\r\ncontent-length: 6\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 2\r\n\r\nok",
    b"HTTP/1.0 200 OK\r\ncontent-length: 2\r\n\r\nok",
], ids=["304", "204", "connection-close", "http-1.0"])
def test_bytes_after_a_bodiless_or_closing_answer_never_answer_the_next_request(
        head: bytes) -> None:
    seen: list[tuple[int, bytes]] = []

    async def steps(transport: httpx.AsyncBaseTransport, backing: ScriptedBacking) -> None:
        for _ in range(2):
            response = await fetch(transport, _get(backing))
            seen.append((response.status_code, response.content))

    backing = run_with("httptools", (Answer(head + FORGED),), steps, max_connections=1)
    assert seen[1] == (200, b"ok") and b"forged" not in seen[0][1]
    assert backing.connections == 2


def test_a_status_below_100_is_refused_not_taken_for_an_interim_answer() -> None:
    odd = b"HTTP/1.1 099 Odd\r\ncontent-length: 2\r\n\r\nok" + FORGED
    seen: list[bytes] = []

    async def steps(transport: httpx.AsyncBaseTransport, backing: ScriptedBacking) -> None:
        try:
            seen.append((await fetch(transport, _get(backing))).content)
        except httpx.RemoteProtocolError:
            seen.append(b"refused")

    run_with("httptools", (Answer(odd),), steps)
    assert seen == [b"refused"]


def test_a_transfer_coding_other_than_chunked_is_refused() -> None:
    gzipped = (b"HTTP/1.1 200 OK\r\ntransfer-encoding: gzip, chunked\r\n\r\n"
               b"2\r\nok\r\n0\r\n\r\n")

    async def steps(transport: httpx.AsyncBaseTransport, backing: ScriptedBacking) -> None:
        with pytest.raises(httpx.RemoteProtocolError):
            await fetch(transport, _get(backing))

    run_with("httptools", (Answer(gzipped),), steps)


# -- the pool under cancelled callers -------------------------------------------------------

def test_a_waiter_cancelled_as_a_connection_is_handed_to_it_passes_it_on() -> None:
    """The one connection is busy; two requests wait. The busy answer is closed (the connection
    goes to the first waiter) and that waiter is cancelled in the same tick: the second waiter
    must get the connection, and no slot leaks."""
    async def steps(transport: httpx.AsyncBaseTransport, backing: ScriptedBacking) -> None:
        busy = await transport.handle_async_request(_get(backing))
        assert isinstance(busy.stream, httpx.AsyncByteStream)
        async for _ in busy.stream:  # read whole, yet not closed: the connection stays busy
            pass
        first = asyncio.ensure_future(fetch(transport, _get(backing)))
        second = asyncio.ensure_future(fetch(transport, _get(backing)))
        await _until_waiting(transport, 2)
        await busy.aclose()  # hands the connection to ``first``
        first.cancel()
        assert (await second).content == b"ok"
        with pytest.raises(asyncio.CancelledError):
            await first
        assert (await fetch(transport, _get(backing))).content == b"ok"

    backing = run_with("httptools", (), steps, max_connections=1)
    assert backing.connections == 1 and len(backing.requests) == 3


def test_cancelled_waiters_leave_no_slot_behind() -> None:
    async def steps(transport: httpx.AsyncBaseTransport, backing: ScriptedBacking) -> None:
        busy = await transport.handle_async_request(_get(backing))
        waiting = [asyncio.ensure_future(fetch(transport, _get(backing))) for _ in range(5)]
        await _until_waiting(transport, 5)
        for task in waiting:
            task.cancel()
        await asyncio.gather(*waiting, return_exceptions=True)
        await busy.aread()
        await busy.aclose()
        pool = {"timeout": httpx.Timeout(5, pool=1).as_dict()}
        answers = await asyncio.gather(*(fetch(transport, httpx.Request(
            "GET", backing.url(), extensions=pool)) for _ in range(3)))
        assert [a.content for a in answers] == [b"ok"] * 3

    backing = run_with("httptools", (), steps, max_connections=1)
    assert backing.connections == 1


async def _until_waiting(transport: httpx.AsyncBaseTransport, count: int) -> None:
    assert isinstance(transport, HttptoolsTransport)
    for _ in range(1000):  # bounded: each waiter queues within a few loop turns
        if len(transport._waiters) >= count:
            return
        await asyncio.sleep(0)
    raise AssertionError("the requests never queued for the pool")


def test_a_post_the_backing_never_answers_is_sent_once() -> None:
    async def steps(transport: httpx.AsyncBaseTransport, backing: ScriptedBacking) -> None:
        timeout = {"timeout": httpx.Timeout(5, read=0.3).as_dict()}
        with pytest.raises(httpx.ReadTimeout):
            await fetch(transport, httpx.Request("POST", backing.url(), content=b"{}",
                                                 extensions=timeout))
        assert (await fetch(transport, _get(backing))).content == b"ok"

    backing = run_with("httptools", (Hold(),), steps)
    assert [head.split(b" ")[0] for _, head, _ in backing.requests] == [b"POST", b"GET"]


# -- the embedded catalog: FileIO properties and purges ------------------------------------

@pytest.fixture()
def embedded(tmp_path: Path) -> Any:
    settings = settings_for_tests(tmp_path, anonymous_admin=True)
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        client.post("/v1/namespaces", json={"namespace": ["demo"]})
        yield client


def test_buffer_size_is_refused_like_the_other_fileio_properties(embedded: TestClient) -> None:
    created = embedded.post("/v1/namespaces/demo/tables", json={
        "name": "buffered", "schema": REST_SCHEMA,
        "properties": {"buffer-size": "99999999999999999"}})
    assert created.status_code == 400, created.text


def test_buffer_size_set_by_a_commit_never_lands(embedded: TestClient) -> None:
    """What holds today: a commit setting it fails and the table is left as it was."""
    embedded.post("/v1/namespaces/demo/tables", json={"name": "plain", "schema": REST_SCHEMA})
    answer = embedded.post("/v1/namespaces/demo/tables/plain", json={
        "requirements": [], "updates": [{"action": "set-properties",
                                         "updates": {"buffer-size": "abc"}}]})
    assert answer.status_code in (400, 502)
    loaded = embedded.get("/v1/namespaces/demo/tables/plain").json()
    assert "buffer-size" not in loaded["metadata"]["properties"]


def test_purging_a_registered_table_deletes_nothing_outside_the_warehouse(
        embedded: TestClient, tmp_path: Path) -> None:
    victim = tmp_path / "outside" / "precious.txt"
    victim.parent.mkdir()
    victim.write_text("precious")
    register_and_purge(embedded, tmp_path / "warehouse", victim.as_uri())
    assert victim.read_text() == "precious"


def register_and_purge(client: TestClient | httpx.Client, warehouse: Path | None,
                       victim: str, put: Any = None) -> None:
    """Register a metadata file (written into the warehouse as any writer of data files can)
    whose metadata-log names ``victim``, then drop the table with purge."""
    base = client.post("/v1/namespaces/demo/tables", json={"name": "base", "schema": REST_SCHEMA})
    metadata = base.json()["metadata"]
    trap_location = metadata["location"].rsplit("/", 1)[0] + "/trap"
    crafted = {**metadata, "location": trap_location,
               "metadata-log": [{"metadata-file": victim, "timestamp-ms": 1}]}
    if put is None:
        assert warehouse is not None
        path = warehouse / "demo" / "trap" / "crafted.metadata.json"
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps(crafted))
        location = path.as_uri()
    else:
        location = put("wh/demo/trap/crafted.metadata.json", json.dumps(crafted).encode())
    registered = client.post("/v1/namespaces/demo/register", json={
        "name": "trap", "metadata-location": location})
    if registered.status_code != 200:
        return  # refused: nothing to purge
    client.delete("/v1/namespaces/demo/tables/trap", params={"purgeRequested": "true"})


# -- the audit file: one writer ------------------------------------------------------------

def test_a_second_writer_on_one_audit_file_is_refused(tmp_path: Path) -> None:
    live = tmp_path / "audit.log"
    refused_or_intact(live, live, live)


def test_an_answer_to_head_with_a_length_keeps_its_connection() -> None:
    head = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n"

    async def steps(transport: httpx.AsyncBaseTransport, backing: ScriptedBacking) -> None:
        for method in ("HEAD", "HEAD", "GET"):
            await fetch(transport, httpx.Request(method, backing.url(), extensions=SHORT))

    backing = run_with("httptools", (Answer(head), Answer(head)), steps)
    assert backing.connections == 1


async def dribbled_fetch(answer_deadline: float) -> tuple[bytes | BackingTimeout, float]:
    """Fetch from a backing that sends a 40-byte body one byte per 0.05 s (each read well
    inside the 0.3 s read timeout, 2 s in all) with ``answer_deadline``: the body, or the
    BackingTimeout, and when (on the loop's clock) the fetch ended."""
    dribbling: list[asyncio.Task[object]] = []

    async def dribble(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        dribbling.append(asyncio.current_task())  # type: ignore[arg-type]
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 40\r\n\r\n")
        try:
            for _ in range(40):
                writer.write(b"a")
                await writer.drain()
                await asyncio.sleep(0.05)  # the backing's pace, the attack itself
        except ConnectionError:
            return  # icegov hung up
        writer.close()

    loop = asyncio.get_running_loop()
    listener = await asyncio.start_server(dribble, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    transport = HttptoolsTransport(2)
    forwarder = Forwarder(transport, f"http://127.0.0.1:{port}", PassThroughAuth(),
                          httpx.Timeout(0.3), answer_deadline=answer_deadline)
    started = loop.time()
    try:
        answer = await forwarder.fetch(b"/v1/namespaces/demo", b"", ())
        return answer.content, loop.time() - started
    except BackingTimeout as exc:
        return exc, loop.time() - started
    finally:
        await transport.aclose()
        listener.close()
        await asyncio.gather(*dribbling)


def test_a_backing_dribbling_its_answer_is_cut_off_by_a_whole_answer_deadline() -> None:
    """On a virtual clock (``tests.support.virtual_time``): the deadline, not the machine's
    speed, decides; the same dribble under a longer deadline arrives whole, so it is the
    whole-answer deadline that cuts it, never a read timeout."""
    cut, when = run_in_virtual_time(dribbled_fetch(answer_deadline=1.0))
    assert isinstance(cut, BackingTimeout)
    assert 1.0 <= when < 1.05
    whole, when = run_in_virtual_time(dribbled_fetch(answer_deadline=3.0))
    assert whole == b"a" * 40
    assert 1.95 <= when < 2.1
