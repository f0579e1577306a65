"""Column dependencies: the ``icegov.column-dependencies`` table property (icebergSQL's form).

The property is a comma-separated list of ``source=dependent:transform``: every row's
``dependent`` value is ``transform(source)`` (both null when the source is null), with Iceberg
transforms: ``identity``, ``truncate[W]``, ``bucket[N]``, ``year``, ``month``, ``day``,
``hour``. Both are top-level primitive columns of the table, distinct; the transform must apply
to the source's type and yield exactly the dependent's type (``truncate[2]`` of a string is its
first two characters, of an int ``v - v % 2``; ``day`` yields a ``date``, ``year`` / ``month`` /
``hour`` an ``int``, ``bucket[N]`` an ``int``).

Server-side planning turns predicates on a source into predicates on its dependent
(``proxy.planning.inferred``), but only for files whose rows icegov checked: a commit that adds
data to a table with dependencies has its added files' rows checked (``dependency_rows``), and
each snapshot whose every added file held is stamped ``icegov.dependencies-verified=<digest>``
in its summary (``digest`` of the dependencies, by field id: a renamed column keeps its stamps,
a changed property or a dropped and re-added column does not). The stamp in a client's summary
is never trusted: ``stamp_summaries`` strips it from every commit and writes icegov's own.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pyiceberg.schema import Schema
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.transforms import (
    BucketTransform,
    DayTransform,
    HourTransform,
    IdentityTransform,
    MonthTransform,
    Transform,
    TruncateTransform,
    YearTransform,
)
from pyiceberg.types import NestedField, PrimitiveType

from proxy.errors import BadRequest

PROPERTY = "icegov.column-dependencies"
"""The table property that declares column dependencies."""
VERIFIED = "icegov.dependencies-verified"
"""The snapshot summary key icegov stamps on a snapshot whose added rows hold the dependencies."""

MAX_CHARS = 8192
MAX_DEPENDENCIES = 64
_ENTRY = re.compile(r"^([^=:,\s]+)=([^=:,\s]+):([a-z]+(?:\[[0-9]{1,9}\])?)$")
_TRANSFORMS: Mapping[str, Callable[[], Transform[Any, Any]]] = {
    "identity": IdentityTransform, "year": YearTransform, "month": MonthTransform,
    "day": DayTransform, "hour": HourTransform,
}


class InvalidDependencies(BadRequest):
    """The ``icegov.column-dependencies`` property does not hold for the table's schema."""


@dataclass(frozen=True)
class Dependency:
    """``dependent`` = ``transform(source)`` on every row (top-level primitive columns)."""

    source: NestedField
    dependent: NestedField
    transform: Transform[Any, Any]

    @property
    def key(self) -> str:
        """The dependency by field ids (what a verification stamp vouches for)."""
        return f"{self.source.field_id}={self.dependent.field_id}:{self.transform}"

    def __str__(self) -> str:
        return f"{self.source.name}={self.dependent.name}:{self.transform}"


def parse_dependencies(text: object, schema: Schema) -> tuple[Dependency, ...]:
    """The dependencies ``text`` declares, checked against ``schema`` (``InvalidDependencies``,
    400, saying which entry is wrong and why). An empty text declares none."""
    if not isinstance(text, str):
        raise InvalidDependencies(f"{PROPERTY} must be a string")
    if len(text) > MAX_CHARS:
        raise InvalidDependencies(f"{PROPERTY} is longer than {MAX_CHARS} characters")
    entries = [e.strip() for e in text.split(",") if e.strip()]
    if len(entries) > MAX_DEPENDENCIES:
        raise InvalidDependencies(f"{PROPERTY} declares more than {MAX_DEPENDENCIES} "
                                  "dependencies")
    found: dict[str, Dependency] = {}
    for entry in entries:
        dependency = _dependency(entry, schema)
        found.setdefault(dependency.key, dependency)
    return tuple(found.values())


