"""Column and row rules: parsing, read views, agreement with Casbin, reloads."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from pyiceberg.expressions import And, EqualTo, In
from pyiceberg.expressions.parser import parse

from proxy.governance import Action, Principal
from proxy.policy import PolicyAuthorizer, PolicyError, PolicySettings
from proxy.policy.decisions import column_verdict, read_view
from proxy.policy.model import (
    CANONICAL_MODEL,
    reference_allows,
    reference_denies,
    reference_enforcer,
)
from proxy.policy.rules import parse_policy
from proxy.policy.views import ColumnState
from proxy.resources import Resource
from proxy.restrictions import Mask, MaskAction, unrestricted

CUSTOMERS = Resource("icegov", ("demo",), "customers")
ORDERS = Resource("icegov", ("demo",), "orders")
COLUMNS = ("id", "name", "ssn", "email", "region")
BASE = """\
p, reader, icegov.demo.*, READ, allow
g, analyst, reader
g, eu, reader
"""


def authorizer(tmp_path: Path, extra: str, base: str = BASE) -> PolicyAuthorizer:
    (tmp_path / "model.conf").write_text(CANONICAL_MODEL)
    (tmp_path / "policy.csv").write_text(base + extra)
    return PolicyAuthorizer.from_settings(PolicySettings(
        model_path=tmp_path / "model.conf", policy_path=tmp_path / "policy.csv"))


def who(*roles: str) -> Principal:
    return Principal("someone", roles)


# --- parsing ------------------------------------------------------------------------------------

@pytest.mark.parametrize(("line", "message"), [
    ("p, a, icegov.d.t.c, SELECT, maks:show-last-4",
     "unknown effect 'maks:show-last-4': expected 'allow', 'deny', 'mask:<action>[:<value>]' "
     "or 'filter:<expression>'"),
    ("p, a, icegov.d.t.c, SELECT, mask:show-last-5",
     "unknown mask action 'show-last-5' (expected one of: replace-with-null, "
     "mask-to-fixed-value, mask-alphanum, show-first-4, show-last-4, truncate-to-year, "
     "truncate-to-month, sha-256)"),
    ("p, a, icegov.d.t.c, SELECT, mask:mask-to-fixed-value",
     "mask-to-fixed-value needs a value: mask:mask-to-fixed-value:<value>"),
    ("p, a, icegov.d.t.c, SELECT, mask:mask-to-fixed-value:",
     "mask-to-fixed-value needs a value: mask:mask-to-fixed-value:<value>"),
    ("p, a, icegov.d.t.c, SELECT, mask:sha-256:salt",
     "mask action 'sha-256' takes no value (got ':salt'); only mask-to-fixed-value does"),
    ("p, a, icegov.d.t.c, INSERT, mask:sha-256",
     "a mask restricts reads: its action must be SELECT, READ or * (got INSERT)"),
    ("p, a, icegov.d.t, WRITE, filter:x = 1",
     "a row filter restricts reads: its action must be SELECT, READ or * (got WRITE)"),
    ("p, a, icegov.d.t, SELECT, mask:sha-256",
     "a mask applies to columns: the resource must be catalog.namespace.table.column (or a "
     "wildcard pattern reaching one); icegov.d.t has 3 segment(s)"),
    ("p, a, icegov.d, SELECT, filter:x = 1",
     "a row filter applies to tables: the resource must be catalog.namespace.table (or a "
     "wildcard pattern reaching one); icegov.d has 2 segment(s)"),
    ("p, a, icegov.d.t, SELECT, filter:",
     "empty row filter: write filter:<expression>, e.g. filter:region = 'eu'"),
    ("p, a, icegov.d.t, SELECT, filter:region = ",
     "cannot parse the row filter 'region =' at character 1: write an Iceberg expression such "
     "as region = 'eu' or region IN ('eu', 'us') (quote the whole field when it contains a "
     "comma)"),
    ("p, a, icegov.d.t, SELECT, filter:x = 1 garbage",
     "cannot parse the row filter 'x = 1 garbage' at character 7: write an Iceberg expression "
     "such as region = 'eu' or region IN ('eu', 'us') (quote the whole field when it contains "
     "a comma)"),
    ("p, a, icegov.d.t, SELECT, filter:region IN ('eu', 'us')",
     "a 'p' line has 4 fields after 'p' (subject, resource, action, effect), got 5 (an effect "
     "containing commas must be double-quoted: \"filter:region IN ('eu', 'us')\")"),
    ('p, a, icegov.d.t, SELECT, "filter:x = "1" "',
     'malformed quoted field "filter:x = "1" ": inside the quotes write "" for each double '
     "quote"),
])
def test_every_restriction_error_is_reported_with_its_line(line: str, message: str) -> None:
    parsed = parse_policy("p, a, icegov, LIST, allow\n" + line + "\n", "policy.csv")
    assert [(p.line, p.message) for p in parsed.problems] == [(2, message)]


def test_a_policy_with_a_bad_restriction_does_not_load(tmp_path: Path) -> None:
    with pytest.raises(PolicyError, match="unknown mask action 'blur'"):
        authorizer(tmp_path, "p, analyst, icegov.demo.t.c, SELECT, mask:blur\n")


def test_quoted_effects_and_quoted_segments() -> None:
    parsed = parse_policy(
        BASE + 'p, a, icegov."x,y"."my table".c, SELECT, "mask:mask-to-fixed-value:a,""b"""\n'
        "p, a, icegov.\"x,y\".\"my table\", READ, \"filter:region IN ('eu', 'us')\"\n"
        'p, a, icegov.d.t, SELECT, filter:"weird col" = 1\n', "policy.csv")
    assert not parsed.problems
    mask, row, weird = parsed.restrictions
    assert mask.pattern.segments == ("icegov", "x,y", "my table", "c")
    assert mask.mask == Mask(MaskAction.MASK_TO_FIXED_VALUE, 'a,"b"', mask.text)
    assert mask.text == ('p, a, icegov."x,y"."my table".c, SELECT, '
                         '"mask:mask-to-fixed-value:a,""b"""')
    assert row.row_filter == In("region", {"eu", "us"})
    assert weird.row_filter == EqualTo("weird col", 1)
    # the canonical text parses back to the same line
    again = parse_policy(BASE + mask.text + "\n" + row.text + "\n", "policy.csv")
    assert not again.problems
    assert [r.text for r in again.restrictions] == [mask.text, row.text]


