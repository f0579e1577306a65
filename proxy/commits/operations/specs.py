"""Which of the table's schemas a partition spec binds to.

A spec's partition tuple is typed by its source columns. When a column an old spec partitions by
has since been dropped, the current schema cannot type that spec's partitions; the newest
schema that still has every source column can (files written with that spec were written under
it). Manifests of that spec are written, and their partitions read, with that schema.
"""

from __future__ import annotations

from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema, index_by_id
from pyiceberg.table.metadata import TableMetadata

from proxy.commits.intent import UnverifiableCommit


def binding_schema(metadata: TableMetadata, spec: PartitionSpec) -> Schema | None:
    """The current schema if it has every source column of ``spec``, else the newest schema
    of the table that has; None if none has."""
    current = metadata.schema()
    candidates = [current, *sorted((s for s in metadata.schemas
                                    if s.schema_id != current.schema_id),
                                   key=lambda s: s.schema_id, reverse=True)]
    for schema in candidates:
        columns = index_by_id(schema)
        if all(f.source_id in columns for f in spec.fields):
            return schema
    return None


def require_binding_schema(metadata: TableMetadata, spec: PartitionSpec) -> Schema:
    """``binding_schema``, or a refusal (400) when no schema of the table binds ``spec``."""
    schema = binding_schema(metadata, spec)
    if schema is None:
        raise UnverifiableCommit(f"partition spec {spec.spec_id} partitions by a column no "
                                 "schema of the table has: its files cannot be written")
    return schema
