"""``GET …/tables/{t}/credentials`` (with or without ``?planId=``): the backing's storage
credentials, forwarded only where the backing vends them. A principal that column or row rules
restrict on the table is refused (403: a credential reads whole files, hidden columns and rows
included); one restricted on other tables gets the credentials without their secrets
(``proxy.reads.disclosure``: nothing tells a credential scoped to this table from the
warehouse's key).

A ``planId`` must be a plan icegov issued to this caller for this table (404 otherwise); the
backing knows nothing of icegov's plans, so it is asked for the table's credentials.
"""

from __future__ import annotations

from starlette.responses import Response

from proxy.admission.admission import Admission
from proxy.backing.forward import Forwarder, relayed_answer
from proxy.errors import Forbidden
from proxy.handlers.tables import TableAnswers
from proxy.inbound import InboundRequest
from proxy.plans.service import PlanService
from proxy.reads.disclosure import disclosed_response


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
        withheld = self._answers.disclosure.withheld(admission.principal)
        if plan_id is None and withheld.nothing:
            return await self._forwarder.forward(inbound)
        upstream = await (self._forwarder.exchange(inbound) if plan_id is None else
                          self._forwarder.fetch(inbound.raw_path, b"", inbound.headers))
        return disclosed_response(relayed_answer(upstream, upstream.content), withheld)
