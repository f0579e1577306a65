"""Who reads which table: the table's state from the backing, the principal's read view of it,
and the checks every read answer passes (the columns a scan names, the row filter)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pyiceberg.schema import Schema
from pyiceberg.table.metadata import TableMetadata

from proxy.admission import Admission
from proxy.backing.tables import (
    NO_FILE_IO,
    Fetch,
    TableState,
    load_table_state,
)
from proxy.commits import UnverifiableCommit
from proxy.errors import BackingFailed, BadRequest, Forbidden
from proxy.governance import Principal
from proxy.inbound import InboundRequest
from proxy.planning.filter_json import bind_filter
from proxy.planning.request import ScanRequest
from proxy.planning.scope import require_snapshots
from proxy.read_views import ReadViews, hidden_ids, hidden_owners
from proxy.reads.projection import partition_refusal
from proxy.resources import Resource
from proxy.restrictions import ReadView
from proxy.scan_access import bound_row_filter, check_row_filter_history, refuse_hidden


@dataclass(frozen=True)
class ReadContext:
    """A principal reading a table as of ``state``, under ``view``; ``evidence`` is the audit
    record's evidence list."""

    principal: Principal
    table: Resource
    state: TableState
    view: ReadView
    applies_masks: bool
    evidence: list[dict[str, Any]] = field(default_factory=list, compare=False)

    @property
    def metadata(self) -> TableMetadata:
        return self.state.metadata


class TableReader:
    """Loads a table's state from the backing, with the caller's read view of it."""

    def __init__(self, fetch: Fetch, views: ReadViews,
                 file_io: Mapping[str, str] = NO_FILE_IO) -> None:
        self._fetch = fetch
        self._views = views
        self._file_io = dict(file_io)  # icegov's FileIO settings (``Settings.file_io``)

    async def for_admission(self, inbound: InboundRequest, admission: Admission) -> ReadContext:
        """The admitted request's table as the backing serves it now (its refusal relayed, its
        server errors 503, metadata icegov cannot read 502)."""
        principal = admission.principal
        assert principal is not None  # reads are never public
        table = admission.intent.needs[0].resource
        try:
            state = await load_table_state(self._fetch, inbound.route.prefix, table,
                                           inbound.headers, self._file_io)
        except UnverifiableCommit as exc:
            raise BackingFailed("the backing catalog's table metadata cannot be read") from exc
        view = self._views.view(principal, table, state.metadata)
        return ReadContext(principal, table, state, view,
                           self._views.applies_masks(principal, inbound.headers),
                           admission.evidence)


def scan_schema(metadata: TableMetadata, request: ScanRequest) -> Schema:
    """The schema a scan binds to: the snapshot's with ``use-snapshot-schema``, else current."""
    if request.use_snapshot_schema and request.snapshot_id is not None:
        snapshot = metadata.snapshot_by_id(request.snapshot_id)
        if snapshot is not None and snapshot.schema_id is not None:
            for schema in metadata.schemas:
                if schema.schema_id == snapshot.schema_id:
                    return schema
    return metadata.schema()


def judge(context: ReadContext, request: ScanRequest) -> None:
    """400 when the request names a column hidden from the principal (in select, filter or
    stats-fields: answered as a column that does not exist), 403 when the principal's row
    filter cannot apply to the table."""
    require_snapshots(context.metadata, request.snapshot_id, request.start_snapshot_id,
                      request.end_snapshot_id)  # first: as for a scan naming no hidden column
    schema = scan_schema(context.metadata, request)
    hidden = context.view.hidden(context.applies_masks)
    bind_filter(request.filter, Schema(*(f for f in schema.fields if f.name not in hidden)),
                request.case_sensitive)  # a hidden column fails where a missing one would
    parts = (("select", request.select or ()), ("filter", sorted(request.filter_columns)),
             ("stats-fields", request.stats_fields or ()))
    for bound_to in _every_schema(context.metadata, schema):  # whichever one the scan binds
        for what, names in parts:
            refuse_hidden(names, bound_to, context.view, what=what,
                          applies_masks=context.applies_masks,
                          case_sensitive=request.case_sensitive, evidence=context.evidence)
    bound_row_filter(context.view, context.metadata.schema())
    check_row_filter_history(context.view, context.metadata)
    refuse_hidden_partitions(context)
    for name in request.select or ():
        if not _has_field(schema, name, request.case_sensitive):
            raise BadRequest(f"select: no column {name[:200]!r} in the scanned schema")


def _every_schema(metadata: TableMetadata, scanned: Schema) -> list[Schema]:
    """The scanned schema first, then every other schema the table has had: a name that lies
    in a hidden column in any of them is refused, whichever schema a scan (an incremental one
    on its end snapshot's, a renamed or dropped column's old name) ends up bound to."""
    return [scanned, *(s for s in metadata.schemas if s.schema_id != scanned.schema_id)]


def _has_field(schema: Schema, name: str, case_sensitive: bool) -> bool:
    try:
        schema.find_field(name, case_sensitive)
    except ValueError:
        return False
    return True


def refuse_hidden_partitions(context: ReadContext) -> None:
    """403 when a partition spec of the table (any: old files keep theirs) is over a hidden
    column: every task of a plan would carry its values (as loadTable refuses such a table)."""
    owners = hidden_owners(context.metadata, context.view.hidden(context.applies_masks))
    for spec in context.metadata.partition_specs:
        for partition_field in spec.fields:
            if partition_field.source_id in owners:
                column = owners[partition_field.source_id]
                raise Forbidden(partition_refusal(column, context.view))


def hidden_field_ids(context: ReadContext, *, for_statistics: bool = False) -> frozenset[int]:
    """Field ids (nested ones included) of the columns the client must not receive, in every
    schema the table has had; ``for_statistics``: also the masked columns a client that
    applies masks reads (their bounds would show the raw values)."""
    applies_masks = context.applies_masks and not for_statistics
    return hidden_ids(context.metadata, context.view.hidden(applies_masks))
