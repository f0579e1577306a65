"""Raw HTTP helpers for talking to a running proxy as one of the demo principals."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx


def token(url: str, credential: str) -> str:
    """An icegov access token for ``client_id:secret`` from the proxy's token endpoint."""
    client_id, secret = credential.split(":", 1)
    response = httpx.post(f"{url}/v1/oauth/tokens", data={
        "grant_type": "client_credentials", "client_id": client_id, "client_secret": secret,
        "scope": "catalog"})
    response.raise_for_status()
    return str(response.json()["access_token"])


def as_principal(url: str, credential: str) -> httpx.Client:
    """An httpx client that calls the proxy with this principal's bearer token."""
    return httpx.Client(base_url=url, headers={"authorization": f"Bearer {token(url, credential)}"})


def audit_records(path: Path) -> list[dict[str, Any]]:
    """Every audit record written so far."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def wait_for(condition: Any, timeout: float = 10.0, what: str = "condition") -> Any:
    """Poll ``condition()`` until it returns something truthy (bounded); return that value."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")
