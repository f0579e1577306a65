"""What in a catalog's answer is a storage secret: the vocabulary ``proxy.reads.disclosure``
decides with.

A storage credential reads whole files: every column of every row, whatever the policy hides.
The secret parts of an answer are the ``config`` properties that carry one (FileIO's S3, ADLS
and GCS keys, tokens, SAS, connection strings) and the same properties inside each of the
``storage-credentials``. Only the secret *values* go: the keys that say where and how to reach
storage (region, endpoint, path-style access) and each credential's ``prefix`` stay, so an
answer without secrets has the shape of one with them (clients such as DuckDB read a
credential's ``client.region``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

SECRET_WORDS = re.compile(
    r"secret|token|password|passwd|credential|key|sas|connection-string|service-account"
    r"|session|sign|auth")
"""Words that make a config key a credential (``s3.secret-access-key``, ``adls.sas-token.<acct>``,
``adls.auth.shared-key.account.key``, ``gcs.service-account``, ``hf.token``, ``s3.signer.uri``...):
FileIO gains keys with every release, so a key is judged by what it says, not looked up in a
list."""


def is_secret_property(key: str) -> bool:
    """True for a config key that carries (or leads to) a storage credential."""
    return SECRET_WORDS.search(key.lower()) is not None


def without_secrets(properties: Mapping[Any, Any]) -> dict[str, Any]:
    """``properties`` (a config map) without its secret properties (a new dict)."""
    return {str(k): v for k, v in properties.items() if not is_secret_property(str(k))}


def has_secrets(properties: object) -> bool:
    """True for a config map that holds a secret property."""
    return isinstance(properties, Mapping) and any(is_secret_property(str(k))
                                                   for k in properties)


def credential_without_secrets(credential: object) -> dict[str, Any] | None:
    """One of the ``storage-credentials`` as its ``prefix`` and the non-secret part of its
    ``config`` (nothing else of it: an unknown member may hold anything); None for an entry
    that is not a credential (dropped)."""
    if not isinstance(credential, Mapping) or not isinstance(credential.get("prefix"), str):
        return None
    config = credential.get("config")
    return {"prefix": credential["prefix"],
            "config": without_secrets(config) if isinstance(config, Mapping) else {}}