def test_restrictions_are_kept_apart_from_allow_and_deny_rules() -> None:
    parsed = parse_policy(BASE + "p, analyst, icegov.demo.t.c, SELECT, mask:sha-256\n", "p.csv")
    assert len(parsed.rules) == 1 and len(parsed.restrictions) == 1


# --- read views ---------------------------------------------------------------------------------

def test_a_principal_without_column_or_row_rules_gets_the_unrestricted_view(
        tmp_path: Path) -> None:
    auth = authorizer(tmp_path, "p, analyst, icegov.demo.customers.ssn, SELECT, deny\n")
    assert auth.read_view(who("eu"), CUSTOMERS, COLUMNS) == unrestricted(CUSTOMERS)
    assert auth.read_view(who("analyst"), ORDERS, COLUMNS) == unrestricted(ORDERS)


def test_denied_and_masked_columns(tmp_path: Path) -> None:
    auth = authorizer(tmp_path, "p, analyst, icegov.demo.customers.ssn, SELECT, deny\n"
                                "p, analyst, icegov.demo.customers.email, SELECT, "
                                "mask:show-last-4\n"
                                "p, analyst, icegov.demo.customers.name, SELECT, "
                                "mask:mask-to-fixed-value:REDACTED\n")
    view = auth.read_view(who("analyst"), CUSTOMERS, COLUMNS)
    assert view.denied == {"ssn"}
    assert dict(view.masks) == {
        "email": Mask(MaskAction.SHOW_LAST_4, None,
                      "p, analyst, icegov.demo.customers.email, SELECT, mask:show-last-4"),
        "name": Mask(MaskAction.MASK_TO_FIXED_VALUE, "REDACTED",
                     "p, analyst, icegov.demo.customers.name, SELECT, "
                     "mask:mask-to-fixed-value:REDACTED")}
    assert view.row_filter is None
    assert view.rules == ("p, analyst, icegov.demo.customers.ssn, SELECT, deny",
                          "p, analyst, icegov.demo.customers.email, SELECT, mask:show-last-4",
                          "p, analyst, icegov.demo.customers.name, SELECT, "
                          "mask:mask-to-fixed-value:REDACTED")
    assert view.hidden() == {"ssn", "email", "name"}


