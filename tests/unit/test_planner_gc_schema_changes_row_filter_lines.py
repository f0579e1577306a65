"""A second attacker's review (issue 8), the parts that need no proxy: the planner's pause of the
garbage collector, what counts as a schema change for a restricted writer, and policy lines
that try to smuggle something into a row filter.

Every attack here is met today (refused or made harmless) and is a plain test (the findings once
pinned as strict xfails were fixed and un-marked);
``tests/integration/test_restricted_answers_and_commits.py`` has the rest.
"""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from proxy.planning.manifest_cache import _FREEZE_MIN_OBJECTS, _CollectorPause
from proxy.policy.lint import lint
from proxy.policy.rules import parse_policy
from proxy.reads.writes import changes_schema

BASE = "p, reader, icegov.demo.*, READ, allow\ng, analyst, reader\n"


class _Node:
    """An object that can hold a reference to itself (cyclic garbage once dropped)."""

    me: object = None


@pytest.fixture
def unfrozen() -> Iterator[None]:
    """Whatever a test freezes is given back to the collector afterwards."""
    gc.collect()
    yield
    gc.unfreeze()
    gc.collect()


def test_cyclic_garbage_of_a_large_pause_is_still_collected(unfrozen: None) -> None:
    pause = _CollectorPause()
    with pause.held(freeze=True):
        node = _Node()
        node.me = node  # e.g. an exception and its traceback, in another request
        alive = weakref.ref(node)
        del node
        decoded = [[] for _ in range(_FREEZE_MIN_OBJECTS)]  # a large decode, kept (cached)
    del decoded
    gc.collect()
    assert alive() is None, "cyclic garbage of the pause was frozen for good"


def test_without_freezing_the_same_garbage_is_collected(unfrozen: None) -> None:
    """The control of the finding above: only the freeze keeps the garbage."""
    pause = _CollectorPause()
    with pause.held(freeze=False):
        node = _Node()
        node.me = node
        alive = weakref.ref(node)
        del node
        decoded = [[] for _ in range(_FREEZE_MIN_OBJECTS)]
    del decoded
    gc.collect()
    assert alive() is None


def test_the_pause_always_gives_the_collector_back() -> None:
    assert gc.isenabled()
    pause = _CollectorPause()
    with pytest.raises(RuntimeError), pause.held(freeze=False):
        assert not gc.isenabled()
        raise RuntimeError("a plan that fails half-way")
    assert gc.isenabled()


def test_removing_schemas_is_a_schema_change() -> None:
    assert changes_schema([{"action": "remove-schemas", "schema-ids": [0]}])


@pytest.mark.parametrize("effect", [
    "filter:region = 'eu' -- OR 1 = 1",   # no comments to hide a disjunction behind
    "filter:region = 'eu' OR 1 = 1",      # no constant comparisons
    "filter:region = 'eu'; DROP",         # nothing after the expression
    "filter:région = 'eu'",               # non-ASCII names must be double-quoted
    "filter:region = 'eu",                # an unterminated literal
])
def test_smuggled_row_filters_do_not_load(effect: str) -> None:
    parsed = parse_policy(BASE + f"p, analyst, icegov.demo.orders, SELECT, {effect}\n", "t")
    assert [p.severity for p in parsed.problems] == ["error"]
    assert not parsed.restrictions


def test_a_doubled_quote_stays_inside_the_literal() -> None:
    parsed = parse_policy(BASE + "p, analyst, icegov.demo.orders, SELECT, "
                                 "filter:region = 'e'' OR region <> '''\n", "t")
    assert not parsed.problems
    (restriction,) = parsed.restrictions
    assert restriction.row_filter is not None
    assert "Or" not in repr(restriction.row_filter)


def test_policy_check_warns_about_a_filter_over_a_denied_column() -> None:
    text = BASE + ("p, analyst, icegov.demo.customers.ssn, SELECT, deny\n"
                   "p, analyst, icegov.demo.customers, SELECT, filter:ssn = '111-11-1111'\n")
    parsed = parse_policy(text, "t")
    assert not parsed.problems
    assert any(p.line == 4 for p in lint(parsed, "t"))
