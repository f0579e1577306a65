"""``icegov serve --workers 2``: several worker processes on one port act as one icegov.

One real ``icegov serve`` process with two uvicorn workers on the embedded catalog (its default
SQLite database) and no keys configured: a token or a plan made by one worker is good on the
other, concurrent appends through both land once each, ``/metrics`` counts every worker's
requests whichever worker answers, and each worker writes its own audit file that verifies.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from pyiceberg.catalog.rest import RestCatalog

from proxy.audit.verify import Intact, verify
from tests.support.appends import (
    NO_CLIENT_RETRIES,
    SCHEMA,
    assert_one_line_of_history,
    id_rows,
    run_together,
    table_ids,
)
from tests.support.http import audit_records
from tests.support.workers import ServedWorkers, serving_workers

WORKERS = 2
APPENDERS = 6


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedWorkers]:
    with serving_workers(tmp_path_factory.mktemp("workers"), WORKERS) as running:
        yield running


def _fresh_connection_get(url: str, headers: dict[str, str]) -> httpx.Response:
    with httpx.Client(timeout=10) as client:  # a new connection: any worker may take it
        return client.get(url, headers=headers)


def _bearer(served: ServedWorkers) -> dict[str, str]:
    answer = httpx.post(f"{served.url}/v1/oauth/tokens", data={
        "grant_type": "client_credentials", "client_id": "admin",
        "client_secret": "admin-secret"})
    assert answer.status_code == 200, answer.text
    return {"authorization": f"Bearer {answer.json()['access_token']}"}


def _catalog(served: ServedWorkers) -> RestCatalog:
    return RestCatalog("workers", uri=served.url, credential="admin:admin-secret")


def test_a_token_from_one_worker_is_good_on_every_worker(served: ServedWorkers) -> None:
    bearer = _bearer(served)
    answers = [_fresh_connection_get(f"{served.url}/v1/config", bearer) for _ in range(40)]
    assert [a.status_code for a in answers] == [200] * 40
    per_worker = [len(audit_records(path)) for path in served.audit_files()]
    assert all(count > 0 for count in per_worker), f"a worker served nothing: {per_worker}"


def test_concurrent_appends_through_both_workers_each_land_once(served: ServedWorkers) -> None:
    catalog = _catalog(served)
    catalog.create_namespace_if_not_exists("work")
    table = catalog.create_table("work.appends", SCHEMA, properties=NO_CLIENT_RETRIES)

    def append(writer: int) -> None:
        own = _catalog(served).load_table("work.appends")  # its own connection
        own.append(id_rows([writer * 10 + i for i in range(3)]))

    assert run_together(APPENDERS, append) == []
    table.refresh()
    assert table_ids(table) == sorted(w * 10 + i for w in range(APPENDERS) for i in range(3))
    assert_one_line_of_history(table, APPENDERS)


def test_metrics_sum_every_workers_requests(served: ServedWorkers) -> None:
    bearer = _bearer(served)
    before = _config_requests(served)
    for _ in range(30):
        assert _fresh_connection_get(f"{served.url}/v1/config", bearer).status_code == 200
    after = [_config_requests(served) for _ in range(6)]  # answered by either worker
    assert all(total == before + 30 for total in after), (before, after)
    exposition = _fresh_connection_get(f"{served.url}/metrics", {}).text
    assert 'icegov_policy_generation{worker="' in exposition


def _config_requests(served: ServedWorkers) -> float:
    exposition = _fresh_connection_get(f"{served.url}/metrics", {}).text
    prefix = 'icegov_requests_total{decision="allow",endpoint="get_config",status="200"} '
    lines = [line for line in exposition.splitlines() if line.startswith(prefix)]
    return float(lines[0].removeprefix(prefix)) if lines else 0.0


def test_each_workers_audit_file_is_its_own_intact_chain(served: ServedWorkers) -> None:
    _catalog(served).list_namespaces()
    assert not (served.workdir / "audit.log").exists(), "no file shared by the workers"
    for path in served.audit_files():
        outcome = verify([path])
        assert isinstance(outcome, Intact) and outcome.records > 0, outcome
