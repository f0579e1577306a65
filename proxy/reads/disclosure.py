"""What of a backing catalog's answer a principal may receive: the one place that decides.

A backing's answers carry three things that read more than the policy lets a restricted
principal read, and every answer that can carry them passes through here — loadTable, commit
answers, create and stage-create, ``/v1/config``, views, the credentials endpoint and
idempotent replays — whether or not anything in it needed projecting:

* **Secret ``config`` properties** (``credentials.is_secret_property``) of a LoadTableResult,
  LoadViewResult or CommitTableResponse, and of the catalog config's ``defaults`` and
  ``overrides``. Such a key is the warehouse's, not one table's: withheld from every principal
  that some column or row rule restricts *anywhere*.
* **The secret parts of ``storage-credentials``**, from the same principals. A credential's
  ``prefix`` says which paths a client uses it for, not what it can read: a backing that cannot
  scope credentials (no STS, a MinIO root key) vends its warehouse key under the table's
  prefix, and nothing in the answer tells the two apart. So a principal restricted on one table
  gets no storage secret for any (``GET …/credentials`` refuses one restricted on the table
  itself, and answers others without the secrets).
* **``metadata-location`` and the ``metadata-log`` paths**, where the principal's view of the
  table restricts something (``metadata_files``, set by the projection): those files hold every
  column, and registering one elsewhere would shed the rules. A CommitTableResponse keeps its
  ``metadata-location`` (the spec requires it).

Only secret values go: non-secret properties and each credential's ``prefix`` stay, so a
restricted principal's answer has the shape an unrestricted one's has. A 2xx answer that
should be cleaned but is not a JSON object is a backing failure (502): fail closed.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from starlette.responses import Response

from proxy.errors import BackingFailed
from proxy.governance import Principal
from proxy.reads.credentials import credential_without_secrets, has_secrets, without_secrets

Json = dict[str, Any]
CONFIG = "config"
STORAGE_CREDENTIALS = "storage-credentials"
METADATA_LOCATION = "metadata-location"
CONFIG_SECTIONS = ("defaults", "overrides")
"""The catalog config's property maps (``GET /v1/config``)."""


@dataclass(frozen=True, slots=True)
class Withheld:
    """What of a backing's answer one principal may not receive."""

    config_secrets: bool = False
    """Secret ``config`` (and catalog config) values."""
    credential_secrets: bool = False
    """Secret values of every storage credential."""
    metadata_files: bool = False
    """``metadata-location`` (unless the answer must keep it) and ``metadata-log`` paths."""

    @property
    def nothing(self) -> bool:
        return not (self.config_secrets or self.credential_secrets or self.metadata_files)

    def and_metadata_files(self) -> Withheld:
        return replace(self, metadata_files=True)


EVERY_SECRET = Withheld(config_secrets=True, credential_secrets=True)
"""What no answer kept at rest holds (``proxy.idempotency``)."""


class Disclosure:
    """Decides what a backing's answers may tell each principal."""

    def __init__(self, restricted_anywhere: Callable[[Principal], bool]) -> None:
        """``restricted_anywhere``: whether some column or row rule applies to a principal
        on any table."""
        self._restricted_anywhere = restricted_anywhere

    def withheld(self, principal: Principal | None) -> Withheld:
        """What ``principal`` may not receive of any answer (the metadata files of a table
        are added where its view restricts something: ``Withheld.and_metadata_files``)."""
        if principal is None or not self._restricted_anywhere(principal):
            return Withheld()
        return Withheld(config_secrets=True, credential_secrets=True)


def disclosed(result: Json, withheld: Withheld, *, keep_location: bool = False) -> Json:
    """``result`` (a LoadTableResult, CommitTableResponse, LoadViewResult or
    LoadCredentialsResponse) without what is ``withheld`` (a new dict; ``result`` itself when
    nothing is). ``keep_location``: the answer must name its metadata file."""
    if withheld.nothing:
        return result
    cleaned = dict(result)
    if withheld.config_secrets and has_secrets(cleaned.get(CONFIG)):
        cleaned[CONFIG] = without_secrets(cleaned[CONFIG])
    if withheld.credential_secrets and STORAGE_CREDENTIALS in cleaned:
        cleaned[STORAGE_CREDENTIALS] = _credentials(cleaned[STORAGE_CREDENTIALS])
    if withheld.metadata_files:
        if not keep_location:
            cleaned.pop(METADATA_LOCATION, None)
        metadata = cleaned.get("metadata")
        if isinstance(metadata, dict) and "metadata-log" in metadata:
            cleaned["metadata"] = {**metadata, "metadata-log": []}
    return cleaned


def disclosed_config(config: Json, withheld: Withheld) -> Json:
    """A catalog config (``GET /v1/config``) without the secret values of its ``defaults``
    and ``overrides`` when they are withheld (a new dict)."""
    if not withheld.config_secrets:
        return config
    cleaned = dict(config)
    for section in CONFIG_SECTIONS:
        if isinstance(cleaned.get(section), Mapping):
            cleaned[section] = without_secrets(cleaned[section])
    return cleaned


def disclosed_body(body: bytes, status: int, withheld: Withheld, *,
                   keep_location: bool = False) -> bytes | None:
    """The JSON answer ``body`` without what is ``withheld``, as new bytes; None when it is
    to be sent as it is (nothing withheld or nothing to take out, or an answer other than
    2xx that is not a JSON object). 502 for a 2xx answer that is not a JSON object."""
    if withheld.nothing:
        return None
    try:
        result = json.loads(body)
    except (ValueError, RecursionError):
        result = None
    if not isinstance(result, dict):
        if 200 <= status < 300 and body.strip():
            raise BackingFailed("the backing catalog's answer is not a JSON object")
        return None
    cleaned = disclosed(result, withheld, keep_location=keep_location)
    return None if cleaned == result else dumps(cleaned)


def disclosed_response(response: Response, withheld: Withheld, *,
                       keep_location: bool = False) -> Response:
    """``response`` (read in full) without what is ``withheld``: its own status and headers
    (an ``idempotent-replayed`` among them) kept, its body replaced only when something left
    (``disclosed`` tells the keywords)."""
    cleaned = disclosed_body(bytes(response.body), response.status_code, withheld,
                             keep_location=keep_location)
    return response if cleaned is None else with_body(response, cleaned)


def with_body(response: Response, body: bytes) -> Response:
    """A JSON answer ``body`` with ``response``'s status and headers (its length and type
    recomputed, never cached: it was made for one principal)."""
    rebuilt = Response(body, status_code=response.status_code)
    recomputed = {b"content-length", b"content-type", b"content-encoding", b"cache-control",
                  b"etag"}
    rebuilt.raw_headers = [
        *(h for h in response.raw_headers if h[0].lower() not in recomputed),
        (b"content-type", b"application/json"), (b"cache-control", b"no-store"),
        (b"content-length", str(len(body)).encode()),
    ]
    return rebuilt


def dumps(result: Json) -> bytes:
    return json.dumps(result, separators=(",", ":")).encode()


def _credentials(credentials: object) -> list[Any]:
    """The storage credentials without their secrets (a list that is not one: none)."""
    if not isinstance(credentials, list):
        return []
    cleaned = (credential_without_secrets(c) for c in credentials)
    return [c for c in cleaned if c is not None]
