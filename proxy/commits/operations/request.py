"""Data operations as requested: the cheap shape check (before any read) and the parse into a
typed ``DataOperation`` against the table's metadata.

A table change carrying a data operation carries exactly one update (the operation) and at most
one requirement, ``assert-table-uuid``; anything else is refused (400), so icegov never has to
merge a data operation with other metadata changes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from pydantic import TypeAdapter, ValidationError
from pyiceberg.expressions import AlwaysTrue, BooleanExpression
from pyiceberg.manifest import DataFile, DataFileContent
from pyiceberg.table.metadata import TableMetadata

from proxy.commits.intent import UnverifiableCommit
from proxy.commits.limits import CommitLimits
from proxy.commits.operations.filters import bind_filter
from proxy.commits.operations.wire import content_file_from_json
from proxy.errors import CommitFailed, PayloadTooLarge

APPEND, DELETE, OVERWRITE, ROW_DELTA, REWRITE = (
    "append-files", "delete-files", "overwrite-files", "row-delta", "rewrite-files")
DATA_OPERATIONS: Final = frozenset({APPEND, DELETE, OVERWRITE, ROW_DELTA, REWRITE})
"""The update actions icegov commits itself (advertised in ``/v1/config``)."""

SERIALIZABLE, SNAPSHOT = "serializable", "snapshot"
_DATA, _DELETES, _PATHS = "data files", "delete files", "paths"
_LISTS: dict[str, dict[str, str]] = {
    APPEND: {"data-files": _DATA},
    DELETE: {"data-files": _PATHS},
    OVERWRITE: {"added-data-files": _DATA, "deleted-data-files": _PATHS},
    ROW_DELTA: {"added-data-files": _DATA, "added-delete-files": _DELETES},
    REWRITE: {"added-data-files": _DATA, "added-delete-files": _DELETES,
              "deleted-data-files": _PATHS, "deleted-delete-files": _PATHS},
}
_FILTERS: dict[str, set[str]] = {
    APPEND: set(), DELETE: {"row-filter"}, OVERWRITE: {"row-filter", "conflict-filter"},
    ROW_DELTA: {"conflict-filter"}, REWRITE: set()}
_ISOLATED = {OVERWRITE, ROW_DELTA}
_COMMON = {"action", "branch", "base-snapshot-id", "snapshot-id"}
_MAX_LONG = 2**63 - 1
_MAX_FILTER_NODES, _MAX_FILTER_DEPTH = 2_000, 64
_EXPRESSION: TypeAdapter[BooleanExpression] = TypeAdapter(BooleanExpression)


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


UNSET: Final = _Unset()
"""``base-snapshot-id`` left out: the operation starts from the branch head it is built on."""


@dataclass(frozen=True)
class DataOperation:
    """One requested data operation, its files decoded and its filters parsed (unbound)."""

    action: str
    branch: str
    base_snapshot_id: int | _Unset | None
    added_data: tuple[DataFile, ...] = ()
    added_deletes: tuple[DataFile, ...] = ()
    deleted_data: tuple[str, ...] = ()
    deleted_deletes: tuple[str, ...] = ()
    row_filter: BooleanExpression | None = None
    conflict_filter: BooleanExpression | None = None
    isolation: str = SERIALIZABLE
    case_sensitive: bool = True
    table_uuid: str | None = None
    snapshot_id: int | None = None

    @property
    def removes_files(self) -> bool:
        return bool(self.deleted_data or self.deleted_deletes or self.row_filter is not None)


def has_data_operation(body: Any) -> bool:
    """True if a table commit (or ``table-changes`` entry) carries a data operation update."""
    updates = body.get("updates") if isinstance(body, Mapping) else None
    return isinstance(updates, list) and any(
        isinstance(u, Mapping) and u.get("action") in DATA_OPERATIONS for u in updates)


def check_operation_shape(body: Any, limits: CommitLimits) -> None:
    """Refuse a data-operation change whose shape is wrong (400) or too large (413), reading
    nothing: one operation update, only ``assert-table-uuid``, lists of the right kinds."""
    if not isinstance(body, Mapping) or not set(body) <= {"identifier", "requirements", "updates"}:
        raise UnverifiableCommit("a data operation change holds only identifier, requirements "
                                 "and one update")
    _check_requirements(body.get("requirements"))
    updates = body.get("updates")
    if not isinstance(updates, list) or len(updates) != 1 or not has_data_operation(body):
        raise UnverifiableCommit("a data operation must be the only update of its table change")
    update = updates[0]
    action = update["action"]
    allowed = _COMMON | set(_LISTS[action]) | _FILTERS[action] | (
        {"isolation-level"} if action in _ISOLATED else set()) | (
        {"case-sensitive"} if _FILTERS[action] else set())
    unknown = sorted(str(k) for k in update if k not in allowed)
    if unknown:
        raise UnverifiableCommit(f"{action} does not accept {', '.join(unknown)[:120]}")
    _check_common(update)
    files = sum(_check_list(update.get(key), key, kind) for key, kind in _LISTS[action].items())
    if files > limits.max_entries:
        raise PayloadTooLarge(f"a data operation may name at most {limits.max_entries} files")
    for key in _FILTERS[action]:
        _check_filter_size(update.get(key), key)
    _check_not_empty(action, update)


def _check_requirements(requirements: Any) -> None:
    if requirements is None:
        return
    if (not isinstance(requirements, list) or len(requirements) > 1
            or not all(isinstance(r, Mapping) and r.get("type") == "assert-table-uuid"
                       and isinstance(r.get("uuid"), str) for r in requirements)):
        raise UnverifiableCommit("a data operation change may carry one requirement only: "
                                 "assert-table-uuid")


def _check_common(update: Mapping[str, Any]) -> None:
    branch = update.get("branch", "main")
    if not isinstance(branch, str) or not 0 < len(branch) <= 255:
        raise UnverifiableCommit("branch must be a branch name")
    base = update.get("base-snapshot-id")
    if base is not None and (not isinstance(base, int) or isinstance(base, bool)):
        raise UnverifiableCommit("base-snapshot-id must be a snapshot id or null")
    wanted = update.get("snapshot-id")
    if "snapshot-id" in update and (not isinstance(wanted, int) or isinstance(wanted, bool)
                                    or not 0 < wanted <= _MAX_LONG):
        raise UnverifiableCommit("snapshot-id must be a positive long")
    if update.get("isolation-level", SERIALIZABLE) not in (SERIALIZABLE, SNAPSHOT):
        raise UnverifiableCommit("isolation-level must be serializable or snapshot")
    if not isinstance(update.get("case-sensitive", True), bool):
        raise UnverifiableCommit("case-sensitive must be true or false")


def _check_list(items: Any, key: str, kind: str) -> int:
    if items is None:
        return 0
    item_type = str if kind == _PATHS else Mapping
    if not isinstance(items, list) or not all(isinstance(i, item_type) for i in items):
        raise UnverifiableCommit(f"{key} must be a list of {kind}")
    return len(items)


def _check_filter_size(expression: Any, key: str) -> None:
    """A filter is a small JSON tree: bounded nodes and depth, walked without recursion."""
    pending: list[tuple[Any, int]] = [(expression, 1)]
    nodes = 0
    while pending:
        node, depth = pending.pop()
        nodes += 1
        if nodes > _MAX_FILTER_NODES or depth > _MAX_FILTER_DEPTH:
            raise UnverifiableCommit(f"{key} is too large an expression")
        children = node.values() if isinstance(node, Mapping) else \
            node if isinstance(node, list) else ()
        pending.extend((child, depth + 1) for child in children)


def _check_not_empty(action: str, update: Mapping[str, Any]) -> None:
    present = {k for k in (*_LISTS[action], *_FILTERS[action])
               if update.get(k) not in (None, [])}
    needed = {APPEND: {"data-files"},
              REWRITE: {"deleted-data-files", "deleted-delete-files"}}.get(action)
    if not (present & needed if needed else present - {"conflict-filter"}):
        raise UnverifiableCommit(f"{action} changes nothing: name the files it adds or removes")


def parse_operation(body: Mapping[str, Any], metadata: TableMetadata) -> DataOperation:
    """The shape-checked change ``body`` as a ``DataOperation`` for the table ``metadata``."""
    update = body["updates"][0]
    action = update["action"]
    lists = _LISTS[action]
    files: dict[str, tuple[Any, ...]] = {}
    for key, kind in lists.items():
        items = update.get(key) or []
        files[key] = tuple(items) if kind == _PATHS else tuple(
            _content_file(item, metadata, f"{key}[{i}]", kind) for i, item in enumerate(items))
    deleted_data_key = "data-files" if action == DELETE else "deleted-data-files"
    requirements = body.get("requirements") or []
    return DataOperation(
        action=action,
        branch=update.get("branch", "main"),
        base_snapshot_id=update.get("base-snapshot-id", UNSET),
        added_data=files.get("data-files" if action == APPEND else "added-data-files", ()),
        added_deletes=files.get("added-delete-files", ()),
        deleted_data=files.get(deleted_data_key, ()),
        deleted_deletes=files.get("deleted-delete-files", ()),
        row_filter=_filter(update, "row-filter", metadata),
        conflict_filter=_filter(update, "conflict-filter", metadata),
        isolation=update.get("isolation-level", SERIALIZABLE),
        case_sensitive=update.get("case-sensitive", True),
        table_uuid=requirements[0]["uuid"] if requirements else None,
        snapshot_id=update.get("snapshot-id"),
    )


def _content_file(item: Any, metadata: TableMetadata, what: str, kind: str) -> DataFile:
    data_file = content_file_from_json(item, metadata, what)
    if (data_file.content == DataFileContent.DATA) != (kind == _DATA):
        raise UnverifiableCommit(f"{what} must be one of the {kind}")
    if kind == _DELETES and metadata.format_version < 2:
        raise UnverifiableCommit("a format-1 table has no delete files")
    return data_file


def _filter(update: Mapping[str, Any], key: str, metadata: TableMetadata
            ) -> BooleanExpression | None:
    if update.get(key) is None:
        return None
    try:
        expression = _EXPRESSION.validate_python(update[key])
    except (ValidationError, ValueError, TypeError) as exc:
        raise UnverifiableCommit(f"{key} is not an Iceberg expression over the table's "
                                 "columns") from exc
    bind_filter(expression, metadata.schema(), update.get("case-sensitive", True), key)
    return expression


def check_table_uuid(operation: DataOperation, metadata: TableMetadata) -> None:
    """The change's ``assert-table-uuid`` must hold (409 otherwise, as for any requirement)."""
    if operation.table_uuid is not None and operation.table_uuid != str(metadata.table_uuid):
        raise CommitFailed("requirement failed: the table's UUID is not the asserted one")


def effective_conflict_filter(operation: DataOperation) -> BooleanExpression:
    """What concurrent data must not match (Iceberg's defaults): the conflict filter if given;
    else an overwrite's row filter when it names no files; else everything."""
    if operation.conflict_filter is not None:
        return operation.conflict_filter
    if operation.action == OVERWRITE and operation.row_filter is not None \
            and not operation.deleted_data:
        return operation.row_filter
    return AlwaysTrue()
