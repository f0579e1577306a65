"""What a grant lets its principal have signed: the one decision, pure.

* A read (GET/HEAD, ranged or not) of an object the grant's principal may read: for a governed
  principal, a file its governed metadata lists (``readable``); for any other, an object under
  the table's locations.
* A write (a PUT, or a multipart upload's create, parts and completion) of an object under the
  table's locations, for a principal with a write right on the table; the signature covers
  ``If-None-Match: *`` on a put and a completion, so no existing object is overwritten.
* Nothing else (``proxy.signing.wire`` refuses every other kind of request before this).
"""

from __future__ import annotations

from proxy.commits.confine import canonical_location, locations_from
from proxy.errors import Forbidden
from proxy.signing.grants import Grant
from proxy.signing.wire import Operation, StorageRequest

S3_SCHEMES = ("s3", "s3a", "s3n")
"""The spellings of one S3 object in table metadata."""

NO_OVERWRITE = frozenset({Operation.PUT, Operation.COMPLETE_UPLOAD})
"""The operations that create an object: signed with ``If-None-Match: *``."""


def spellings(request: StorageRequest) -> tuple[str, ...]:
    """The object as table metadata may spell it (canonical form)."""
    return tuple(canonical_location(f"{scheme}://{request.bucket}/{request.key}")
                 for scheme in S3_SCHEMES)


def decide(grant: Grant, request: StorageRequest, readable: frozenset[str] | None) -> None:
    """Return when ``grant`` lets ``request`` be signed; 403 otherwise. ``readable``: the
    governed files of ``grant.governed`` (needed for a governed principal's read)."""
    names = spellings(request)
    within_table = locations_from(grant.roots)
    if request.operation.writes:
        if not grant.write:
            raise Forbidden(f"no write right on {grant.table}: icegov signs no write for it")
        if not any(within_table.admits(name) for name in names):
            raise Forbidden(f"{request.location!r} is not under the locations of {grant.table}")
        return
    if grant.governed:
        if readable is None or not any(name in readable for name in names):
            raise Forbidden(f"{request.location!r} is not a file of your governed snapshots "
                            f"of {grant.table}")
        return
    if not any(within_table.admits(name) for name in names):
        raise Forbidden(f"{request.location!r} is not under the locations of {grant.table}")
