"""Scan filters on the wire (proxy.planning.expressions): every accepted form, weakening that
never prunes a file the client's filter could match, refusals, writing, keys and implication."""

from __future__ import annotations

import contextlib
import json
from datetime import date
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyiceberg.expressions import (
    AlwaysFalse,
    AlwaysTrue,
    And,
    BooleanExpression,
    EqualTo,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNull,
    LessThan,
    Not,
    NotIn,
    NotNull,
    NotStartsWith,
    Or,
    StartsWith,
)
from pyiceberg.expressions.visitors import expression_evaluator
from pyiceberg.schema import Schema
from pyiceberg.typedef import Record
from pyiceberg.types import (
    BinaryType,
    DateType,
    FixedType,
    LongType,
    NestedField,
    StringType,
    StructType,
    TimestampType,
)

from proxy.errors import BadRequest
from proxy.planning.expressions import (
    MAX_DEPTH,
    MAX_NODES,
    parse_filter,
    parse_filter_detailed,
)
from proxy.planning.filter_json import bind_filter, filter_to_json, referenced_columns
from proxy.planning.implication import conjuncts, implies, normalized_key

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "region", StringType(), required=False),
    NestedField(3, "ts", TimestampType(), required=False),
    NestedField(4, "d", DateType(), required=False),
    NestedField(5, "blob", BinaryType(), required=False),
    NestedField(6, "addr", StructType(NestedField(7, "zip", StringType(), required=False)),
                required=False),
    NestedField(8, "code", FixedType(2), required=False),
)


@pytest.mark.parametrize(("wire", "expected"), [
    (True, AlwaysTrue()),
    (False, AlwaysFalse()),
    ({"type": "true"}, AlwaysTrue()),
    ({"type": "false"}, AlwaysFalse()),
    ({"type": "eq", "term": "id", "value": 5}, EqualTo("id", 5)),
    ({"type": "lt", "term": {"type": "reference", "term": "id"}, "value": 5}, LessThan("id", 5)),
    ({"type": "gt-eq", "term": "region", "value": "eu"}, GreaterThanOrEqual("region", "eu")),
    ({"type": "in", "term": "id", "values": [1, 2]}, In("id", [1, 2])),
    ({"type": "not-in", "term": "id", "values": [3]}, NotIn("id", [3])),
    ({"type": "is-null", "term": "region"}, IsNull("region")),
    ({"type": "not-null", "child": {"type": "reference", "name": "region"}}, NotNull("region")),
    ({"type": "starts-with", "term": "region", "value": "e"}, StartsWith("region", "e")),
    ({"type": "not-starts-with", "left": {"type": "reference", "name": "region"},
      "right": {"type": "literal", "value": "e"}}, NotStartsWith("region", "e")),
    ({"type": "and", "left": {"type": "eq", "term": "id", "value": 1},
      "right": {"type": "not", "child": {"type": "is-null", "term": "ts"}}},
     And(EqualTo("id", 1), Not(IsNull("ts")))),
    ({"type": "or", "left": True, "right": {"type": "eq", "term": "id", "value": 1}},
     AlwaysTrue()),
    ({"type": "eq", "term": {"type": "transform", "transform": "identity", "term": "region"},
      "value": "eu"}, EqualTo("region", "eu")),
    ({"type": "gt", "left": 5, "right": {"type": "reference", "name": "id"}}, LessThan("id", 5)),
    ({"type": "in", "child": {"type": "reference", "name": "id"},
      "values": {"type": "literals", "values": [7], "data-type": "long"}}, EqualTo("id", 7)),
    ({"type": "eq", "term": "addr.zip", "value": "1000"}, EqualTo("addr.zip", "1000")),
])
def test_accepted_forms(wire: Any, expected: BooleanExpression) -> None:
    parsed = parse_filter_detailed(wire)
    assert parsed.expression == expected and parsed.exact


TRANSFORMED = {"type": "eq", "term": {"type": "transform", "transform": "day", "term": "ts"},
               "value": "2024-05-01"}


