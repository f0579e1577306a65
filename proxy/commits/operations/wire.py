"""Content files on the wire: the REST spec's ``DataFile`` / ``PositionDeleteFile`` /
``EqualityDeleteFile`` JSON, to and from pyiceberg ``DataFile`` records.

The wire form (``open-api/rest-catalog-open-api.yaml``, ``ContentFile``)::

    {"content": "data" | "position-deletes" | "equality-deletes",
     "file-path": "s3://...", "file-format": "parquet" | "avro" | "orc",
     "spec-id": 0, "partition": [<value per partition field>, ...],
     "file-size-in-bytes": 1234, "record-count": 10,
     "split-offsets": [4], "sort-order-id": 0,
     # data files
     "column-sizes" | "value-counts" | "null-value-counts" | "nan-value-counts":
         {"keys": [1, 2], "values": [100, 200]},
     "lower-bounds" | "upper-bounds": {"keys": [1], "values": ["0100000000000000"]},
     # position delete files
     "referenced-data-file": "s3://...",
     # equality delete files
     "equality-ids": [1]}

Partition values use Iceberg's JSON single-value serialization for the partition field's result
type (dates ``"2024-05-01"``, decimals as strings, binary as hex...). Bounds are hex strings of
Iceberg's single-value *binary* encoding (what Java 1.11 sends; ``pyiceberg.conversions.to_bytes``).
Anything else is refused (400): unknown fields, encrypted files (``key-metadata``), format-3
fields (``first-row-id``, ``content-offset``), bounds or metrics of columns the schema lacks.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from decimal import InvalidOperation
from typing import Any

from pyiceberg.conversions import from_bytes, from_json, to_bytes, to_json
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.typedef import Record
from pyiceberg.types import (
    BooleanType,
    DateType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    PrimitiveType,
    TimestampType,
    TimestamptzType,
    TimeType,
)

from proxy.commits.intent import UnverifiableCommit
from proxy.commits.operations.specs import require_binding_schema

POSITION_PATH_FIELD = 2147483546  # ``file_path`` column of position delete files
_POSITION_FIELDS = {POSITION_PATH_FIELD, 2147483545}  # and ``pos``: columns of no table schema
_CONTENT = {"data": DataFileContent.DATA, "position-deletes": DataFileContent.POSITION_DELETES,
            "equality-deletes": DataFileContent.EQUALITY_DELETES}
_CONTENT_NAME = {v: k for k, v in _CONTENT.items()}
_FORMATS = {"parquet": FileFormat.PARQUET, "avro": FileFormat.AVRO, "orc": FileFormat.ORC}
_COMMON = {"content", "file-path", "file-format", "spec-id", "partition", "file-size-in-bytes",
           "record-count", "split-offsets", "sort-order-id"}
_COUNT_MAPS = {"column-sizes": "column_sizes", "value-counts": "value_counts",
               "null-value-counts": "null_value_counts", "nan-value-counts": "nan_value_counts"}
_BOUND_MAPS = {"lower-bounds": "lower_bounds", "upper-bounds": "upper_bounds"}
_ALLOWED = {
    DataFileContent.DATA: _COMMON | set(_COUNT_MAPS) | set(_BOUND_MAPS),
    DataFileContent.POSITION_DELETES: _COMMON | set(_COUNT_MAPS) | set(_BOUND_MAPS)
    | {"referenced-data-file"},
    DataFileContent.EQUALITY_DELETES: _COMMON | set(_COUNT_MAPS) | set(_BOUND_MAPS)
    | {"equality-ids"},
}
_INTERNAL_INTS = (DateType, TimeType, TimestampType, TimestamptzType)


def content_file_from_json(obj: Any, metadata: TableMetadata, what: str) -> DataFile:
    """``obj`` (one wire content file) as a ``DataFile`` with its ``spec_id`` set; ``what``
    names it in errors. Refuses (400) anything malformed or not understood."""
    if not isinstance(obj, Mapping):
        raise UnverifiableCommit(f"{what} must be a JSON object")
    content = _CONTENT.get(obj.get("content"))  # type: ignore[arg-type]
    if content is None:
        raise UnverifiableCommit(f"{what} needs content data, position-deletes or "
                                 "equality-deletes")
    unknown = sorted(str(k) for k in obj if k not in _ALLOWED[content])
    if unknown:
        raise UnverifiableCommit(f"{what} has fields icegov does not accept: "
                                 f"{', '.join(unknown)[:120]}")
    spec = _spec(obj, metadata, what)
    schema = metadata.schema()
    fields: dict[str, Any] = {
        "content": content,
        "file_path": _string(obj, "file-path", what),
        "file_format": _format(obj, what),
        "partition": partition_from_json(obj.get("partition", []), spec,
                                         require_binding_schema(metadata, spec), what),
        "record_count": _count(obj, "record-count", what),
        "file_size_in_bytes": _count(obj, "file-size-in-bytes", what),
        "split_offsets": _offsets(obj.get("split-offsets"), what),
        "sort_order_id": _sort_order(obj.get("sort-order-id"), metadata, what),
        "equality_ids": _equality_ids(obj, content, schema, what),
    }
    for key, name in _COUNT_MAPS.items():
        fields[name] = _count_map(obj.get(key), schema, f"{what} {key}")
    for key, name in _BOUND_MAPS.items():
        fields[name] = _bound_map(obj.get(key), schema, f"{what} {key}")
    _scope_to_referenced_file(obj, fields, what)
    data_file = DataFile.from_args(**fields)
    data_file.spec_id = spec.spec_id
    return data_file


def content_file_to_json(data_file: DataFile, spec: PartitionSpec,
                         schema: Schema) -> dict[str, Any]:
    """The wire form of ``data_file`` (written with ``spec`` over ``schema``)."""
    partition_type = spec.partition_type(schema)
    values = [data_file.partition[i] for i in range(len(partition_type.fields))]
    body: dict[str, Any] = {
        "content": _CONTENT_NAME[DataFileContent(data_file.content)],
        "file-path": data_file.file_path,
        "file-format": FileFormat(data_file.file_format).name.lower(),
        "spec-id": spec.spec_id,
        "partition": [None if v is None else to_json(_primitive(f.field_type), v)
                      for f, v in zip(partition_type.fields, values, strict=True)],
        "file-size-in-bytes": data_file.file_size_in_bytes,
        "record-count": data_file.record_count,
    }
    for key, name in _COUNT_MAPS.items():
        counts = getattr(data_file, name)
        if counts:
            body[key] = {"keys": list(counts), "values": list(counts.values())}
    for key, name in _BOUND_MAPS.items():
        bounds = getattr(data_file, name)
        if bounds:
            body[key] = {"keys": list(bounds), "values": [b.hex().upper() for b in bounds.values()]}
    if data_file.split_offsets:
        body["split-offsets"] = list(data_file.split_offsets)
    if data_file.sort_order_id is not None:
        body["sort-order-id"] = data_file.sort_order_id
    if data_file.equality_ids:
        body["equality-ids"] = list(data_file.equality_ids)
    return body


def _primitive(field_type: Any) -> PrimitiveType:
    if not isinstance(field_type, PrimitiveType):
        raise TypeError("partition fields are primitive")
    return field_type


def partition_from_json(values: Any, spec: PartitionSpec, schema: Schema, what: str) -> Record:
    """The partition tuple of a file written with ``spec``, from its wire values."""
    fields = spec.partition_type(schema).fields
    if not isinstance(values, list) or len(values) != len(fields):
        raise UnverifiableCommit(
            f"{what} partition must list {len(fields)} values for partition spec {spec.spec_id}")
    return Record(*(_partition_value(v, f.field_type, f.name, what)
                    for v, f in zip(values, fields, strict=True)))


def _partition_value(value: Any, field_type: Any, name: str, what: str) -> Any:
    if value is None:
        return None
    if not isinstance(field_type, PrimitiveType) or not _json_type_fits(value, field_type):
        raise UnverifiableCommit(f"{what} partition value for {name!r:.60} is not a {field_type}")
    try:
        parsed = from_json(field_type, value)
        encoded = to_bytes(field_type, parsed)  # checks ranges, lengths, scales
    except (ValueError, TypeError, ArithmeticError, InvalidOperation, struct.error,
            NotImplementedError) as exc:
        raise UnverifiableCommit(
            f"{what} partition value for {name!r:.60} is not a valid {field_type}") from exc
    return from_bytes(field_type, encoded) if isinstance(field_type, _INTERNAL_INTS) else parsed


def _json_type_fits(value: Any, field_type: PrimitiveType) -> bool:
    if isinstance(field_type, BooleanType):
        return isinstance(value, bool)
    if isinstance(value, bool):
        return False
    if isinstance(field_type, IntegerType | LongType):
        return isinstance(value, int)
    if isinstance(field_type, FloatType | DoubleType):
        return isinstance(value, int | float)
    return isinstance(value, str)


def _spec(obj: Mapping[str, Any], metadata: TableMetadata, what: str) -> PartitionSpec:
    spec_id = obj.get("spec-id")
    specs = metadata.specs()
    if not _is_int(spec_id) or spec_id not in specs:
        raise UnverifiableCommit(f"{what} spec-id is not a partition spec of the table")
    return specs[spec_id]


def _string(obj: Mapping[str, Any], key: str, what: str) -> str:
    value = obj.get(key)
    if not isinstance(value, str) or not value:
        raise UnverifiableCommit(f"{what} needs a string {key!r}")
    return value


def _format(obj: Mapping[str, Any], what: str) -> FileFormat:
    value = obj.get("file-format")
    found = _FORMATS.get(value.lower()) if isinstance(value, str) else None
    if found is None:
        raise UnverifiableCommit(f"{what} file-format must be parquet, avro or orc")
    return found


def _count(obj: Mapping[str, Any], key: str, what: str) -> int:
    value: Any = obj.get(key)
    if not _is_int(value) or not 0 <= value < 2**63:
        raise UnverifiableCommit(f"{what} needs a non-negative integer {key!r}")
    return int(value)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _offsets(value: Any, what: str) -> list[int] | None:
    if value is None:
        return None
    if (not isinstance(value, list) or not all(_is_int(v) and 0 <= v < 2**63 for v in value)
            or value != sorted(value)):
        raise UnverifiableCommit(f"{what} split-offsets must be ascending non-negative integers")
    return list(value)


def _sort_order(value: Any, metadata: TableMetadata, what: str) -> int | None:
    if value is None:
        return None
    if not _is_int(value) or value not in {o.order_id for o in metadata.sort_orders}:
        raise UnverifiableCommit(f"{what} sort-order-id is not a sort order of the table")
    return int(value)


def _equality_ids(obj: Mapping[str, Any], content: DataFileContent, schema: Schema,
                  what: str) -> list[int] | None:
    if content != DataFileContent.EQUALITY_DELETES:
        return None
    ids = obj.get("equality-ids")
    if (not isinstance(ids, list) or not ids
            or not all(_is_int(i) and _primitive_field(schema, i) for i in ids)):
        raise UnverifiableCommit(f"{what} equality-ids must name primitive columns of the table")
    return list(ids)


def _primitive_field(schema: Schema, field_id: int) -> PrimitiveType | None:
    """The primitive type of column ``field_id`` of ``schema`` (None: no such primitive)."""
    try:
        field_type = schema.find_type(field_id)
    except ValueError:
        return None
    return field_type if isinstance(field_type, PrimitiveType) else None


def _known_column(schema: Schema, field_id: int) -> bool:
    if field_id in _POSITION_FIELDS:
        return True
    try:
        schema.find_field(field_id)
    except ValueError:
        return False
    return True


def _key_values(value: Any, what: str) -> list[tuple[int, Any]]:
    if not isinstance(value, Mapping) or set(value) != {"keys", "values"}:
        raise UnverifiableCommit(f"{what} must be {{\"keys\": [...], \"values\": [...]}}")
    keys, values = value["keys"], value["values"]
    if (not isinstance(keys, list) or not isinstance(values, list) or len(keys) != len(values)
            or not all(_is_int(k) for k in keys) or len(set(keys)) != len(keys)):
        raise UnverifiableCommit(f"{what} needs distinct integer keys, one per value")
    return list(zip(keys, values, strict=True))


def _count_map(value: Any, schema: Schema, what: str) -> dict[int, int] | None:
    if value is None:
        return None
    pairs = _key_values(value, what)
    if not all(_known_column(schema, k) and _is_int(v) and 0 <= v < 2**63
               for k, v in pairs):
        raise UnverifiableCommit(f"{what} needs non-negative counts of the table's columns")
    return dict(pairs)


def _bound_map(value: Any, schema: Schema, what: str) -> dict[int, bytes] | None:
    if value is None:
        return None
    bounds: dict[int, bytes] = {}
    for key, text in _key_values(value, what):
        field_type = _primitive_field(schema, key) if key not in _POSITION_FIELDS else LongType()
        if key == POSITION_PATH_FIELD:
            field_type = None  # a path, any bytes
        try:
            raw = bytes.fromhex(text) if isinstance(text, str) else None
            if raw is not None and field_type is not None:
                from_bytes(field_type, raw)
        except (ValueError, TypeError, struct.error, ArithmeticError) as exc:
            raise UnverifiableCommit(f"{what} holds a value that is not a hex-encoded bound of "
                                     "its column") from exc
        if raw is None or (field_type is None and key != POSITION_PATH_FIELD):
            raise UnverifiableCommit(f"{what} needs hex-encoded bounds of the table's primitive "
                                     "columns")
        bounds[key] = raw
    return bounds


def _scope_to_referenced_file(obj: Mapping[str, Any], fields: dict[str, Any], what: str) -> None:
    """A format-2 manifest has no ``referenced_data_file``: a position delete file naming one is
    scoped to it by equal ``file_path`` bounds, which is how readers tell."""
    referenced = obj.get("referenced-data-file")
    if referenced is None:
        return
    if not isinstance(referenced, str) or not referenced:
        raise UnverifiableCommit(f"{what} referenced-data-file must be a string")
    encoded = referenced.encode()
    for name in _BOUND_MAPS.values():
        bounds = dict(fields[name] or {})
        if bounds.get(POSITION_PATH_FIELD, encoded) != encoded:
            raise UnverifiableCommit(f"{what} file_path bounds contradict referenced-data-file")
        bounds[POSITION_PATH_FIELD] = encoded
        fields[name] = bounds


def referenced_data_file(data_file: DataFile) -> str | None:
    """The one data file a position delete file applies to (equal ``file_path`` bounds)."""
    if data_file.content != DataFileContent.POSITION_DELETES:
        return None
    lower = (data_file.lower_bounds or {}).get(POSITION_PATH_FIELD)
    upper = (data_file.upper_bounds or {}).get(POSITION_PATH_FIELD)
    if lower is None or lower != upper:
        return None
    return lower.decode("utf-8", errors="replace")
