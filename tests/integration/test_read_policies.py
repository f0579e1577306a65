"""Column and row policies against a real client, pyiceberg 0.12 (issue 8 §3, §4).

The demo policy: ``analyst`` may not read ``demo.customers.ssn`` and reads ``email`` only masked
(show-last-4); ``eu-analyst`` reads only the EU rows of ``demo.orders``. Both principals are served
governed snapshots (``proxy.governed``): ``ssn`` is gone from every schema, ``email`` is there with
masked values, and no mask or row filter is declared (the data already holds them). Through
server-side planning: 400 for a scan naming the denied column, as for one that is not there;
no statistics of denied or masked columns; files outside the row filter never handed out. Writes
by principals that hold the same restrictions plus write rights (test-local ``analyst-writer``
and ``eu-writer``): an INSERT lands, anything else built on a governed snapshot is 403. Both
backing catalogs.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pyarrow as pa
import pytest
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import BadRequestError, ForbiddenError
from pyiceberg.expressions import EqualTo, GreaterThan, GreaterThanOrEqual
from pyiceberg.table import Table
from pyiceberg.types import StringType

from tests.support.errors import assert_error_model
from tests.support.http import as_principal, audit_records, token, wait_for
from tests.support.plan_tables import RawPlan, RawPlanner, Row, ordered
from tests.support.read_tables import (
    ANALYST,
    ANALYST_COLUMNS,
    ANALYST_WRITER,
    CUSTOMER_COLUMNS,
    CUSTOMERS,
    EMAIL_ID,
    EU_ANALYST,
    EU_WRITER,
    MASK_CAPABLE_CLIENT,
    ORDERS,
    SSN_ID,
    Served,
    arrow_rows,
    build_customers,
    build_orders,
    customer_rows,
    files_by_region,
    order_rows,
    served,
    stats_field_ids,
    table_state,
)
from tests.support.settings import ADMIN

ANALYST_IDS = frozenset({1, 2, 3, 5})
STATS_IDS = frozenset({1, 2, 5})  # no statistics of the masked email
HIDDEN = ("ssn",)
MASKED_EMAIL = "xxx@xxxxxxx.org"  # show-last-4 of every demo customer's e-mail


def rest(url: str, credential: str, *, server: bool = False) -> RestCatalog:
    """A pyiceberg catalog for ``credential``; ``server``: it plans every scan on icegov."""
    options = {"scan-planning-mode": "server"} if server else {}
    catalog = RestCatalog(credential.split(":")[0], uri=url, credential=credential, **options)
    assert catalog.supports_server_side_planning() == server
    return catalog


def planner(url: str, credential: str, **headers: str) -> RawPlanner:
    client = as_principal(url, credential)
    client.headers.update(headers)
    return RawPlanner(rest(url, credential), client)


def rows_of(arrow: pa.Table) -> list[Row]:
    return ordered(zip(*(arrow.column(n).to_pylist() for n in arrow.column_names), strict=True))


def names(table: Table) -> list[str]:
    return [f.name for f in table.schema().fields]


@pytest.fixture(scope="module")
def reads(backend: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """A proxy with ``demo.customers`` and ``demo.orders`` built by admin (read-only tests)."""
    with served(backend, tmp_path_factory.mktemp(f"reads-{backend}")) as running:
        admin = rest(running.url, ADMIN)
        build_customers(admin)
        build_orders(admin)
        yield running


# -- analyst and demo.customers: loadTable ------------------------------------------------------

def test_analyst_loads_customers_without_the_denied_column(reads: Served) -> None:
    table = rest(reads.url, ANALYST).load_table(CUSTOMERS)
    assert names(table) == list(ANALYST_COLUMNS)
    assert [f.field_id for f in table.schema().fields] == [1, 2, 3, 5]  # ids kept
    for schema in table.metadata.schemas:
        assert not {f.name for f in schema.fields} & set(HIDDEN)


def test_analyst_load_answer_is_governed(reads: Served) -> None:
    answer = _load(reads.url, ANALYST, CUSTOMERS)
    metadata = answer["metadata"]
    for schema in metadata["schemas"]:
        assert [f["name"] for f in schema["fields"]] == list(ANALYST_COLUMNS)
    assert "read-restrictions" not in answer  # the data is masked: nothing left to declare
    assert "/_icegov_governed/" in answer["metadata-location"]
    assert metadata["properties"]["icegov.governed.stale-seconds"] == "0.000"
    for snapshot in metadata["snapshots"]:
        assert "/_icegov_governed/" in snapshot["manifest-list"]
    assert metadata["metadata-log"] == [] and not metadata.get("statistics")


@pytest.mark.parametrize("credential", [ANALYST, ANALYST_WRITER], ids=["trusted", "untrusted"])
def test_a_mask_capable_client_gets_the_same_governed_answer(reads: Served,
                                                           credential: str) -> None:
    """Masks are applied in the data for every client: a client that says it applies masks
    (trusted or not) is declared none, so it cannot apply one twice."""
    plain = _load(reads.url, credential, CUSTOMERS)
    claimed = _load(reads.url, credential, CUSTOMERS,
                    **{"X-Client-Version": MASK_CAPABLE_CLIENT})
    assert claimed["metadata"] == plain["metadata"]
    assert "read-restrictions" not in claimed


def test_eu_analyst_load_answer_is_governed(reads: Served) -> None:
    answer = _load(reads.url, EU_ANALYST, ORDERS)
    assert "read-restrictions" not in answer  # the rows are filtered: nothing to declare
    properties = answer["metadata"]["properties"]
    assert properties["icegov.governed.base-snapshot-id"] == str(
        answer["metadata"]["current-snapshot-id"])
    fields = answer["metadata"]["schemas"][0]["fields"]
    assert [f["name"] for f in fields] == ["order_id", "region", "amount"]


def test_admin_load_answer_is_the_backings_own(reads: Served) -> None:
    with as_principal(reads.url, ADMIN) as admin:
        first = admin.get(_table_path(CUSTOMERS))
        second = admin.get(_table_path(CUSTOMERS))
    assert first.status_code == second.status_code == 200
    assert first.content == second.content
    answer = first.json()
    assert "read-restrictions" not in answer
    assert (answer.get("config") or {}).get("scan-planning-mode") != "server"
    current = answer["metadata"]["schemas"][-1]
    assert [f["name"] for f in current["fields"]] == list(CUSTOMER_COLUMNS)
    if reads.backing_uri is not None:
        direct = httpx.get(reads.backing_uri + _table_path(CUSTOMERS))
        assert direct.status_code == 200
        assert first.content == direct.content


def _table_path(identifier: str) -> str:
    namespace, name = identifier.split(".")
    return f"/v1/namespaces/{namespace}/tables/{name}"


def _load(url: str, credential: str, identifier: str, **headers: str) -> dict[str, Any]:
    with as_principal(url, credential) as client:
        response = client.get(_table_path(identifier), headers=headers)
    assert response.status_code == 200, response.text
    return dict(response.json())


# -- analyst and demo.customers: scans ----------------------------------------------------------

@pytest.mark.parametrize("server", [False, True], ids=["local-planning", "server-planning"])
def test_analyst_reads_every_row_of_the_permitted_columns(reads: Served, server: bool) -> None:
    arrow = rest(reads.url, ANALYST, server=server).load_table(CUSTOMERS).scan().to_arrow()
    assert arrow.column_names == list(ANALYST_COLUMNS)
    assert rows_of(arrow) == ordered((i, n, MASKED_EMAIL, r)
                                     for i, n, _, r in customer_rows(ANALYST_COLUMNS))


def test_selecting_the_masked_column_reads_it_masked(reads: Served) -> None:
    table = rest(reads.url, ANALYST, server=True).load_table(CUSTOMERS)
    arrow = table.scan(selected_fields=("id", "email")).to_arrow()
    assert arrow.column("email").to_pylist() == [MASKED_EMAIL] * 4


@pytest.mark.parametrize("column", HIDDEN)
def test_selecting_a_hidden_column_is_refused(reads: Served, column: str) -> None:
    table = rest(reads.url, ANALYST, server=True).load_table(CUSTOMERS)
    with pytest.raises(BadRequestError, match=column):  # as a column the table does not have
        table.scan(selected_fields=("id", column)).plan_files()
    response = planner(reads.url, ANALYST).plan(CUSTOMERS, {"select": ["id", column]})
    message = assert_error_model(response, 400, "BadRequestException")["message"]
    assert repr(column) in message and "denied" not in message and "mask" not in message


@pytest.mark.parametrize("column", HIDDEN)
def test_filtering_on_a_hidden_column_is_refused(reads: Served, column: str) -> None:
    table = rest(reads.url, ANALYST, server=True).load_table(CUSTOMERS)
    with pytest.raises((BadRequestError, ValueError), match=column):
        table.scan(row_filter=EqualTo(column, "111-11-1111")).plan_files()
    nested = {"type": "or", "left": {"type": "eq", "term": "id", "value": 1},
              "right": {"type": "not", "child": {"type": "not-null", "term": column}}}
    response = planner(reads.url, ANALYST).plan(CUSTOMERS, {"filter": nested})
    message = assert_error_model(response, 400, "BadRequestException")["message"]
    assert column in message and "denied" not in message and "mask" not in message


@pytest.mark.parametrize("body", [
    {"stats-fields": ["id", "ssn"]},
    {"select": ["SSN"], "case-sensitive": False},
    {"filter": {"type": "eq", "left": {"type": "reference", "term": "ssn"}, "right": "x"}},
], ids=["stats-ssn", "select-case-insensitive", "filter-spec-form"])
def test_every_other_way_of_naming_a_hidden_column_is_refused(reads: Served,
                                                               body: dict[str, Any]) -> None:
    response = planner(reads.url, ANALYST).plan(CUSTOMERS, body)
    assert_error_model(response, 400, "BadRequestException")  # as a column that is not there


def test_plans_carry_no_statistics_of_hidden_columns(reads: Served) -> None:
    everything = planner(reads.url, ADMIN).completed(
        CUSTOMERS, {"stats-fields": list(CUSTOMER_COLUMNS)})
    for content_file in _data_files(everything):  # the files do hold statistics of both
        assert {EMAIL_ID, SSN_ID} <= stats_field_ids(content_file)["lower-bounds"]

    analyst = planner(reads.url, ANALYST)
    asked = analyst.completed(CUSTOMERS, {"stats-fields": list(ANALYST_COLUMNS)})
    assert len(_data_files(asked)) == 2
    for content_file in _data_files(asked):
        stats = stats_field_ids(content_file)
        assert stats["lower-bounds"] == stats["upper-bounds"] == STATS_IDS
        assert all(ids <= STATS_IDS for ids in stats.values()), stats
        assert EMAIL_ID not in stats["lower-bounds"] and SSN_ID not in stats["lower-bounds"]
    for content_file in _data_files(analyst.completed(CUSTOMERS, {})):
        assert stats_field_ids(content_file) == {}


def _data_files(plan: RawPlan) -> list[dict[str, Any]]:
    return [task["data-file"] for task, _ in plan.tasks()]


def test_a_restricted_plan_is_audited_with_the_read_view(reads: Served) -> None:
    client = as_principal(reads.url, ANALYST)
    marker = {"x-request-id": "read-policies-audit"}
    response = client.post(planner(reads.url, ANALYST).url(CUSTOMERS, "/plan"), json={},
                           headers=marker)
    assert response.status_code == 200, response.text

    def record() -> dict[str, Any] | None:
        return next((r for r in audit_records(reads.proxy.audit_log)
                     if r["principal"] == "analyst" and r["endpoint"] == "plan_table_scan"
                     and r["status"] == 200), None)

    found = wait_for(record, what="the analyst's plan in the audit log")
    [view] = [e["read_view"] for e in found["evidence"] if "read_view" in e]
    assert view["denied"] == ["ssn"]
    assert view["masked"] == {"email": "show-last-4"}
    assert view["row_filter"] is None
    assert view["rules"], view


# -- eu-analyst and demo.orders -----------------------------------------------------------------

@pytest.mark.parametrize("scan_filter", [
    None,
    {"type": "gt", "term": "amount", "value": 100},
    {"type": "in", "term": "region", "values": ["eu", "us"]},
    {"type": "eq", "term": "region", "value": "us"},
], ids=["full", "amount", "regions", "us-only"])
def test_eu_analyst_is_planned_only_eu_files(reads: Served,
                                             scan_filter: dict[str, Any] | None) -> None:
    eu_files = files_by_region(rest(reads.url, ADMIN).load_table(ORDERS))["eu"]
    body = {} if scan_filter is None else {"filter": scan_filter}
    plan = planner(reads.url, EU_ANALYST).completed(ORDERS, body)
    _assert_only_eu(plan)
    if scan_filter is None or scan_filter["type"] == "in":
        assert set(plan.data_files()) == eu_files
    elif scan_filter["type"] == "eq":
        assert plan.data_files() == []


def _assert_only_eu(plan: RawPlan) -> None:
    for task, _ in plan.tasks():
        data_file = task["data-file"]
        assert data_file["partition"] == ["eu"], data_file
        assert "/region=eu/" in data_file["file-path"], data_file


def test_eu_analyst_time_travel_and_incremental_plans_hold_only_eu_files(reads: Served) -> None:
    admin = rest(reads.url, ADMIN).load_table(ORDERS)
    first, _, last = (s.snapshot_id for s in admin.snapshots())
    eu_files = files_by_region(admin)["eu"]
    eu = planner(reads.url, EU_ANALYST)
    old = eu.completed(ORDERS, {"snapshot-id": first})
    _assert_only_eu(old)
    assert len(old.data_files()) == 1 and set(old.data_files()) < eu_files
    later = eu.completed(ORDERS, {"start-snapshot-id": first, "end-snapshot-id": last})
    _assert_only_eu(later)
    assert set(later.data_files()) == eu_files - set(old.data_files())


def test_eu_analyst_reads_exactly_the_eu_rows_through_server_planning(reads: Served) -> None:
    table = rest(reads.url, EU_ANALYST, server=True).load_table(ORDERS)
    assert rows_of(table.scan().to_arrow()) == order_rows("eu")
    large = table.scan(row_filter=GreaterThan("amount", 100)).to_arrow()
    assert rows_of(large) == [r for r in order_rows("eu") if r[2] > 100]
    assert rows_of(table.scan(row_filter=EqualTo("region", "us")).to_arrow()) == []


@pytest.fixture(scope="module")
def sharded(backend: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """A proxy that hands out a plan task per manifest (one file per shard)."""
    with served(backend, tmp_path_factory.mktemp(f"sharded-{backend}"),
                shard_files=1) as running:
        build_orders(rest(running.url, ADMIN))
        yield running


def test_plan_tasks_of_a_row_filtered_principal_hold_only_its_files(sharded: Served) -> None:
    everything = planner(sharded.url, ADMIN).completed(ORDERS, {})
    assert everything.answers[0].get("plan-tasks"), "the plan was not split into plan tasks"
    assert len(everything.data_files()) == 9

    plan = planner(sharded.url, EU_ANALYST).completed(ORDERS, {})
    assert plan.answers[0].get("plan-tasks"), "the plan was not split into plan tasks"
    _assert_only_eu(plan)
    eu_files = files_by_region(rest(sharded.url, ADMIN).load_table(ORDERS))["eu"]
    assert sorted(plan.data_files()) == sorted(eu_files)

    table = rest(sharded.url, EU_ANALYST, server=True).load_table(ORDERS)
    assert rows_of(table.scan().to_arrow()) == order_rows("eu")


# -- writes by restricted principals ------------------------------------------------------------

@pytest.fixture(scope="module")
def writes(backend: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with served(backend, tmp_path_factory.mktemp(f"writes-{backend}")) as running:
        yield running


@pytest.fixture()
def customers(writes: Served) -> Table:
    return build_customers(rest(writes.url, ADMIN))


def _refused(writes: Served, identifier: str, write: Any, match: str) -> None:
    """``write()`` is refused with 403 (``match`` in the message) and changes nothing."""
    before = table_state(writes.url, identifier)
    with pytest.raises(ForbiddenError, match=match):
        write()
    assert table_state(writes.url, identifier) == before


def test_an_append_without_the_denied_column_lands_with_it_null(writes: Served,
                                                                customers: Table) -> None:
    table = rest(writes.url, ANALYST_WRITER).load_table(CUSTOMERS)
    assert names(table) == list(ANALYST_COLUMNS)
    table.append(arrow_rows(table, [(5, "eve", "eve@example.org", "us")], ANALYST_COLUMNS))
    rows, _, _ = table_state(writes.url, CUSTOMERS)
    assert rows == ordered([*customer_rows(), (5, "eve", "eve@example.org", None, "us")])


ONLY_ADDS = "may only add rows"


def test_an_overwrite_is_refused(writes: Served, customers: Table) -> None:
    table = rest(writes.url, ANALYST_WRITER).load_table(CUSTOMERS)
    replacement = arrow_rows(table, [(9, "zed", "z@x.org", "eu")], ANALYST_COLUMNS)
    _refused(writes, CUSTOMERS, lambda: table.overwrite(replacement), ONLY_ADDS)


def test_a_copy_on_write_delete_is_refused(writes: Served, customers: Table) -> None:
    table = rest(writes.url, ANALYST_WRITER).load_table(CUSTOMERS)
    _refused(writes, CUSTOMERS, lambda: table.delete(EqualTo("id", 1)), ONLY_ADDS)


def test_a_delete_of_whole_governed_files_is_refused(writes: Served, customers: Table) -> None:
    """Its files are governed copies: removing them would act on files of icegov's, not on the
    table's (a governed principal may add rows, nothing else)."""
    table = rest(writes.url, ANALYST_WRITER).load_table(CUSTOMERS)
    _refused(writes, CUSTOMERS, lambda: table.delete(GreaterThanOrEqual("id", 3)), ONLY_ADDS)


