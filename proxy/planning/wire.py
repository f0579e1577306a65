"""Plan answers on the wire: ``PlanTableScanResult``, ``FetchPlanningResult`` and
``FetchScanTasksResult`` bodies in the forms Java 1.11 and pyiceberg 0.12 parse.

Content files are written in the form of ``proxy.commits.operations.wire.content_file_to_json``
(lowercase content and format, partition as an array of JSON single values, bounds as uppercase
hex of Iceberg's single-value binary form) by a writer built for large plans, which also trims
what a principal may see and adds what a plan needs besides:

* **Statistics.** Column statistics (``column-sizes``, ``value-counts``, ``null-value-counts``,
  ``nan-value-counts``, ``lower-bounds``, ``upper-bounds``) are kept only for the field ids the
  client asked for (``stats-fields``; none when it did not ask, which is what Java expects) and
  never for a hidden field id (denied or masked columns: engines compute COUNT / MIN / MAX from
  them). Delete files also keep the statistics of the position-delete columns (``file_path``,
  ``pos``): they name data files, which the client receives anyway, and tell Java which one file
  a position delete file covers.
* **Format 3.** ``first-row-id`` of data files, and ``referenced-data-file``,
  ``content-offset``, ``content-size-in-bytes`` of deletion vectors (Puffin position deletes),
  when the ``DataFile`` carries them (read with the format-3 manifest schema).
* **Delete files.** Each appears once per response in ``delete-files``; a task's
  ``delete-file-references`` index into that list. ``delete-files`` is left out when empty
  (both clients reject delete files without tasks).
* **Residuals.** Each task's residual in the legacy expression form, ``true`` when it has none,
  names a hidden column, or has no wire form (a weaker residual is always correct: clients
  apply their own filter to rows, and Spark uses the residual only to skip row groups).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from pyiceberg.conversions import to_json
from pyiceberg.expressions import (
    AlwaysTrue,
    And,
    BooleanExpression,
    BoundPredicate,
    Not,
    Or,
    UnboundPredicate,
)
from pyiceberg.manifest import DATA_FILE_TYPE, DataFile, DataFileContent, FileFormat
from pyiceberg.schema import Schema
from pyiceberg.table import FileScanTask
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DoubleType,
    FixedType,
    FloatType,
    IntegerType,
    LongType,
    PrimitiveType,
    StringType,
)
from pyiceberg.utils.lazydict import LazyDict

from proxy.commits.operations.specs import binding_schema
from proxy.commits.operations.wire import POSITION_PATH_FIELD
from proxy.errors import IcebergError
from proxy.planning.filter_json import filter_to_json

POSITION_FIELDS = frozenset({POSITION_PATH_FIELD, POSITION_PATH_FIELD - 1})  # file_path, pos
STATS_MAPS = ("column-sizes", "value-counts", "null-value-counts", "nan-value-counts",
              "lower-bounds", "upper-bounds")
_V3_FIELDS = {name: pos for pos, name in enumerate(f.name for f in DATA_FILE_TYPE[3].fields)}
_V3_WIRE = (("first_row_id", "first-row-id"), ("referenced_data_file", "referenced-data-file"),
            ("content_offset", "content-offset"),
            ("content_size_in_bytes", "content-size-in-bytes"))


class _Writer:
    """Writes the content files of one response.

    The same wire form as ``content_file_to_json`` (a test holds them equal), built for plans of
    hundreds of thousands of files: each spec's partition converters are worked out once, and
    statistics maps are read only for the ids that are kept.
    """

    def __init__(self, metadata: TableMetadata, hidden: frozenset[int],
                 stats: frozenset[int] | None) -> None:
        self.metadata = metadata
        self.specs = metadata.specs()
        self.data_ids = tuple(sorted((stats or frozenset()) - hidden))
        self.delete_ids = tuple(sorted(set(self.data_ids) | POSITION_FIELDS))
        self._partitions: dict[int, list[Callable[[Any], Any]]] = {}

    def content_file(self, data_file: DataFile) -> dict[str, Any]:
        content = DataFileContent(data_file.content)
        body: dict[str, Any] = {
            "content": _CONTENT_NAMES[content],
            "file-path": data_file.file_path,
            "file-format": FileFormat(data_file.file_format).value.lower(),
            "spec-id": data_file.spec_id,
            "partition": self._partition(data_file),
            "file-size-in-bytes": data_file.file_size_in_bytes,
            "record-count": data_file.record_count,
        }
        keep = self.data_ids if content == DataFileContent.DATA else self.delete_ids
        if keep:
            _add_stats(body, data_file, keep)
        if data_file.split_offsets:
            body["split-offsets"] = list(data_file.split_offsets)
        if data_file.sort_order_id is not None:
            body["sort-order-id"] = data_file.sort_order_id
        if data_file.equality_ids:
            body["equality-ids"] = list(data_file.equality_ids)
        if data_file.key_metadata:
            body["key-metadata"] = bytes(data_file.key_metadata).hex().upper()
        for name, wire_name in _V3_WIRE:
            value = _v3_value(data_file, name)
            if value is not None:
                body[wire_name] = value
        return body

    def _partition(self, data_file: DataFile) -> list[Any]:
        converters = self._partitions.get(data_file.spec_id)
        if converters is None:
            converters = self._partitions[data_file.spec_id] = self._converters(
                data_file.spec_id)
        partition = data_file.partition
        return [convert(partition[i]) for i, convert in enumerate(converters)]

    def _converters(self, spec_id: int) -> list[Callable[[Any], Any]]:
        spec = self.specs.get(spec_id)
        if spec is None:
            raise IcebergError(f"a file of the table names partition spec {spec_id}, "
                               "which the table metadata lacks")
        schema = binding_schema(self.metadata, spec) or self.metadata.schema()
        return [_converter(f.field_type) for f in spec.partition_type(schema).fields]


_CONTENT_NAMES = {DataFileContent.DATA: "data", DataFileContent.POSITION_DELETES:
                  "position-deletes", DataFileContent.EQUALITY_DELETES: "equality-deletes"}
_COUNT_MAPS = (("column-sizes", "column_sizes"), ("value-counts", "value_counts"),
               ("null-value-counts", "null_value_counts"),
               ("nan-value-counts", "nan_value_counts"))
_BOUND_MAPS = (("lower-bounds", "lower_bounds"), ("upper-bounds", "upper_bounds"))
_AS_IS = (BooleanType, IntegerType, LongType, StringType, FloatType, DoubleType)


def _converter(field_type: Any) -> Callable[[Any], Any]:
    """Partition value → Iceberg's JSON single-value form (dates as ISO text, binary hex...)."""
    if isinstance(field_type, _AS_IS):
        return lambda value: value
    if not isinstance(field_type, PrimitiveType):
        raise IcebergError("a partition field of the table is not of a primitive type")
    if isinstance(field_type, BinaryType | FixedType):
        return lambda value: None if value is None else bytes(value).hex().upper()
    seen: dict[Any, Any] = {}  # dates, timestamps, decimals: few distinct values per plan

    def convert(value: Any) -> Any:
        if value is None:
            return None
        text = seen.get(value)
        if text is None:
            text = to_json(field_type, value)
            if len(seen) < 65_536:
                seen[value] = text
        return text
    return convert


