"""The signer the handler calls: grants for loadTable answers, and signatures for requests.

``Signer.advert`` is the ``config`` a loadTable answer gains (only when signing is enabled and
the table is on S3): ``s3.remote-signing-enabled``, ``s3.signer`` (pyiceberg's
``S3V4RestSigner``), ``s3.signer.endpoint`` carrying the sealed grant, and ``s3.signer.uri``
when configured. ``Signer.sign`` answers one ``S3SignRequest``: the grant unsealed and matched
to the caller and the policy generation, the request parsed (``wire``) and decided
(``decide``), then signed with icegov's own credentials (``sigv4``). Every decision is noted in
the audit record's evidence; reads are aggregated (``tally``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from proxy.audit import AuditLog, AuditRecord
from proxy.audit.record import AGGREGATED
from proxy.errors import Forbidden
from proxy.governance import Principal
from proxy.signing.decide import NO_OVERWRITE, decide
from proxy.signing.grants import Grant, seal_grant, unseal_grant
from proxy.signing.readable import GovernedFiles
from proxy.signing.settings import SigningSettings
from proxy.signing.sigv4 import UNSIGNED_PAYLOAD, Credentials, amz_date, sign
from proxy.signing.tally import Key, ReadTally
from proxy.signing.wire import Operation, StorageRequest, Store, parse_sign_request

ENDPOINT = "v1/aws/s3/sign"
S3_PREFIXES = ("s3://", "s3a://", "s3n://")
Json = dict[str, Any]


class SigningUnavailable(ValueError):
    """Signing is enabled but icegov has no storage credentials to sign with."""


def _credentials(file_io: Mapping[str, str]) -> Credentials:
    access, secret = file_io.get("s3.access-key-id"), file_io.get("s3.secret-access-key")
    if not access or not secret:
        raise SigningUnavailable("signing needs s3.access-key-id and s3.secret-access-key in "
                                 "file_io: icegov signs with its own storage credentials")
    return Credentials(access, secret, file_io.get("s3.session-token") or None)


class Signer:
    """Grants and signatures for one icegov process."""

    def __init__(self, settings: SigningSettings, file_io: Mapping[str, str], key: bytes,
                 generation: Callable[[], int], audit: AuditLog,
                 clock: Callable[[], float] = time.time) -> None:
        self.settings = settings
        self._credentials = _credentials(file_io)
        self._store = Store.from_file_io(file_io)
        self._region = file_io.get("s3.region") or file_io.get("client.region")
        self._key = key
        self._generation = generation
        self._audit = audit
        self._clock = clock
        self._files = GovernedFiles(file_io)
        self._tally = ReadTally(settings.read_audit_seconds)

    def advert(self, grant: Grant) -> dict[str, str]:
        """The ``config`` entries that point a client at this signer under ``grant``."""
        config = {"s3.remote-signing-enabled": "true", "s3.signer": "S3V4RestSigner",
                  "s3.signer.endpoint": f"{ENDPOINT}/{seal_grant(grant, self._key)}"}
        if self.settings.uri:
            config["s3.signer.uri"] = self.settings.uri
        return config

    def grant(self, principal: Principal, table: str, table_uuid: str, roots: tuple[str, ...],
              write: bool, governed: tuple[str, str] | None = None) -> Grant:
        """A grant for ``principal`` on ``table`` (``governed``: its governed metadata file and
        view digest), decided under the policy generation in force now."""
        where, view = governed or ("", "")
        return Grant(principal.name, tuple(principal.roles), table, table_uuid, roots, where,
                     view, write, self._generation(), self._clock() + self.settings.grant_seconds)

    async def sign(self, token: str, principal: Principal | None, body: Any,
                   evidence: list[Json]) -> Json:
        """The ``S3SignResponse`` for ``body``, or 403 (noted in ``evidence`` either way)."""
        now = self._clock()
        self._flush(now)
        grant = self._checked(unseal_grant(token, self._key, now), principal)
        note: Json = {"table": grant.table, "view": grant.view or None}
        evidence.append({"signing": note})
        request, region = parse_sign_request(body, self._store, self._region)
        note.update(operation=str(request.operation), object=request.location)
        readable = (await self._files.paths(grant.governed)
                    if grant.governed and not request.operation.writes else None)
        try:
            decide(grant, request, readable)
        except Forbidden:
            note["decision"] = "deny"
            raise
        note["decision"] = "allow"
        if request.operation is Operation.READ:
            quiet = self._tally.count(grant.key, request.location, now)
            if quiet is None:
                evidence.append(AGGREGATED)
            else:
                note["earlier_reads"] = quiet
        return self._signed(request, region, now)

    def _checked(self, grant: Grant, principal: Principal | None) -> Grant:
        if principal is None or (principal.name, tuple(principal.roles)) != (
                grant.principal, grant.roles):
            raise Forbidden("this signer endpoint was issued to another principal")
        if grant.generation != self._generation():
            raise Forbidden("the policy changed since the table was loaded: load it again")
        return grant

    def _signed(self, request: StorageRequest, region: str, now: float) -> Json:
        date = amz_date(now)
        added = {"x-amz-date": date, "x-amz-content-sha256": UNSIGNED_PAYLOAD}
        if self._credentials.session_token:
            added["x-amz-security-token"] = self._credentials.session_token
        if request.operation in NO_OVERWRITE:
            added["if-none-match"] = "*"
        signed = {"host": request.host, **dict(request.amz_headers), **added}
        url = request.url
        added["authorization"] = sign(request.method, url, signed, self._credentials, region,
                                      date)
        return {"uri": url, "headers": {name: [value] for name, value in added.items()}}

    def _flush(self, now: float) -> None:
        for key, summary in self._tally.due(now):
            self._audit.write(_summary_record(key, summary))

    def close(self) -> None:
        """Write the summaries of reads not yet on record."""
        for key, summary in self._tally.drain():
            self._audit.write(_summary_record(key, summary))


def on_s3(location: str) -> bool:
    """True for a table location on S3 (what icegov signs for)."""
    return location.startswith(S3_PREFIXES)


def _summary_record(key: Key, summary: Json) -> AuditRecord:
    principal, table, _, view = key
    record = AuditRecord(request_id="signed-reads", method="POST", path=f"/{ENDPOINT}",
                         endpoint="sign_s3_request", principal=Principal(principal),
                         resources=(table,), decision="allow",
                         evidence=[{"signing": {"table": table, "view": view or None,
                                                "operation": "read", "decision": "allow",
                                                "earlier_reads": summary}}], status=200)
    return record
