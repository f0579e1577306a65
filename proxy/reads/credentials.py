"""Storage credentials are never handed to a principal that column or row rules restrict.

A storage credential reads whole files: every column of every row, whatever the policy hides.
For a restricted principal, the LoadTableResult's ``storage-credentials`` are dropped, and so
are the ``config`` properties that carry a secret (FileIO's S3, ADLS and GCS keys, tokens,
connection strings); the credentials endpoint refuses it (``proxy.credentials_handler``).
"""

from __future__ import annotations

import re
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


def without_credentials(result: dict[str, Any]) -> dict[str, Any]:
    """``result`` (a LoadTableResult-like dict) without storage credentials (a new dict)."""
    cleaned = {k: v for k, v in result.items() if k != "storage-credentials"}
    config = result.get("config")
    if isinstance(config, dict):
        cleaned["config"] = {k: v for k, v in config.items() if not is_secret_property(str(k))}
    return cleaned
