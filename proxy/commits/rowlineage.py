"""Row lineage as readers see it, for the row checks (``rows``, ``rewrite_rows``).

On format 3 every row has a ``_row_id`` and a ``_last_updated_sequence_number``. A data file may
hold them (a writer that moves rows, as a compaction or a copy-on-write delete does, keeps
them); where a value is null, or the file lacks the column, readers inherit it: the file's
``first_row_id`` plus the row's position, and the file's data sequence number. A file with no
``first_row_id`` (written before the table had row lineage) gives its rows no lineage.

The row checks compare rows *with* their lineage: a compaction that moved rows but gave them new
ids, or made them look updated (or not updated) since some sequence number, changed what
incremental and change-data readers see, so it is no data-equivalent rewrite; and an honest
one, which writes the lineage columns, is not refused for holding columns outside the schema.

Rows that had no lineage before (a removed file without ``first_row_id``: written before the
table had row lineage) get new ids wherever they go, as Java's compaction gives them; where a
snapshot removes such a file, its rows are compared without lineage (``comparable``).

``first_row_ids`` assigns inherited ``first_row_id``s the way readers do: in manifest order,
each live data entry without one of its own takes the manifest's next id and advances it by
its record count.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.manifest import ManifestFile
from pyiceberg.schema import Schema
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.types import LongType, NestedField

from proxy.commits.columns import ROW_LINEAGE_IDS
from proxy.commits.rowfiles import RowFile

ROW_ID, LAST_UPDATED = 2147483540, 2147483539
_NAMES = {ROW_ID: "_row_id", LAST_UPDATED: "_last_updated_sequence_number"}
_MANIFEST_FIRST_ROW_ID = 15  # position of ``first_row_id`` in a (v3) manifest-list record
assert set(_NAMES) == set(ROW_LINEAGE_IDS)


def has_lineage(metadata: TableMetadata) -> bool:
    return metadata.format_version >= 3


def lineage_schema(metadata: TableMetadata) -> Schema:
    """The current schema, with the two lineage columns on format 3."""
    schema = metadata.schema()
    if not has_lineage(metadata):
        return schema
    extra = [NestedField(i, name, LongType(), required=False) for i, name in _NAMES.items()]
    return Schema(*schema.fields, *extra, schema_id=schema.schema_id)


def with_lineage(rows: pa.Table, data: RowFile) -> pa.Table:
    """``rows`` (read in ``lineage_schema``) with their lineage as readers see it: nulls
    inherited from ``data``'s ``first_row_id`` and data sequence number."""
    if _NAMES[ROW_ID] not in rows.column_names:
        return rows
    if data.first_row_id is None:
        inherited_ids = pa.nulls(rows.num_rows, pa.int64())
        inherited_seq = pa.nulls(rows.num_rows, pa.int64())
    else:
        first = data.first_row_id
        inherited_ids = pa.array(range(first, first + rows.num_rows), pa.int64())
        inherited_seq = pa.repeat(pa.scalar(data.sequence, pa.int64()), rows.num_rows)
    for name, inherited in ((_NAMES[ROW_ID], inherited_ids),
                            (_NAMES[LAST_UPDATED], inherited_seq)):
        index = rows.column_names.index(name)
        own = rows.column(index).combine_chunks().cast(pa.int64())
        rows = rows.set_column(index, rows.field(index), pc.coalesce(own, inherited))
    return rows


def comparable(tables: list[pa.Table], removed: Iterable[RowFile]) -> list[pa.Table]:
    """``tables`` as they are compared: without the lineage columns when one of the ``removed``
    data files gave its rows none (their new ids are the table's to assign)."""
    if all(f.first_row_id is not None for f in removed):
        return tables
    names = set(_NAMES.values())
    return [t.select([n for n in t.column_names if n not in names]) for t in tables]


def first_row_ids(manifest: ManifestFile, files: Iterable[tuple[bool, RowFile]]
                  ) -> list[tuple[bool, RowFile]]:
    """``files`` (each with whether it is live, in manifest order) with the ``first_row_id``
    readers give the live data files that have none of their own."""
    try:
        next_id = manifest[_MANIFEST_FIRST_ROW_ID]
    except IndexError:
        next_id = None
    if next_id is None:
        return list(files)
    assigned: list[tuple[bool, RowFile]] = []
    for live, file in files:
        if live and file.first_row_id is None and not file.positional and not file.equality:
            file = replace(file, first_row_id=next_id)
            next_id += file.records
        assigned.append((live, file))
    return assigned
