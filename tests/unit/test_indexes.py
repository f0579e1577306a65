"""Bloom-filter indexes: the filter, value hashing, Puffin files, stored provenance, the
property check, pruning that is never wrong, and the service's builds and reuse."""

from __future__ import annotations

import random
import uuid
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.conversions import to_bytes
from pyiceberg.expressions import (
    And,
    BooleanExpression,
    EqualTo,
    GreaterThan,
    In,
    Not,
    NotEqualTo,
    Or,
)
from pyiceberg.expressions.visitors import expression_evaluator
from pyiceberg.manifest import DataFile
from pyiceberg.schema import Schema
from pyiceberg.table.puffin import PuffinFile
from pyiceberg.typedef import Record
from pyiceberg.types import (
    BinaryType,
    DateType,
    DecimalType,
    DoubleType,
    IntegerType,
    ListType,
    LongType,
    NestedField,
    StringType,
    TimestampType,
    UUIDType,
)

from proxy.commits.index_property import BLOOM_FILTER_COLUMNS, check_index_property
from proxy.errors import BadRequest
from proxy.indexes.build import filter_of
from proxy.indexes.service import IndexService
from proxy.indexes.settings import IndexSettings
from proxy.indexes.status import ColumnStatus, index_status
from proxy.indexes.store import FilterKey, filter_from, puffin_bytes
from proxy.planning.bloom import BloomFilter, encoder, family
from proxy.planning.index_pruning import IndexPruner
from proxy.planning.manifest_cache import ManifestCache
from proxy.planning.planner import Planner
from proxy.planning.puffin import Blob, read_puffin, write_puffin
from proxy.planning.scope import ScanSpec


def test_a_bloom_filter_has_no_false_negatives_and_about_its_false_positive_rate() -> None:
    bloom = BloomFilter.sized_for(10_000, 0.01)
    members = [f"user-{i}".encode() for i in range(10_000)]
    bloom.add_all(members)
    assert all(bloom.might_contain(m) for m in members)
    strangers = [f"other-{i}".encode() for i in range(20_000)]
    rate = sum(bloom.might_contain(s) for s in strangers) / len(strangers)
    assert rate < 0.02
    again = BloomFilter(bloom.num_bits, bloom.num_hashes, bloom.to_bytes())
    assert all(again.might_contain(m) for m in members[:100])


def test_a_bloom_filter_refuses_impossible_parameters() -> None:
    with pytest.raises(ValueError, match="bits"):
        BloomFilter(63, 3)
    with pytest.raises(ValueError, match="hashes"):
        BloomFilter(64, 0)
    with pytest.raises(ValueError, match="size"):
        BloomFilter(64, 3, b"\x00")


@pytest.mark.parametrize(("field_type", "value"), [
    (LongType(), 1 << 40), (LongType(), -5), (DateType(), 19723), (TimestampType(), 1_700_000),
    (StringType(), "ünïcode"), (BinaryType(), b"\x00\x01"), (DecimalType(10, 2), Decimal("12.34")),
    (DoubleType(), 2.5), (UUIDType(), uuid.UUID("12345678-1234-5678-1234-567812345678")),
])
def test_values_hash_in_their_iceberg_single_value_form(field_type: object, value: object) -> None:
    name = family(field_type)  # type: ignore[arg-type]
    assert name is not None
    assert encoder(name)(value) == to_bytes(field_type, value)  # type: ignore[arg-type]


def test_promotable_types_share_a_family_and_equal_values_one_hash() -> None:
    assert family(IntegerType()) == family(LongType()) == "long"
    assert encoder("double")(-0.0) == encoder("double")(0.0)
    assert encoder("double")(float("nan")) is None
    assert family(DecimalType(9, 2)) == family(DecimalType(18, 2)) != family(DecimalType(9, 3))


def test_a_puffin_file_round_trips_and_pyiceberg_reads_it() -> None:
    blobs = [Blob("t-1", (3,), 7, 2, b"abc", {"k": "v"}), Blob("t-2", (4, 5), -1, 0, b"")]
    data = write_puffin(blobs, {"created-by": "test"})
    assert read_puffin(data) == blobs
    footer = PuffinFile(data).footer
    assert [b.type for b in footer.blobs] == ["t-1", "t-2"]
    assert footer.properties == {"created-by": "test"}


@pytest.mark.parametrize("damage", [
    lambda d: d[:-1], lambda d: b"XXXX" + d[4:], lambda d: d[:20] + d[40:], lambda d: d[:5],
    lambda d: d.replace(b'"offset":4', b'"offset":9999'),
])
def test_a_damaged_puffin_file_is_refused(damage: object) -> None:
    data = write_puffin([Blob("t", (1,), 1, 1, b"payload-bytes")])
    with pytest.raises(ValueError):
        read_puffin(damage(data))  # type: ignore[operator]


def test_a_stored_filter_is_believed_only_for_its_own_file_and_column() -> None:
    key = FilterKey("s3://b/t/data/a.parquet", 1234, 2, "long")
    bloom = BloomFilter.sized_for(10, 0.01)
    bloom.add_all([encoder("long")(7)])
    blobs = read_puffin(puffin_bytes(key, bloom, 1, 1))
    loaded = filter_from(blobs, key)
    assert loaded is not None and loaded.might_contain(encoder("long")(7))
    for other in (FilterKey(key.data_path, 1235, 2, "long"), FilterKey("s3://b/x", 1234, 2, "long"),
                  FilterKey(key.data_path, 1234, 3, "long"),
                  FilterKey(key.data_path, 1234, 2, "string")):
        assert filter_from(blobs, other) is None


def test_with_a_key_only_a_filter_sealed_with_it_is_believed() -> None:
    key = FilterKey("file:///t/a.parquet", 10, 1, "long")
    bloom = BloomFilter.sized_for(10, 0.01)
    bloom.add_all([encoder("long")(42)])
    sealed = read_puffin(puffin_bytes(key, bloom, 1, 1, b"k" * 40))
    assert filter_from(sealed, key, b"k" * 40) is not None
    assert filter_from(sealed, key, b"x" * 40) is None
    assert filter_from(read_puffin(puffin_bytes(key, bloom, 1, 1)), key, b"k" * 40) is None
    forged = [Blob(b.type, b.fields, b.snapshot_id, b.sequence_number,
                   bytes(len(b.payload)), b.properties) for b in sealed]  # bits emptied
    assert filter_from(forged, key, b"k" * 40) is None
    assert filter_from(forged, key) is not None  # unsealed: trusted as the storage is


SCHEMA = Schema(NestedField(1, "user_id", LongType()), NestedField(2, "email", StringType()),
                NestedField(3, "n", LongType()),
                NestedField(4, "tags", ListType(5, StringType())))


def _commit(properties: dict[str, str]) -> dict[str, object]:
    return {"updates": [{"action": "set-properties", "updates": properties}]}


def _metadata() -> object:
    from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC
    from pyiceberg.table.metadata import new_table_metadata
    from pyiceberg.table.sorting import UNSORTED_SORT_ORDER
    return new_table_metadata(SCHEMA, UNPARTITIONED_PARTITION_SPEC, UNSORTED_SORT_ORDER,
                              "file:///tmp/t", {})


def test_the_property_must_name_indexable_top_level_columns() -> None:
    base = _metadata()
    check_index_property(_commit({BLOOM_FILTER_COLUMNS: "user_id, email"}), base)  # type: ignore[arg-type]
    for bad, reason in (("nope", "not a top-level column"), ("tags", "primitive"),
                        ("user_id,user_id", "twice"), (" , ", "names no column")):
        with pytest.raises(BadRequest, match=reason):
            check_index_property(_commit({BLOOM_FILTER_COLUMNS: bad}), base)  # type: ignore[arg-type]
    check_index_property(_commit({"other": "x"}), base)  # type: ignore[arg-type]
    removal = {"updates": [{"action": "remove-properties", "removals": [BLOOM_FILTER_COLUMNS]}]}
    check_index_property(removal, base)  # type: ignore[arg-type]


def _file(path: str, size: int = 100) -> DataFile:
    return DataFile.from_args(file_path=path, file_size_in_bytes=size, record_count=1)


