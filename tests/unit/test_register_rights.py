"""registerTable's rights: adopting a metadata file needs REGISTER_TABLE; replacing the table
of that name (``overwrite``) needs every right on it, since it can roll the table back to any
state or swap it for another."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from tests.support.errors import assert_error_model
from tests.support.upstream import Upstream, client_for, icegov_token

REGISTRAR_POLICY = """\
p, admin, *, *, allow
p, analyst, icegov, BROWSE, allow
p, analyst, icegov.demo, BROWSE, allow
p, analyst, icegov.demo.*, REGISTER_TABLE, allow
p, analyst, icegov.demo.*, READ, allow
"""
REGISTER = "/v1/cat/namespaces/demo/register"


@pytest.fixture()
def registrar(tmp_path: Path) -> Iterator[tuple[TestClient, dict[str, str], Upstream]]:
    policy = tmp_path / "policy.csv"
    policy.write_text(REGISTRAR_POLICY)
    upstream = Upstream()
    with client_for(upstream, tmp_path, policy={"policy_path": policy}) as client:
        token = icegov_token(client, "analyst:analyst-secret")
        yield client, {"authorization": f"Bearer {token}"}, upstream


def register(client: TestClient, who: dict[str, str], **fields: Any) -> Any:
    body = {"name": "t", "metadata-location": "file:///w/demo/t/metadata/00001.metadata.json",
            **fields}
    return client.post(REGISTER, json=body, headers=who)


def registers_seen(upstream: Upstream) -> int:
    return sum(1 for r in upstream.seen if r.url.path.endswith("/register"))


def test_registering_needs_register_table_only(
        registrar: tuple[TestClient, dict[str, str], Upstream]) -> None:
    client, analyst, upstream = registrar
    assert register(client, analyst).status_code == 200
    assert register(client, analyst, overwrite=False).status_code == 200
    assert register(client, analyst, overwrite=None).status_code == 200  # JSON null: false
    assert registers_seen(upstream) == 3


def test_overwriting_a_table_needs_every_right_on_it(
        registrar: tuple[TestClient, dict[str, str], Upstream]) -> None:
    client, analyst, upstream = registrar
    answer = register(client, analyst, overwrite=True)
    assert answer.status_code == 403
    assert_error_model(answer, 403)
    assert registers_seen(upstream) == 0


@pytest.mark.parametrize("value", ["true", 1, [True]])
def test_an_overwrite_that_is_not_a_boolean_is_refused(
        registrar: tuple[TestClient, dict[str, str], Upstream], value: Any) -> None:
    client, analyst, upstream = registrar
    answer = register(client, analyst, overwrite=value)
    assert answer.status_code == 400
    assert registers_seen(upstream) == 0


def test_an_administrator_may_overwrite(
        registrar: tuple[TestClient, dict[str, str], Upstream]) -> None:
    client, _, upstream = registrar
    admin = {"authorization": f"Bearer {icegov_token(client)}"}
    assert register(client, admin, overwrite=True).status_code == 200
    assert registers_seen(upstream) == 1
