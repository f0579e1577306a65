"""What leaks nowhere: operational logs (JSON lines, request id on every line, secrets redacted)
and /readyz (no policy paths or contents)."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from typing import Any

import jwt
import pytest
import structlog
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from proxy.edge.context import RequestContextMiddleware
from proxy.ops.logs import REDACTED, configure_logging, redact_text, reset_logging

TOKEN = jwt.encode({"sub": "writer", "roles": ["admin"]}, "k" * 32, algorithm="HS256")
SECRET = "pa55-w0rd-that-must-not-leak"


@pytest.fixture()
def stream() -> Iterator[io.StringIO]:
    out = io.StringIO()
    configure_logging("INFO", stream=out)
    yield out
    reset_logging()


def lines(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_lines_are_json_with_level_logger_and_time(stream: io.StringIO) -> None:
    structlog.get_logger("icegov.test").info("hello", answer=42)
    logging.getLogger("uvicorn.error").warning("started on %s", "port 1")
    first, second = lines(stream)
    assert first | {"timestamp": "?"} == {"event": "hello", "answer": 42, "level": "info",
                                          "logger": "icegov.test", "timestamp": "?"}
    assert first["timestamp"].endswith("Z")
    assert second["event"] == "started on port 1" and second["level"] == "warning"


def test_configuring_twice_installs_one_handler(stream: io.StringIO) -> None:
    configure_logging("DEBUG")
    structlog.get_logger().debug("once")
    assert [line["event"] for line in lines(stream)] == ["once"]
    assert logging.getLogger().level == logging.DEBUG


def test_unknown_level_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown log level"):
        configure_logging("chatty")


def test_every_line_of_a_request_carries_its_request_id(stream: io.StringIO) -> None:
    async def endpoint(_: Request) -> JSONResponse:
        structlog.get_logger("icegov").info("handling")
        logging.getLogger("somelib").warning("stdlib too")
        return JSONResponse({})

    app = Starlette(routes=[Route("/", endpoint)])
    with TestClient(RequestContextMiddleware(app)) as client:
        response = client.get("/", headers={"x-request-id": "req-123"})
        client.get("/")
    structlog.get_logger("icegov").info("outside")
    ours = ("handling", "stdlib too", "outside")
    handled = [line for line in lines(stream) if line["event"] in ours]
    assert len(handled) == 5
    assert [line.get("request_id") for line in handled[:2]] == ["req-123", "req-123"]
    assert handled[2]["request_id"] not in ("req-123", None)
    assert handled[2]["request_id"] == handled[3]["request_id"]
    assert "request_id" not in handled[4]
    assert response.headers["x-request-id"] == "req-123"


def test_sensitive_fields_are_redacted(stream: io.StringIO) -> None:
    structlog.get_logger().info(
        "calling", authorization=f"Bearer {TOKEN}", client_secret=SECRET,
        headers=[(b"authorization", b"Basic d3JpdGVyOndyaXRlci1zZWNyZXQ="), (b"host", b"x")],
        form={"grant_type": "token-exchange", "subject_token": TOKEN, "password": SECRET},
        catalog_credential=f"icegov:{SECRET}", note="nothing secret here")
    text = stream.getvalue()
    assert TOKEN not in text and SECRET not in text and "d3JpdGVy" not in text
    (line,) = lines(stream)
    assert line["authorization"] == REDACTED and line["client_secret"] == REDACTED
    assert line["headers"] == [["authorization", REDACTED], ["host", "x"]]
    assert line["form"]["grant_type"] == "token-exchange"
    assert line["note"] == "nothing secret here"


@pytest.mark.parametrize("text", [
    f"Authorization: Bearer {TOKEN}",
    f"sent {TOKEN} to the catalog",
    f"grant_type=client_credentials&client_id=writer&client_secret={SECRET}",
    f'{{"subject_token": "{SECRET}", "subject_token_type": "x"}}',
    f"{{'password': '{SECRET}'}}",
    f"ICEGOV__IDENTITY__SIGNING_KEY={SECRET}",
    f"postgresql://icegov:{SECRET}@db:5432/catalog",
    f"X-Api-Key: {SECRET}",
    f"credential=writer:{SECRET}",
])
def test_secrets_in_free_text_are_redacted(text: str) -> None:
    redacted = redact_text(text)
    assert SECRET not in redacted and TOKEN not in redacted
    assert REDACTED in redacted


@pytest.mark.parametrize("text", [
    "bearer token has expired", "token_type=bearer", "issued_token_type: access_token",
    "signing_key must be at least 32 bytes", "unknown client or wrong secret",
])
def test_ordinary_words_are_left_alone(text: str) -> None:
    assert redact_text(text) == text


def test_tracebacks_are_redacted(stream: io.StringIO) -> None:
    try:
        raise RuntimeError(f"backing refused Authorization: Bearer {TOKEN} (secret={SECRET})")
    except RuntimeError:
        structlog.get_logger("icegov").exception("unexpected error")
        logging.getLogger("uvicorn.error").exception("Exception in ASGI application")
    text = stream.getvalue()
    assert TOKEN not in text and SECRET not in text
    for line in lines(stream):
        assert "Traceback" in line["exception"] and "RuntimeError" in line["exception"]
        assert REDACTED in line["exception"]


def test_a_secret_in_the_event_itself_is_redacted(stream: io.StringIO) -> None:
    structlog.get_logger().error(f"token {TOKEN} rejected")
    assert lines(stream)[0]["event"] == f"token {REDACTED} rejected"


# --- /readyz tells anonymous callers nothing about the policy files ---------------------------

def test_readyz_discloses_no_policy_paths_or_contents(tmp_path: Any) -> None:
    import asyncio
    import shutil

    import httpx

    from proxy.handlers.health import BackingHandlers
    from proxy.policy import PolicyAuthorizer, PolicySettings
    from tests.support.settings import POLICIES

    for name in ("model.conf", "policy.csv"):
        shutil.copy(POLICIES / name, tmp_path / name)
    policy_csv = tmp_path / "policy.csv"
    authorizer = PolicyAuthorizer.from_settings(PolicySettings(
        model_path=tmp_path / "model.conf", policy_path=policy_csv))

    class Backing:
        async def fetch(self, *_: Any) -> httpx.Response:
            return httpx.Response(200, json={"defaults": {}, "overrides": {}})

    handlers = BackingHandlers(Backing(), authorizer)  # type: ignore[arg-type]

    def ready() -> Any:
        return json.loads(asyncio.run(handlers.readyz(None)).body)  # type: ignore[arg-type]

    assert ready() == {"status": "ready", "generation": 1, "policy_error": False}

    broken = "p, spy, icegov.secret_table, FROBNICATE, allow\n"
    policy_csv.write_text(policy_csv.read_text() + broken)
    assert not authorizer.reload_if_changed() and authorizer.status.last_error is not None
    answer = ready()
    assert answer == {"status": "ready", "generation": 1, "policy_error": True}
    text = json.dumps(answer)
    assert str(tmp_path) not in text and "secret_table" not in text and "FROBNICATE" not in text


def test_an_unexpected_error_is_a_500_with_the_request_id_on_answer_and_log(
        stream: io.StringIO) -> None:
    from proxy.edge.dispatch import FastLaneApp

    async def boom(_: Request) -> JSONResponse:
        raise RuntimeError(f"failed with Authorization: Bearer {TOKEN}")

    async def fallback(*_: Any) -> None:
        raise RuntimeError(f"failed with Authorization: Bearer {TOKEN}")

    app = FastLaneApp(fallback, RequestContextMiddleware, routes=[Route("/boom", boom)])
    with TestClient(app) as client:  # raise_server_exceptions: nothing escapes the middleware
        response = client.get("/boom", headers={"x-request-id": "req-500"})
        fast = client.get("/v1/config", headers={"x-request-id": "req-fast"})
    assert fast.status_code == 500 and fast.headers["x-request-id"] == "req-fast"
    assert fast.json()["error"]["message"] == "internal error in icegov"
    assert response.status_code == 500
    assert response.headers["x-request-id"] == "req-500"
    assert response.json()["error"] == {"message": "internal error in icegov",
                                        "type": "ServiceFailureException", "code": 500}
    logged, _ = [line for line in lines(stream) if line["event"] == "unexpected error"]
    assert logged["request_id"] == "req-500" and logged["level"] == "error"
    assert "RuntimeError" in logged["exception"] and TOKEN not in stream.getvalue()