def _random_filter(rng: random.Random, ids: list[int]) -> BooleanExpression:
    def leaf() -> BooleanExpression:
        choice = rng.randrange(5)
        if choice == 0:
            return EqualTo("user_id", rng.choice(ids) if rng.random() < 0.5 else -rng.randrange(99))
        if choice == 1:
            return In("user_id", {rng.choice(ids) for _ in range(rng.randrange(1, 4))})
        if choice == 2:
            return EqualTo("email", f"u{rng.choice(ids)}@x")
        if choice == 3:
            return GreaterThan("n", rng.randrange(10))
        return NotEqualTo("user_id", rng.choice(ids))
    expression = leaf()
    for _ in range(rng.randrange(3)):
        combine = rng.choice([And, Or])
        expression = combine(expression, leaf())
    return Not(expression) if rng.random() < 0.2 else expression


def test_index_pruning_never_drops_a_file_holding_a_matching_row() -> None:
    rng = random.Random(7)
    files: dict[str, list[Record]] = {}
    filters: dict[tuple[str, int], BloomFilter] = {}
    for f in range(40):
        ids = [rng.randrange(2000) for _ in range(25)]
        path = f"file:///t/f{f}.parquet"
        files[path] = [Record(i, f"u{i}@x", rng.randrange(10), None) for i in ids]
        if f % 5 != 0:  # some files have no filter: never pruned
            filters[(path, 1)] = filter_of(pa.chunked_array([ids], pa.int64()), "long", 0.05)
            filters[(path, 2)] = filter_of(pa.chunked_array([[f"u{i}@x" for i in ids]]),
                                           "string", 0.05)
    every_id = [r[0] for rows in files.values() for r in rows]

    def lookup(data_file: DataFile, field_id: int, kind: str) -> BloomFilter | None:
        return filters.get((data_file.file_path, field_id))

    pruned = 0
    for _ in range(300):
        expression = _random_filter(rng, every_id)
        pruner = IndexPruner.for_filter(SCHEMA, expression, True, frozenset({1, 2}), lookup)
        matches = expression_evaluator(SCHEMA, expression, True)
        for path, rows in files.items():
            if pruner is not None and not pruner.keeps(_file(path)):
                pruned += 1
                assert not any(matches(row) for row in rows), (expression, path)
    assert pruned > 1000  # the index did prune


def test_only_indexed_usable_columns_and_narrowing_parts_prune() -> None:
    ids = pa.chunked_array([[1, 2, 3]], pa.int64())
    bloom = filter_of(ids, "long", 0.01)

    def lookup(data_file: DataFile, field_id: int, kind: str) -> BloomFilter | None:
        return bloom if field_id == 1 else None

    def keeps(expression: BooleanExpression, usable: frozenset[int] = frozenset({1})) -> bool:
        pruner = IndexPruner.for_filter(SCHEMA, expression, True, usable, lookup)
        return pruner is None or pruner.keeps(_file("f"))

    assert not keeps(EqualTo("user_id", 99))
    assert keeps(EqualTo("user_id", 99), usable=frozenset())  # e.g. a masked column
    assert keeps(EqualTo("user_id", 2))
    assert not keeps(And(EqualTo("user_id", 99), GreaterThan("n", 1)))
    assert keeps(Or(EqualTo("user_id", 99), GreaterThan("n", 1)))
    assert not keeps(Or(EqualTo("user_id", 99), In("user_id", {98, 97})))
    assert keeps(Not(EqualTo("user_id", 99)))


def _table_with_files(tmp_path: Path, files: int) -> tuple[SqlCatalog, object]:
    catalog = SqlCatalog("t", uri=f"sqlite:///{tmp_path}/c.db", warehouse=tmp_path.as_uri())
    catalog.create_namespace("ns")
    schema = Schema(NestedField(1, "user_id", LongType()), NestedField(2, "v", StringType()))
    table = catalog.create_table("ns.t", schema, properties={BLOOM_FILTER_COLUMNS: "user_id"})
    for f in range(files):
        ids = list(range(f, 300, 6))  # every file spans the range: metrics cannot prune
        table.append(pa.table({"user_id": pa.array(ids, pa.int64()),
                               "v": [str(i) for i in ids]}))
    return catalog, catalog.load_table("ns.t")


