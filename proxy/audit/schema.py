"""The JSON Schema (draft 2020-12) of an audit record, shipped in the package for consumers."""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

SCHEMA_FILE = "record-v2.schema.json"


def record_schema() -> dict[str, Any]:
    """The JSON Schema every written record satisfies (``icegov.audit/2``)."""
    text = resources.files("proxy.audit").joinpath(SCHEMA_FILE).read_text(encoding="utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema
