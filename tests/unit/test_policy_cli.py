"""``icegov policy check | explain | test`` through click's CliRunner."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from proxy.policy.cli import policy
from proxy.policy.model import CANONICAL_MODEL

REPO = Path(__file__).parents[2]
POLICY = """\
g, ann, analysts
p, analysts, icegov.sales.*, READ, allow
p, analysts, icegov.sales.payroll, *, deny
p, loaders, icegov.sales.*, INSERT, allow
"""


@pytest.fixture
def files(tmp_path: Path) -> list[str]:
    (tmp_path / "model.conf").write_text(CANONICAL_MODEL)
    (tmp_path / "policy.csv").write_text(POLICY)
    return ["--model", str(tmp_path / "model.conf"), "--policy", str(tmp_path / "policy.csv")]


def run(*args: str) -> Result:
    return CliRunner().invoke(policy, list(args))


def test_check_accepts_the_repository_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)  # the defaults are policies/model.conf and policies/policy.csv
    result = run("check", "--strict")
    assert result.exit_code == 0, result.output
    assert "0 error(s), 0 warning(s)" in result.output


def test_the_demo_cases_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    result = run("test", "policies/tests/demo.yaml")
    assert result.exit_code == 0, result.output
    assert " 0 failed" in result.output


def test_check_reports_errors_with_lines_and_fails(tmp_path: Path, files: list[str]) -> None:
    (tmp_path / "policy.csv").write_text(POLICY + "p, ann, icegov.x, SLECT, allow\n"
                                         "p, ann, icegov.x, SELECT, maybe\n")
    result = run("check", *files)
    assert result.exit_code == 1
    assert f"{tmp_path / 'policy.csv'}:5: error: unknown action 'SLECT'" in result.output
    assert f"{tmp_path / 'policy.csv'}:6: error: unknown effect 'maybe'" in result.output
    assert "2 error(s)" in result.output


def test_check_reports_a_wrong_model(tmp_path: Path, files: list[str]) -> None:
    model = CANONICAL_MODEL.replace("&& actionMatch", "|| actionMatch")
    (tmp_path / "model.conf").write_text(model)
    result = run("check", *files)
    assert result.exit_code == 1
    assert "[matchers] must be" in result.output


@pytest.mark.parametrize(("extra", "warning"), [
    ("p, analysts, icegov.sales.*, READ, allow\n", "5: warning: duplicate of line 2"),
    ("p, ann, icegov.sales.payroll, SELECT, allow\n",
     "5: warning: never takes effect: the deny on line 3"),
    ("p, analysts, icegov.sales.payroll.*, SELECT, allow\n"
     "p, analysts, icegov.sales.payroll.*, READ, deny\n",
     "5: warning: never takes effect: the deny on line 6"),
    ("p, loaders, icegov.hr.*, DELETE, deny\n", "5: warning: overrides nothing"),
    ("g, bob, auditors\n", "5: warning: role 'auditors' has no rules"),
    ("g, analysts, analysts\n", "5: warning: has no effect"),
    ("g, analysts, ann\n", "5: warning: role cycle"),
])
def test_check_warns_about_rules_without_effect(tmp_path: Path, files: list[str], extra: str,
                                               warning: str) -> None:
    (tmp_path / "policy.csv").write_text(POLICY + extra)
    result = run("check", *files)
    assert result.exit_code == 0, result.output
    assert f"{tmp_path / 'policy.csv'}:{warning}" in result.output
    assert run("check", "--strict", *files).exit_code == 1


def test_check_does_not_warn_about_useful_rules(files: list[str]) -> None:
    result = run("check", "--strict", *files)
    assert result.exit_code == 0, result.output
    assert "warning" not in result.output.replace("0 warning(s)", "")


def test_explain_names_the_deciding_rule(tmp_path: Path, files: list[str]) -> None:
    result = run("explain", *files, "--principal", "ann", "--action", "SELECT",
                 "--resource", "icegov.sales.payroll")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == "DENY SELECT on icegov.sales.payroll"
    assert lines[1] == (f"  decided by: {tmp_path / 'policy.csv'}:3: "
                        "p, analysts, icegov.sales.payroll, *, deny")
    assert "  acts as:    analysts, ann" in lines
    assert sum(line.startswith("  matched:") for line in lines) == 2  # the allow and the deny
    assert "casbin:     agrees" in result.output


def test_explain_with_token_roles_and_default_deny(files: list[str]) -> None:
    allowed = run("explain", *files, "--principal", "zoe", "--role", "loaders",
                  "--action", "INSERT", "--resource", "icegov.sales.orders")
    assert allowed.output.startswith("ALLOW INSERT on icegov.sales.orders")
    denied = run("explain", *files, "--principal", "zoe", "--action", "INSERT",
                 "--resource", "icegov.sales.orders")
    assert "decided by: no rule matched (default deny)" in denied.output


def test_explain_takes_quoted_names_and_says_what_is_visible(files: list[str]) -> None:
    dotted = run("explain", *files, "--principal", "ann", "--action", "SELECT",
                 "--resource", 'icegov."sales.eu".orders')
    assert dotted.exit_code == 0, dotted.output
    assert dotted.output.startswith('DENY SELECT on icegov."sales.eu".orders\n')
    assert "  visible:    no, hidden (404), as a table" in dotted.output
    assert "casbin:     agrees" in dotted.output
    table = run("explain", *files, "--principal", "ann", "--action", "SELECT",
                "--resource", "icegov.sales.payroll")
    assert "  visible:    no, hidden (404), as a table" in table.output
    namespace = run("explain", *files, "--principal", "ann", "--action", "SELECT",
                    "--resource", "icegov.sales.payroll", "--kind", "namespace")
    # a deny covers what is beneath it: the namespace (sales, payroll) is hidden too
    assert "  visible:    no, hidden (404), as a namespace" in namespace.output


@pytest.mark.parametrize(("resource", "kind", "message"), [
    ('icegov."sales', None, "unbalanced quote"),
    ("icegov.*.orders", None, "names no wildcards"),
    ('icegov."..".orders', None, "is not a name"),
    ("icegov", "namespace", "a namespace has two or more segments"),
])
def test_explain_refuses_a_malformed_resource(files: list[str], resource: str,
                                              kind: str | None, message: str) -> None:
    kind_args = ["--kind", kind] if kind else []
    result = run("explain", *files, "--principal", "a", "--action", "LIST",
                 "--resource", resource, *kind_args)
    assert result.exit_code == 2
    assert message in result.output


def test_explain_rejects_an_unknown_action(files: list[str]) -> None:
    result = run("explain", *files, "--principal", "a", "--action", "SLECT", "--resource", "x")
    assert result.exit_code == 2


def test_explain_refuses_a_broken_policy(tmp_path: Path, files: list[str]) -> None:
    (tmp_path / "policy.csv").write_text("p, a, b\n")
    result = run("explain", *files, "--principal", "a", "--action", "LIST", "--resource", "x")
    assert result.exit_code == 2
    assert "does not load" in result.output


def test_test_reports_each_failure(tmp_path: Path, files: list[str]) -> None:
    cases = tmp_path / "cases.yaml"
    cases.write_text("""\
