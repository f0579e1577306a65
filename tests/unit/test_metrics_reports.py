"""Metrics reports (``POST …/tables/{t}/metrics``): forwarded for the table in the path only."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.support.audit import no_icegov_environment  # noqa: F401
from tests.support.errors import assert_error_model
from tests.support.upstream import Upstream, client_for

pytestmark = pytest.mark.usefixtures("no_icegov_environment")

REPORT = "/v1/cat/namespaces/demo/tables/customers/metrics"


def report(table_name: Any) -> dict[str, Any]:
    return {"report-type": "scan-report", "table-name": table_name, "snapshot-id": 1,
            "filter": True, "schema-id": 0, "projected-field-ids": [1],
            "projected-field-names": ["id"], "metrics": {}}


@pytest.mark.parametrize("name", ["icegov.demo.customers", "spark_cat.demo.customers",
                                  "demo.customers"])
def test_a_report_about_the_table_in_the_path_is_forwarded(name: str) -> None:
    upstream = Upstream(lambda _: httpx.Response(204))
    with client_for(upstream) as client:
        answer = client.post(REPORT, json=report(name))
    assert answer.status_code == 204, answer.text
    assert [r.url.path for r in upstream.seen] == ["/catalog" + REPORT]


@pytest.mark.parametrize("name", ["icegov.demo.salaries", "demo.customers2", "xdemo.customers",
                                  "customers", "", 7, ["demo", "customers"]])
def test_a_report_naming_another_table_never_reaches_the_backing(name: Any) -> None:
    """The backing files a report under its ``table-name``: a caller who may read one table
    must not file reports under another (one it may not even see)."""
    upstream = Upstream(lambda _: httpx.Response(204))
    with client_for(upstream) as client:
        answer = client.post(REPORT, json=report(name))
    assert_error_model(answer, 400)
    assert upstream.seen == []