def _dependency(entry: str, schema: Schema) -> Dependency:
    shown = entry[:200]
    match = _ENTRY.match(entry)
    if match is None:
        raise InvalidDependencies(f"{PROPERTY}: {shown!r} is not source=dependent:transform")
    source, dependent = (_column(name, schema, shown) for name in match.group(1, 2))
    if source.field_id == dependent.field_id:
        raise InvalidDependencies(f"{PROPERTY}: {shown!r} relates a column to itself")
    transform = _transform(match.group(3), shown)
    if not transform.can_transform(source.field_type):
        raise InvalidDependencies(f"{PROPERTY}: {shown!r}: {transform} does not apply to "
                                  f"{source.name} ({source.field_type})")
    produced = transform.result_type(source.field_type)
    if produced != dependent.field_type:
        raise InvalidDependencies(f"{PROPERTY}: {shown!r}: {transform} of {source.name} is "
                                  f"{produced}, but {dependent.name} is "
                                  f"{dependent.field_type}")
    return Dependency(source, dependent, transform)


def _column(name: str, schema: Schema, shown: str) -> NestedField:
    column = next((f for f in schema.fields if f.name == name), None)
    if column is None:
        raise InvalidDependencies(f"{PROPERTY}: {shown!r}: the table has no top-level column "
                                  f"{name[:100]!r}")
    if not isinstance(column.field_type, PrimitiveType):
        raise InvalidDependencies(f"{PROPERTY}: {shown!r}: {name} is not a primitive column")
    return column


def _transform(text: str, shown: str) -> Transform[Any, Any]:
    plain = _TRANSFORMS.get(text)
    if plain is not None:
        return plain()
    name, _, rest = text.partition("[")
    width = int(rest[:-1]) if rest.endswith("]") and rest[:-1].isdigit() else 0
    if name == "truncate" and width > 0:
        return TruncateTransform(width)
    if name == "bucket" and width > 0:
        return BucketTransform(width)
    raise InvalidDependencies(f"{PROPERTY}: {shown!r}: {text!r} is not one of identity, "
                              "truncate[W], bucket[N], year, month, day, hour (W, N > 0)")


def table_dependencies(metadata: TableMetadata) -> tuple[Dependency, ...]:
    """The dependencies ``metadata`` declares for its current schema; none when it declares
    none or its property does not hold for the schema (never a guess)."""
    text = metadata.properties.get(PROPERTY)
    if not text:
        return ()
    try:
        return parse_dependencies(text, metadata.schema())
    except InvalidDependencies:
        return ()


def digest(dependencies: Sequence[Dependency]) -> str:
    """A short digest of ``dependencies`` by field id (order and duplicates ignored); "" for
    none."""
    if not dependencies:
        return ""
    text = "\n".join(sorted({d.key for d in dependencies}))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def verified_snapshots(metadata: TableMetadata, dependencies: Sequence[Dependency]
                       ) -> frozenset[int]:
    """The snapshots icegov stamped as holding ``dependencies`` on every row they added."""
    wanted = digest(dependencies)
    if not wanted:
        return frozenset()
    return frozenset(s.snapshot_id for s in metadata.snapshots
                     if s.summary is not None and s.summary.get(VERIFIED) == wanted)


def stamp_summaries(body: dict[str, Any], stamps: Mapping[int, str]) -> dict[str, Any]:
    """``body`` with every ``add-snapshot``'s summary stripped of a client's ``VERIFIED`` key
    and stamped where icegov verified the snapshot (``stamps``: snapshot id -> digest). The
    body is returned unchanged (the same object) when nothing changes."""
    updates = body.get("updates")
    if not isinstance(updates, list):
        return body
    changed = [_stamped(u, stamps) for u in updates]
    if all(a is b for a, b in zip(changed, updates, strict=True)):
        return body
    return {**body, "updates": changed}


def _stamped(update: Any, stamps: Mapping[int, str]) -> Any:
    if not isinstance(update, dict) or update.get("action") != "add-snapshot":
        return update
    snapshot = update.get("snapshot")
    if not isinstance(snapshot, dict) or not isinstance(snapshot.get("summary"), dict):
        return update
    summary = snapshot["summary"]
    stamp = stamps.get(snapshot.get("snapshot-id"))  # type: ignore[arg-type]
    if summary.get(VERIFIED) == stamp and (stamp is not None or VERIFIED not in summary):
        return update
    kept = {k: v for k, v in summary.items() if k != VERIFIED}
    if stamp is not None:
        kept[VERIFIED] = stamp
    return {**update, "snapshot": {**snapshot, "summary": kept}}
