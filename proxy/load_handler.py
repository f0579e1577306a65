"""``GET …/tables/{t}`` (loadTable): forwarded byte for byte, except to a restricted principal.

Every client that plans itself (Spark 1.10, Trino, metadata tables, incremental scans) reads what
loadTable says, so the answer itself carries a principal's column restrictions: the schemas lose
the hidden columns (ids kept), the table config asks clients to plan on the server, and the
spec's ``read-restrictions`` declares masks and the row filter (``proxy.reads.projection``).
A principal no column or row rule can touch gets the backing's bytes unchanged.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from pyiceberg.table.metadata import TableMetadataUtil
from starlette.responses import JSONResponse, Response

from proxy.admission import Admission
from proxy.backing.forward import Forwarder, relayed
from proxy.errors import BackingFailed
from proxy.governance import Principal
from proxy.inbound import InboundRequest
from proxy.read_views import ReadViews, describe
from proxy.reads.projection import project_load_result
from proxy.resources import Resource

MayRestrict = Callable[[Principal, Resource], bool]


class LoadTableHandler:
    """Answers loadTable, projecting the metadata for a principal that policy restricts."""

    def __init__(self, forwarder: Forwarder, views: ReadViews, may_restrict: MayRestrict) -> None:
        self._forwarder = forwarder
        self._views = views
        self._may_restrict = may_restrict

    async def load_table(self, inbound: InboundRequest, admission: Admission) -> Response:
        principal, table = admission.principal, admission.intent.needs[0].resource
        if principal is None or not self._may_restrict(principal, table):
            return await self._forwarder.forward(inbound)
        upstream = await self._forwarder.exchange(inbound)
        if upstream.status_code != 200:
            return relayed(upstream, upstream.content)
        try:
            result = json.loads(upstream.content)
            metadata = TableMetadataUtil.parse_obj(result["metadata"])
        except (ValueError, KeyError, TypeError) as exc:
            raise BackingFailed("the backing catalog's table metadata cannot be read") from exc
        view = self._views.view(principal, table, metadata)
        if not view.restricted:
            return relayed(upstream, upstream.content)
        admission.evidence.append({"resource": str(table), "read_view": describe(view)})
        applies_masks = self._views.applies_masks(inbound.headers)
        projected = project_load_result(result, view, applies_masks=applies_masks)
        return JSONResponse(projected, headers={"cache-control": "no-store"})
