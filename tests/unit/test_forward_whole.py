"""Answers icegov reads whole: bounded in time and size, and a failure mid-answer is reported
as what it is (a commit's outcome unknown, never a 500 or a conflict)."""

from __future__ import annotations

import asyncio
import gzip
from collections.abc import AsyncIterator

import httpx
import pytest

from proxy.backing import forward
from proxy.backing.auth import PassThroughAuth
from proxy.backing.forward import Forwarder
from proxy.errors import BackingFailed, BackingUnavailable, CommitStateUnknown
from proxy.inbound import InboundRequest
from proxy.routes import RouteTable


class BrokenMidway(httpx.AsyncByteStream):
    """Half an answer, then the connection fails."""

    async def __aiter__(self) -> AsyncIterator[bytes]:
        yield b'{"metadata-location": "s3://b/t/met'
        raise httpx.ReadError("connection reset")


def forwarder_for(answer: httpx.Response) -> Forwarder:
    transport = httpx.MockTransport(lambda request: answer)
    return Forwarder(transport, "http://backing", PassThroughAuth(), httpx.Timeout(5))


def inbound(method: str, path: str, body: bytes = b"") -> InboundRequest:
    route = RouteTable().match(method, path)
    assert route is not None
    return InboundRequest(method, path.encode(), b"", (), body, route)


def test_a_commit_answer_cut_off_midway_leaves_the_outcome_unknown() -> None:
    forwarder = forwarder_for(httpx.Response(200, stream=BrokenMidway()))
    commit = inbound("POST", "/v1/namespaces/demo/tables/t", b"{}")
    with pytest.raises(CommitStateUnknown):
        asyncio.run(forwarder.exchange(commit))


def test_a_read_answer_cut_off_midway_is_a_bad_gateway_not_a_crash() -> None:
    forwarder = forwarder_for(httpx.Response(200, stream=BrokenMidway()))
    with pytest.raises(BackingUnavailable):
        asyncio.run(forwarder.exchange(inbound("GET", "/v1/namespaces/demo/tables/t")))


def test_a_compressed_answer_is_refused_once_its_decoded_size_passes_the_cap(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(forward, "MAX_WHOLE_ANSWER_BYTES", 1024 * 1024)
    bomb = gzip.compress(b"0" * (4 * 1024 * 1024))  # 4 KiB on the wire, 4 MiB decoded
    answer = httpx.Response(200, headers={"content-encoding": "gzip"}, content=bomb)
    with pytest.raises(BackingFailed):
        asyncio.run(forwarder_for(answer).fetch(b"/v1/config", b"", ()))


def test_a_compressed_answer_within_the_cap_is_read_decoded() -> None:
    answer = httpx.Response(200, headers={"content-encoding": "gzip"},
                            content=gzip.compress(b'{"defaults": {}}'))
    read = asyncio.run(forwarder_for(answer).fetch(b"/v1/config", b"", ()))
    assert read.content == b'{"defaults": {}}' and read.json() == {"defaults": {}}
    assert "content-encoding" not in read.headers


def test_a_commit_answer_past_the_cap_leaves_the_outcome_unknown(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(forward, "MAX_WHOLE_ANSWER_BYTES", 1024)
    forwarder = forwarder_for(httpx.Response(200, content=b"x" * 4096))
    with pytest.raises(CommitStateUnknown):
        asyncio.run(forwarder.exchange(inbound("POST", "/v1/namespaces/demo/tables/t", b"{}")))