- {principal: ann, action: SELECT, resource: icegov.sales.orders, expect: allow}
- {name: payroll is secret, principal: ann, action: SELECT, resource: icegov.sales.payroll,
   expect: allow}
- {principal: zoe, roles: [loaders], action: INSERT, resource: icegov.sales.orders, expect: deny}
""")
    result = run("test", *files, str(cases))
    assert result.exit_code == 1
    assert (f"FAIL {cases} #2 (payroll is secret) ann SELECT icegov.sales.payroll: expected "
            "allow, got deny (p, analysts, icegov.sales.payroll, *, deny)") in result.output
    assert (f"FAIL {cases} #3 zoe [loaders] INSERT icegov.sales.orders: expected deny, got "
            "allow (p, loaders, icegov.sales.*, INSERT, allow)") in result.output
    assert "3 case(s): 1 passed, 2 failed" in result.output


def test_test_checks_visibility_by_kind(tmp_path: Path, files: list[str]) -> None:
    cases = tmp_path / "cases.yaml"
    cases.write_text("""\
- {principal: ann, table: icegov.sales.orders, expect: visible}
- {principal: ann, namespace: icegov.sales.payroll, expect: hidden}
- {principal: ann, table: icegov.sales.payroll, expect: hidden}
- {principal: ann, namespace: 'icegov."sales.eu"', expect: hidden}
- {principal: ann, catalog: icegov, expect: visible}
- {principal: ann, column: icegov.sales.orders.amount, expect: visible}
- {name: wrong on purpose, principal: zoe, namespace: icegov.sales, expect: visible}
- {principal: ann, action: SELECT, table: 'icegov."sales.eu".orders', expect: deny}
""")
    result = run("test", *files, str(cases))
    assert result.exit_code == 1
    assert (f"FAIL {cases} #7 (wrong on purpose) zoe SEES namespace icegov.sales: expected "
            "visible, got hidden\n") in result.output
    assert "8 case(s): 7 passed, 1 failed" in result.output


@pytest.mark.parametrize(("text", "message"), [
    ("- {principal: a, resource: icegov.x, expect: visible}\n",
     "use catalog:, namespace:, table: or column: instead of resource:"),
    ("- {principal: a, action: LIST, namespace: icegov.x, expect: hidden}\n",
     "a hidden case names no action"),
    ("- {principal: a, table: icegov.x.t, expect: allow}\n", "case #1: missing action"),
    ("- {principal: a, action: LIST, table: icegov.x.t, namespace: icegov.x, expect: deny}\n",
     "exactly one of resource, catalog, namespace, table, column"),
    ("- {principal: a, action: LIST, table: icegov.x, expect: deny}\n",
     "a table has three or more segments"),
    ("- {principal: a, action: LIST, resource: 'icegov.\"x', expect: deny}\n", "unbalanced"),
    ("not: a list\n", "expected a non-empty YAML list"),
    ("- {principal: a, action: SELECT, resource: x}\n", "case #1: missing expect"),
    ("- {principal: a, action: READ, resource: x, expect: allow}\n", "unknown action 'READ'"),
    ("- {principal: a, action: SELECT, resource: x, expect: yes}\n", "expect must be"),
    ("- {principal: a, action: SELECT, resource: x, expect: allow, colour: red}\n",
     "unknown key(s) colour"),
    ("- {principal: a, roles: admin, action: SELECT, resource: x, expect: allow}\n",
     "roles must be a list"),
    ("- [unclosed\n", "not valid YAML"),
])
def test_test_rejects_malformed_case_files(tmp_path: Path, files: list[str], text: str,
                                          message: str) -> None:
    cases = tmp_path / "cases.yaml"
    cases.write_text(text)
    result = run("test", *files, str(cases))
    assert result.exit_code == 2
    assert message in result.output


def test_missing_files_are_usage_errors(tmp_path: Path) -> None:
    result = run("check", "--policy", str(tmp_path / "nope.csv"))
    assert result.exit_code == 2
    assert "does not exist" in result.output


# --- columns and rows ---------------------------------------------------------------------------

READS = """\
p, analysts, icegov.sales.customers.ssn, SELECT, deny
p, analysts, icegov.sales.customers.email, SELECT, mask:show-last-4
p, eu, icegov.sales.customers.email, SELECT, mask:sha-256
p, eu, icegov.sales.*, READ, "filter:region IN ('eu', 'ch')"
g, eu, analysts
"""


@pytest.fixture
def read_files(tmp_path: Path, files: list[str]) -> list[str]:
    (tmp_path / "policy.csv").write_text(POLICY + READS)
    return files


def test_explain_shows_each_column_and_the_row_filter(read_files: list[str]) -> None:
    result = run("explain", *read_files, "--principal", "ann", "--role", "eu", "--action",
                 "SELECT", "--resource", "icegov.sales.customers", "--columns", "id,ssn",
                 "--columns", "email")
    assert result.exit_code == 0, result.output
    policy = read_files[3]
    assert ("  row filter: region IN ('eu', 'ch')\n"
            f"              {policy}:8: p, eu, icegov.sales.*, READ, "
            "\"filter:region IN ('eu', 'ch')\"\n"
            "  columns:\n"
            "    id     readable\n"
            "    ssn    denied\n"
            f"             {policy}:5: p, analysts, icegov.sales.customers.ssn, SELECT, deny\n"
            "    email  denied: different masks apply (fail closed)\n"
            f"             {policy}:6: p, analysts, icegov.sales.customers.email, SELECT, "
            "mask:show-last-4\n"
            f"             {policy}:7: p, eu, icegov.sales.customers.email, SELECT, "
            "mask:sha-256\n") in result.output


def test_explain_lists_column_rules_without_columns(read_files: list[str]) -> None:
    result = run("explain", *read_files, "--principal", "ann", "--action", "SELECT",
                 "--resource", "icegov.sales.customers")
    assert result.exit_code == 0, result.output
    assert "  row filter: none\n  column rules (--columns a,b,c" in result.output
    assert "icegov.sales.customers.email, SELECT, mask:show-last-4" in result.output
    orders = run("explain", *read_files, "--principal", "ann", "--action", "SELECT",
                 "--resource", "icegov.sales.orders")
    assert "no column rule applies: every column is readable" in orders.output


def test_explain_gives_a_columns_verdict(read_files: list[str]) -> None:
    result = run("explain", *read_files, "--principal", "ann", "--action", "SELECT",
                 "--resource", "icegov.sales.customers.email", "--kind", "column")
    assert result.exit_code == 0, result.output
    assert "  column:     masked (mask:show-last-4)\n" in result.output
    refused = run("explain", *read_files, "--principal", "zoe", "--action", "SELECT",
                  "--resource", "icegov.sales.customers.email", "--kind", "column")
    assert "  column:     denied: SELECT on the table is not allowed\n" in refused.output


def test_explain_takes_columns_only_for_select_on_a_table(read_files: list[str]) -> None:
    result = run("explain", *read_files, "--principal", "ann", "--action", "INSERT",
                 "--resource", "icegov.sales.customers", "--columns", "id")
    assert result.exit_code == 2
    assert "--columns goes with --action SELECT on a table" in result.output


def test_check_reports_restriction_errors(tmp_path: Path, files: list[str]) -> None:
    (tmp_path / "policy.csv").write_text(POLICY + "p, ann, icegov.x.t.c, SELECT, mask:blur\n"
                                         "p, ann, icegov.x.t, INSERT, filter:a = 1\n"
                                         "p, ann, icegov.x.t, SELECT, filter:a = = 1\n")
    result = run("check", *files)
    assert result.exit_code == 1
    policy = tmp_path / "policy.csv"
    assert f"{policy}:5: error: unknown mask action 'blur'" in result.output
    assert f"{policy}:6: error: a row filter restricts reads" in result.output
    assert f"{policy}:7: error: cannot parse the row filter 'a = = 1'" in result.output
    assert "3 error(s)" in result.output


@pytest.mark.parametrize(("extra", "warning"), [
    ("p, analysts, icegov.sales.*.ssn, SELECT, mask:sha-256\n"
     "p, ann, icegov.sales.customers.ssn, SELECT, mask:show-first-4\n",
     "6: warning: conflicts with the mask on line 5 (p, analysts, icegov.sales.*.ssn, SELECT, "
     "mask:sha-256) on the columns both name"),
    ("p, analysts, icegov.sales.customers.ssn, SELECT, mask:sha-256\n",
     "5: warning: never takes effect: the deny on line 3 (p, analysts, icegov.sales.payroll, *, "
     "deny) covers every column it masks"),
    ("p, analysts, icegov.sales.t, SELECT, filter:true\n",
     "5: warning: filters nothing: filter:true lets every row through"),
    ("p, analysts, icegov.sales.t.c, SELECT, mask:sha-256\n"
     "p, analysts, icegov.sales.t.c, SELECT, filter:a = 1\n",
     "6: warning: line 5 masks the same resource as a column"),
    ("p, analysts, icegov.sales.t, SELECT, filter:a = 1\n"
     "p, analysts, icegov.sales.t, SELECT, filter:a = 1\n", "6: warning: duplicate of line 5"),
])
def test_check_warns_about_misfiring_restrictions(tmp_path: Path, files: list[str], extra: str,
                                                  warning: str) -> None:
    if "payroll" in warning:
        extra = extra.replace("customers.ssn", "payroll.ssn")
    (tmp_path / "policy.csv").write_text(POLICY + extra)
    result = run("check", *files)
    assert result.exit_code == 0, result.output
    assert f"{tmp_path / 'policy.csv'}:{warning}" in result.output


def test_a_column_deny_under_an_allowed_table_is_not_idle(tmp_path: Path,
                                                          files: list[str]) -> None:
    (tmp_path / "policy.csv").write_text("p, r, icegov.s.t, SELECT, allow\n"
                                         "p, r, icegov.s.t.ssn, SELECT, deny\n")
    result = run("check", *files, "--strict")
    assert result.exit_code == 0, result.output


def test_test_checks_column_verdicts_and_row_filters(tmp_path: Path,
                                                     read_files: list[str]) -> None:
    cases = tmp_path / "cases.yaml"
    cases.write_text("""\