def test_the_service_builds_reuses_after_a_restart_prunes_and_collects(tmp_path: Path) -> None:
    _, table = _table_with_files(tmp_path, 6)
    metadata, io = table.metadata, table.io  # type: ignore[attr-defined]
    first = IndexService(IndexSettings(), ManifestCache(10_000), {})
    spec = ScanSpec(filter=EqualTo("user_id", 205))
    assert first.pruner(metadata, io, spec, frozenset()) is None  # nothing built yet
    assert first.wait_idle(60)
    assert first.stats.built == 6 and first.stats.reused == 0
    stored = sorted((tmp_path / "ns" / "t" / "metadata" / "icegov-index").iterdir())
    assert len(stored) == 6
    assert index_status(metadata, io) == [ColumnStatus("user_id", "long", 6, 6)]

    again = IndexService(IndexSettings(), ManifestCache(10_000), {})  # icegov restarted
    again.want(metadata, io)
    assert again.wait_idle(60)
    assert again.stats.built == 0 and again.stats.reused == 6
    pruner = again.pruner(metadata, io, spec, frozenset())
    assert pruner is not None
    from proxy.indexes.files import live_data_files
    live = live_data_files(metadata, io, ManifestCache(10_000))
    kept = [f.file_path for f in live if pruner.keeps(f)]
    assert len(kept) >= 1 and all(p in {f.file_path for f in live} for p in kept)
    assert len(kept) < 6
    plan = Planner(ManifestCache(10_000)).plan(metadata, io, spec, index=pruner)
    assert sorted(t.file.file_path for t in plan.tasks) == sorted(kept)
    assert plan.pruned["indexes"] == 6 - len(kept)
    assert not any(n for mechanism, n in plan.pruned.items() if mechanism != "indexes")
    unindexed = Planner(ManifestCache(10_000)).plan(metadata, io, spec)
    assert len(unindexed.tasks) == 6 and not unindexed.pruned.get("indexes")
    assert again.pruner(metadata, io, spec, frozenset({"user_id"})) is None  # masked: unused

    dropped = table.transaction()  # type: ignore[attr-defined]
    dropped.remove_properties(BLOOM_FILTER_COLUMNS)
    after = dropped.commit_transaction()
    assert again.pruner(after.metadata, io, spec, frozenset()) is None  # stops using at once
    again.landed(after.metadata)
    assert again.wait_idle(60)
    assert again.stats.removed == 6
    assert not list((tmp_path / "ns" / "t" / "metadata" / "icegov-index").iterdir())


class _Recording:
    """An IndexService stand-in noting what planning asked of it."""

    def __init__(self) -> None:
        self.asked: list[tuple[frozenset[str], bool]] = []

    def pruner(self, metadata: object, io: object, spec: object, excluded: frozenset[str], *,
               sync: bool = True) -> None:
        self.asked.append((excluded, sync))


def _scan(view: object, governed_from: object = None) -> object:
    from types import SimpleNamespace
    context = SimpleNamespace(view=view, governed_from=governed_from, metadata=None,
                              state=SimpleNamespace(io=None))
    return SimpleNamespace(context=context)


def test_planning_never_uses_an_index_on_a_denied_or_masked_column() -> None:
    from proxy.plans.service import PlanService
    from proxy.resources import Resource
    from proxy.restrictions import Mask, MaskAction, ReadView

    table = Resource("icegov", ("demo",), "customers")
    masked = ReadView(table, denied=frozenset({"ssn"}),
                      masks={"email": Mask(MaskAction.SHOW_LAST_4)})
    recording = _Recording()
    service = PlanService.__new__(PlanService)
    service._indexes = recording  # type: ignore[assignment]
    service._index(_scan(masked), ScanSpec())  # type: ignore[arg-type]
    governed = ReadView(table, governed="digest")
    service._index(_scan(governed, masked), ScanSpec())  # type: ignore[arg-type]
    assert recording.asked == [(frozenset({"ssn", "email"}), True),
                               (frozenset({"ssn", "email"}), False)]