def _add_stats(body: dict[str, Any], data_file: DataFile, keep: tuple[int, ...]) -> None:
    """The statistics maps of ``data_file`` cut down to the ``keep`` ids (absent when empty)."""
    for wire_name, name in _COUNT_MAPS:
        pairs = _pick(getattr(data_file, name), keep)
        if pairs:
            body[wire_name] = {"keys": [k for k, _ in pairs], "values": [v for _, v in pairs]}
    for wire_name, name in _BOUND_MAPS:
        pairs = _pick(getattr(data_file, name), keep)
        if pairs:
            body[wire_name] = {"keys": [k for k, _ in pairs],
                               "values": [v.hex().upper() for _, v in pairs]}


def _pick(stats: Mapping[int, Any] | None, keep: tuple[int, ...]) -> list[tuple[int, Any]]:
    if not stats:
        return []
    source = stats.__dict__() if isinstance(stats, LazyDict) else stats  # built once, not per key
    return [(k, source[k]) for k in keep if k in source]


def _v3_value(data_file: DataFile, name: str) -> Any:
    position = _V3_FIELDS[name]
    return data_file[position] if len(data_file) > position else None


def file_scan_tasks_json(tasks: Iterable[FileScanTask], metadata: TableMetadata, *,
                         hidden_field_ids: frozenset[int] = frozenset(),
                         stats_fields: frozenset[int] | None = None,
                         residual: bool = True) -> dict[str, Any]:
    """``{"file-scan-tasks": [...], "delete-files": [...]}`` for ``tasks`` (pyiceberg
    ``FileScanTask``s planned from ``metadata``).

    ``stats_fields`` are the field ids whose statistics the client asked for (None: it did not
    ask, no column statistics at all); ``hidden_field_ids`` the ids it must never see statistics
    of (every nested id of a hidden column included). ``residual`` False leaves residual filters
    out (the client then uses its own filter). ``delete-files`` is absent when no task has one.
    """
    writer = _Writer(metadata, hidden_field_ids, stats_fields)
    residuals = _Residuals(metadata.schema(), hidden_field_ids)
    delete_index: dict[str, int] = {}
    delete_files: list[dict[str, Any]] = []
    scan_tasks: list[dict[str, Any]] = []
    for task in tasks:
        references: list[int] = []
        for delete_file in sorted(task.delete_files, key=lambda f: f.file_path):
            index = delete_index.get(delete_file.file_path)
            if index is None:
                index = delete_index[delete_file.file_path] = len(delete_files)
                delete_files.append(writer.content_file(delete_file))
            references.append(index)
        body: dict[str, Any] = {"data-file": writer.content_file(task.file)}
        if references:
            body["delete-file-references"] = references
        if residual:
            body["residual-filter"] = residuals.json(task.residual)
        scan_tasks.append(body)
    answer: dict[str, Any] = {"file-scan-tasks": scan_tasks}
    if delete_files:
        answer["delete-files"] = delete_files
    return answer


