"""Data operations committed by icegov (an icegov extension of the REST commit API).

A client sends one of these as the *only* update of a table commit (``POST .../tables/{t}``) or
of a ``table-changes`` entry of ``POST /v1/transactions/commit``, with at most the requirement
``assert-table-uuid``. icegov validates it, writes the manifests and manifest list, and commits a
standard snapshot, rebuilding it on the new head when the branch moved. Content files are the REST
spec's ``DataFile`` / ``PositionDeleteFile`` / ``EqualityDeleteFile`` JSON (``wire``); files to
remove are named by location (``file-path``); filters are Iceberg expression JSON.

=================  ===========================================================================
``append-files``   ``data-files``: [DataFile] (INSERT)
``delete-files``   ``data-files``: [path] and/or ``row-filter`` (whole files only: a file
                   matched in part is a 400), ``case-sensitive`` (DELETE)
``overwrite-files``  ``added-data-files``: [DataFile], ``deleted-data-files``: [path],
                   ``row-filter``, ``conflict-filter``, ``isolation-level``, ``case-sensitive``
``row-delta``      ``added-data-files``, ``added-delete-files``: [DeleteFile],
                   ``conflict-filter``, ``isolation-level``, ``case-sensitive``
``rewrite-files``  ``deleted-data-files``, ``deleted-delete-files``: [path],
                   ``added-data-files``, ``added-delete-files`` (REWRITE when data-equivalent)
=================  ===========================================================================

Every operation may carry ``branch`` (default ``main``; it must exist, except ``main`` of an
empty table), ``base-snapshot-id``: the snapshot the writer read (null: it read an empty
branch; left out, the window starts at the head icegov first builds on), and ``snapshot-id``:
the id the built snapshot gets (a positive long not in the table; left out, icegov picks one),
so a client that lost an answer can tell whether its operation landed and resend it safely.
``isolation-level`` is ``serializable`` (default) or ``snapshot``. Conflict rules:
``conflicts``; the row-filter of ``delete-files`` (like Iceberg's ``DeleteFiles``) applies to
the head it is built on. Added files must be the table's data (``inputs``, ``footers``) and new
to the table (``readded``).

Public API::

    DATA_OPERATIONS                               # the update actions above
    has_data_operation(body)                      # does this change carry one?
    check_operation_shape(body, limits)           # cheap, before any read: 400 / 413
    start = starting_snapshot_id(body, metadata)  # once, before the first build
    built = build_commit(body, metadata, io, start_snapshot_id=start, now_ms=...)
    # built.body: a standard commit; on a 409 from the catalog, build again on the fresh
    # head with the same start (built.retryable)

Format-3 tables are refused (400, not supported yet: row lineage is not written).
"""

from proxy.commits.operations.build import BuiltCommit, build_commit, starting_snapshot_id
from proxy.commits.operations.request import (
    DATA_OPERATIONS,
    check_operation_shape,
    has_data_operation,
)
from proxy.commits.operations.wire import content_file_from_json, content_file_to_json

__all__ = [
    "DATA_OPERATIONS",
    "BuiltCommit",
    "build_commit",
    "check_operation_shape",
    "content_file_from_json",
    "content_file_to_json",
    "has_data_operation",
    "starting_snapshot_id",
]
