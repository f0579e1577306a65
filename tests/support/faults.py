"""A small HTTP fault proxy between icegov and a backing catalog (test-only).

It listens on 127.0.0.1, forwards every request to ``upstream`` unchanged, and misbehaves on
the next requests that match an armed fault, exactly as often as it was armed::

    with fault_proxy(catalog_uri) as faults:           # icegov's catalog_uri = faults.url
        armed = faults.arm(drop_after_commit())         # the next table commit only
        ...                                             # a commit through icegov
        assert armed.fired == 1
        assert len(faults.forwarded(table_commit)) == 1  # what reached the backing

Faults (``FaultKind``): answer a status without forwarding (nothing landed), forward and then
answer a status, forward and then close the connection without an answer, forward and then hold
the answer until the client gives up (longer than its read timeout), and abort the TCP connection
(RST) before or after forwarding. A fault fires on the exchange that matches it; ``on_fire`` runs
when it does (e.g. to arm a follow-up fault on the reload that comes next).

``gather(n)`` holds the next ``n`` matching requests until all ``n`` have arrived, then lets
them through together: placed in front of icegov, it makes ``n`` clients' commits meet on the
same base state, so the race a test needs happens every time, not by chance.

HTTP/1.1 is parsed with h11 (keep-alive connections, as icegov's pool uses them); the upstream is
reached with httpx. The server runs its own event loop in a daemon thread and stops, closing held
connections, when the ``fault_proxy`` block exits.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import re
import socket
import struct
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import h11
import httpx

Matcher = Callable[[str, str], bool]
MAX_HOLD_SECONDS = 60.0
_HOP_BY_HOP = frozenset({"connection", "keep-alive", "host", "content-length",
                         "transfer-encoding", "content-encoding", "te", "trailer", "upgrade"})
_TABLE_PATH = re.compile(r"^/v1/(?:[^/]+/)?namespaces/[^/]+/tables/[^/]+$")
_TRANSACTION_PATH = re.compile(r"^/v1/(?:[^/]+/)?transactions/commit$")


def table_commit(method: str, path: str) -> bool:
    """``POST .../namespaces/{ns}/tables/{t}``: a table commit."""
    return method == "POST" and _TABLE_PATH.match(path) is not None


def transaction_commit(method: str, path: str) -> bool:
    """``POST .../transactions/commit``."""
    return method == "POST" and _TRANSACTION_PATH.match(path) is not None


def table_load(method: str, path: str) -> bool:
    """``GET .../namespaces/{ns}/tables/{t}``: a table load (icegov's reload among them)."""
    return method == "GET" and _TABLE_PATH.match(path) is not None


class FaultKind(enum.Enum):
    """What the fault proxy does with a matching request."""

    STATUS_BEFORE = "status-before"  # answer ``status`` without forwarding: nothing landed
    STATUS_AFTER = "status-after"  # forward (the backing commits), then answer ``status``
    DROP_AFTER = "drop-after"  # forward, then close the connection without an answer
    HOLD_AFTER = "hold-after"  # forward, then hold the answer until the client gives up
    RESET_BEFORE = "reset-before"  # abort the TCP connection (RST) without forwarding
    RESET_AFTER = "reset-after"  # forward, then abort the TCP connection (RST)

    @property
    def forwards(self) -> bool:
        """True if the backing sees (and may apply) the request before the fault."""
        return self not in (FaultKind.STATUS_BEFORE, FaultKind.RESET_BEFORE)


@dataclass(frozen=True)
class Fault:
    """One kind of misbehaviour; ``status`` is the answer of the STATUS_* kinds."""

    kind: FaultKind
    status: int = 503

    def __str__(self) -> str:
        suffix = f"-{self.status}" if self.kind.name.startswith("STATUS") else ""
        return f"{self.kind.value}{suffix}"


def drop_after_commit() -> Fault:
    """Forward, let the backing commit, then close the connection without an answer."""
    return Fault(FaultKind.DROP_AFTER)


def timeout_after_commit() -> Fault:
    """Forward, then hold the answer longer than the client waits."""
    return Fault(FaultKind.HOLD_AFTER)


def status_before(status: int) -> Fault:
    """Answer ``status`` without forwarding (nothing landed)."""
    return Fault(FaultKind.STATUS_BEFORE, status)


def status_after(status: int) -> Fault:
    """Forward (the backing commits), then answer ``status`` instead of its answer."""
    return Fault(FaultKind.STATUS_AFTER, status)


def reset_before() -> Fault:
    """Abort the TCP connection without forwarding."""
    return Fault(FaultKind.RESET_BEFORE)


def reset_after() -> Fault:
    """Forward, then abort the TCP connection."""
    return Fault(FaultKind.RESET_AFTER)


@dataclass
class ArmedFault:
    """A fault waiting for its next ``remaining`` matching requests; ``fired`` counts hits."""

    fault: Fault
    matches: Matcher
    remaining: int
    on_fire: Callable[[], None] | None = None
    fired: int = 0


@dataclass
class Gate:
    """Holds matching requests until ``count`` have arrived (or ``timeout_seconds`` passed)."""

    count: int
    matches: Matcher
    timeout_seconds: float
    arrived: int = 0
    timed_out: bool = False
    opened: asyncio.Event = field(default_factory=asyncio.Event)


@dataclass(frozen=True)
class Exchange:
    """One request the fault proxy received: whether it reached the backing, and how it ended."""

    method: str
    path: str
    forwarded: bool
    backing_status: int | None
    fault: Fault | None


@dataclass
class _Request:
    method: str
    target: bytes
    headers: list[tuple[bytes, bytes]]
    body: bytes = b""
    path: str = field(init=False)

    def __post_init__(self) -> None:
        self.path = self.target.split(b"?", 1)[0].decode("latin-1")


class FaultProxy:
    """The running fault proxy: arm faults, read what happened. Thread-safe."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.url = ""
        self._lock = threading.Lock()
        self._armed: list[ArmedFault] = []
        self._gates: list[Gate] = []
        self._exchanges: list[Exchange] = []

    def arm(self, fault: Fault, times: int = 1, match: Matcher = table_commit,
            on_fire: Callable[[], None] | None = None) -> ArmedFault:
        """Make the next ``times`` requests that ``match`` suffer ``fault``."""
        armed = ArmedFault(fault, match, times, on_fire)
        with self._lock:
            self._armed.append(armed)
        return armed

    def gather(self, count: int, match: Matcher = table_commit,
               timeout_seconds: float = 120.0) -> Gate:
        """Hold the next ``count`` requests that ``match`` until all of them have arrived."""
        gate = Gate(count, match, timeout_seconds)
        with self._lock:
            self._gates.append(gate)
        return gate

    def disarm_all(self) -> None:
        """Forget every armed fault and gate (those that fired keep their counts)."""
        with self._lock:
            self._armed.clear()
            self._gates.clear()

    @property
    def exchanges(self) -> list[Exchange]:
        """Every request received so far, in order of completion."""
        with self._lock:
            return list(self._exchanges)

    def forwarded(self, match: Matcher = table_commit) -> list[Exchange]:
        """The matching requests that reached the backing."""
        return [e for e in self.exchanges if e.forwarded and match(e.method, e.path)]

    def reset_log(self) -> None:
        """Forget the exchanges recorded so far."""
        with self._lock:
            self._exchanges.clear()

    def _take_fault(self, method: str, path: str) -> Fault | None:
        with self._lock:
            armed = next((a for a in self._armed if a.remaining > 0 and a.matches(method, path)),
                         None)
            if armed is None:
                return None
            armed.remaining -= 1
            armed.fired += 1
            if armed.remaining == 0:
                self._armed.remove(armed)
        if armed.on_fire is not None:
            armed.on_fire()
        return armed.fault

    def _join_gate(self, method: str, path: str) -> Gate | None:
        with self._lock:
            gate = next((g for g in self._gates if g.matches(method, path)), None)
            if gate is not None:
                gate.arrived += 1
                if gate.arrived == gate.count:
                    self._gates.remove(gate)
            return gate

    def _record(self, exchange: Exchange) -> None:
        with self._lock:
            self._exchanges.append(exchange)


class _Server:
    """The asyncio side: accepts connections and serves them with faults applied."""

    def __init__(self, proxy: FaultProxy) -> None:
        self._proxy = proxy
        self._client = httpx.AsyncClient(timeout=httpx.Timeout(120.0), trust_env=False)
        self._tasks: set[asyncio.Task[None]] = set()
        self._server: asyncio.Server | None = None

    async def start(self) -> str:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._client.aclose()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            await self._serve_connection(reader, writer)
        except (ConnectionError, h11.ProtocolError, asyncio.CancelledError):
            pass  # the client went away, spoke nonsense, or the proxy is stopping
        finally:
            self._tasks.discard(task)
            writer.transport.abort()

    async def _serve_connection(self, reader: asyncio.StreamReader,
                                writer: asyncio.StreamWriter) -> None:
        connection = h11.Connection(h11.SERVER)
        while True:
            request = await _read_request(connection, reader)
            if request is None:
                return
            keep_open = await self._serve_request(request, connection, reader, writer)
            if not keep_open or connection.our_state is not h11.DONE:
                return
            connection.start_next_cycle()

    async def _serve_request(self, request: _Request, connection: h11.Connection,
                             reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """Answer one request (or not); False when the connection must end."""
        await self._pass_gate(request)
        fault = self._proxy._take_fault(request.method, request.path)
        status: int | None = None
        answer: tuple[int, list[tuple[bytes, bytes]], bytes] | None = None
        if fault is None or fault.kind.forwards:
            answer = await self._forward(request)
            status = answer[0]
        self._proxy._record(Exchange(request.method, request.path,
                                     forwarded=answer is not None, backing_status=status,
                                     fault=fault))
        if fault is None and answer is not None:
            await _respond(connection, writer, *answer)
            return True
        assert fault is not None
        return await _misbehave(fault, connection, reader, writer)

    async def _pass_gate(self, request: _Request) -> None:
        gate = self._proxy._join_gate(request.method, request.path)
        if gate is None:
            return
        if gate.arrived >= gate.count:
            gate.opened.set()
            return
        try:
            await asyncio.wait_for(gate.opened.wait(), gate.timeout_seconds)
        except TimeoutError:
            gate.timed_out = True

    async def _forward(self, request: _Request) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        headers = [(k, v) for k, v in request.headers if k.decode().lower() not in _HOP_BY_HOP]
        url = self._proxy.upstream + request.target.decode("latin-1")
        try:
            response = await self._client.request(request.method, url, headers=headers,
                                                  content=request.body)
        except httpx.HTTPError:
            return 502, [(b"content-type", b"text/plain")], b"the upstream did not answer"
        kept = [(k, v) for k, v in response.headers.raw if k.decode().lower() not in _HOP_BY_HOP]
        return response.status_code, kept, response.content


async def _read_request(connection: h11.Connection,
                        reader: asyncio.StreamReader) -> _Request | None:
    """The next whole request on the connection, or None when the client closed it."""
    request: _Request | None = None
    chunks: list[bytes] = []
    while True:
        event = connection.next_event()
        if event is h11.NEED_DATA:
            connection.receive_data(await reader.read(65536))
        elif isinstance(event, h11.Request):
            request = _Request(event.method.decode(), event.target, list(event.headers))
        elif isinstance(event, h11.Data):
            chunks.append(bytes(event.data))
        elif isinstance(event, h11.EndOfMessage) and request is not None:
            request.body = b"".join(chunks)
            return request
        elif isinstance(event, h11.ConnectionClosed) or event is h11.PAUSED:
            return None


async def _respond(connection: h11.Connection, writer: asyncio.StreamWriter, status: int,
                   headers: list[tuple[bytes, bytes]], body: bytes) -> None:
    headers = [*headers, (b"content-length", str(len(body)).encode())]
    writer.write(connection.send(h11.Response(status_code=status, headers=headers)))
    writer.write(connection.send(h11.Data(data=body)))
    writer.write(connection.send(h11.EndOfMessage()))
    await writer.drain()


async def _misbehave(fault: Fault, connection: h11.Connection, reader: asyncio.StreamReader,
                     writer: asyncio.StreamWriter) -> bool:
    """Apply ``fault`` after forwarding (or instead of it); False when the connection ends."""
    kind = fault.kind
    if kind in (FaultKind.STATUS_BEFORE, FaultKind.STATUS_AFTER):
        body = (b'{"error": {"message": "injected by the fault proxy", '
                b'"type": "ServiceFailureException", "code": %d}}' % fault.status)
        await _respond(connection, writer, fault.status,
                       [(b"content-type", b"application/json")], body)
        return True
    if kind is FaultKind.HOLD_AFTER:
        with contextlib.suppress(TimeoutError, ConnectionError):
            await asyncio.wait_for(reader.read(), MAX_HOLD_SECONDS)  # until the client leaves
    elif kind in (FaultKind.RESET_BEFORE, FaultKind.RESET_AFTER):
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    return False  # DROP_AFTER too: the connection closes without an answer


@contextlib.contextmanager
def fault_proxy(upstream: str) -> Iterator[FaultProxy]:
    """Run a fault proxy in front of ``upstream`` until the block exits."""
    proxy = FaultProxy(upstream)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True, name="fault-proxy")
    thread.start()
    server = asyncio.run_coroutine_threadsafe(_make_server(proxy), loop).result(timeout=10)
    try:
        proxy.url = asyncio.run_coroutine_threadsafe(server.start(), loop).result(timeout=10)
        yield proxy
    finally:
        asyncio.run_coroutine_threadsafe(server.stop(), loop).result(timeout=30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.close()


async def _make_server(proxy: FaultProxy) -> _Server:
    return _Server(proxy)  # created inside the loop: httpx binds its pool to it
