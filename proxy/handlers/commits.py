"""icegov's own handlers for table commits and transactions: the commit pinned to the base it
was classified against (``pinning``), landed by the ``Committer`` — rebased when it is a pure
append whose branch moved, reconciled when the backing's answer is lost — with a status the
client can trust: 409 only when nothing landed, 502/504 ``CommitStateUnknownException`` when
icegov cannot tell, never 503 (clients take that as "safe to retry", which it is not once the
commit was sent).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from pyiceberg.exceptions import ValidationError
from pyiceberg.table.metadata import TableMetadataUtil
from starlette.responses import Response

from proxy.admission.admission import Admission
from proxy.committer.committer import Committer
from proxy.committer.pinning import pinned_change
from proxy.handlers.tables import TableAnswers
from proxy.inbound import InboundRequest
from proxy.indexes.service import IndexService
from proxy.reads.disclosure import disclosed_response


class CommitHandlers:
    """``POST .../tables/{t}`` and ``POST .../transactions/commit``."""

    def __init__(self, committer: Committer, answers: TableAnswers | None = None,
                 indexes: IndexService | None = None) -> None:
        self._committer = committer
        self._answers = answers
        self._indexes = indexes

    async def commit_table(self, inbound: InboundRequest, admission: Admission) -> Response:
        [change] = admission.changes
        [original] = _as_sent(admission)

        def wire(bodies: Sequence[dict[str, Any]]) -> bytes | None:
            return None if bodies[0] is original else _dumps(bodies[0])

        body = pinned_change(change) or change.body
        response = await self._committer.commit(inbound, admission.changes, [body], wire, True)
        self._landed(response)
        if self._answers is None:
            return response
        # the answer carries the table's whole metadata: a restricted principal sees it projected
        return await self._answers.project_response(response, inbound, admission,
                                                    change.resource)

    def _landed(self, response: Response) -> None:
        """Start the governed builds (``proxy.governed``) and the index syncs
        (``proxy.indexes``) of a table a commit just changed, in the background."""
        governed = self._answers.governed if self._answers is not None else None
        builds = governed is not None and governed.service.in_use
        if response.status_code != 200 or not (builds or self._indexes is not None):
            return
        try:
            result = json.loads(bytes(response.body))
        except (ValueError, RecursionError):
            return
        if not isinstance(result, dict):
            return
        if governed is not None and builds:
            governed.landed(result)
        if self._indexes is not None:
            try:
                metadata = TableMetadataUtil.parse_obj(result["metadata"])
            except (ValueError, KeyError, TypeError, ValidationError):
                return  # not metadata icegov can read: the next plan of the table syncs it
            self._indexes.landed(metadata)

    async def commit_transaction(self, inbound: InboundRequest,
                                 admission: Admission) -> Response:
        originals = _as_sent(admission)
        envelope = inbound.json()

        def wire(bodies: Sequence[dict[str, Any]]) -> bytes | None:
            if all(b is o for b, o in zip(bodies, originals, strict=True)):
                return None
            return _dumps({**envelope, "table-changes": list(bodies)})

        bodies = [pinned_change(c) or c.body for c in admission.changes]
        response = await self._committer.commit(inbound, admission.changes, bodies, wire, False)
        withheld = (self._answers.disclosure.withheld(admission.principal)
                    if self._answers is not None else None)
        if withheld is None or withheld.nothing:
            return response
        if 200 <= response.status_code < 300:  # the spec's answer: whatever a backing added
            return Response(status_code=204)  # goes no further than icegov
        return disclosed_response(response, withheld)


def _as_sent(admission: Admission) -> list[dict[str, Any] | None]:
    """Each change's body when it is the caller's own (None: icegov built it from a data
    operation, or rewrote a commit built on a governed snapshot): a request whose bodies are
    all the caller's own goes out byte for byte."""
    return [None if c.operation is not None or c.rewritten else c.body
            for c in admission.changes]


def _dumps(body: dict[str, Any]) -> bytes:
    return json.dumps(body, separators=(",", ":"), allow_nan=False).encode()
