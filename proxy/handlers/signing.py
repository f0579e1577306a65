"""S3 remote signing: ``POST /v1/aws/s3/sign/{grant}``, and the signer a loadTable advertises.

``SigningHandlers`` answers the signer endpoints (``proxy.signing`` decides and signs; a call
without a grant, the spec's bare ``/v1/aws/s3/sign``, is refused: only a grant names the table).
``SignerAdverts`` adds the signer to a loadTable answer's ``config`` when signing is enabled and
the table is on S3: for a principal that reads the table's files whole (no rule restricts its
view) or reads governed snapshots (its grant names the governed metadata it was served). A
principal whose view is projected over the base files (a denied column, no governed snapshot)
gets no signer: those files hold what it may not read.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.responses import JSONResponse, Response

from proxy.admission.admission import Admission
from proxy.errors import Forbidden
from proxy.governance import Action, Principal
from proxy.governed.metadata import PROPERTY_PREFIX
from proxy.handlers.tables import TableAnswers
from proxy.inbound import InboundRequest
from proxy.locations import LOCATION_PROPERTIES
from proxy.policy import PolicyAuthorizer
from proxy.reads.disclosure import dumps, with_body
from proxy.resources import Resource
from proxy.signing.service import Signer, on_s3

WRITE_ACTIONS = (Action.INSERT, Action.DELETE, Action.UPDATE, Action.REWRITE)
"""A right to any of these on a table lets its holder have new files signed under it."""
_VIEW = f"{PROPERTY_PREFIX}view"


class SigningHandlers:
    """The signer endpoints (403 for every request while signing is not enabled)."""

    def __init__(self, signer: Signer | None) -> None:
        self._signer = signer

    async def sign(self, inbound: InboundRequest, admission: Admission) -> Response:
        if self._signer is None:
            raise Forbidden("S3 remote signing is not enabled on this icegov")
        answer = await self._signer.sign(inbound.route.params["grant"], admission.principal,
                                         inbound.json(), admission.evidence)
        return JSONResponse(answer, headers={"cache-control": "no-store"})

    async def sign_ungranted(self, _: InboundRequest, __: Admission) -> Response:
        raise Forbidden("sign through the s3.signer.endpoint a loadTable answer advertises: "
                        "its grant names the table")


class SignerAdverts:
    """The signer in loadTable answers' ``config``."""

    def __init__(self, signer: Signer, answers: TableAnswers,
                 authorizer: PolicyAuthorizer) -> None:
        self._signer = signer
        self._answers = answers
        self._authorizer = authorizer

    def advertised(self, response: Response, principal: Principal | None, table: Resource,
                   base_body: bytes) -> Response:
        """``response`` (the answer as ``principal`` receives it; ``base_body`` the backing's)
        with the signer in its ``config``, when the principal may have reads signed."""
        if principal is None or response.status_code != 200:
            return response
        base, metadata = self._answers.parsed(base_body)
        if not on_s3(metadata.location):
            return response
        result = json.loads(bytes(response.body)) if response.body != base_body else dict(base)
        governed = None
        if self._answers.restricted(principal, table):
            view = self._answers.view_of(principal, table, metadata)
            if view.restricted:
                governed = _governed(result) if self._answers.governs(view) else None
                if governed is None:
                    return response
        roots = tuple(r for r in (metadata.location, *(metadata.properties.get(p)
                                                     for p in LOCATION_PROPERTIES)) if r)
        write = any(self._authorizer.decide(principal, a, table).allowed for a in WRITE_ACTIONS)
        grant = self._signer.grant(principal, str(table), str(metadata.table_uuid), roots,
                                   write, governed)
        config = result.get("config")
        result["config"] = {**(config if isinstance(config, dict) else {}),
                            **self._signer.advert(grant)}
        return with_body(response, dumps(result))


def _governed(result: dict[str, Any]) -> tuple[str, str] | None:
    """The governed metadata file and view digest of a governed answer, else None."""
    metadata = result.get("metadata")
    properties = metadata.get("properties") if isinstance(metadata, dict) else None
    location = result.get("metadata-location")
    if isinstance(properties, dict) and isinstance(properties.get(_VIEW), str) and isinstance(
            location, str):
        return location, properties[_VIEW]
    return None
