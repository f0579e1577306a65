"""The policy language: patterns, wildcards, roles, deny-wins, default deny, can_see."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from proxy.governance import Action, Principal
from proxy.policy import PolicyAuthorizer, PolicySettings
from proxy.policy.model import CANONICAL_MODEL, reference_allows, reference_enforcer
from proxy.policy.patterns import PatternError, compile_actions, compile_resource, split_resource

A = Action


def authorizer(tmp_path: Path, policy: str) -> PolicyAuthorizer:
    """A PolicyAuthorizer over ``policy`` (the canonical model) written to ``tmp_path``."""
    (tmp_path / "model.conf").write_text(CANONICAL_MODEL)
    (tmp_path / "policy.csv").write_text(policy)
    return PolicyAuthorizer.from_settings(PolicySettings(
        model_path=tmp_path / "model.conf", policy_path=tmp_path / "policy.csv"))


def who(name: str, *roles: str) -> Principal:
    return Principal(name, roles)


@pytest.mark.parametrize(("pattern", "resource", "matches"), [
    ("icegov.sales.orders", "icegov.sales.orders", True),
    ("icegov.sales.orders", "icegov.sales.orders2", False),
    ("icegov.sales.orders", "icegov.sales", False),
    ("icegov.sales.*", "icegov.sales.orders", True),
    ("icegov.sales.*", "icegov.sales.eu.orders", True),  # trailing * reaches every depth
    ("icegov.sales.*", "icegov.sales", False),  # ... but not the namespace itself
    ("icegov.sales.*", "icegov.salesforce.x", False),  # segments, not string prefixes
    ("icegov.*", "icegov.sales", True),
    ("icegov.*", "icegov", False),
    ("icegov.*.orders", "icegov.sales.orders", True),
    ("icegov.*.orders", "icegov.sales.eu.orders", False),  # inner * is one segment
    ("icegov.*.orders", "icegov.sales.returns", False),
    ("*", "icegov", True),
    ("*", "icegov.sales.orders", True),
    ("*.sales.*", "other.sales.orders", True),
    ("Icegov.sales", "icegov.sales", False),  # case-sensitive
])
def test_resource_patterns(pattern: str, resource: str, matches: bool) -> None:
    assert compile_resource(pattern).matches(split_resource(resource)) is matches


@pytest.mark.parametrize("bad", ["icegov..x", ".icegov", "icegov.", "sales_*", "ice*.x", "a b",
                                 ""])
def test_malformed_resource_patterns_are_rejected(bad: str) -> None:
    with pytest.raises(PatternError):
        compile_resource(bad)


def test_action_patterns() -> None:
    assert compile_actions("*") == frozenset(Action)
    assert compile_actions("READ") == {A.SELECT, A.LIST, A.DESCRIBE}
    assert compile_actions("BROWSE") == {A.LIST, A.DESCRIBE}
    assert compile_actions("WRITE") == {A.INSERT, A.DELETE, A.UPDATE, A.REWRITE}
    assert compile_actions("INSERT") == {A.INSERT}
    with pytest.raises(PatternError, match="unknown action 'SLECT'"):
        compile_actions("SLECT")


def test_allow_reports_the_deciding_line(tmp_path: Path) -> None:
    auth = authorizer(tmp_path, "p, writer, icegov.demo.*, INSERT, allow\n")
    decision = auth.decide(who("writer"), A.INSERT, "icegov.demo.events")
    assert decision.allowed
    assert decision.rule == "p, writer, icegov.demo.*, INSERT, allow"
    assert (decision.action, decision.resource) == (A.INSERT, "icegov.demo.events")


def test_default_deny_has_no_rule(tmp_path: Path) -> None:
    auth = authorizer(tmp_path, "p, writer, icegov.demo.*, INSERT, allow\n")
    for principal, action, resource in [(who("writer"), A.DELETE, "icegov.demo.t"),
                                        (who("writer"), A.INSERT, "icegov.other.t"),
                                        (who("stranger"), A.INSERT, "icegov.demo.t")]:
        decision = auth.decide(principal, action, resource)
        assert not decision.allowed
        assert decision.rule is None


def test_deny_wins_over_allow_whatever_the_order(tmp_path: Path) -> None:
    auth = authorizer(tmp_path, "p, team, icegov.sales.*, *, allow\n"
                                "p, team, icegov.sales.payroll, *, deny\n")
    assert auth.decide(who("ann", "team"), A.SELECT, "icegov.sales.orders").allowed
    decision = auth.decide(who("ann", "team"), A.SELECT, "icegov.sales.payroll")
    assert not decision.allowed
    assert decision.rule == "p, team, icegov.sales.payroll, *, deny"


def test_deny_from_any_role_wins(tmp_path: Path) -> None:
    auth = authorizer(tmp_path, "p, analyst, icegov.*, READ, allow\n"
                                "p, contractor, icegov.hr.*, *, deny\n")
    assert auth.decide(who("ann", "analyst"), A.SELECT, "icegov.hr.salaries").allowed
    denied = auth.decide(who("ann", "analyst", "contractor"), A.SELECT, "icegov.hr.salaries")
    assert not denied.allowed
    assert denied.rule == "p, contractor, icegov.hr.*, *, deny"


def test_roles_from_the_file_are_transitive(tmp_path: Path) -> None:
    auth = authorizer(tmp_path, "g, ann, analysts\n"
                                "g, analysts, readers\n"
                                "p, readers, icegov.demo.*, SELECT, allow\n")
    decision = auth.decide(who("ann"), A.SELECT, "icegov.demo.t")
    assert decision.allowed
    assert decision.rule == "p, readers, icegov.demo.*, SELECT, allow"
    assert not auth.decide(who("bob"), A.SELECT, "icegov.demo.t").allowed


def test_roles_from_the_token_and_their_file_roles(tmp_path: Path) -> None:
    auth = authorizer(tmp_path, "g, analysts, readers\n"
                                "p, readers, icegov.demo.*, SELECT, allow\n"
                                "p, loaders, icegov.demo.*, INSERT, allow\n")
    ann = who("ann", "analysts", "loaders")
    assert auth.decide(ann, A.SELECT, "icegov.demo.t").allowed  # token role -> file role
    assert auth.decide(ann, A.INSERT, "icegov.demo.t").allowed  # token role directly
    assert not auth.decide(who("ann"), A.SELECT, "icegov.demo.t").allowed


def test_the_principal_name_is_a_subject(tmp_path: Path) -> None:
    auth = authorizer(tmp_path, "p, ann, icegov.demo.t, SELECT, allow\n")
    assert auth.decide(who("ann"), A.SELECT, "icegov.demo.t").allowed
    assert not auth.decide(who("bob", "ann-team"), A.SELECT, "icegov.demo.t").allowed


def test_first_matching_line_is_reported(tmp_path: Path) -> None:
    auth = authorizer(tmp_path, "p, r, icegov.*, SELECT, allow\n"
                                "p, r, icegov.demo.t, SELECT, allow\n"
                                "p, r, icegov.demo.t, SELECT, deny\n"
                                "p, r, *, SELECT, deny\n")
    assert auth.decide(who("x", "r"), A.SELECT, "icegov.demo.t").rule == \
        "p, r, icegov.demo.t, SELECT, deny"


def test_catalog_and_namespace_levels(tmp_path: Path) -> None:
    auth = authorizer(tmp_path, "p, r, icegov, LIST, allow\n"
                                "p, r, icegov.demo, DESCRIBE, allow\n")
    assert auth.decide(who("x", "r"), A.LIST, "icegov").allowed
    assert not auth.decide(who("x", "r"), A.LIST, "icegov.demo").allowed
    assert auth.decide(who("x", "r"), A.DESCRIBE, "icegov.demo").allowed
    assert not auth.decide(who("x", "r"), A.DESCRIBE, "icegov.demo.t").allowed


@pytest.mark.parametrize(("resource", "visible"), [
    ("icegov", True),  # something beneath is allowed
    ("icegov.sales", True),
    ("icegov.sales.orders", True),
    ("icegov.sales.payroll", True),  # as a namespace: icegov.sales.payroll.x is allowed
    ("icegov.hr", False),  # nothing allowed there
    ("icegov.hr.salaries", False),
    ("other", False),
])
def test_can_see(tmp_path: Path, resource: str, visible: bool) -> None:
    auth = authorizer(tmp_path, "p, team, icegov.sales.*, READ, allow\n"
                                "p, team, icegov.sales.payroll, *, deny\n")
    assert auth.can_see(who("ann", "team"), resource) is visible


def test_can_see_a_table_counts_rights_on_the_table_only(tmp_path: Path) -> None:
    auth = authorizer(tmp_path, "p, team, icegov.sales.*, READ, allow\n"
                                "p, team, icegov.sales.payroll, *, deny\n")
    assert not auth.can_see(who("ann", "team"), "icegov.sales.payroll", table=True)
    assert auth.can_see(who("ann", "team"), "icegov.sales.orders", table=True)
    assert not auth.can_see(who("ann", "team"), "icegov.sales", table=True)  # as a table


def test_can_see_through_a_partially_denied_subtree(tmp_path: Path) -> None:
    auth = authorizer(tmp_path, "p, r, icegov.*, SELECT, allow\n"
                                "p, r, icegov.sales.*, SELECT, deny\n"
                                "p, r, icegov.*.*, SELECT, deny\n")
    # icegov.sales itself is allowed (icegov.* covers it; the denies only cover what is beneath)
    assert auth.can_see(who("x", "r"), "icegov.sales")
    assert not auth.can_see(who("x", "r"), "icegov.sales.orders")
    assert auth.can_see(who("x", "r"), "icegov")


def test_can_see_with_an_inner_wildcard(tmp_path: Path) -> None:
    auth = authorizer(tmp_path, "p, r, icegov.*.orders, SELECT, allow\n"
                                "p, r, icegov.eu.*, *, deny\n")
    assert auth.can_see(who("x", "r"), "icegov.us")
    assert auth.can_see(who("x", "r"), "icegov.us.orders")
    assert not auth.can_see(who("x", "r"), "icegov.us.returns")
    assert not auth.can_see(who("x", "r"), "icegov.eu")


def test_can_see_is_per_action(tmp_path: Path) -> None:
    auth = authorizer(tmp_path, "p, r, icegov.demo.t, *, allow\n"
                                "p, r, icegov.demo.t, WRITE, deny\n")
    assert auth.can_see(who("x", "r"), "icegov.demo.t")  # SELECT etc. are still allowed
    assert not auth.can_see(who("y"), "icegov.demo.t")


RANDOM_POLICY_SUBJECTS = ("a", "b", "c", "d")
RANDOM_SEGMENTS = ("icegov", "x", "y", "*")


def _random_policy(rng: random.Random) -> str:
    lines = [f"g, {m}, {r}" for m, r in (("a", "b"), ("b", "c"))]
    actions = ("SELECT", "INSERT", "READ", "WRITE", "*", "LIST")
    for _ in range(30):
        depth = rng.randint(1, 4)
        pattern = ".".join(rng.choice(RANDOM_SEGMENTS) for _ in range(depth))
        effect = rng.choice(("allow", "allow", "deny"))
        lines.append(f"p, {rng.choice(RANDOM_POLICY_SUBJECTS)}, {pattern}, "
                     f"{rng.choice(actions)}, {effect}")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("seed", range(8))
def test_the_index_agrees_with_casbin(tmp_path: Path, seed: int) -> None:
    """Casbin enforcing model.conf is the reference; the compiled index must give its answers."""
    rng = random.Random(seed)
    auth = authorizer(tmp_path, _random_policy(rng))
    enforcer = reference_enforcer(CANONICAL_MODEL, auth.policy.parsed)
    for _ in range(300):
        resource = ".".join(rng.choice(("icegov", "x", "y", "z")) for _ in range(rng.randint(1, 4)))
        principal = who(rng.choice(("a", "b", "d", "z")), *rng.sample(RANDOM_POLICY_SUBJECTS, 1))
        action = rng.choice((A.SELECT, A.INSERT, A.LIST, A.DELETE, A.DROP_TABLE))
        expected = reference_allows(enforcer, principal, action, resource)
        assert auth.decide(principal, action, resource).allowed is expected, (principal, action,
                                                                              resource)


@pytest.mark.parametrize("seed", range(8))
def test_can_see_agrees_with_brute_force(tmp_path: Path, seed: int) -> None:
    """can_see == some action allowed on the resource or on a resource beneath it."""
    rng = random.Random(seed)
    auth = authorizer(tmp_path, _random_policy(rng))
    names = ("icegov", "x", "y", "fresh")
    universe = [(a,) for a in names] + [(a, b) for a in names for b in names]
    universe += [(*p, c) for p in universe if len(p) == 2 for c in names]
    universe += [(*p, c) for p in universe if len(p) == 3 for c in names]
    resources = [".".join(parts) for parts in universe]
    for principal in (who("a"), who("d", "c"), who("z")):
        for resource in resources[:84]:  # depths 1-3 as targets; depth 4 as witnesses
            brute = any(auth.decide(principal, action, candidate).allowed
                        for candidate in resources
                        if candidate == resource or candidate.startswith(resource + ".")
                        for action in Action)
            assert auth.can_see(principal, resource) is brute, (principal, resource)
            exact = any(auth.decide(principal, action, resource).allowed for action in Action)
            assert auth.can_see(principal, resource, table=True) is exact, (principal, resource)