def test_transform_predicates_weaken_by_polarity_and_keep_their_columns() -> None:
    positive = parse_filter_detailed({"type": "and", "left": TRANSFORMED,
                                      "right": {"type": "eq", "term": "id", "value": 1}})
    assert positive.expression == EqualTo("id", 1) and not positive.exact
    assert positive.columns == {"ts", "id"}
    negated = parse_filter_detailed({"type": "not", "child": {
        "type": "and", "left": TRANSFORMED, "right": {"type": "eq", "term": "id", "value": 1}}})
    # not(day(ts) = x and id = 1): weakening day(ts) = x to true would give not(id = 1), which
    # wrongly drops id = 1 rows on other days; false under the not gives true (prune nothing)
    assert negated.expression == AlwaysTrue()
    lower = {"type": "apply", "function": "lower",
             "arguments": [{"type": "reference", "name": "region"}]}
    applied = parse_filter_detailed({"type": "lt", "left": lower, "right": "x"})
    assert applied.expression == AlwaysTrue() and applied.columns == {"region"}
    two_columns = parse_filter({"type": "eq", "left": {"type": "reference", "name": "id"},
                                "right": {"type": "reference", "name": "region"}})
    assert two_columns == AlwaysTrue()


WEAKENABLE = st.recursive(
    st.sampled_from([
        TRANSFORMED,
        {"type": "eq", "term": "id", "value": 1},
        {"type": "lt", "term": "id", "value": 3},
        {"type": "is-null", "term": {"type": "transform", "transform": "bucket[4]", "term": "id"}},
        {"type": "in", "term": {"type": "transform", "transform": "month", "term": "ts"},
         "values": [1]},
        {"type": "eq", "term": "region", "value": "eu"},
    ]),
    lambda children: st.one_of(
        st.builds(lambda c: {"type": "not", "child": c}, children),
        st.builds(lambda a, b: {"type": "and", "left": a, "right": b}, children, children),
        st.builds(lambda a, b: {"type": "or", "left": a, "right": b}, children, children)),
    max_leaves=8)


def _truth(wire: Any, row: dict[str, Any], transformed: dict[str, bool]) -> bool:
    """The client's filter evaluated on a row, transform predicates given their truth."""
    kind = wire["type"] if isinstance(wire, dict) else wire
    if kind in ("and", "or"):
        left, right = _truth(wire["left"], row, transformed), _truth(wire["right"], row,
                                                                     transformed)
        return (left and right) if kind == "and" else (left or right)
    if kind == "not":
        return not _truth(wire["child"], row, transformed)
    if isinstance(wire["term"], dict):
        return transformed[json.dumps(wire, sort_keys=True)]
    value = row[wire["term"]]
    return {"eq": lambda: value == wire["value"], "lt": lambda: value < wire["value"]}[kind]()


@settings(max_examples=300, deadline=None)
@given(WEAKENABLE, st.integers(0, 4), st.sampled_from(["eu", "us"]),
       st.lists(st.booleans(), min_size=3, max_size=3))
def test_a_weakened_filter_accepts_every_row_the_clients_filter_accepts(
        wire: Any, row_id: int, region: str, truths: list[bool]) -> None:
    """Soundness of weakening: whatever the transform predicates evaluate to on a row, if the
    client's filter accepts the row, the parsed filter does too (so it never prunes it)."""
    leaves = [TRANSFORMED,
              {"type": "is-null", "term": {"type": "transform", "transform": "bucket[4]",
                                           "term": "id"}},
              {"type": "in", "term": {"type": "transform", "transform": "month", "term": "ts"},
               "values": [1]}]
    transformed = {json.dumps(leaf, sort_keys=True): t for leaf, t in zip(leaves, truths,
                                                                          strict=True)}
    row = {"id": row_id, "region": region}
    if not _truth(wire, row, transformed):
        return
    schema = Schema(NestedField(1, "id", LongType(), required=False),
                    NestedField(2, "region", StringType(), required=False))
    evaluate = expression_evaluator(schema, parse_filter(wire), case_sensitive=True)
    assert evaluate(Record(row_id, region))


@pytest.mark.parametrize("wire", [
    None, 5, "id", [], {"type": 1}, {"type": "nope"}, {"type": "eq", "term": "id"},
    {"type": "eq", "term": "id", "value": None}, {"type": "eq", "term": "id", "value": [1]},
    {"type": "eq", "term": "id", "value": 2**63},
    {"type": "eq", "term": "id", "value": float("nan")},
    {"type": "eq", "term": "id", "value": 1, "extra": 1}, {"type": "and", "left": True},
    {"type": "not", "child": "x"}, {"type": "in", "term": "id", "values": 3},
    {"type": "in", "term": "id", "child": {"type": "reference", "name": "id"}, "values": []},
    {"type": "eq", "term": "", "value": 1}, {"type": "eq", "term": {"type": "reference", "id": 1},
                                             "value": 1},
    {"type": "eq", "left": 1, "right": 2}, {"type": "starts-with", "left": "a",
                                            "right": {"type": "reference", "name": "region"}},
    {"type": "is-null", "child": 3}, {"type": "eq", "term": {"type": "transform", "term": "ts"},
                                      "value": 1},
])
def test_malformed_filters_are_refused_with_400(wire: Any) -> None:
    with pytest.raises(BadRequest) as refused:
        parse_filter(wire)
    assert refused.value.status == 400 and refused.value.message.startswith("invalid filter")


