"""The policy language: patterns, wildcards, roles, deny-wins, default deny, can_see."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.governance import Action, Principal
from proxy.policy import PolicyAuthorizer, PolicySettings
from proxy.policy.model import CANONICAL_MODEL, reference_allows, reference_enforcer
from proxy.policy.patterns import (
    PatternError,
    compile_actions,
    compile_resource,
    parse_resource_text,
    resource_from_text,
    resource_match,
)
from proxy.policy.rules import parse_policy
from proxy.resources import Resource, ResourceKind, format_segments, parse_segments

A = Action
NS, TABLE, COLUMN = ResourceKind.NAMESPACE, ResourceKind.TABLE, ResourceKind.COLUMN


def res(text: str, kind: ResourceKind | None = None) -> Resource:
    """A resource from its text form (1 segment: catalog, 2: namespace, more: table)."""
    return resource_from_text(text, kind)


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
    assert compile_resource(pattern).matches(parse_resource_text(resource)) is matches


@pytest.mark.parametrize("bad", ["icegov..x", ".icegov", "icegov.", "sales_*", "ice*.x", "a b",
                                 "", '""', 'icegov.""', 'icegov."demo', 'icegov."x"y', 'ice"gov',
                                 'icegov."."', 'icegov.".."', 'icegov."a/b"', 'icegov."a\\b"',
                                 'icegov."a\x1fb"', "icegov.a\tb"])
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
    decision = auth.decide(who("writer"), A.INSERT, res("icegov.demo.events"))
    assert decision.allowed
    assert decision.rule == "p, writer, icegov.demo.*, INSERT, allow"
    assert (decision.action, decision.resource) == (A.INSERT, res("icegov.demo.events"))


def test_default_deny_has_no_rule(tmp_path: Path) -> None:
    auth = authorizer(tmp_path, "p, writer, icegov.demo.*, INSERT, allow\n")
    for principal, action, resource in [(who("writer"), A.DELETE, res("icegov.demo.t")),
                                        (who("writer"), A.INSERT, res("icegov.other.t")),
                                        (who("stranger"), A.INSERT, res("icegov.demo.t"))]:
        decision = auth.decide(principal, action, resource)
        assert not decision.allowed
        assert decision.rule is None


def test_deny_wins_over_allow_whatever_the_order(tmp_path: Path) -> None:
    auth = authorizer(tmp_path, "p, team, icegov.sales.*, *, allow\n"
                                "p, team, icegov.sales.payroll, *, deny\n")
    assert auth.decide(who("ann", "team"), A.SELECT, res("icegov.sales.orders")).allowed
    decision = auth.decide(who("ann", "team"), A.SELECT, res("icegov.sales.payroll"))
    assert not decision.allowed
    assert decision.rule == "p, team, icegov.sales.payroll, *, deny"


def test_deny_from_any_role_wins(tmp_path: Path) -> None:
    auth = authorizer(tmp_path, "p, analyst, icegov.*, READ, allow\n"
                                "p, contractor, icegov.hr.*, *, deny\n")
    assert auth.decide(who("ann", "analyst"), A.SELECT, res("icegov.hr.salaries")).allowed
    denied = auth.decide(who("ann", "analyst", "contractor"), A.SELECT, res("icegov.hr.salaries"))
    assert not denied.allowed
    assert denied.rule == "p, contractor, icegov.hr.*, *, deny"


def test_roles_from_the_file_are_transitive(tmp_path: Path) -> None:
    auth = authorizer(tmp_path, "g, ann, analysts\n"
                                "g, analysts, readers\n"
                                "p, readers, icegov.demo.*, SELECT, allow\n")
    decision = auth.decide(who("ann"), A.SELECT, res("icegov.demo.t"))
    assert decision.allowed
    assert decision.rule == "p, readers, icegov.demo.*, SELECT, allow"
    assert not auth.decide(who("bob"), A.SELECT, res("icegov.demo.t")).allowed


def test_roles_from_the_token_and_their_file_roles(tmp_path: Path) -> None:
    auth = authorizer(tmp_path, "g, analysts, readers\n"
                                "p, readers, icegov.demo.*, SELECT, allow\n"
                                "p, loaders, icegov.demo.*, INSERT, allow\n")
    ann = who("ann", "analysts", "loaders")
    assert auth.decide(ann, A.SELECT, res("icegov.demo.t")).allowed  # token role -> file role
    assert auth.decide(ann, A.INSERT, res("icegov.demo.t")).allowed  # token role directly
    assert not auth.decide(who("ann"), A.SELECT, res("icegov.demo.t")).allowed


def test_the_principal_name_is_a_subject(tmp_path: Path) -> None:
    auth = authorizer(tmp_path, "p, ann, icegov.demo.t, SELECT, allow\n")
    assert auth.decide(who("ann"), A.SELECT, res("icegov.demo.t")).allowed
    assert not auth.decide(who("bob", "ann-team"), A.SELECT, res("icegov.demo.t")).allowed


def test_first_matching_line_is_reported(tmp_path: Path) -> None:
    auth = authorizer(tmp_path, "p, r, icegov.*, SELECT, allow\n"
                                "p, r, icegov.demo.t, SELECT, allow\n"
                                "p, r, icegov.demo.t, SELECT, deny\n"
                                "p, r, *, SELECT, deny\n")
    assert auth.decide(who("x", "r"), A.SELECT, res("icegov.demo.t")).rule == \
        "p, r, icegov.demo.t, SELECT, deny"


def test_catalog_and_namespace_levels(tmp_path: Path) -> None:
    auth = authorizer(tmp_path, "p, r, icegov, LIST, allow\n"
                                "p, r, icegov.demo, DESCRIBE, allow\n")
    assert auth.decide(who("x", "r"), A.LIST, res("icegov")).allowed
    assert not auth.decide(who("x", "r"), A.LIST, res("icegov.demo")).allowed
    assert auth.decide(who("x", "r"), A.DESCRIBE, res("icegov.demo")).allowed
    assert not auth.decide(who("x", "r"), A.DESCRIBE, res("icegov.demo.t")).allowed


@pytest.mark.parametrize(("resource", "visible"), [
    ("icegov", True),  # something beneath is allowed
    ("icegov.sales", True),
    ("icegov.sales.orders", True),
    ("icegov.sales.payroll", False),  # as a namespace too: the deny covers what is beneath
    ("icegov.hr", False),  # nothing allowed there
    ("icegov.hr.salaries", False),
    ("other", False),
])
def test_can_see(tmp_path: Path, resource: str, visible: bool) -> None:
    auth = authorizer(tmp_path, "p, team, icegov.sales.*, READ, allow\n"
                                "p, team, icegov.sales.payroll, *, deny\n")
    kind = None if "." not in resource else NS
    assert auth.can_see(who("ann", "team"), res(resource, kind)) is visible


def test_can_see_a_table_counts_rights_on_the_table_only(tmp_path: Path) -> None:
    auth = authorizer(tmp_path, "p, team, icegov.sales.*, READ, allow\n"
                                "p, team, icegov.sales.payroll, *, deny\n")
    assert not auth.can_see(who("ann", "team"), res("icegov.sales.payroll", TABLE))
    assert auth.can_see(who("ann", "team"), res("icegov.sales.orders", TABLE))
    # the namespace (sales, payroll) is beneath the denied table: on a path-based catalog it is
    # the table's own directory
    assert not auth.can_see(who("ann", "team"), res("icegov.sales.payroll", NS))
    assert not auth.decide(who("ann", "team"), A.CREATE_TABLE,
                           res("icegov.sales.payroll.metadata", TABLE)).allowed


def test_can_see_through_a_partially_denied_subtree(tmp_path: Path) -> None:
    auth = authorizer(tmp_path, "p, r, icegov.*, SELECT, allow\n"
                                "p, r, icegov.sales.*, SELECT, deny\n"
                                "p, r, icegov.*.*, SELECT, deny\n")
    # icegov.sales itself is allowed (icegov.* covers it; the denies only cover what is beneath)
    assert auth.can_see(who("x", "r"), res("icegov.sales", NS))
    assert not auth.can_see(who("x", "r"), res("icegov.sales.orders", NS))
    assert auth.can_see(who("x", "r"), res("icegov"))


def test_can_see_with_an_inner_wildcard(tmp_path: Path) -> None:
    auth = authorizer(tmp_path, "p, r, icegov.*.orders, SELECT, allow\n"
                                "p, r, icegov.eu.*, *, deny\n")
    assert auth.can_see(who("x", "r"), res("icegov.us", NS))
    assert auth.can_see(who("x", "r"), res("icegov.us.orders", NS))
    assert not auth.can_see(who("x", "r"), res("icegov.us.returns", NS))
    assert not auth.can_see(who("x", "r"), res("icegov.eu", NS))


def test_can_see_is_per_action(tmp_path: Path) -> None:
    auth = authorizer(tmp_path, "p, r, icegov.demo.t, *, allow\n"
                                "p, r, icegov.demo.t, WRITE, deny\n")
    assert auth.can_see(who("x", "r"), res("icegov.demo.t"))  # SELECT etc. are still allowed
    assert not auth.can_see(who("y"), res("icegov.demo.t"))


RANDOM_POLICY_SUBJECTS = ("a", "b", "c", "d")
RANDOM_SEGMENTS = ("icegov", "x", '"x.y"', '"*"', '"a,b"', "*")  # quoted: literal names
RANDOM_NAMES = ("icegov", "x", "y", "x.y", "*", "a,b")


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


def _resource(parts: tuple[str, ...]) -> Resource:
    """A catalog, a namespace or (three segments or more) a table with these segments."""
    if len(parts) < 3:
        return Resource(parts[0], parts[1:])
    return Resource(parts[0], parts[1:-1], parts[-1])


@pytest.mark.parametrize("seed", range(8))
def test_the_index_agrees_with_casbin(tmp_path: Path, seed: int) -> None:
    """Casbin enforcing model.conf is the reference; the compiled index must give its answers.
    Casbin sees resources and patterns as text, with names that contain dots, commas and '*'."""
    rng = random.Random(seed)
    auth = authorizer(tmp_path, _random_policy(rng))
    enforcer = reference_enforcer(CANONICAL_MODEL, auth.policy.parsed)
    for _ in range(300):
        resource = _resource(tuple(rng.choice(RANDOM_NAMES) for _ in range(rng.randint(1, 4))))
        principal = who(rng.choice(("a", "b", "d", "z")), *rng.sample(RANDOM_POLICY_SUBJECTS, 1))
        action = rng.choice((A.SELECT, A.INSERT, A.LIST, A.DELETE, A.DROP_TABLE))
        expected = reference_allows(enforcer, principal, action, resource)
        assert auth.decide(principal, action, resource).allowed is expected, (principal, action,
                                                                              resource)


DISTINCT_ACTIONS = (A.SELECT, A.INSERT, A.LIST, A.DESCRIBE, A.DELETE, A.ALTER)
"""One action per class the random policies cannot tell apart (ALTER: only ``*`` names it)."""


@pytest.mark.parametrize("seed", range(8))
def test_can_see_agrees_with_brute_force(tmp_path: Path, seed: int) -> None:
    """can_see == some action allowed on the resource or (catalog, namespace) beneath it."""
    rng = random.Random(seed)
    auth = authorizer(tmp_path, _random_policy(rng))
    names = ("icegov", "x", "x.y", "*", "a,b", "fresh")  # every literal, and one no rule names
    universe: list[tuple[str, ...]] = [(a,) for a in names]
    for depth in range(2, 5):
        universe += [(*p, c) for p in universe if len(p) == depth - 1 for c in names]
    for principal in (who("a"), who("d", "c"), who("z")):
        allowed = {parts for parts in universe
                   if any(auth.decide(principal, action, _resource(parts)).allowed
                          for action in DISTINCT_ACTIONS)}
        for parts in (p for p in universe if len(p) <= 3):  # depth 4 only as witnesses
            brute = any(candidate[:len(parts)] == parts for candidate in allowed)
            assert auth.can_see(principal, Resource(parts[0], parts[1:])) is brute, parts
        for parts in (p for p in universe if len(p) >= 3):
            typed = _resource(parts) if len(parts) == 3 else \
                Resource(parts[0], parts[1:2], parts[2], parts[3])  # a column
            assert auth.can_see(principal, typed) is (parts in allowed), typed


def test_a_dot_inside_a_name_is_not_a_separator(tmp_path: Path) -> None:
    """The top-level namespace ``demo.priv`` is not governed by the rules for ``icegov.demo.*``."""
    auth = authorizer(tmp_path, "p, r, icegov.demo.*, *, allow\n")
    dotted_namespace = Resource("icegov", ("demo.priv",))
    dotted_table = dotted_namespace.table_named("t")
    for action in (A.SELECT, A.INSERT, A.DESCRIBE, A.LIST):
        assert not auth.decide(who("x", "r"), action, dotted_table).allowed
        assert not auth.decide(who("x", "r"), action, dotted_namespace).allowed
    assert not auth.can_see(who("x", "r"), dotted_namespace)
    assert not auth.can_see(who("x", "r"), dotted_table)
    nested = Resource("icegov", ("demo", "priv"), "t")  # what the dotted text would split into
    assert auth.decide(who("x", "r"), A.SELECT, nested).allowed
    assert str(dotted_table) == 'icegov."demo.priv".t' != str(nested)


def test_a_quoted_pattern_governs_a_dotted_name(tmp_path: Path) -> None:
    auth = authorizer(tmp_path, 'p, r, icegov."demo.priv", BROWSE, allow\n'
                                'p, r, icegov."demo.priv".*, READ, allow\n'
                                'p, r, icegov."demo.priv".secret, *, deny\n')
    namespace = Resource("icegov", ("demo.priv",))
    decision = auth.decide(who("x", "r"), A.SELECT, namespace.table_named("t"))
    assert decision.allowed
    assert decision.rule == 'p, r, icegov."demo.priv".*, READ, allow'
    assert auth.decide(who("x", "r"), A.DESCRIBE, namespace).allowed
    denied = auth.decide(who("x", "r"), A.SELECT, namespace.table_named("secret"))
    assert denied.rule == 'p, r, icegov."demo.priv".secret, *, deny'
    assert not auth.can_see(who("x", "r"), namespace.table_named("secret"))
    assert not auth.decide(who("x", "r"), A.SELECT, Resource("icegov", ("demo", "priv"),
                                                                "t")).allowed
    assert not auth.can_see(who("x", "r"), Resource("icegov", ("demo",)))


def test_a_quoted_star_is_a_literal_name(tmp_path: Path) -> None:
    auth = authorizer(tmp_path, 'p, r, icegov."*".t, SELECT, allow\n'
                                'p, s, icegov.*.t, SELECT, allow\n')
    star, other = Resource("icegov", ("*",), "t"), Resource("icegov", ("x",), "t")
    assert auth.decide(who("x", "r"), A.SELECT, star).allowed
    assert not auth.decide(who("x", "r"), A.SELECT, other).allowed
    assert auth.decide(who("x", "s"), A.SELECT, star).allowed  # a wildcard covers any name
    assert auth.decide(who("x", "s"), A.SELECT, other).allowed
    literal_end = compile_resource('icegov."*"')
    assert not literal_end.open
    assert literal_end.matches(("icegov", "*"))
    assert not literal_end.matches(("icegov", "x"))
    assert not literal_end.matches(("icegov", "*", "t"))


@pytest.mark.parametrize(("written", "canonical"), [
    ('icegov."demo".*', "icegov.demo.*"),
    ('icegov."demo.priv".*', 'icegov."demo.priv".*'),
    ('icegov."a""b".x', 'icegov."a""b".x'),
    ('"*"', '"*"'),
    ("*", "*"),
    ('icegov."a,b".*.t', 'icegov."a,b".*.t'),
    ('icegov."with space"', 'icegov."with space"'),
    ("icegov.ünïcode", "icegov.ünïcode"),
])
def test_patterns_are_shown_in_canonical_form(written: str, canonical: str) -> None:
    assert compile_resource(written).text == canonical
    assert compile_resource(canonical) == compile_resource(written)


def test_a_comma_inside_a_quoted_segment_does_not_split_the_line(tmp_path: Path) -> None:
    auth = authorizer(tmp_path, 'p, r, icegov."a,b".*, SELECT, allow\n')
    (rule,) = auth.policy.parsed.rules
    assert rule.pattern.segments == ("icegov", "a,b")
    assert rule.text == 'p, r, icegov."a,b".*, SELECT, allow'
    assert auth.decide(who("x", "r"), A.SELECT, Resource("icegov", ("a,b",), "t")).allowed
    enforcer = reference_enforcer(CANONICAL_MODEL, auth.policy.parsed)
    assert reference_allows(enforcer, who("x", "r"), "SELECT", Resource("icegov", ("a,b",), "t"))


@pytest.mark.parametrize("name", ["a\u2028b", "a\u2029b", "a\u00a0b"])
def test_unicode_line_and_space_separators_stay_inside_a_quoted_name(name: str) -> None:
    parsed = parse_policy(f'p, r, icegov."{name}".*, SELECT, allow\n', "policy.csv")
    assert not parsed.problems
    assert parsed.rules[0].pattern.segments == ("icegov", name)


def test_column_visibility_counts_rights_on_the_column_only(tmp_path: Path) -> None:
    auth = authorizer(tmp_path, "p, r, icegov.demo.t.c, SELECT, allow\n")
    table = Resource("icegov", ("demo",), "t")
    assert auth.can_see(who("x", "r"), table.column_named("c"))
    assert not auth.can_see(who("x", "r"), table.column_named("d"))
    assert auth.can_see(who("x", "r"), Resource("icegov", ("demo",)))  # something beneath


HOSTILE = st.text(alphabet=st.sampled_from('ab."*, \u2028\u00a0é\u200b\''), min_size=1,
                  max_size=8)
NAMES = HOSTILE.filter(lambda name: name not in (".", ".."))


@settings(max_examples=300, deadline=None)
@given(st.lists(NAMES, min_size=1, max_size=5).map(tuple))
def test_the_text_form_round_trips_for_hostile_names(parts: tuple[str, ...]) -> None:
    text = format_segments(parts)
    assert tuple(segment for segment, _ in parse_segments(text)) == parts
    assert parse_resource_text(text) == parts
    pattern = compile_resource(text)
    assert pattern.exact and pattern.text == text and pattern.matches(parts)
    assert resource_match(text, text)  # what Casbin's matcher is given
    assert compile_resource(text + ".*").matches((*parts, "x"))
    assert not compile_resource(text + ".*").matches(parts)
    naive = tuple(".".join(parts).split("."))
    if naive != parts:  # a dot inside a name: splitting the text naively names something else
        assert not pattern.matches(naive)
    if len(parts) >= 3:
        assert resource_from_text(text, TABLE).parts == parts
    parsed = parse_policy(f"p, r, {text}, SELECT, allow\n", "policy.csv")
    assert not parsed.problems
    assert parsed.rules[0].pattern.segments == parts  # commas in names do not split the line