class _Residuals:
    """Residuals written once per distinct expression object (tasks of one partition share
    theirs); the expression is kept with its JSON so its id is not reused."""

    def __init__(self, schema: Schema, hidden: frozenset[int]) -> None:
        self.schema, self.hidden = schema, hidden
        self._seen: dict[int, tuple[BooleanExpression | None, Any]] = {}

    def json(self, residual: BooleanExpression | None) -> Any:
        seen = self._seen.get(id(residual))
        if seen is None:
            seen = self._seen[id(residual)] = (residual, residual_json(residual, self.schema,
                                                                       self.hidden))
        return seen[1]


def residual_json(residual: BooleanExpression | None, schema: Schema,
                  hidden_field_ids: frozenset[int]) -> Any:
    """A task's residual in the legacy form; ``true`` when there is none, it names a hidden
    (or unknown) column, or it has no wire form."""
    if residual is None or isinstance(residual, AlwaysTrue):
        return True
    ids = _field_ids(residual, schema)
    if ids is None or ids & hidden_field_ids:
        return True
    try:
        return filter_to_json(residual, schema)
    except ValueError:
        return True


def _field_ids(expr: BooleanExpression, schema: Schema) -> frozenset[int] | None:
    """The field ids an expression names; None when one cannot be resolved."""
    if isinstance(expr, And | Or):
        left, right = _field_ids(expr.left, schema), _field_ids(expr.right, schema)
        return None if left is None or right is None else left | right
    if isinstance(expr, Not):
        return _field_ids(expr.child, schema)
    if isinstance(expr, BoundPredicate):
        return frozenset({expr.term.ref().field.field_id})
    if isinstance(expr, UnboundPredicate):
        try:
            return frozenset({schema.find_field(expr.term.name).field_id})  # type: ignore[attr-defined]
        except (ValueError, AttributeError):
            return None
    return frozenset()


def completed_plan(plan_id: str | None, tasks_json: Mapping[str, Any] | None,
                   plan_tasks: list[str], *,
                   storage_credentials: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A ``completed`` planning result: ``tasks_json`` (from ``file_scan_tasks_json``; None for
    a plan answered with plan tasks only) and the ``plan_tasks`` to fetch. ``plan_id`` is
    required on ``POST …/plan`` answers; a ``GET …/plan/{id}`` answer may leave it out."""
    body: dict[str, Any] = {"status": "completed"}
    if plan_id is not None:
        body["plan-id"] = plan_id
    body.update(_scan_tasks(tasks_json, plan_tasks))
    if storage_credentials:
        body["storage-credentials"] = list(storage_credentials)
    return body


def submitted_plan(plan_id: str | None) -> dict[str, Any]:
    """A ``submitted`` result: with its ``plan_id`` on ``POST …/plan``, without on a poll."""
    return {"status": "submitted"} if plan_id is None else {"status": "submitted",
                                                              "plan-id": plan_id}


def cancelled_plan() -> dict[str, Any]:
    """A ``cancelled`` result (a poll of a plan that was cancelled)."""
    return {"status": "cancelled"}


def failed_plan(error: IcebergError) -> dict[str, Any]:
    """A ``failed`` result: the spec's ``IcebergErrorResponse`` plus ``status``."""
    return {"status": "failed", **error.to_model()}


def fetched_tasks(tasks_json: Mapping[str, Any] | None, plan_tasks: list[str]) -> dict[str, Any]:
    """The ``FetchScanTasksResult`` of ``POST …/tasks``."""
    return _scan_tasks(tasks_json, plan_tasks)


def _scan_tasks(tasks_json: Mapping[str, Any] | None, plan_tasks: list[str]) -> dict[str, Any]:
    body: dict[str, Any] = {"file-scan-tasks": list((tasks_json or {}).get("file-scan-tasks", []))}
    deletes = (tasks_json or {}).get("delete-files")
    if deletes:
        body["delete-files"] = list(deletes)
    if plan_tasks:
        body["plan-tasks"] = list(plan_tasks)
    return body