def test_a_view_names_only_the_columns_asked_about(tmp_path: Path) -> None:
    auth = authorizer(tmp_path, "p, analyst, icegov.demo.customers.ssn, SELECT, deny\n"
                                "p, analyst, icegov.demo.*.email, SELECT, mask:sha-256\n")
    view = auth.read_view(who("analyst"), CUSTOMERS, ["id", "name"])
    assert not view.restricted and view.rules == ()


@pytest.mark.parametrize("deny_roles", [("analyst",), ("analyst", "eu"), ("eu", "analyst")])
def test_deny_wins_over_masks_from_any_role(tmp_path: Path, deny_roles: tuple[str, ...]) -> None:
    auth = authorizer(tmp_path, "p, analyst, icegov.demo.customers.email, SELECT, mask:sha-256\n"
                                f"p, {deny_roles[-1]}, icegov.demo.customers.email, SELECT, deny\n")
    view = auth.read_view(who(*deny_roles), CUSTOMERS, COLUMNS)
    assert view.denied == {"email"} and not view.masks
    assert view.rules == (f"p, {deny_roles[-1]}, icegov.demo.customers.email, SELECT, deny",)


def test_wildcard_column_rules(tmp_path: Path) -> None:
    auth = authorizer(tmp_path, "p, analyst, icegov.demo.*.ssn, SELECT, deny\n"
                                "p, analyst, icegov.*.customers.*, SELECT, mask:mask-alphanum\n")
    view = auth.read_view(who("analyst"), CUSTOMERS, COLUMNS)
    assert view.denied == {"ssn"}
    assert set(view.masks) == {"id", "name", "email", "region"}
    assert auth.read_view(who("analyst"), ORDERS, COLUMNS).denied == {"ssn"}
    assert not auth.read_view(who("analyst"), ORDERS, COLUMNS).masks
    nested = Resource("icegov", ("demo", "eu"), "customers")  # icegov.demo.*.ssn: one segment
    assert auth.read_view(who("analyst"), nested, COLUMNS).denied == frozenset()


def test_a_deny_on_the_table_or_above_covers_every_column(tmp_path: Path) -> None:
    auth = authorizer(tmp_path, "p, analyst, icegov.demo.customers, SELECT, deny\n"
                                "p, eu, icegov.demo, *, deny\n")
    assert auth.read_view(who("analyst"), CUSTOMERS, COLUMNS).denied == set(COLUMNS)
    assert auth.read_view(who("analyst"), ORDERS, COLUMNS).denied == frozenset()
    assert auth.read_view(who("eu"), ORDERS, COLUMNS).denied == set(COLUMNS)
    assert auth.read_view(who("eu"), ORDERS, COLUMNS).rules == ("p, eu, icegov.demo, *, deny",)


def test_a_deny_of_another_action_does_not_touch_reads(tmp_path: Path) -> None:
    auth = authorizer(tmp_path, "p, analyst, icegov.demo.customers.ssn, INSERT, deny\n")
    assert not auth.read_view(who("analyst"), CUSTOMERS, COLUMNS).restricted


def test_roles_inherited_through_g_lines_bring_their_restrictions(tmp_path: Path) -> None:
    auth = authorizer(tmp_path, "g, alice, analyst\ng, analyst, masked\n"
                                "p, masked, icegov.demo.customers.ssn, SELECT, mask:sha-256\n"
                                "p, masked, icegov.demo.orders, SELECT, filter:region = 'eu'\n")
    alice = Principal("alice")
    assert set(auth.read_view(alice, CUSTOMERS, COLUMNS).masks) == {"ssn"}
    assert auth.read_view(alice, ORDERS, COLUMNS).filter_expression == EqualTo("region", "eu")
    assert not auth.read_view(Principal("bob", ("reader",)), CUSTOMERS, COLUMNS).restricted


