"""The one assertion every error path goes through: Iceberg ErrorModel shape and status."""

from __future__ import annotations

from typing import Any


def assert_error_model(response: Any, status: int, error_type: str | None = None) -> dict[str, Any]:
    """Assert ``response`` is an Iceberg ErrorModel with ``status`` (and ``type``); return it."""
    assert response.status_code == status, (response.status_code, response.text)
    assert response.headers["content-type"].startswith("application/json"), response.headers
    body = response.json()
    assert set(body) == {"error"}, body
    error = body["error"]
    assert {"message", "type", "code"} <= set(error), error
    assert error["code"] == status, error
    assert isinstance(error["message"], str) and error["message"], error
    if error_type is not None:
        assert error["type"] == error_type, error
    return dict(error)
