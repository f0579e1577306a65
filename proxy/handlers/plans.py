"""The planning endpoints icegov serves itself: ``POST …/plan``, ``GET``/``DELETE …/plan/{id}``
and ``POST …/tasks`` (thin: parse, ask ``proxy.plans.service``, answer JSON).

A plan over one shard of manifests is answered ``completed`` with its file scan tasks; a larger
one with plan tasks (one signed token per shard) that clients fetch in parallel, from any
replica; above ``submit_above_files``, a client that can poll gets ``submitted`` and its plan is
prepared in the background. pyiceberg ≤ 0.12 cannot poll and never gets ``submitted``.
"""

from __future__ import annotations

import asyncio
import re

from starlette.responses import Response

from proxy.admission.admission import Admission
from proxy.errors import NoSuchPlanId
from proxy.inbound import InboundRequest
from proxy.planning.request import parse_scan_request, parse_task_request
from proxy.plans.service import PlanService, Scan

_OLD_PYICEBERG = re.compile(r"^PyIceberg (0\.(\d|1[0-2]))(\.|$)")


def can_poll(inbound: InboundRequest) -> bool:
    """False for clients known not to poll ``submitted`` plans (pyiceberg ≤ 0.12)."""
    version = inbound.header(b"x-client-version")
    text = version.decode("latin-1") if version is not None else ""
    return not _OLD_PYICEBERG.match(text)


class PlanHandlers:
    """Answers the planning endpoints through one ``PlanService``."""

    def __init__(self, service: PlanService) -> None:
        self._service = service

    async def plan_table_scan(self, inbound: InboundRequest, admission: Admission) -> Response:
        request = await asyncio.to_thread(parse_scan_request, inbound.json())  # big filters
        scan = await self._service.open_scan(inbound, admission, request)
        return _json(await self._service.plan(scan, poll=can_poll(inbound)))

    async def fetch_planning_result(self, inbound: InboundRequest,
                                    admission: Admission) -> Response:
        scan = await self._service.reopen(inbound, admission, _plan_id(inbound), kind="plan")
        return _json(await self._service.result(scan))

    async def cancel_planning(self, inbound: InboundRequest, admission: Admission) -> Response:
        await self._service.cancel(inbound, admission, _plan_id(inbound))
        return Response(status_code=204)

    async def fetch_scan_tasks(self, inbound: InboundRequest, admission: Admission) -> Response:
        token = parse_task_request(inbound.json())
        scan: Scan = await self._service.reopen(inbound, admission, token, kind="task")
        return _json(await self._service.shard_tasks(scan))


def _json(body: bytes) -> Response:
    return Response(body, media_type="application/json")


def _plan_id(inbound: InboundRequest) -> str:
    plan_id = inbound.route.params.get("plan_id")
    if not plan_id:
        raise NoSuchPlanId("no such plan")
    return plan_id