def test_two_different_masks_deny_the_column_fail_closed(tmp_path: Path) -> None:
    auth = authorizer(tmp_path, "p, analyst, icegov.demo.customers.email, SELECT, mask:sha-256\n"
                                "p, eu, icegov.demo.*.email, SELECT, mask:show-last-4\n"
                                "p, eu, icegov.demo.customers.name, SELECT, mask:sha-256\n"
                                "p, analyst, icegov.demo.customers.name, SELECT, mask:sha-256\n")
    view = auth.read_view(who("analyst", "eu"), CUSTOMERS, COLUMNS)
    assert view.denied == {"email"}
    assert set(view.masks) == {"name"}  # the same mask twice is one mask
    assert len(view.rules) == 4
    verdict = column_verdict(auth.policy, who("analyst", "eu"), CUSTOMERS.column_named("email"))
    assert verdict.state == ColumnState.DENIED and verdict.conflict
    assert [rule.line for rule in verdict.rules] == [4, 5]
    # each role alone gets its own mask
    assert auth.read_view(who("eu"), CUSTOMERS, COLUMNS).masks["email"].action == \
        MaskAction.SHOW_LAST_4


def test_row_filters_are_anded_across_roles(tmp_path: Path) -> None:
    auth = authorizer(tmp_path, "p, eu, icegov.demo.orders, SELECT, filter:region = 'eu'\n"
                                "p, analyst, icegov.demo.*, READ, \"filter:tier IN (1, 2)\"\n"
                                "p, analyst, icegov.demo.orders, SELECT, filter:region = 'eu'\n")
    view = auth.read_view(who("eu", "analyst"), ORDERS, COLUMNS)
    assert view.row_filter is not None
    assert view.row_filter.expression == And(EqualTo("region", "eu"), In("tier", {1, 2}))
    assert view.row_filter.text == "(region = 'eu') AND (tier IN (1, 2))"
    assert len(view.rules) == 3  # every line behind the filter, the repeated one too
    assert auth.read_view(who("eu"), CUSTOMERS, COLUMNS).row_filter is None
    assert auth.read_view(who("analyst"), CUSTOMERS, COLUMNS).filter_expression == \
        In("tier", {1, 2})


def test_filter_true_filters_nothing(tmp_path: Path) -> None:
    auth = authorizer(tmp_path, "p, eu, icegov.demo.orders, SELECT, filter:true\n")
    assert not auth.read_view(who("eu"), ORDERS, COLUMNS).restricted


def test_restrictions_grant_nothing(tmp_path: Path) -> None:
    auth = authorizer(tmp_path, "p, other, icegov.sales.t, SELECT, filter:a = 1\n"
                                "p, other, icegov.sales.t.c, SELECT, mask:sha-256\n")
    t = Resource("icegov", ("sales",), "t")
    assert not auth.decide(Principal("x", ("other",)), Action.SELECT, t).allowed
    verdict = column_verdict(auth.policy, Principal("x", ("other",)), t.column_named("c"))
    assert verdict.state == ColumnState.DENIED and verdict.table_refused


def test_the_pure_read_view_equals_the_cached_one(tmp_path: Path) -> None:
    auth = authorizer(tmp_path, "p, analyst, icegov.demo.*.ssn, SELECT, deny\n"
                                "p, analyst, icegov.demo.orders, SELECT, filter:region = 'eu'\n")
    for table in (CUSTOMERS, ORDERS):
        assert read_view(auth.policy, who("analyst"), table, list(COLUMNS)) == \
            auth.read_view(who("analyst"), table, iter(COLUMNS))


# --- agreement with Casbin ----------------------------------------------------------------------

SUBJECTS = ("a", "b", "c")
SEGMENTS = ("icegov", "d", "t", "c1", '"c.2"', "*")
NAMES = ("icegov", "d", "t", "c1", "c.2", "zz")


def _random_policy(rng: random.Random) -> str:
    lines = ["g, a, b"]
    for _ in range(30):
        pattern = ".".join(rng.choice(SEGMENTS) for _ in range(rng.randint(1, 5)))
        effect = rng.choice(("allow", "allow", "deny", "mask:sha-256", "mask:show-last-4",
                             "filter:x = 1"))
        action = rng.choice(("SELECT", "READ", "*")) if effect.startswith(("m", "f")) \
            else rng.choice(("SELECT", "INSERT", "READ", "*"))
        lines.append(f"p, {rng.choice(SUBJECTS)}, {pattern}, {action}, {effect}")
    text = "\n".join(lines) + "\n"
    parsed = parse_policy(text, "p.csv")  # drop lines a restriction may not have
    bad = {p.line for p in parsed.problems if p.line is not None}
    return "".join(line + "\n" for n, line in enumerate(lines, 1) if n not in bad)


