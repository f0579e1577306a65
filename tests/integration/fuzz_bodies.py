"""Hypothesis strategies for Iceberg REST request bodies: valid shapes with hostile values.

Every strategy mixes well-formed values (so that requests get past shape checks and reach the
gate, the classifier and the catalog) with hostile ones: wrong types, nulls, non-finite and huge
numbers, deep nesting, unicode and control characters in names, path tricks in locations.
``body_for(endpoint)`` is the strategy for one endpoint of the route table; ``random_json`` is
structure-free JSON.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st


def mostly(usual: st.SearchStrategy[Any], rare: st.SearchStrategy[Any],
           in_ten: int = 1) -> st.SearchStrategy[Any]:
    """``usual``, or about ``in_ten`` times in ten ``rare`` (hypothesis' ``one_of`` has no weights
    and favours its first and last branches)."""
    return st.integers(0, 9).flatmap(lambda roll: rare if roll < in_ten else usual)


SCHEMA: dict[str, Any] = {"type": "struct", "schema-id": 0, "fields": [
    {"id": 1, "name": "id", "type": "long", "required": False},
    {"id": 2, "name": "category", "type": "string", "required": False}]}

HOSTILE_NAMES = st.sampled_from([
    "", ".", "..", "/", "a/b", "a\\b", "a.b", "\x00", "\x1f", "a\x1fb", "%1F", "%2F", "..%2F..",
    "\u202e", "\ud800", "\udfff", "x" * 300, "x" * 2000, " ", "*", '"', "'; drop table x; --",
    "\u0085", "\x7f", "CON", "é", "😀",
])
KNOWN_NAMES = st.sampled_from(["db", "t", "demo", "fresh", "other", "x"])
NAMES = st.one_of(KNOWN_NAMES, KNOWN_NAMES, HOSTILE_NAMES, st.text(max_size=12))

EDGE_INTS = st.sampled_from([2**63 - 1, -(2**63), 2**31, -(2**31) - 1, -1, 2**63, 10**30])
INTS = mostly(st.one_of(st.integers(-3, 5), st.integers(0, 2**40)), EDGE_INTS)
FLOATS = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.just(1e308))

# @DB@ and @DEMO@ stand for the locations of the tables db.t and demo.t (see test_fuzz.py): files
# there pass the location check and are read as manifest lists or metadata.
TABLE_FILES = ("metadata/junk.avro", "metadata/empty.avro", "metadata/json.avro",
               "metadata/folder", "metadata/missing.avro", "data/junk.parquet")
LOCATIONS = st.one_of(st.sampled_from([f"{table}/{file}" for table in ("@DB@", "@DEMO@")
                                       for file in TABLE_FILES]), st.sampled_from([
    "/etc/passwd", "/nonexistent/metadata/x.avro", "file:///etc/passwd", "file:/etc/shadow",
    "/tmp/../etc/passwd", "s3://bucket/x.avro", "http://169.254.169.254/latest", "", "relative/x",
    "file:///%2E%2E/etc/passwd", "/proc/self/environ", "\x00", "gs://b/x", "file://host/x",
    "@DB@", "@DB@/../keep/metadata/x.avro", "@DEMO@/metadata/%2E%2E/x.avro",
]))


def _leaf() -> st.SearchStrategy[Any]:
    return st.one_of(st.none(), st.booleans(), INTS, FLOATS, st.text(max_size=20), HOSTILE_NAMES)


def random_json(max_leaves: int = 20) -> st.SearchStrategy[Any]:
    """Any JSON value (hypothesis' recursive JSON), occasionally nested past icegov's limit."""
    tree = st.recursive(_leaf(), lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(st.text(max_size=8), children, max_size=4)),
        max_leaves=max_leaves)
    deep = st.integers(60, 200).map(lambda n: _nest(n))
    return st.one_of(tree, tree, tree, deep)


def _nest(depth: int) -> Any:
    value: Any = "leaf"
    for level in range(depth):
        value = [value] if level % 2 else {"a": value}
    return value


HOSTILE = st.one_of(_leaf(), _leaf(), _leaf(), st.lists(_leaf(), max_size=3),
                    st.dictionaries(st.text(max_size=5), _leaf(), max_size=3))


def maybe(valid: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Mostly ``valid``, sometimes a hostile value of any type."""
    return mostly(valid, HOSTILE)


def shaped(required: dict[str, st.SearchStrategy[Any]],
           optional: dict[str, st.SearchStrategy[Any]] | None = None) -> st.SearchStrategy[Any]:
    """A JSON object with these fields (each maybe hostile), some dropped, some junk added."""
    fields = st.fixed_dictionaries(
        {k: maybe(v) for k, v in required.items()},
        optional={k: maybe(v) for k, v in (optional or {}).items()})
    dropped = st.sets(st.sampled_from(sorted(required)), max_size=1) if required else st.just(set())
    junk = st.dictionaries(st.text(max_size=6), _leaf(), max_size=2)
    return st.builds(_assemble, fields, dropped, junk, st.integers(0, 9))


def _assemble(fields: dict[str, Any], dropped: set[str], junk: dict[str, Any], roll: int) -> Any:
    body = {k: v for k, v in fields.items() if not (roll == 0 and k in dropped)}
    return {**junk, **body} if roll == 1 else body


NAMESPACE = st.one_of(st.lists(NAMES, min_size=1, max_size=3), st.just(["db"]),
                      st.just(["demo"]))
PROPERTIES = st.dictionaries(NAMES, st.one_of(st.text(max_size=10), HOSTILE), max_size=3)
IDENTIFIER = mostly(st.just({"namespace": ["db"], "name": "t"}),
                    shaped({"namespace": NAMESPACE, "name": NAMES}), in_ten=5)
TYPES = st.sampled_from(["long", "int", "string", "boolean", "double", "decimal(5, 2)",
                         "decimal(99, 99)", "fixed[3]", "fixed[-1]", "timestamp", "uuid",
                         "variant", "geometry", "nope", "timestamp_ns", "unknown"])
FIELD = shaped({"id": INTS, "name": NAMES, "type": st.one_of(TYPES, st.just(SCHEMA)),
                "required": st.booleans()}, {"doc": st.text(max_size=5)})
SCHEMAS = st.one_of(st.just(SCHEMA), shaped(
    {"type": st.just("struct"), "fields": st.lists(FIELD, max_size=3)},
    {"schema-id": INTS, "identifier-field-ids": st.lists(INTS, max_size=2)}))
TRANSFORMS = st.sampled_from(["identity", "bucket[4]", "bucket[0]", "bucket[-1]", "truncate[3]",
                              "year", "month", "day", "hour", "void", "bucket[99999999999]",
                              "zorder", ""])
SPEC = shaped({"spec-id": INTS, "fields": st.lists(shaped(
    {"source-id": INTS, "field-id": INTS, "name": NAMES, "transform": TRANSFORMS}), max_size=2)})
ORDER = shaped({"order-id": INTS, "fields": st.lists(shaped(
    {"source-id": INTS, "transform": TRANSFORMS,
     "direction": st.sampled_from(["asc", "desc", "up"]),
     "null-order": st.sampled_from(["nulls-first", "nulls-last", "never"])}), max_size=2)})
SNAPSHOT = shaped({
    "snapshot-id": INTS, "timestamp-ms": INTS, "manifest-list": LOCATIONS,
    "summary": shaped({"operation": st.sampled_from(["append", "overwrite", "delete", "replace",
                                                     "grant"])}, {"added-records": INTS}),
}, {"parent-snapshot-id": INTS, "sequence-number": INTS, "schema-id": INTS})
UUIDS = st.one_of(st.uuids().map(str), st.text(max_size=5))

REQUIREMENTS = st.one_of(
    shaped({"type": st.just("assert-create")}),
    shaped({"type": st.just("assert-table-uuid"), "uuid": UUIDS}),
    shaped({"type": st.just("assert-ref-snapshot-id"), "ref": NAMES,
            "snapshot-id": st.one_of(st.none(), INTS)}),
    shaped({"type": st.sampled_from([
        "assert-last-assigned-field-id", "assert-current-schema-id",
        "assert-last-assigned-partition-id", "assert-default-spec-id",
        "assert-default-sort-order-id", "assert-everything"])},
        {"last-assigned-field-id": INTS, "current-schema-id": INTS,
         "last-assigned-partition-id": INTS, "default-spec-id": INTS,
         "default-sort-order-id": INTS}),
)

UPDATES = st.one_of(
    shaped({"action": st.just("assign-uuid"), "uuid": UUIDS}),
    shaped({"action": st.just("upgrade-format-version"), "format-version": INTS}),
    shaped({"action": st.just("add-schema"), "schema": SCHEMAS}, {"last-column-id": INTS}),
    shaped({"action": st.sampled_from(["set-current-schema", "set-default-spec",
                                       "set-default-sort-order"]),
            "schema-id": INTS, "spec-id": INTS, "sort-order-id": INTS}),
    shaped({"action": st.just("add-spec"), "spec": SPEC}),
    shaped({"action": st.just("add-sort-order"), "sort-order": ORDER}),
    shaped({"action": st.just("add-snapshot"), "snapshot": SNAPSHOT}),
    shaped({"action": st.just("set-snapshot-ref"), "ref-name": NAMES,
            "type": st.sampled_from(["branch", "tag", "twig"]), "snapshot-id": INTS},
           {"max-snapshot-age-ms": INTS, "max-ref-age-ms": INTS, "min-snapshots-to-keep": INTS}),
    shaped({"action": st.just("remove-snapshots"), "snapshot-ids": st.lists(INTS, max_size=3)}),
    shaped({"action": st.just("remove-snapshot-ref"), "ref-name": NAMES}),
    shaped({"action": st.just("set-location"), "location": LOCATIONS}),
    shaped({"action": st.just("set-properties"), "updates": PROPERTIES}),
    shaped({"action": st.just("remove-properties"), "removals": st.lists(NAMES, max_size=3)}),
    shaped({"action": st.sampled_from(["set-statistics", "remove-statistics",
                                       "set-partition-statistics", "remove-partition-statistics",
                                       "remove-partition-specs", "remove-schemas",
                                       "enable-row-lineage", "add-encryption-key",
                                       "remove-encryption-key", "grant-everything"])},
           {"snapshot-id": INTS, "spec-ids": st.lists(INTS, max_size=2),
            "schema-ids": st.lists(INTS, max_size=2), "statistics": HOSTILE,
            "key-id": st.text(max_size=5)}),
)

COMMIT = shaped({"requirements": st.lists(REQUIREMENTS, max_size=3),
                 "updates": st.lists(UPDATES, min_size=1, max_size=4)}, {"identifier": IDENTIFIER})
TABLE_CHANGE = shaped({"identifier": IDENTIFIER, "requirements": st.lists(REQUIREMENTS, max_size=2),
                       "updates": st.lists(UPDATES, max_size=3)})

BODIES: dict[str, st.SearchStrategy[Any]] = {
    "create_namespace": shaped({"namespace": NAMESPACE}, {"properties": PROPERTIES}),
    "update_namespace_properties": shaped(
        {}, {"removals": st.lists(NAMES, max_size=3), "updates": PROPERTIES}),
    "create_table": shaped({"name": NAMES, "schema": SCHEMAS}, {
        "location": LOCATIONS, "partition-spec": SPEC, "write-order": ORDER,
        "stage-create": st.booleans(), "properties": PROPERTIES}),
    "register_table": shaped({"name": NAMES, "metadata-location": LOCATIONS},
                             {"overwrite": st.booleans()}),
    "commit_table": COMMIT,
    "report_metrics": shaped({"report-type": st.sampled_from(["scan-report", "commit-report"]),
                              "table-name": NAMES, "snapshot-id": INTS, "metrics": HOSTILE}),
    "plan_table_scan": shaped({}, {"snapshot-id": INTS, "select": st.lists(NAMES, max_size=2),
                                   "filter": HOSTILE, "case-sensitive": st.booleans()}),
    "fetch_scan_tasks": shaped({"plan-task": st.text(max_size=10)}),
    "rename_table": shaped({"source": IDENTIFIER, "destination": IDENTIFIER}),
    "commit_transaction": shaped({"table-changes": st.lists(TABLE_CHANGE, min_size=1,
                                                            max_size=3)}),
    "create_view": shaped({"name": NAMES, "schema": SCHEMAS, "view-version": HOSTILE}),
    "register_view": shaped({"name": NAMES, "metadata-location": LOCATIONS}),
    "replace_view": COMMIT,
    "rename_view": shaped({"source": IDENTIFIER, "destination": IDENTIFIER}),
    "sign_s3_request": shaped(
        {"region": NAMES, "uri": LOCATIONS,
         "method": st.sampled_from(["GET", "HEAD", "PUT", "POST", "DELETE", "get", ""]),
         "headers": HOSTILE}, {"properties": PROPERTIES, "body": HOSTILE}),
}


def body_for(endpoint: str) -> st.SearchStrategy[Any]:
    """A body for ``endpoint``: mostly plausibly shaped, sometimes any JSON at all."""
    return mostly(BODIES[endpoint], random_json())
