"""An added data file's partition values are what its rows are: ``partition_problem``.

Readers prune a data file by the partition values its manifest entry declares, without opening
it (Java readers even fill identity-partitioned columns from them), and governed snapshots pick
candidates by them. A writer that declares ``region=eu`` for a file holding a US row would hide
that row from every ``region = 'us'`` scan and break the governed builds of every later
snapshot. So every data file an added manifest entry names is held to what the row checks hold a
file they read to (``rowstats.partition_problem``): for every partition field of its spec, the
field's transform maps every row's source value to the declared value (void: null).

The proof reads the values, never the footer's statistics: a footer is written by the same hand
as the manifest entry, and can claim a single value its rows do not hold. Only each field's
source column is read, in batches of ``BATCH_ROWS`` rows, string and binary columns as
dictionaries reduced to their distinct values before they are decoded (a few compressed bytes of
one long repeated value cannot expand into gigabytes); what each batch holds decoded is charged
to the commit's ``partition_bytes_budget`` (a dictionary once), and each batch is checked on its
own (every row must map to the declared value, so no batch needs another).

INT96 timestamps are read as microseconds, as Java reads them (pyarrow's default nanoseconds
wrap past 2262), and a value beyond the int64 microseconds is refused (read again as
milliseconds, the two readings must agree). A source column the file does not hold is the
declared value in every row for an identity field (readers fill it from the partition, as the
spec's column projection says), null for any other. Files of unpartitioned specs and delete files
are not read (a delete file's partition only narrows where it applies).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.manifest import DataFile
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import IdentityTransform, VoidTransform
from pyiceberg.types import NestedField

from proxy.commits.rowstats import partition_problem as rows_problem

BATCH_ROWS = 65_536
Opener = Callable[..., pq.ParquetFile]
"""Opens the file again with ``pq.ParquetFile`` options (``read_dictionary``, the INT96 unit)."""


def partition_problem(open_file: Opener, data_file: DataFile, spec: PartitionSpec,
                      converted: Schema, charge: Callable[[int], None]) -> str | None:
    """What is wrong with ``data_file``'s declared partition values (None: they are its
    rows'). ``converted`` is the file's Iceberg schema (its own ids and names); ``charge``
    takes the bytes each batch holds decoded (raising beyond the budget)."""
    declared = data_file.partition
    partition = tuple(declared[i] for i in range(len(declared)))
    if len(partition) != len(spec.fields):
        return f"declares {len(partition)} partition values, its spec has {len(spec.fields)}"
    for field, value in zip(spec.fields, partition, strict=True):
        if isinstance(field.transform, VoidTransform):
            continue
        path = _name(converted, field.source_id)
        if path is None:
            if value is not None and not isinstance(field.transform, IdentityTransform):
                return (f"declares partition {field.name} of a column it does not hold "
                        "(every row reads it as null)")
            continue  # identity: readers take the column's value from the partition itself
        problem = _field_problem(open_file, field, value, path,
                                 converted.find_field(field.source_id), charge)
        if problem is not None:
            return problem
    return None


def _field_problem(open_file: Opener, field: PartitionField, value: Any, path: str,
                   source: NestedField, charge: Callable[[int], None]) -> str | None:
    """Whether every row's ``path`` value maps to ``value`` through ``field``'s transform."""
    leaf = Schema(NestedField(field.source_id, "v", source.field_type, required=False))
    one = PartitionSpec(PartitionField(field.source_id, field.field_id, field.transform,
                                       field.name))
    arrow_type = schema_to_pyarrow(leaf).field(0).type
    seen: set[int] = set()
    parquet = _opened(open_file, path, "us")
    in_millis = _batches(_opened(open_file, path, "ms"), path) \
        if _is_int96(parquet, path) else None
    for values in _batches(parquet, path):
        if in_millis is not None and not _same_instants(values, next(in_millis)):
            return ("holds INT96 timestamps beyond what microseconds count (readers disagree "
                    "on them)")
        charge(_decoded_bytes(values, seen))
        rows = pa.table({"v": pc.cast(_distinct(values), arrow_type, safe=False)})
        problem = rows_problem(one, leaf, (value,), rows)
        if problem is not None:
            return f"does not hold the rows its partition declares: {problem}"
    return None


def _opened(open_file: Opener, path: str, int96_unit: str) -> pq.ParquetFile:
    return open_file(read_dictionary=[path], coerce_int96_timestamp_unit=int96_unit)


def _batches(parquet: pq.ParquetFile, path: str) -> Iterator[pa.Array]:
    """The leaf column at ``path``, batch by batch (a null parent struct makes it null)."""
    for batch in parquet.iter_batches(batch_size=BATCH_ROWS, columns=[path]):
        array = batch.column(0)
        for name in path.split(".")[1:]:
            array = array.flatten()[array.type.get_field_index(name)]
        yield array


def _decoded_bytes(values: pa.Array, seen: set[int]) -> int:
    """What ``values`` hold in memory: a dictionary's values counted once per file."""
    if not pa.types.is_dictionary(values.type):
        return int(values.nbytes)
    dictionary = values.dictionary
    key = dictionary.buffers()[-1].address if dictionary.buffers()[-1] is not None else 0
    counted = 0 if key in seen else int(dictionary.nbytes)
    seen.add(key)
    return int(values.indices.nbytes) + counted


def _distinct(values: pa.Array) -> pa.Array:
    """A dictionary column's distinct values, decoded (others as they are: the check reads
    floats' NaN and -0.0 whole)."""
    if pa.types.is_dictionary(values.type):
        return pc.unique(values).dictionary_decode()
    return values


def _is_int96(parquet: pq.ParquetFile, path: str) -> bool:
    schema = parquet.schema
    return any(schema.column(i).path == path and schema.column(i).physical_type == "INT96"
               for i in range(len(schema)))


def _same_instants(micros: pa.Array, millis: pa.Array) -> bool:
    """Every INT96 value read as microseconds is, to the millisecond, the one read as
    milliseconds: pyarrow wraps a value beyond the int64 microseconds silently."""
    try:
        scaled = pc.multiply_checked(millis.view(pa.int64()), 1000)
        apart = pc.abs_checked(pc.subtract_checked(micros.view(pa.int64()), scaled))
    except pa.ArrowInvalid:  # beyond the int64 microseconds
        return False
    return bool((pc.max(apart).as_py() or 0) < 1000)


def _name(converted: Schema, field_id: int) -> str | None:
    try:
        return converted.find_column_name(field_id)
    except ValueError:
        return None