@pytest.mark.parametrize("seed", range(6))
def test_column_denies_and_decisions_agree_with_casbin(tmp_path: Path, seed: int) -> None:
    """Casbin sees every line, restrictions included (indeterminate effects): its decisions are
    icegov's, and a column is denied exactly when one of Casbin's denies matches it."""
    rng = random.Random(seed)
    auth = authorizer(tmp_path, _random_policy(rng), base="")
    enforcer = reference_enforcer(CANONICAL_MODEL, auth.policy.parsed)
    assert auth.policy.parsed.restrictions
    for _ in range(150):
        parts = tuple(rng.choice(NAMES) for _ in range(rng.randint(3, 4)))
        table = Resource(parts[0], parts[1:-1], parts[-1])
        principal = Principal(rng.choice(("a", "c", "z")), (rng.choice(SUBJECTS),))
        for action in (Action.SELECT, Action.INSERT):
            assert auth.decide(principal, action, table).allowed is \
                reference_allows(enforcer, principal, action, table)
        view = auth.read_view(principal, table, NAMES)
        for name in NAMES:
            column = table.column_named(name)
            if reference_denies(enforcer, principal, "SELECT", column):
                assert name in view.denied, (principal, column)
            elif name in view.denied:  # only two different masks deny without a deny rule
                assert column_verdict(auth.policy, principal, column).conflict or \
                    not auth.decide(principal, Action.SELECT, table).allowed, (principal, column)


@pytest.mark.parametrize("seed", range(4))
def test_restriction_lines_change_no_decision(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    text = _random_policy(rng)
    plain = "".join(line + "\n" for line in text.splitlines()
                    if not line.endswith(("sha-256", "show-last-4", "x = 1")))
    (tmp_path / "r").mkdir()
    with_restrictions = authorizer(tmp_path / "r", text, base="")
    without = authorizer(tmp_path, plain, base="")
    assert len(with_restrictions.policy.parsed.restrictions) > 0
    for _ in range(200):
        parts = tuple(rng.choice(NAMES) for _ in range(rng.randint(1, 4)))
        resource = Resource(parts[0], parts[1:-1], parts[-1]) if len(parts) >= 3 \
            else Resource(parts[0], parts[1:])
        principal = Principal(rng.choice(("a", "c", "z")), (rng.choice(SUBJECTS),))
        for action in (Action.SELECT, Action.LIST):
            assert with_restrictions.decide(principal, action, resource) == \
                without.decide(principal, action, resource)
            assert with_restrictions.can_see(principal, resource) == \
                without.can_see(principal, resource)


# --- reloads ------------------------------------------------------------------------------------

def test_a_reload_changes_read_views_and_no_cached_view_survives(tmp_path: Path) -> None:
    auth = authorizer(tmp_path, "p, analyst, icegov.demo.customers.ssn, SELECT, deny\n")
    assert auth.generation == 1
    assert auth.read_view(who("analyst"), CUSTOMERS, COLUMNS).denied == {"ssn"}
    policy = tmp_path / "policy.csv"
    policy.write_text(BASE + "p, analyst, icegov.demo.customers.email, SELECT, mask:sha-256\n"
                             "p, analyst, icegov.demo.customers, SELECT, filter:id > 10\n")
    assert auth.reload_if_changed()
    assert auth.generation == 2
    view = auth.read_view(who("analyst"), CUSTOMERS, COLUMNS)
    assert view.denied == frozenset() and set(view.masks) == {"email"}
    assert view.filter_expression == parse("id > 10")
    assert auth.status.rules == 3


def test_a_broken_restriction_keeps_the_last_good_views(tmp_path: Path) -> None:
    auth = authorizer(tmp_path, "p, analyst, icegov.demo.customers.ssn, SELECT, deny\n")
    (tmp_path / "policy.csv").write_text(BASE + "p, analyst, icegov.demo.orders, SELECT, "
                                                "filter:region =\n")
    assert not auth.reload_if_changed()
    assert auth.generation == 1
    assert "cannot parse the row filter" in (auth.status.last_error or "")
    assert auth.read_view(who("analyst"), CUSTOMERS, COLUMNS).denied == {"ssn"}
