"""An added data file's partition values are what its rows are: ``partition_problem``.

Readers prune a data file by the partition values its manifest entry declares, without opening
it (Java readers even fill identity-partitioned columns from them), and governed snapshots pick
candidates by them. A writer that declares ``region=eu`` for a file holding a US row would hide
that row from every ``region = 'us'`` scan and break the governed builds of every later
snapshot. So every data file an added manifest entry names is held to what the row checks hold a
file they read to (``rowstats.partition_problem``): for every partition field of its spec, the
field's transform maps every row's source value to the declared value (void: null).

The proof reads the values — only the partition source columns, their compressed bytes charged
to the commit's ``partition_bytes_budget`` — never the footer's statistics: a footer is written
by the same hand as the manifest entry, and can claim a single value its rows do not hold.
INT96 timestamps are read as microseconds, as Java reads them (pyarrow's default nanoseconds
wrap past 2262), and a value beyond the int64 microseconds is refused (pyarrow would wrap it
silently). A source column the file does not hold is the declared value in every row for an
identity field (readers fill it from the partition, as the spec's column projection says),
null for any other. Files of unpartitioned specs and delete files are not read (a delete file's
partition only narrows where it applies).
"""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.manifest import DataFile
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import IdentityTransform, VoidTransform

from proxy.commits.rowstats import partition_problem as rows_problem


def partition_problem(parquet: pq.ParquetFile, data_file: DataFile, spec: PartitionSpec,
                      converted: Schema, charge: Callable[[int], None],
                      in_millis: Callable[[], pq.ParquetFile]) -> str | None:
    """What is wrong with ``data_file``'s declared partition values (None: they are its
    rows'). ``parquet`` reads INT96 as microseconds, ``in_millis`` opens the file again reading
    it as milliseconds (a range no INT96 value exceeds); ``converted`` is the file's Iceberg
    schema (its own ids and names); ``charge`` takes the compressed bytes the column reads
    cost (raising beyond the budget)."""
    declared = data_file.partition
    partition = tuple(declared[i] for i in range(len(declared)))
    if len(partition) != len(spec.fields):
        return f"declares {len(partition)} partition values, its spec has {len(spec.fields)}"
    kept, values = [], []
    for field, value in zip(spec.fields, partition, strict=True):
        if isinstance(field.transform, VoidTransform):
            continue
        if _name(converted, field.source_id) is None:
            if value is not None and not isinstance(field.transform, IdentityTransform):
                return (f"declares partition {field.name} of a column it does not hold "
                        "(every row reads it as null)")
            continue  # identity: readers take the column's value from the partition itself
        kept.append(field)
        values.append(value)
    if not kept:
        return None
    schema = Schema(*(f for f in converted.fields
                      if f.field_id in {_top_level_id(converted, k.source_id) for k in kept}))
    rows = _read(parquet, schema, charge)
    if _holds_int96(parquet, schema) and not _same_instants(
            rows, _read(in_millis(), schema, charge, cast=False)):
        return "holds INT96 timestamps beyond what microseconds count (readers disagree on them)"
    problem = rows_problem(PartitionSpec(*kept, spec_id=spec.spec_id), schema, tuple(values),
                           rows)
    return None if problem is None else f"does not hold the rows its partition declares: {problem}"


def _name(converted: Schema, field_id: int) -> str | None:
    try:
        return converted.find_column_name(field_id)
    except ValueError:
        return None


def _top_level_id(converted: Schema, field_id: int) -> int:
    """The id of the top-level column that is or holds ``field_id``."""
    name = _name(converted, field_id) or ""
    return converted.find_field(name.split(".")[0]).field_id


def _holds_int96(parquet: pq.ParquetFile, schema: Schema) -> bool:
    names = {f.name for f in schema.fields}
    columns = (parquet.schema.column(i) for i in range(len(parquet.schema)))
    return any(c.physical_type == "INT96" and c.path.split(".")[0] in names for c in columns)


def _same_instants(micros: pa.Table, millis: pa.Table) -> bool:
    """Every timestamp read as microseconds is, to the millisecond, the one read as
    milliseconds: pyarrow wraps an INT96 value beyond the int64 microseconds silently."""
    while any(pa.types.is_struct(c.type) for c in micros.columns):
        micros, millis = micros.flatten(), millis.flatten()
    for us, ms in zip(micros.columns, millis.columns, strict=True):
        if not pa.types.is_timestamp(us.type):
            continue
        try:
            scaled = pc.multiply_checked(ms.combine_chunks().view(pa.int64()), 1000)
            apart = pc.abs_checked(pc.subtract_checked(us.combine_chunks().view(pa.int64()),
                                                       scaled))
        except pa.ArrowInvalid:  # beyond the int64 microseconds
            return False
        if (pc.max(apart).as_py() or 0) >= 1000:
            return False
    return True


def _read(parquet: pq.ParquetFile, schema: Schema, charge: Callable[[int], None],
          cast: bool = True) -> pa.Table:
    """The file's top-level columns of ``schema``, as Iceberg reads their types (``cast``) or
    as the file holds them."""
    names = [f.name for f in schema.fields]
    metadata = parquet.metadata
    wanted = {i for i in range(metadata.num_columns)
              if metadata.schema.column(i).path.split(".")[0] in names}
    charge(sum(metadata.row_group(g).column(i).total_compressed_size
               for g in range(metadata.num_row_groups) for i in wanted))
    rows = parquet.read(columns=names)
    if not cast:
        return rows
    return rows.cast(schema_to_pyarrow(schema), safe=False)  # INT96 as microseconds
