"""Table metadata answered to a restricted principal: loadTable (``GET …/tables/{t}``) and the
metadata a table commit answers with.

Every client that plans itself (Spark 1.10, Trino, metadata tables, incremental scans) reads what
loadTable says, so the answer itself carries a principal's column restrictions: the schemas lose
the hidden columns (ids kept), the table config asks clients to plan on the server, and the
spec's ``read-restrictions`` declares masks and the row filter (``proxy.reads.projection``). A
commit's answer carries the same metadata and is projected the same way. Every such answer, to a
principal that some rule restricts anywhere, also passes ``proxy.reads.disclosure`` (secret
config values, storage credentials' secrets, metadata file paths), projected or not. A
principal no column or row rule can touch gets the backing's bytes unchanged.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any

from pyiceberg.table.metadata import TableMetadata, TableMetadataUtil
from starlette.responses import Response

from proxy.admission.admission import Admission
from proxy.backing.forward import Forwarder, relayed_answer
from proxy.commits.index_property import check_create_request
from proxy.commits.lru import SizedLru
from proxy.errors import BackingFailed, Forbidden
from proxy.governance import Principal
from proxy.governed.answers import GovernedAnswers
from proxy.inbound import InboundRequest
from proxy.reads.disclosure import (
    Disclosure,
    disclosed,
    disclosed_response,
    dumps,
    with_body,
)
from proxy.reads.projection import project_load_result
from proxy.reads.read_views import ReadViews, describe
from proxy.reads.scan_access import check_row_filter_history
from proxy.reads.writes import spec_refusal
from proxy.resources import Resource
from proxy.restrictions import ReadView

MayRestrict = Callable[[Principal, Resource], bool]
Advertise = Callable[[Response, Principal | None, Resource, bytes], Response]
"""Adds the S3 signer to a loadTable answer (``proxy.handlers.signing.SignerAdverts``)."""


class TableAnswers:
    """Table metadata answers as each principal may see them: projected for the principals
    policy restricts on the table, and without what ``proxy.reads.disclosure`` withholds."""

    def __init__(self, views: ReadViews, may_restrict: MayRestrict,
                 restricted_anywhere: Callable[[Principal], bool],
                 governed: GovernedAnswers | None = None) -> None:
        self._views = views
        self._may_restrict = may_restrict
        self.disclosure = Disclosure(restricted_anywhere)
        self.governed = governed
        self._parses: SizedLru[bytes, tuple[dict[str, Any], TableMetadata]] = SizedLru(64)

    def restricted(self, principal: Principal | None, table: Resource) -> bool:
        """True when some column or row rule may apply to ``principal`` on ``table``."""
        return principal is not None and self._may_restrict(principal, table)

    def untouched(self, principal: Principal | None, table: Resource) -> bool:
        """True when ``principal`` receives the backing's answers about ``table`` byte for
        byte: no rule restricts it anywhere (so there is nothing to project or withhold)."""
        return principal is None or (self.disclosure.withheld(principal).nothing
                                     and not self.restricted(principal, table))

    async def projected(self, result: dict[str, Any], principal: Principal, table: Resource,
                        inbound: InboundRequest, evidence: list[dict[str, Any]],
                        metadata: TableMetadata | None = None) -> Any | None:
        """The answer ``result`` (a parsed LoadTableResult or CommitTableResponse; ``metadata``
        its metadata, parsed) with the table's metadata as ``principal`` may see it — governed
        snapshots where its view filters rows or masks a column (``proxy.governed``) — or None
        when its view of the table restricts nothing (what else it may not receive is
        ``disclosure``'s to take out)."""
        metadata = metadata or _metadata_of(result)
        view = self._views.view(principal, table, metadata)
        if not view.restricted:
            return None
        evidence.append({"resource": str(table), "read_view": describe(view)})
        check_row_filter_history(view, metadata)
        if self.governed is not None and self.governed.governs(view):
            return await self.governed.answer(result, view, metadata, table, evidence)
        applies_masks = self._views.applies_masks(principal, inbound.headers)
        return project_load_result(result, view, applies_masks=applies_masks)

    def view_of(self, principal: Principal, table: Resource, metadata: TableMetadata) -> ReadView:
        """What ``principal`` may read of ``table`` as ``metadata`` describes it."""
        return self._views.view(principal, table, metadata)

    def governs(self, view: ReadView) -> bool:
        """True when ``view``'s principal is served governed snapshots."""
        return self.governed is not None and self.governed.governs(view)

    def parsed(self, body: bytes) -> tuple[dict[str, Any], TableMetadata]:
        """A table answer's JSON and its metadata, parsed once per distinct answer (the same
        metadata is answered again and again; both are only ever read)."""
        key = hashlib.blake2b(body, digest_size=20).digest()
        known = self._parses.get(key)
        if known is not None:
            return known
        try:
            result = json.loads(body)
        except (ValueError, RecursionError) as exc:
            raise BackingFailed("the backing catalog's table metadata cannot be read") from exc
        if not isinstance(result, dict):
            raise BackingFailed("the backing catalog's table metadata cannot be read")
        parsed = (result, _metadata_of(result))
        self._parses.put(key, parsed)
        return parsed

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
        """``response`` (already read in full) as the admitted principal may receive it:
        projected when its view of the table restricts something, and in every case without
        what ``disclosure`` withholds from it; its status and headers kept (``keep_location``:
        a CommitTableResponse must name its metadata file)."""
        principal = admission.principal
        if principal is None:
            return response
        withheld = self.disclosure.withheld(principal)
        if response.status_code != 200 or not self.restricted(principal, table):
            return disclosed_response(response, withheld, keep_location=keep_location)
        result, metadata = self.parsed(bytes(response.body))
        projected = await self.projected(result, principal, table, inbound, admission.evidence,
                                         metadata)
        if projected is not None and not (self.governed is not None
                                          and self.governed.is_governed(projected)):
            withheld = withheld.and_metadata_files()
        if projected is not None:
            result = projected
        cleaned = disclosed(result, withheld, keep_location=keep_location)
        return with_body(response, dumps(cleaned)) if projected is not None or (
            cleaned != result) else response


def _metadata_of(result: dict[str, Any]) -> TableMetadata:
    try:
        return TableMetadataUtil.parse_obj(result["metadata"])
    except (ValueError, KeyError, TypeError) as exc:
        raise BackingFailed("the backing catalog's table metadata cannot be read") from exc


class LoadTableHandler:
    """Answers loadTable, projecting the metadata for a principal that policy restricts."""

    def __init__(self, forwarder: Forwarder, answers: TableAnswers,
                 adverts: Advertise | None = None) -> None:
        self._forwarder = forwarder
        self._answers = answers
        self._adverts = adverts

    async def load_table(self, inbound: InboundRequest, admission: Admission) -> Response:
        """The table's metadata as the principal may see it (and, with S3 remote signing,
        the signer it may use: ``proxy.handlers.signing``)."""
        principal, table = admission.principal, admission.intent.needs[0].resource
        if self._adverts is None and self._answers.untouched(principal, table):
            return await self._forwarder.forward(inbound)
        upstream = await self._forwarder.exchange(inbound)
        answer = await self._answers.project_response(relayed_answer(upstream, upstream.content),
                                                      inbound, admission, table,
                                                      keep_location=False)
        if self._adverts is None:
            return answer
        return self._adverts(answer, principal, table, upstream.content)

    async def create_table(self, inbound: InboundRequest, admission: Admission) -> Response:
        """Create (or stage-create) a table: forwarded; its answer, which carries the new
        table's metadata and any vended credentials, as the principal may receive it."""
        principal, table = admission.principal, admission.intent.needs[0].resource
        check_create_request(inbound.json())  # icegov's own index property (400 when wrong)
        if principal is None or self._answers.untouched(principal, table):
            return await self._forwarder.forward(inbound)
        if self._answers.restricted(principal, table):
            self._answers.refuse_hidden_layout(principal, table, inbound.json())
        upstream = await self._forwarder.exchange(inbound)
        response = relayed_answer(upstream, upstream.content)
        return await self._answers.project_response(response, inbound, admission, table)