def test_size_and_depth_are_bounded_without_echoing_input() -> None:
    deep: Any = {"type": "eq", "term": "id", "value": 1}
    for _ in range(MAX_DEPTH + 1):
        deep = {"type": "not", "child": deep}
    with pytest.raises(BadRequest, match="deeper"):
        parse_filter(deep)
    leaves = [{"type": "eq", "term": "id", "value": i} for i in range(MAX_NODES)]
    balanced: Any = leaves
    while len(balanced) > 1:
        balanced = [{"type": "or", "left": a, "right": b}
                    for a, b in zip(balanced[::2], balanced[1::2], strict=False)]
    with pytest.raises(BadRequest, match="nodes"):
        parse_filter(balanced[0])
    secret = "s3cr3t" * 1000
    with pytest.raises(BadRequest) as refused:
        parse_filter({"type": secret})
    assert secret not in refused.value.message and len(refused.value.message) < 200
    nested_terms: Any = "ts"
    for _ in range(MAX_DEPTH + 1):
        nested_terms = {"type": "transform", "transform": "day", "term": nested_terms}
    with pytest.raises(BadRequest):
        parse_filter({"type": "eq", "term": nested_terms, "value": 1})


@settings(max_examples=400, deadline=None)
@given(st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8)
    | st.sampled_from(["eq", "in", "and", "not", "term", "reference", "transform", "id"]),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(
        st.sampled_from(["type", "term", "value", "values", "left", "right", "child", "name",
                         "transform", "arguments", "function"]), children, max_size=4),
    max_leaves=20))
def test_arbitrary_json_parses_or_is_refused_never_crashes(wire: Any) -> None:
    with contextlib.suppress(BadRequest):
        parse_filter(wire)


def test_written_form_reads_back_and_binds() -> None:
    wire = {"type": "and",
            "left": {"type": "in", "term": "region", "values": ["us", "eu"]},
            "right": {"type": "or", "left": {"type": "lt-eq", "term": "d", "value": "2024-05-01"},
                      "right": {"type": "not-null", "term": "addr.zip"}}}
    expression = parse_filter(wire)
    assert parse_filter(filter_to_json(expression)) == expression
    bound = bind_filter(expression, SCHEMA, case_sensitive=True)
    written = filter_to_json(bound, SCHEMA)
    assert written["right"]["left"] == {"type": "lt-eq", "term": "d", "value": "2024-05-01"}
    assert written["right"]["right"] == {"type": "not-null", "term": "addr.zip"}
    assert bind_filter(parse_filter(written), SCHEMA, True) == bound
    assert filter_to_json(AlwaysTrue()) is True and filter_to_json(AlwaysFalse()) is False


def test_bind_decodes_hex_for_binary_and_fixed_and_refuses_what_cannot_bind() -> None:
    bound = bind_filter(parse_filter({"type": "eq", "term": "blob", "value": "0A0B"}), SCHEMA,
                        True)
    assert filter_to_json(bound, SCHEMA) == {"type": "eq", "term": "blob", "value": "0A0B"}
    fixed = bind_filter(parse_filter({"type": "in", "term": "code", "values": ["0A0B", "FFFF"]}),
                        SCHEMA, True)
    assert filter_to_json(fixed, SCHEMA)["values"] == ["0A0B", "FFFF"]
    for bad in ({"type": "eq", "term": "blob", "value": "zz"},
                {"type": "eq", "term": "nope", "value": 1},
                {"type": "eq", "term": "d", "value": "not a date"},
                {"type": "eq", "term": "ID", "value": 1}):
        with pytest.raises(BadRequest):
            bind_filter(parse_filter(bad), SCHEMA, case_sensitive=True)
    assert bind_filter(parse_filter({"type": "eq", "term": "ID", "value": 1}), SCHEMA, False)


