"""Typed, canonical resources: catalog, namespace (a tuple of levels), table, column.

Every name a request carries (URL path levels, ``parent``, identifiers in bodies) is validated
with ``validate_name`` *before* it becomes a ``Resource`` and before anything is authorized or
forwarded. A name is refused (400) when it is empty, ``.`` or ``..``, or contains ``/``, ``\\``,
NUL or any other control character: those are the names a path-based catalog would normalize
into something else than what was authorized.

A resource's text form (audit records, policy lines, messages) joins its segments with ``.``.
A segment that contains ``.``, ``"``, ``*``, ``,`` or whitespace is written in double quotes,
with ``"`` doubled inside: the namespace ``demo.priv`` is ``icegov."demo.priv"``, never
``icegov.demo.priv``. ``parse_segments`` reads that form back (policy patterns use it; an
unquoted ``*`` there is a wildcard, a quoted ``"*"`` a literal name).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from functools import lru_cache

from proxy.errors import BadRequest

_FORBIDDEN = re.compile(r"[/\\;\x00-\x1f\x7f-\x9f]")
"""Characters no name may hold: path separators, ``;`` (JAX-RS servers cut a path segment at it,
as a matrix parameter: ``t;v=1`` would be authorized as one table and served as ``t``) and
control characters."""
_NEEDS_QUOTES = re.compile(r"[.\"*,\s]")
MAX_NAME_LENGTH = 1024


class ResourceKind(StrEnum):
    """What a resource names."""

    CATALOG = "catalog"
    NAMESPACE = "namespace"
    TABLE = "table"
    COLUMN = "column"


def validate_name(value: object, what: str = "name") -> str:
    """``value`` if it is an acceptable namespace level, table or view name; else 400."""
    if not isinstance(value, str):
        raise BadRequest(f"{what} must be a string")
    if not value or value in (".", ".."):
        raise BadRequest(f"invalid {what}: {value!r} is not a name")
    if len(value) > MAX_NAME_LENGTH:
        raise BadRequest(f"invalid {what}: longer than {MAX_NAME_LENGTH} characters")
    if _FORBIDDEN.search(value):
        raise BadRequest(f"invalid {what} {value!r}: '/', '\\', ';' and control characters "
                         "are not allowed in names")
    return value


def is_plain_name(value: str) -> bool:
    """A valid name that its text form writes without quotes (no dot, quote, ``*``, comma or
    whitespace): what a catalog name must be."""
    try:
        validate_name(value)
    except BadRequest:
        return False
    return format_segment(value) == value


def refuse_other_cases(resource: Resource) -> None:
    """400 for a name that a backing folding names to lower case would resolve to another
    spelling (leading or trailing white space, which Hive's metastore trims; any character
    lower-casing or case-folding changes: ``SALARIES``, the Kelvin sign, ``ß``): the policy is
    matched against the name the backing resolves, never another spelling of it."""
    for segment in resource.parts[1:]:
        if segment != segment.strip():  # Hive's metastore trims names before it folds them
            raise BadRequest(f"invalid name {segment!r}: this catalog's names are lower case "
                             "without leading or trailing spaces (name_case: lower)")
        if segment != segment.lower() or segment != segment.casefold():
            raise BadRequest(f"invalid name {segment!r}: this catalog's names are lower case "
                             f"(name_case: lower); write {segment.casefold()!r}")


def validate_namespace(levels: object, what: str = "namespace") -> tuple[str, ...]:
    """A non-empty list of valid level names, as a tuple; else 400."""
    if not isinstance(levels, list | tuple) or not levels:
        raise BadRequest(f"{what} must be a non-empty list of names")
    return tuple(validate_name(level, f"{what} level") for level in levels)


@dataclass(frozen=True, slots=True)
class Resource:
    """A governed resource. ``namespace`` is empty for a catalog; ``table`` is set for tables
    (and views) and their columns; ``column`` only for columns."""

    catalog: str
    namespace: tuple[str, ...] = ()
    table: str | None = None
    column: str | None = None

    @property
    def kind(self) -> ResourceKind:
        if self.column is not None:
            return ResourceKind.COLUMN
        if self.table is not None:
            return ResourceKind.TABLE
        return ResourceKind.NAMESPACE if self.namespace else ResourceKind.CATALOG

    @property
    def parts(self) -> tuple[str, ...]:
        """The segments from the catalog down."""
        tail = tuple(p for p in (self.table, self.column) if p is not None)
        return (self.catalog, *self.namespace, *tail)

    @property
    def is_table(self) -> bool:
        return self.kind == ResourceKind.TABLE

    def table_named(self, name: str) -> Resource:
        """The table ``name`` in this namespace."""
        return Resource(self.catalog, self.namespace, name)

    def column_named(self, name: str) -> Resource:
        """The column ``name`` of this table."""
        return Resource(self.catalog, self.namespace, self.table, name)

    @property
    def name(self) -> str:
        """The resource without its catalog (what a caller knows it as)."""
        return format_segments(self.parts[1:])

    def __str__(self) -> str:
        return format_segments(self.parts)


def format_segment(segment: str) -> str:
    """One segment in the text form (quoted when it contains a separator or special char)."""
    if segment and not _NEEDS_QUOTES.search(segment):
        return segment
    return '"' + segment.replace('"', '""') + '"'


@lru_cache(maxsize=16_384)  # the same few tables are named on every request
def format_segments(parts: tuple[str, ...]) -> str:
    """Segments in the text form, e.g. ``icegov."demo.priv".t``."""
    return ".".join(format_segment(p) for p in parts)


class SegmentError(ValueError):
    """A dotted text that cannot be split into segments (unbalanced quotes, stray chars)."""


def parse_segments(text: str) -> tuple[tuple[str, bool], ...]:
    """Split the text form into ``(segment, quoted)`` pairs; raises ``SegmentError``."""
    segments: list[tuple[str, bool]] = []
    position = 0
    while True:
        segment, quoted, position = _segment_at(text, position)
        segments.append((segment, quoted))
        if position == len(text):
            return tuple(segments)
        position += 1  # the "." separator


def _segment_at(text: str, start: int) -> tuple[str, bool, int]:
    if not text.startswith('"', start):
        end = text.find(".", start)
        end = len(text) if end < 0 else end
        segment = text[start:end]
        if '"' in segment:
            raise SegmentError(f"{text!r}: a quote may only open a segment")
        return segment, False, end
    chars: list[str] = []
    position = start + 1
    while position < len(text):
        if text[position] == '"':
            if text.startswith('""', position):
                chars.append('"')
                position += 2
                continue
            position += 1
            if position < len(text) and text[position] != ".":
                raise SegmentError(f"{text!r}: a closing quote must end its segment")
            return "".join(chars), True, position
        chars.append(text[position])
        position += 1
    raise SegmentError(f"{text!r}: unbalanced quote")
