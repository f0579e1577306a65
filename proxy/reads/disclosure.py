"""What of a backing catalog's answer a principal may receive: the one place that decides.

A backing's answers carry three things that read more than the policy lets a restricted
principal read, and every answer that can carry them passes through here — loadTable, commit
answers, create and stage-create, ``/v1/config``, views, the credentials endpoint and
idempotent replays — whether or not anything in it needed projecting:

* **Secret ``config`` properties** (``credentials.is_secret_property``) of a LoadTableResult,
  LoadViewResult or CommitTableResponse, and of the catalog config's ``defaults`` and
  ``overrides``. Such a key is the warehouse's, not one table's: withheld from every principal
  that some column or row rule restricts *anywhere*.
* **The secret parts of ``storage-credentials``**: withheld from a principal that a rule may
  restrict on the table (as ``GET …/credentials`` refuses it), and from one restricted anywhere
  when a credential's ``prefix`` is not inside the table's own location (it reads other
  tables; a view or an answer without a table location has no such prefix).
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
from proxy.resources import Resource

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
    foreign_credential_secrets: bool = False
    """Secret values of the storage credentials whose prefix is not inside the table."""
    metadata_files: bool = False
    """``metadata-location`` (unless the answer must keep it) and ``metadata-log`` paths."""

    @property
    def nothing(self) -> bool:
        return not (self.config_secrets or self.credential_secrets
                    or self.foreign_credential_secrets or self.metadata_files)

    def and_metadata_files(self) -> Withheld:
        return replace(self, metadata_files=True)


EVERY_SECRET = Withheld(config_secrets=True, credential_secrets=True)
"""What no answer kept at rest holds (``proxy.idempotency``)."""


class Disclosure:
    """Decides, per principal and table, what a backing's answers may tell it."""

    def __init__(self, restricts: Callable[[Principal, Resource], bool],
                 restricted_anywhere: Callable[[Principal], bool]) -> None:
        """``restricts``: whether some column or row rule may apply to a principal on a
        table; ``restricted_anywhere``: whether one applies to it on any table."""
        self._restricts = restricts
        self._restricted_anywhere = restricted_anywhere

    def withheld(self, principal: Principal | None, table: Resource | None = None) -> Withheld:
        """What ``principal`` may not receive of an answer about ``table`` (None: an answer
        about no one table, such as the catalog config or a view)."""
        if principal is None or not self._restricted_anywhere(principal):
            return Withheld()
        on_table = table is None or self._restricts(principal, table)
        return Withheld(config_secrets=True, credential_secrets=on_table,
                        foreign_credential_secrets=True)


def disclosed(result: Json, withheld: Withheld, *, keep_location: bool = False,
              table_location: str | None = None) -> Json:
    """``result`` (a LoadTableResult, CommitTableResponse, LoadViewResult or
    LoadCredentialsResponse) without what is ``withheld`` (a new dict; ``result`` itself when
    nothing is). ``keep_location``: the answer must name its metadata file;
    ``table_location``: the table's, for an answer that carries no metadata."""
    if withheld.nothing:
        return result
    cleaned = dict(result)
    if withheld.config_secrets and has_secrets(cleaned.get(CONFIG)):
        cleaned[CONFIG] = without_secrets(cleaned[CONFIG])
    if STORAGE_CREDENTIALS in cleaned:
        cleaned[STORAGE_CREDENTIALS] = _credentials(cleaned[STORAGE_CREDENTIALS], withheld,
                                                    table_location or _location(result))
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
                   keep_location: bool = False, table_location: str | None = None,
                   ) -> bytes | None:
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
    cleaned = disclosed(result, withheld, keep_location=keep_location,
                        table_location=table_location)
    return None if cleaned == result else dumps(cleaned)


def disclosed_response(response: Response, withheld: Withheld, *,
                       keep_location: bool = False,
                       table_location: str | None = None) -> Response:
    """``response`` (read in full) without what is ``withheld``: its own status and headers
    (an ``idempotent-replayed`` among them) kept, its body replaced only when something left
    (``disclosed`` tells the keywords)."""
    cleaned = disclosed_body(bytes(response.body), response.status_code, withheld,
                             keep_location=keep_location, table_location=table_location)
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


def _credentials(credentials: object, withheld: Withheld, location: str | None) -> list[Any]:
    """The storage credentials as ``withheld`` lets them through (a malformed list: none)."""
    if not isinstance(credentials, list):
        return []
    kept: list[Any] = []
    for credential in credentials:
        if withheld.credential_secrets or (
                withheld.foreign_credential_secrets and not _inside(credential, location)):
            cleaned = credential_without_secrets(credential)
            if cleaned is not None:
                kept.append(cleaned)
        else:
            kept.append(credential)
    return kept


def _location(result: Json) -> str | None:
    metadata = result.get("metadata")
    location = metadata.get("location") if isinstance(metadata, dict) else None
    return location if isinstance(location, str) and location else None


def _inside(credential: object, location: str | None) -> bool:
    """Whether a storage credential's prefix lies inside the table ``location`` (compared
    textually: a prefix with ``..`` or ``.`` segments is never inside)."""
    prefix = credential.get("prefix") if isinstance(credential, Mapping) else None
    if location is None or not isinstance(prefix, str):
        return False
    if any(part in (".", "..") for part in prefix.split("/")):
        return False
    root = location.rstrip("/")
    return prefix.rstrip("/") == root or prefix.startswith(root + "/")