- principal: ann
  table: icegov.sales.customers
  expect: {columns: {id: readable, ssn: denied, email: "mask:show-last-4"}, row-filter: none}
- principal: ann
  roles: [eu]
  table: icegov.sales.orders
  expect: {row-filter: "region in ('ch', 'eu')"}
- {principal: ann, column: icegov.sales.customers.ssn, expect: denied}
- name: wrong on purpose
  principal: ann
  roles: [eu]
  table: icegov.sales.customers
  expect: {columns: {email: "mask:show-last-4", ssn: readable}, row-filter: none}
- {principal: zoe, column: icegov.sales.customers.id, expect: readable}
""")
    result = run("test", *read_files, str(cases))
    assert result.exit_code == 1
    assert (f"FAIL {cases} #4 (wrong on purpose) ann [eu] READS icegov.sales.customers: "
            "column email: expected mask:show-last-4, got denied: different masks apply (fail "
            "closed) by line 6, line 7; column ssn: expected readable, got denied by line 5; "
            "row filter: expected none, got region IN ('eu', 'ch')\n") in result.output
    assert (f"FAIL {cases} #5 zoe READS icegov.sales.customers.id: column id: expected "
            "readable, got denied: SELECT on the table is not allowed\n") in result.output
    assert "5 case(s): 3 passed, 2 failed" in result.output


@pytest.mark.parametrize(("text", "message"), [
    ("- {principal: a, table: icegov.x.t, expect: {colour: red}}\n",
     "a read expectation is a mapping with 'columns' and/or 'row-filter'"),
    ("- {principal: a, table: icegov.x.t, expect: {columns: [a]}}\n", "'columns' maps"),
    ("- {principal: a, table: icegov.x.t, expect: {columns: {a: maybe}}}\n",
     "column a: expected readable, denied or mask:<action>, got 'maybe'"),
    ("- {principal: a, table: icegov.x.t, expect: {columns: {a: 'mask:blur'}}}\n",
     "column a: unknown mask action 'blur'"),
    ("- {principal: a, table: icegov.x.t, expect: {row-filter: 'a = '}}\n",
     "cannot parse the row filter"),
    ("- {principal: a, table: icegov.x.t, expect: {row-filter: 3}}\n",
     "'row-filter' is an expression or 'none'"),
    ("- {principal: a, action: SELECT, table: icegov.x.t, expect: {row-filter: none}}\n",
     "a read case names no action"),
    ("- {principal: a, table: icegov.x.t, expect: denied}\n",
     "an expect of a column verdict needs exactly one resource key, column:"),
    ("- {principal: a, column: icegov.x.t.c, expect: {row-filter: none}}\n",
     "an expect of a mapping needs exactly one resource key, table:"),
])
def test_test_rejects_malformed_read_cases(tmp_path: Path, files: list[str], text: str,
                                          message: str) -> None:
    cases = tmp_path / "cases.yaml"
    cases.write_text(text)
    result = run("test", *files, str(cases))
    assert result.exit_code == 2
    assert message in result.output
