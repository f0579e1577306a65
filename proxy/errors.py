"""Errors icegov answers itself, as Iceberg REST ErrorModel JSON.

Every error that icegov (not the backing catalog) produces is an ``IcebergError``; one function,
``error_response``, turns it into ``{"error": {"message", "type", "code"}}`` with the right status.
Errors from the backing catalog are forwarded unchanged and never pass through here.

The exception tree::

    IcebergError                         500 ServiceFailureException (base)
    ├── BadRequest                       400 BadRequestException
    │   └── MalformedJson                400 BadRequestException
    ├── NotAuthorized                    401 NotAuthorizedException
    ├── Forbidden                        403 ForbiddenException
    ├── NotFound                         404 NotFoundException
    │   ├── NoSuchNamespace              404 NoSuchNamespaceException
    │   ├── NoSuchTable                  404 NoSuchTableException
    │   ├── NoSuchPlanId                 404 NoSuchPlanIdException
    │   └── NoSuchPlanTask               404 NoSuchPlanTaskException
    ├── Conflict                         409 (base of the 409s)
    │   ├── AlreadyExists                409 AlreadyExistsException
    │   ├── NamespaceNotEmpty            409 NamespaceNotEmptyException
    │   └── CommitFailed                 409 CommitFailedException  (nothing landed)
    ├── MethodNotAllowed                 405 MethodNotAllowedException
    ├── PayloadTooLarge                  413 PayloadTooLargeException
    ├── NotSupported                     501 UnsupportedOperationException
    ├── BackingUnavailable               503 ServiceUnavailableException (safe to retry)
    ├── NotReady                         503 ServiceUnavailableException, with Retry-After
    ├── CommitStateUnknown               502 CommitStateUnknownException (never retry blindly)
    ├── BackingFailed                    502 BadGatewayException (the backing's 5xx, non-commit)
    └── BackingTimeout                   504 (non-commit: GatewayTimeoutException,
                                              commit: CommitStateUnknownException)
"""

from __future__ import annotations

from typing import ClassVar

from starlette.responses import JSONResponse


class IcebergError(Exception):
    """Base of every error icegov answers itself."""

    status: ClassVar[int] = 500
    error_type: ClassVar[str] = "ServiceFailureException"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def to_model(self) -> dict[str, dict[str, str | int]]:
        """The Iceberg ErrorModel body for this error."""
        return {"error": {"message": self.message, "type": self.error_type, "code": self.status}}


class BadRequest(IcebergError):
    status = 400
    error_type = "BadRequestException"


class MalformedJson(BadRequest):
    """A request body that should be JSON is not."""


class NotAuthorized(IcebergError):
    status = 401
    error_type = "NotAuthorizedException"


class Forbidden(IcebergError):
    status = 403
    error_type = "ForbiddenException"


class NotFound(IcebergError):
    status = 404
    error_type = "NotFoundException"


class NoSuchNamespace(NotFound):
    error_type = "NoSuchNamespaceException"


class NoSuchTable(NotFound):
    error_type = "NoSuchTableException"


class NoSuchPlanId(NotFound):
    error_type = "NoSuchPlanIdException"


class NoSuchPlanTask(NotFound):
    error_type = "NoSuchPlanTaskException"


class MethodNotAllowed(IcebergError):
    status = 405
    error_type = "MethodNotAllowedException"


class Conflict(IcebergError):
    status = 409
    error_type = "ConflictException"


class AlreadyExists(Conflict):
    error_type = "AlreadyExistsException"


class NamespaceNotEmpty(Conflict):
    error_type = "NamespaceNotEmptyException"


class CommitFailed(Conflict):
    """A commit that was refused as a whole: nothing landed, the client may retry."""

    error_type = "CommitFailedException"


class PayloadTooLarge(IcebergError):
    status = 413
    error_type = "PayloadTooLargeException"


class NotSupported(IcebergError):
    status = 501
    error_type = "UnsupportedOperationException"


class BackingUnavailable(IcebergError):
    """The backing catalog could not be reached on a route where that is safe to report."""

    status = 503
    error_type = "ServiceUnavailableException"


class NotReady(IcebergError):
    """What was asked for is being prepared (a governed snapshot): retry after ``retry_after``
    seconds (the answer's Retry-After header)."""

    status = 503
    error_type = "ServiceUnavailableException"

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class CommitStateUnknown(IcebergError):
    """A commit reached (or may have reached) the backing catalog, and its outcome is unknown."""

    status = 502
    error_type = "CommitStateUnknownException"


class BackingFailed(IcebergError):
    """The backing catalog answered a (non-commit) request with a server error: its own text,
    which may describe its internals, stays in icegov's log."""

    status = 502
    error_type = "BadGatewayException"


class BackingTimeout(IcebergError):
    status = 504
    error_type = "GatewayTimeoutException"


class CommitTimeout(BackingTimeout):
    """A commit whose answer did not arrive in time: it may have landed."""

    error_type = "CommitStateUnknownException"


def error_body(status: int, error_type: str, message: str) -> dict[str, dict[str, str | int]]:
    """An ErrorModel body for errors that have no exception class (e.g. plain 404 routes)."""
    return {"error": {"message": message, "type": error_type, "code": status}}


def error_response(exc: IcebergError) -> JSONResponse:
    """The one mapping from an icegov exception to an HTTP response."""
    headers = ({"Retry-After": str(exc.retry_after)} if isinstance(exc, NotReady) else None)
    return JSONResponse(exc.to_model(), status_code=exc.status, headers=headers)
