"""Who reads which table: the table's state from the backing, the principal's read view of it,
and the checks every read answer passes (the columns a scan names, the row filter).

``judge`` is the one seam where the column names a plan request writes meet the table: they
are resolved in the principal's view of the schema the scan binds to, before anything binds to
the table's schema, and the planner binds to that same view (``ScanSpec.hidden``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

from pyiceberg.table.metadata import TableMetadata, TableMetadataUtil

from proxy.admission.admission import Admission
from proxy.backing.tables import (
    NO_FILE_IO,
    Fetch,
    TableState,
    load_table_state,
)
from proxy.commits import UnverifiableCommit
from proxy.errors import BackingFailed, Forbidden
from proxy.governance import Principal
from proxy.governed.answers import GovernedAnswers
from proxy.inbound import InboundRequest
from proxy.planning.filter_json import bind_filter
from proxy.planning.request import ScanRequest
from proxy.planning.scope import ScanSpec, require_snapshots, scanned_schema
from proxy.reads.projection import partition_refusal
from proxy.reads.read_views import ReadViews, hidden_ids, hidden_owners
from proxy.reads.scan_access import (
    bound_row_filter,
    check_row_filter_history,
    hidden_column,
    refuse_unseen,
)
from proxy.resources import Resource
from proxy.restrictions import ReadView


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
    governed_from: ReadView | None = None  # the policy's view, when ``view`` plans governed data

    @property
    def metadata(self) -> TableMetadata:
        return self.state.metadata

    @property
    def policy_view(self) -> ReadView:
        """The view the policy gives the principal (what the audit record shows)."""
        return self.governed_from or self.view


class TableReader:
    """Loads a table's state from the backing, with the caller's read view of it."""

    def __init__(self, fetch: Fetch, views: ReadViews,
                 file_io: Mapping[str, str] = NO_FILE_IO,
                 governed: GovernedAnswers | None = None) -> None:
        self._fetch = fetch
        self._views = views
        self._file_io = dict(file_io)  # icegov's FileIO settings (``Settings.file_io``)
        self._governed = governed

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
        if self._governed is not None and self._governed.governs(view):
            governed_state, planned = await self._governed_state(state, view,
                                                                 admission.evidence)
            return ReadContext(principal, table, governed_state, planned, False,
                               admission.evidence, governed_from=view)
        return ReadContext(principal, table, state, view,
                           self._views.applies_masks(principal, inbound.headers),
                           admission.evidence)


    async def _governed_state(self, state: TableState, view: ReadView,
                              evidence: list[dict[str, Any]]) -> tuple[TableState, ReadView]:
        """The table as a reader of governed snapshots sees it, and the view it plans with."""
        assert self._governed is not None and state.document is not None
        check_row_filter_history(view, state.metadata)
        answer = await self._governed.answer(dict(state.document), view, state.metadata,
                                             state.resource, evidence, io=state.io)
        try:
            metadata = TableMetadataUtil.parse_obj(answer["metadata"])
        except (ValueError, KeyError, TypeError) as exc:
            raise BackingFailed("the governed table metadata cannot be read") from exc
        governed = replace(state, metadata=metadata,
                           metadata_location=answer["metadata-location"], document=answer)
        return governed, self._governed.planning_view(view, answer)


def scan_spec(context: ReadContext, request: ScanRequest) -> ScanSpec:
    """The scan as the planner takes it: the principal's row filter, and the columns hidden
    from the principal left out of the schema it binds to. Column dependencies prune only
    scans of the table's own data (governed snapshots hold copies whose masked values need
    not keep them)."""
    r = request
    return ScanSpec(r.snapshot_id, r.filter, context.view.filter_expression, r.case_sensitive,
                    r.use_snapshot_schema, r.start_snapshot_id, r.end_snapshot_id,
                    hidden=context.view.hidden(context.applies_masks),
                    dependencies=context.governed_from is None)


def named_columns(request: ScanRequest) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """Every column name the request writes, by part, in the order they are judged (a filter's
    names sorted: those of predicates weakened away included)."""
    return (("select", request.select or ()), ("filter", tuple(sorted(request.filter_columns))),
            ("stats-fields", request.stats_fields or ()))


def judge(context: ReadContext, request: ScanRequest) -> None:
    """400 when the request names a column that is not in the principal's view of the schema
    the scan binds to (``NoSuchColumn``: hidden and missing alike, in select, filter — every
    form, translated or not — and stats-fields), 403 when the principal's row filter cannot
    apply to the table. Runs when a plan is submitted and again on every fetch of its result
    or tasks, so a name is refused at submission whatever its column."""
    require_snapshots(context.metadata, request.snapshot_id, request.start_snapshot_id,
                      request.end_snapshot_id)  # first: as for a scan naming no hidden column
    visible = scanned_schema(context.metadata, scan_spec(context, request))
    refuse_unseen(named_columns(request), visible, case_sensitive=request.case_sensitive,
                  noted=partial(_note_refusal, context, request.case_sensitive))
    bind_filter(request.filter, visible, request.case_sensitive)  # literals, by visible types
    bound_row_filter(context.view, context.metadata.schema())
    check_row_filter_history(context.view, context.metadata)
    refuse_hidden_partitions(context)


def _note_refusal(context: ReadContext, case_sensitive: bool, part: str, name: str) -> None:
    """The audit record's truth about a refused name: hidden (which column, why) or absent."""
    column = hidden_column(name, context.metadata, context.view,
                           applies_masks=context.applies_masks, case_sensitive=case_sensitive)
    because = ("absent" if column is None else
               "denied" if column in context.view.denied else "masked")
    context.evidence.append({"refused": part, "column": column or name[:200],
                             "table": str(context.table), "because": because})


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