def test_unbound_typed_literals_are_written_as_java_reads_them() -> None:
    bound = bind_filter(EqualTo("d", "2024-05-01"), SCHEMA, True)
    assert filter_to_json(bound, SCHEMA)["value"] == "2024-05-01"
    assert filter_to_json(EqualTo("d", date(2024, 5, 1).isoformat()))["value"] == "2024-05-01"
    assert filter_to_json(EqualTo("blob", b"\x0a\x0b"))["value"] == "0A0B"


def test_normalized_key_ignores_operand_order_and_grouping() -> None:
    a, b, c = EqualTo("id", 1), In("region", ["eu", "us"]), IsNull("ts")
    assert normalized_key(And(a, And(b, c))) == normalized_key(And(And(c, a), b))
    assert normalized_key(Or(a, b)) == normalized_key(Or(b, a))
    assert normalized_key(In("region", ["us", "eu"])) == normalized_key(b)
    assert normalized_key(And(a, b)) != normalized_key(Or(a, b))
    assert normalized_key(EqualTo("id", 1)) != normalized_key(EqualTo("id", "1"))
    assert conjuncts(And(a, And(b, c))) == {normalized_key(a), normalized_key(b),
                                            normalized_key(c)}
    assert conjuncts(AlwaysTrue()) == frozenset()
    nested = Schema(NestedField(1, "a", StructType(NestedField(2, "x", LongType()))),
                    NestedField(3, "b", StructType(NestedField(4, "x", LongType()))))
    assert normalized_key(bind_filter(EqualTo("a.x", 1), nested, True)) != normalized_key(
        bind_filter(EqualTo("b.x", 1), nested, True))


@pytest.mark.parametrize(("narrow", "wide"), [
    (EqualTo("id", 1), AlwaysTrue()),
    (AlwaysFalse(), EqualTo("id", 1)),
    (And(EqualTo("id", 1), IsNull("ts")), EqualTo("id", 1)),
    (EqualTo("id", 5), In("id", [5, 6])),
    (In("id", [5, 6]), In("id", [4, 5, 6])),
    (GreaterThan("id", 10), GreaterThanOrEqual("id", 3)),
    (GreaterThan("id", 3), GreaterThanOrEqual("id", 3)),
    (EqualTo("id", 3), GreaterThanOrEqual("id", 3)),
    (In("id", [1, 2]), LessThan("id", 3)),
    (StartsWith("region", "eur"), StartsWith("region", "eu")),
    (EqualTo("region", "eu"), NotNull("region")),
    (EqualTo("id", 1), Or(EqualTo("id", 1), IsNull("ts"))),
    (Or(EqualTo("id", 1), EqualTo("id", 2)), In("id", [1, 2, 3])),
    (EqualTo("id", 1), NotIn("id", [2, 3])),
])
def test_implies_what_certainly_follows(narrow: BooleanExpression,
                                        wide: BooleanExpression) -> None:
    assert implies(narrow, wide)


@pytest.mark.parametrize(("narrow", "wide"), [
    (AlwaysTrue(), EqualTo("id", 1)),
    (EqualTo("id", 1), And(EqualTo("id", 1), IsNull("ts"))),
    (EqualTo("id", 7), In("id", [5, 6])),
    (GreaterThanOrEqual("id", 3), GreaterThan("id", 3)),
    (GreaterThan("id", 2.5), GreaterThan("id", 2)),  # non-integer literals: no range reasoning
    (EqualTo("region", "eu"), EqualTo("id", 1)),
    (StartsWith("region", "e"), StartsWith("region", "eu")),
    (NotIn("id", [1]), NotNull("id")),
    (EqualTo("id", True), In("id", [1])),
    (EqualTo("id", 1), NotIn("id", [1, 2])),
    (Or(EqualTo("id", 1), EqualTo("id", 9)), In("id", [1, 2, 3])),
])
def test_implies_nothing_uncertain(narrow: BooleanExpression, wide: BooleanExpression) -> None:
    assert not implies(narrow, wide)


def test_referenced_columns_as_written() -> None:
    assert referenced_columns(And(EqualTo("addr.zip", "1"), Not(IsNull("ID")))) == {
        "addr.zip", "ID"}
    assert referenced_columns(AlwaysTrue()) == frozenset()
    bound = bind_filter(EqualTo("id", 1), SCHEMA, True)
    assert referenced_columns(bound) == {"id"}
