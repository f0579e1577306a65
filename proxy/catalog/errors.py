"""Translation of pyiceberg's catalog exceptions into icegov's ErrorModel exceptions."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import pydantic
from pyiceberg import exceptions as pyi
from starlette.concurrency import run_in_threadpool

from proxy import errors

T = TypeVar("T")

_TRANSLATION: tuple[tuple[type[Exception], type[errors.IcebergError]], ...] = (
    (pyi.NoSuchNamespaceError, errors.NoSuchNamespace),
    (pyi.NoSuchTableError, errors.NoSuchTable),
    (pyi.NamespaceAlreadyExistsError, errors.AlreadyExists),
    (pyi.TableAlreadyExistsError, errors.AlreadyExists),
    (pyi.NamespaceNotEmptyError, errors.NamespaceNotEmpty),
    (pyi.CommitFailedException, errors.CommitFailed),
    (pyi.ValidationError, errors.BadRequest),
    (pydantic.ValidationError, errors.BadRequest),
    (NotImplementedError, errors.BadRequest),  # a feature the request asks for (format v3)
    # a client-chosen location that is a file, or a file where a directory must go
    (NotADirectoryError, errors.BadRequest),
    (IsADirectoryError, errors.BadRequest),
    (FileExistsError, errors.BadRequest),
    (ValueError, errors.BadRequest),
    (KeyError, errors.BadRequest),
    (TypeError, errors.BadRequest),
)


def translate(exc: Exception) -> errors.IcebergError | None:
    """The ErrorModel exception for a catalog exception, or None if it is unexpected."""
    if isinstance(exc, errors.IcebergError):
        return exc
    for source, target in _TRANSLATION:
        if isinstance(exc, source):
            return target(_message(exc))
    return None


async def run_catalog(fn: Callable[..., T], *args: object) -> T:
    """Run a blocking catalog call off the event loop, translating its exceptions."""
    try:
        return await run_in_threadpool(fn, *args)
    except Exception as exc:
        translated = translate(exc)
        if translated is None:
            raise
        raise translated from exc


def _message(exc: Exception) -> str:
    if isinstance(exc, KeyError):
        return f"missing field {exc}"
    if isinstance(exc, pydantic.ValidationError):  # never echo the input (it may be file content)
        first = exc.errors(include_url=False, include_input=False)[0]
        location = ".".join(str(part) for part in first["loc"]) or "value"
        return f"invalid {exc.title}: {location}: {first['msg']}"[:300]
    if isinstance(exc, UnicodeError):
        return "invalid input"
    if isinstance(exc, OSError):  # never echo OS error text or paths
        return "a location in the request cannot be used for table files"
    return (str(exc) or type(exc).__name__)[:300]
