"""The Arrow schema of each OCSF class ``to_ocsf`` writes, and events as Arrow record batches.

The schema is fixed per class (not inferred from the events at hand), so every batch of a
Parquet file has the same one however the export splits them: every field ``to_ocsf`` can write
has a column (absent in an event: null), nested objects are structs, ``time`` is epoch
milliseconds (int64), ``unmapped`` is one JSON text column (its evidence varies in shape from
record to record). An event with a field the schema lacks, or a value of another type, is
refused (``Unfit``): nothing is dropped silently.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from proxy.audit.ocsf import API_ACTIVITY, DATASTORE_ACTIVITY

_S, _I, _B = pa.string(), pa.int64(), pa.bool_()


def _struct(**fields: pa.DataType) -> pa.StructType:
    return pa.struct(list(fields.items()))


_COMMON: list[tuple[str, pa.DataType]] = [
    ("category_uid", _I), ("category_name", _S), ("class_uid", _I), ("class_name", _S),
    ("time", _I), ("activity_id", _I), ("activity_name", _S), ("type_uid", _I),
    ("type_name", _S), ("severity_id", _I), ("severity", _S), ("status_id", _I),
    ("status", _S), ("status_code", _S), ("status_detail", _S), ("duration", _I),
    ("message", _S),
    ("metadata", _struct(
        version=_S, profiles=pa.list_(_S),
        product=_struct(name=_S, vendor_name=_S, version=_S), log_name=_S, event_code=_S,
        correlation_uid=_S, log_version=_S, uid=_S, sequence=_I, log_provider=_S)),
    ("actor", _struct(app_name=_S, user=_struct(
        name=_S, uid=_S, groups=pa.list_(_struct(name=_S))))),
    ("src_endpoint", _struct(name=_S)),
    ("http_request", _struct(http_method=_S, uid=_S, url=_struct(path=_S), user_agent=_S)),
    ("http_response", _struct(code=_I)),
    ("action_id", _I), ("action", _S), ("disposition_id", _I), ("disposition", _S),
    ("policy", _struct(name=_S, uid=_S, type=_S, is_applied=_B, desc=_S, version=_S)),
]
_DATASTORE: list[tuple[str, pa.DataType]] = [
    ("type_id", _I), ("type", _S), ("table", _struct(name=_S, uid=_S)),
    ("database", _struct(name=_S, type_id=_I, type=_S)),
]
_API: list[tuple[str, pa.DataType]] = [
    ("api", _struct(operation=_S, service=_struct(name=_S, version=_S),
                    request=_struct(uid=_S))),
    ("resources", pa.list_(_struct(uid=_S, name=_S))),
]

SCHEMAS: dict[int, pa.Schema] = {
    DATASTORE_ACTIVITY: pa.schema([*_COMMON, *_DATASTORE, ("unmapped", _S)]),
    API_ACTIVITY: pa.schema([*_COMMON, *_API, ("unmapped", _S)]),
}
"""The columns of each class's Parquet files."""


class Unfit(ValueError):
    """An event the class's schema cannot hold as it is (a field it lacks, a value's type)."""


def batch(class_uid: int, events: Sequence[dict[str, Any]]) -> pa.RecordBatch:
    """``events`` (all of ``class_uid``) as one record batch of the class's schema; ``Unfit``
    names the first that does not fit."""
    schema = SCHEMAS[class_uid]
    rows = []
    for event in events:
        stray = _stray_field(event, pa.struct(list(schema)))
        if stray is not None:
            raise Unfit(f"the event has a field the export has no column for: {stray}")
        rows.append({**event, "unmapped": json.dumps(event.get("unmapped", {}),
                                                     sort_keys=True)})
    try:
        return pa.RecordBatch.from_pylist(rows, schema=schema)
    except (pa.ArrowException, OverflowError, TypeError, ValueError) as exc:
        raise Unfit(f"a value does not fit its column: {exc}") from None


def _stray_field(value: object, kind: pa.DataType, at: str = "") -> str | None:
    """The first field of ``value`` that ``kind`` (a struct, or a list of them) has no room
    for, as a dotted path; None when all have. Leaves are left to Arrow's conversion."""
    if isinstance(kind, pa.StructType) and isinstance(value, dict):
        for name, inner in value.items():
            index = kind.get_field_index(name) if isinstance(name, str) else -1
            if index < 0:
                return f"{at}{name}"
            if name == "unmapped" and not at:
                continue  # written as JSON text
            found = _stray_field(inner, kind.field(index).type, f"{at}{name}.")
            if found is not None:
                return found
    elif isinstance(kind, pa.ListType) and isinstance(value, list):
        for item in value:
            found = _stray_field(item, kind.value_type, at)
            if found is not None:
                return found
    return None
