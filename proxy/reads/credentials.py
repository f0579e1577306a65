"""Storage credentials are never handed to a principal that column or row rules restrict.

A storage credential reads whole files: every column of every row, whatever the policy hides.
For a restricted principal, the LoadTableResult's ``storage-credentials`` are dropped, and so
are the ``config`` properties that carry a secret (FileIO's S3, ADLS and GCS keys, tokens,
connection strings); the credentials endpoint refuses it (``proxy.credentials_handler``). A
principal restricted on some table gets no secret ``config`` property anywhere (``/v1/config``,
loadTable, loadView): such a key is the warehouse's, not one table's.
"""

from __future__ import annotations

import json
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


def without_config_secrets(body: bytes) -> bytes | None:
    """A LoadTableResult or LoadViewResult (JSON ``body``) with no secret ``config`` property,
    as new bytes; None when it has none to drop (or is not such an object). For a principal
    restricted on some table: a warehouse-wide key in the config of a table it may read whole
    also reads the tables it may not (``storage-credentials``, vended for the table alone,
    stay)."""
    try:
        result = json.loads(body)
    except ValueError:
        return None
    config = result.get("config") if isinstance(result, dict) else None
    if not isinstance(config, dict) or not any(is_secret_property(str(k)) for k in config):
        return None
    result["config"] = {k: v for k, v in config.items() if not is_secret_property(str(k))}
    return json.dumps(result, separators=(",", ":")).encode()


def without_credentials(result: dict[str, Any]) -> dict[str, Any]:
    """``result`` (a LoadTableResult-like dict) without storage credentials (a new dict)."""
    cleaned = {k: v for k, v in result.items() if k != "storage-credentials"}
    config = result.get("config")
    if isinstance(config, dict):
        cleaned["config"] = {k: v for k, v in config.items() if not is_secret_property(str(k))}
    return cleaned
