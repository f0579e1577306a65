"""Table metadata answered to a restricted principal: loadTable (``GET …/tables/{t}``) and the
metadata a table commit answers with.

Every client that plans itself (Spark 1.10, Trino, metadata tables, incremental scans) reads what
loadTable says, so the answer itself carries a principal's column restrictions: the schemas lose
the hidden columns (ids kept), the table config asks clients to plan on the server, and the
spec's ``read-restrictions`` declares masks and the row filter (``proxy.reads.projection``). A
commit's answer carries the same metadata and is projected the same way, and neither carries
storage credentials (``proxy.reads.credentials``). A principal no column or row rule can touch
gets the backing's bytes unchanged.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from pyiceberg.table.metadata import TableMetadataUtil
from starlette.responses import JSONResponse, Response

from proxy.admission import Admission
from proxy.backing.forward import Forwarder, relayed_answer
from proxy.errors import BackingFailed, Forbidden
from proxy.governance import Principal
from proxy.inbound import InboundRequest
from proxy.read_views import ReadViews, describe
from proxy.reads.credentials import without_config_secrets, without_credentials
from proxy.reads.projection import project_load_result
from proxy.reads.writes import spec_refusal
from proxy.resources import Resource
from proxy.scan_access import check_row_filter_history

MayRestrict = Callable[[Principal, Resource], bool]


class TableAnswers:
    """Projects table metadata answers for the principals policy restricts."""

    def __init__(self, views: ReadViews, may_restrict: MayRestrict,
                 restricted_anywhere: Callable[[Principal], bool] = lambda _: False) -> None:
        self._views = views
        self._may_restrict = may_restrict
        self._restricted_anywhere = restricted_anywhere

    def restricted(self, principal: Principal | None, table: Resource) -> bool:
        """True when some column or row rule may apply to ``principal`` on ``table``."""
        return principal is not None and self._may_restrict(principal, table)

    def keeps_secrets_from(self, principal: Principal | None) -> bool:
        """True when some column or row rule applies to ``principal`` anywhere: it gets no
        secret config property, even for a table it may read whole."""
        return principal is not None and self._restricted_anywhere(principal)

    def without_config_secrets(self, response: Response) -> Response:
        """``response`` (read in full) without secret config properties."""
        cleaned = without_config_secrets(bytes(response.body))
        if response.status_code != 200 or cleaned is None:
            return response
        return Response(cleaned, media_type="application/json",
                        headers={"cache-control": "no-store"})

    def projected(self, body: bytes, principal: Principal, table: Resource,
                  inbound: InboundRequest, evidence: list[dict[str, Any]],
                  keep_location: bool = False) -> Any | None:
        """The answer ``body`` (a LoadTableResult, or with ``keep_location`` a
        CommitTableResponse, which must name its metadata file) as ``principal`` may see it, or
        None when its view of the table restricts nothing."""
        try:
            result = json.loads(body)
            metadata = TableMetadataUtil.parse_obj(result["metadata"])
        except (ValueError, KeyError, TypeError) as exc:
            raise BackingFailed("the backing catalog's table metadata cannot be read") from exc
        view = self._views.view(principal, table, metadata)
        if not view.restricted:
            return None
        evidence.append({"resource": str(table), "read_view": describe(view)})
        check_row_filter_history(view, metadata)
        applies_masks = self._views.applies_masks(principal, inbound.headers)
        projected = without_credentials(project_load_result(result, view,
                                                            applies_masks=applies_masks))
        return without_metadata_files(projected, keep_location=keep_location)

    async def replayed(self, response: Response, inbound: InboundRequest,
                       admission: Admission) -> Response:
        """A stored answer (a commit's or a create's, which carry the table's metadata) as the
        principal may see the table now: a rule may have hidden columns since it was kept."""
        intent = admission.intent
        table = intent.changes[0].resource if intent.changes else intent.needs[0].resource
        return await self.project_response(response, inbound, admission, table)

    def refuse_hidden_layout(self, principal: Principal, table: Resource, body: Any) -> None:
        """403 before a table is created partitioned or sorted by a column that policy hides
        from its creator (the answer could not be projected: every path holds its values)."""
        schema = body.get("schema") if isinstance(body, dict) else None
        fields = schema.get("fields") if isinstance(schema, dict) else None
        if not isinstance(fields, list):
            return
        named: dict[str, int] = {
            f["name"]: f["id"] for f in fields
            if isinstance(f, dict) and isinstance(f.get("name"), str)
            and isinstance(f.get("id"), int)}
        view = self._views.of_columns(principal, table, tuple(sorted(named)))
        hidden_ids = frozenset(named[n] for n in view.hidden(False) if n in named)
        updates = [{"action": "add-spec", "spec": body.get("partition-spec")},
                   {"action": "add-sort-order", "sort-order": body.get("write-order")}]
        refusal = spec_refusal(view, updates, hidden_ids)
        if refusal is not None:
            raise Forbidden(refusal)

    async def project_response(self, response: Response, inbound: InboundRequest,
                               admission: Admission, table: Resource,
                               keep_location: bool = True) -> Response:
        """``response`` (already read in full) projected for the admitted principal
        (``keep_location``: see ``projected``)."""
        principal = admission.principal
        if response.status_code != 200 or principal is None:
            return response
        if not self.restricted(principal, table):
            return self.without_config_secrets(response) if self.keeps_secrets_from(
                principal) else response
        projected = self.projected(bytes(response.body), principal, table, inbound,
                                   admission.evidence, keep_location=keep_location)
        if projected is None:
            return response
        return JSONResponse(projected, headers={"cache-control": "no-store"})


def without_metadata_files(result: dict[str, Any], keep_location: bool) -> dict[str, Any]:
    """``result`` without the paths of the table's unprojected metadata files: they hold every
    column (and registering one elsewhere would shed the restrictions). ``metadata-location`` is
    optional in a LoadTableResult; a CommitTableResponse must keep it."""
    cleaned = dict(result)
    if not keep_location:
        cleaned.pop("metadata-location", None)
    metadata = cleaned.get("metadata")
    if isinstance(metadata, dict) and "metadata-log" in metadata:
        cleaned["metadata"] = {**metadata, "metadata-log": []}
    return cleaned


class LoadTableHandler:
    """Answers loadTable, projecting the metadata for a principal that policy restricts."""

    def __init__(self, forwarder: Forwarder, answers: TableAnswers) -> None:
        self._forwarder = forwarder
        self._answers = answers

    async def load_table(self, inbound: InboundRequest, admission: Admission) -> Response:
        principal, table = admission.principal, admission.intent.needs[0].resource
        if not self._answers.keeps_secrets_from(principal) and (
                principal is None or not self._answers.restricted(principal, table)):
            return await self._forwarder.forward(inbound)
        upstream = await self._forwarder.exchange(inbound)
        return await self._answers.project_response(relayed_answer(upstream, upstream.content),
                                                    inbound, admission, table,
                                                    keep_location=False)

    async def create_table(self, inbound: InboundRequest, admission: Admission) -> Response:
        """Create (or stage-create) a table: forwarded; its answer, which carries the new
        table's metadata and any vended credentials, projected for a restricted principal."""
        principal, table = admission.principal, admission.intent.needs[0].resource
        if principal is None or not self._answers.restricted(principal, table):
            return await self._forwarder.forward(inbound)
        self._answers.refuse_hidden_layout(principal, table, inbound.json())
        upstream = await self._forwarder.exchange(inbound)
        response = relayed_answer(upstream, upstream.content)
        return await self._answers.project_response(response, inbound, admission, table)