def test_a_schema_change_is_refused(writes: Served, customers: Table) -> None:
    table = rest(writes.url, ANALYST_WRITER).load_table(CUSTOMERS)

    def add_column() -> None:
        with table.update_schema() as update:
            update.add_column("note", StringType())

    _refused(writes, CUSTOMERS, add_column, "would drop values")
    assert names(rest(writes.url, ADMIN).load_table(CUSTOMERS)) == list(CUSTOMER_COLUMNS)


def test_a_renamed_denied_column_stays_hidden(writes: Served, customers: Table) -> None:
    first = customers.metadata.current_snapshot_id
    with customers.update_schema() as update:  # admin renames ssn; the rule names ssn
        update.rename_column("ssn", "tax_id")
    table = rest(writes.url, ANALYST).load_table(CUSTOMERS)
    assert names(table) == list(ANALYST_COLUMNS)
    for schema in table.metadata.schemas:
        assert not {f.name for f in schema.fields} & {"ssn", "tax_id"}
    analyst = planner(writes.url, ANALYST)
    assert_error_model(analyst.plan(CUSTOMERS, {"select": ["tax_id"]}), 400)
    old_schema = {"snapshot-id": first, "use-snapshot-schema": True, "select": ["ssn"]}
    assert_error_model(analyst.plan(CUSTOMERS, old_schema), 400)
    plan = analyst.completed(CUSTOMERS, {"stats-fields": ["id", "name", "region"]})
    for content_file in _data_files(plan):
        assert all(ids <= ANALYST_IDS for ids in stats_field_ids(content_file).values())


def test_an_append_is_refused_when_a_hidden_column_is_required(writes: Served) -> None:
    build_customers(rest(writes.url, ADMIN), ssn_required=True)
    table = rest(writes.url, ANALYST_WRITER).load_table(CUSTOMERS)
    rows = arrow_rows(table, [(5, "eve", "e@x.org", "us")], ANALYST_COLUMNS)
    before = table_state(writes.url, CUSTOMERS)
    with pytest.raises(ForbiddenError, match="required column is hidden") as refused:
        table.append(rows)
    assert "ssn" not in str(refused.value)  # a denied column is never named
    assert table_state(writes.url, CUSTOMERS) == before


def test_a_row_filtered_principal_cannot_delete(writes: Served) -> None:
    build_orders(rest(writes.url, ADMIN))
    table = rest(writes.url, EU_WRITER).load_table(ORDERS)
    _refused(writes, ORDERS, lambda: table.delete(EqualTo("region", "eu")), ONLY_ADDS)


def test_tokens_of_the_test_local_principals_work(writes: Served) -> None:
    """The test-local principals authenticate (a broken principals file would make every
    refusal above a 401, not a 403)."""
    for credential in (ANALYST_WRITER, EU_WRITER):
        assert token(writes.url, credential)
