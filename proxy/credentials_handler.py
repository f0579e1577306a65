"""``GET …/tables/{t}/credentials`` (with or without ``?planId=``): the backing's storage
credentials, forwarded only where the backing vends them and only to a principal whose reads
policy does not restrict on the table (a credential reads whole files, hidden columns and rows
included). To a principal restricted on other tables, a credential whose prefix is not inside
this table's location arrives without its secrets (``proxy.reads.disclosure``): it reads the
tables the rules restrict.

A ``planId`` must be a plan icegov issued to this caller for this table (404 otherwise); the
backing knows nothing of icegov's plans, so it is asked for the table's credentials.
"""

from __future__ import annotations

import json

from starlette.responses import Response

from proxy.admission import Admission
from proxy.backing.forward import Forwarder, relayed_answer
from proxy.errors import Forbidden
from proxy.inbound import InboundRequest
from proxy.load_handler import TableAnswers
from proxy.plan_service import PlanService
from proxy.reads.disclosure import disclosed_response

CREDENTIALS_SUFFIX = b"/credentials"


class CredentialsHandler:
    """Answers the credentials endpoint."""

    def __init__(self, forwarder: Forwarder, answers: TableAnswers, plans: PlanService) -> None:
        self._forwarder = forwarder
        self._answers = answers
        self._plans = plans

    async def load_credentials(self, inbound: InboundRequest, admission: Admission) -> Response:
        table = admission.intent.needs[0].resource
        plan_id = inbound.query("planId")
        if plan_id is not None:
            self._plans.check_plan_id(plan_id, admission)
        if self._answers.restricted(admission.principal, table):
            raise Forbidden(f"column or row rules restrict what you may read of {table.name}: "
                            "storage credentials would read whole files, so none are vended")
        withheld = self._answers.disclosure.withheld(admission.principal, table)
        if plan_id is None and withheld.nothing:
            return await self._forwarder.forward(inbound)
        upstream = await (self._forwarder.exchange(inbound) if plan_id is None else
                          self._forwarder.fetch(inbound.raw_path, b"", inbound.headers))
        answer = relayed_answer(upstream, upstream.content)
        if withheld.nothing or upstream.status_code != 200:
            return answer
        return disclosed_response(answer, withheld,
                                  table_location=await self._table_location(inbound))

    async def _table_location(self, inbound: InboundRequest) -> str | None:
        """The table's location as the backing's loadTable tells it (None: unknown, and then
        no credential counts as inside it)."""
        loaded = await self._forwarder.fetch(inbound.raw_path.removesuffix(CREDENTIALS_SUFFIX),
                                             b"", inbound.headers)
        try:
            location = json.loads(loaded.content)["metadata"]["location"]
        except (ValueError, KeyError, TypeError):
            return None
        return location if loaded.status_code == 200 and isinstance(location, str) else None
