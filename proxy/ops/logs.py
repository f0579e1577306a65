"""Operational logging: structlog configured once, JSON lines on stderr, secrets redacted.

``configure_logging()`` (called by the CLI; calling it again only changes the level) routes
structlog *and* the standard library (uvicorn, httpx, ...) through one handler whose lines are
JSON objects with ``timestamp``, ``level``, ``logger``, ``event`` and the event's fields. The
request id bound by ``proxy.edge.context.RequestContextMiddleware`` appears as ``request_id`` on
every line logged while that request is handled (structlog contextvars).

Before a line is rendered, ``redact_secrets`` blanks what must never reach a log: values of
sensitive fields (``authorization``, ``client_secret``, ``subject_token``, passwords, signing
keys, ...), bearer/basic credentials, JWTs, ``key=value`` secrets in forms, queries and reprs, and
passwords in URLs — in every string, formatted tracebacks included. The audit stream
(``proxy.audit``) is separate and carries no secrets by construction.
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Mapping
from contextvars import ContextVar
from typing import IO, Any

import structlog
from structlog.typing import EventDict, Processor, WrappedLogger

REDACTED = "[REDACTED]"

_SENSITIVE_KEYS = frozenset({
    "authorization", "proxy_authorization", "cookie", "set_cookie", "client_secret",
    "subject_token", "actor_token", "access_token", "refresh_token", "id_token", "token",
    "password", "passwd", "secret", "signing_key", "private_key", "api_key", "credential",
    "catalog_token", "catalog_credential", "secret_hash",
})
_SENSITIVE_SUFFIXES = ("_secret", "_password", "_token", "_credential", "_signing_key")

_SECRET_WORDS = "|".join(word.replace("_", "[_-]") for word in (
    "client_secret", "subject_token", "actor_token", "access_token", "refresh_token", "id_token",
    "password", "passwd", "signing_key", "private_key", "api_key", "secret_hash", "credential",
    "secret", "token",
))
_TEXT_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    # JWTs (and JWEs) anywhere: base64url JSON header "eyJ..." followed by dot-separated parts
    (re.compile(r"eyJ[A-Za-z0-9_-]*(?:\.[A-Za-z0-9_-]*){1,4}"), REDACTED),
    # key=value / "key": "value" / key: value, in forms, queries, JSON, YAML and reprs
    (re.compile(rf"(?i)\b((?:[a-z0-9]+[_-]+){{0,8}}(?:{_SECRET_WORDS}))(\\?[\"']?\s*[:=]\s*\\?[\"']?)"
                r"(?!\[REDACTED\])[^\"'&\s,;}\]\\]+"), rf"\1\2{REDACTED}"),
    # userinfo passwords in URLs: scheme://user:password@host
    (re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://[^/\s:@]*):[^@\s/]+@"), rf"\1:{REDACTED}@"),
)


# Authorization schemes: "Bearer <token>", "Basic <base64>" (but not "bearer token has expired")
_SCHEME = re.compile(r"(?i)\b(bearer|basic)(\s+)([A-Za-z0-9\-._~+/]+=*)")
_PROSE_WORD_LIMIT = 16


def _scheme_credential(match: re.Match[str]) -> str:
    credential = match.group(3)
    if credential.isalpha() and len(credential) < _PROSE_WORD_LIMIT:
        return match.group(0)  # an English word, not a credential
    return f"{match.group(1)}{match.group(2)}{REDACTED}"


def redact_text(text: str) -> str:
    """``text`` with every credential-looking part replaced by ``[REDACTED]``."""
    text = _SCHEME.sub(_scheme_credential, text)
    for pattern, replacement in _TEXT_PATTERNS:
        text = pattern.sub(replacement, text)
    return text


def is_sensitive_key(key: object) -> bool:
    """True for a field or header name whose value is a secret."""
    if isinstance(key, bytes):
        key = key.decode("latin-1")
    if not isinstance(key, str):
        return False
    name = key.strip().lower().replace("-", "_")
    return name in _SENSITIVE_KEYS or name.endswith(_SENSITIVE_SUFFIXES)


def redact_value(value: Any) -> Any:
    """A copy of ``value`` with secrets redacted, recursing into mappings, lists and tuples."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, bytes | bytearray):
        return redact_text(bytes(value).decode("utf-8", "replace"))
    if isinstance(value, Mapping):
        return {k: REDACTED if is_sensitive_key(k) else redact_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        if len(value) == 2 and is_sensitive_key(value[0]):  # a (name, value) header pair
            return [redact_value(value[0]), REDACTED]
        return [redact_value(item) for item in value]
    if isinstance(value, int | float | bool) or value is None:
        return value
    return redact_text(repr(value))


def redact_secrets(_: WrappedLogger, __: str, event_dict: EventDict) -> EventDict:
    """structlog processor: redact every field of the event (run after tracebacks are formatted)."""
    return {key: value if key.startswith("_") else
            (REDACTED if is_sensitive_key(key) else redact_value(value))
            for key, value in event_dict.items()}


REQUEST_ID: ContextVar[str | None] = ContextVar("icegov_request_id", default=None)
"""The id of the request being handled (set by ``proxy.edge.context``): every log line written for
it, in its task, child tasks and threadpool calls (which copy the context), carries it."""


def add_request_id(_: WrappedLogger, __: str, event_dict: EventDict) -> EventDict:
    """structlog processor: the current request's ``request_id``, when there is one."""
    rid = REQUEST_ID.get()
    if rid is not None:
        event_dict.setdefault("request_id", rid)
    return event_dict


def _shared_processors() -> list[Processor]:
    return [
        structlog.contextvars.merge_contextvars,
        add_request_id,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.StackInfoRenderer(),
    ]


def _formatter() -> structlog.stdlib.ProcessorFormatter:
    return structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=_shared_processors(),
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.format_exc_info,
            redact_secrets,
            structlog.processors.JSONRenderer(),
        ],
    )


class _State:
    handler: logging.Handler | None = None


def configure_logging(level: str | int = "INFO", stream: IO[str] | None = None) -> None:
    """Send structlog and stdlib logging to ``stream`` (stderr) as redacted JSON lines.

    Idempotent: a second call replaces nothing but the level (and the stream, if given).
    """
    numeric = logging.getLevelName(level.upper()) if isinstance(level, str) else level
    if not isinstance(numeric, int):
        raise ValueError(f"unknown log level {level!r}")
    root = logging.getLogger()
    if _State.handler is None:
        handler = logging.StreamHandler(stream or sys.stderr)
        handler.setFormatter(_formatter())
        root.addHandler(handler)
        _State.handler = handler
        structlog.configure(
            processors=[*_shared_processors(), structlog.processors.format_exc_info,
                        structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
            logger_factory=structlog.stdlib.LoggerFactory(),
            wrapper_class=structlog.stdlib.BoundLogger,
            cache_logger_on_first_use=False,  # so tests may reconfigure (capture_logs)
        )
    elif stream is not None and isinstance(_State.handler, logging.StreamHandler):
        _State.handler.setStream(stream)
    root.setLevel(numeric)
    for name in _SERVER_LOGGERS:  # uvicorn may have given them handlers of their own
        server_logger = logging.getLogger(name)
        server_logger.handlers.clear()
        server_logger.propagate = True


_SERVER_LOGGERS = ("uvicorn", "uvicorn.error", "uvicorn.access")


def reset_logging() -> None:
    """Undo ``configure_logging`` (for tests): structlog defaults, the handler removed."""
    if _State.handler is not None:
        logging.getLogger().removeHandler(_State.handler)
        _State.handler = None
    structlog.reset_defaults()
