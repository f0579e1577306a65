"""Resource and action patterns: the two wildcard languages of a policy line.

A resource pattern is written in the resources' text form (``proxy.resources``): segments from
the catalog down, joined with ``.``; a segment containing ``.``, ``"``, ``*``, ``,`` or whitespace
is double-quoted, with ``"`` doubled inside (the namespace ``demo.priv`` is ``icegov."demo.priv"``).
A segment is a literal name or an **unquoted** ``*``:

* ``*`` as the **last** segment matches one or more further segments: ``icegov.sales.*`` matches
  every table and nested namespace under ``icegov.sales`` (at any depth) but not ``icegov.sales``
  itself; ``*`` alone matches every resource, catalogs included.
* ``*`` anywhere else matches exactly one segment: ``icegov.*.orders`` matches
  ``icegov.sales.orders`` but not ``icegov.sales.eu.orders``.
* a literal segment matches that one name only (case-sensitive); ``"*"`` is the literal name
  ``*``. ``*`` is a whole segment or nothing: ``sales_*`` is rejected, not silently read as a
  literal.

Patterns are compiled to tuples of segments (``None`` for a wildcard), and resources are matched
as tuples of names, so a dot inside a name is never taken for a separator.

Actions are an ``Action`` value, a group name from ``ACTION_GROUPS``, or ``*`` for all of them.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from proxy.errors import BadRequest
from proxy.governance import Action
from proxy.resources import (
    Resource,
    ResourceKind,
    SegmentError,
    format_segment,
    parse_segments,
    validate_name,
)

WILDCARD = "*"
FRESH = "\x00"  # a segment no pattern can name literally: stands for "any other name"

Segment = str | None
"""A pattern segment: a literal name, or None for a wildcard."""

ACTION_GROUPS: dict[str, frozenset[Action]] = {
    "BROWSE": frozenset({Action.LIST, Action.DESCRIBE}),
    "READ": frozenset({Action.LIST, Action.DESCRIBE, Action.SELECT}),
    "WRITE": frozenset({Action.INSERT, Action.DELETE, Action.UPDATE, Action.REWRITE}),
}
"""Named sets of actions a policy line may use in place of a single action."""

ALL_ACTIONS: frozenset[Action] = frozenset(Action)


class PatternError(ValueError):
    """A resource or action pattern that is not well formed."""


@dataclass(frozen=True, slots=True)
class ResourcePattern:
    """A compiled resource pattern (see the module docstring for its meaning)."""

    segments: tuple[Segment, ...]  # without the trailing wildcard when ``open``
    open: bool  # ends in "*": needs at least one segment beyond ``segments``

    @property
    def prefix(self) -> tuple[str, ...]:
        """The literal segments before the first wildcard: the index key."""
        literal: list[str] = []
        for segment in self.segments:
            if segment is None:
                break
            literal.append(segment)
        return tuple(literal)

    @property
    def text(self) -> str:
        """The canonical text form, e.g. ``icegov."demo.priv".*``."""
        shown = [WILDCARD if s is None else format_segment(s) for s in self.segments]
        return ".".join(shown + [WILDCARD] * self.open)

    @property
    def exact(self) -> bool:
        """True when the pattern names exactly one resource."""
        return not self.open and None not in self.segments

    @property
    def min_length(self) -> int:
        """The fewest segments a matching resource has."""
        return len(self.segments) + (1 if self.open else 0)

    def matches(self, parts: tuple[str, ...]) -> bool:
        """True if the resource with segments ``parts`` matches this pattern."""
        size = len(self.segments)
        if len(parts) < size + self.open or (not self.open and len(parts) != size):
            return False
        return all(seg is None or seg == part
                   for seg, part in zip(self.segments, parts, strict=False))

    def segment_at(self, index: int) -> Segment | bool:
        """What the pattern demands at ``index``: a literal, None (wildcard), False (nothing)."""
        if index < len(self.segments):
            return self.segments[index]
        return None if self.open else False

    def __str__(self) -> str:
        return self.text


def compile_resource(text: str) -> ResourcePattern:
    """Parse a resource pattern; raises ``PatternError`` (empty, partially wildcarded or
    invalid segments, unbalanced quotes)."""
    try:
        parsed = parse_segments(text)
    except SegmentError as exc:
        raise PatternError(f"resource pattern {exc}") from None
    segments = tuple(_pattern_segment(text, segment, quoted) for segment, quoted in parsed)
    is_open = segments[-1] is None
    return ResourcePattern(segments[:-1] if is_open else segments, is_open)


def _pattern_segment(text: str, segment: str, quoted: bool) -> Segment:
    if not quoted and segment == WILDCARD:
        return None
    if not quoted and WILDCARD in segment:
        raise PatternError(f"resource pattern {text!r}: '*' must be a whole segment "
                           f"(got {segment!r}; write \"{segment}\" for a name with a '*')")
    return _literal(f"resource pattern {text!r}", segment, quoted)


def _literal(where: str, segment: str, quoted: bool) -> str:
    """A literal segment, checked as a name; an unquoted one must not need quotes."""
    if not segment and not quoted:
        raise PatternError(f"{where} has an empty segment")
    try:
        validate_name(segment, "segment")
    except BadRequest as exc:
        raise PatternError(f"{where}: {exc.message}") from None
    if not quoted and format_segment(segment) != segment:
        raise PatternError(f"{where}: the segment {segment!r} must be double-quoted "
                           f"({format_segment(segment)})")
    return segment


def parse_resource_text(text: str) -> tuple[str, ...]:
    """The segments of a resource written in the text form (no wildcards: ``"*"`` is a name)."""
    try:
        parsed = parse_segments(text)
    except SegmentError as exc:
        raise PatternError(f"resource {exc}") from None
    if any(segment == WILDCARD and not quoted for segment, quoted in parsed):
        raise PatternError(f"resource {text!r}: a resource names no wildcards "
                           "(write \"*\" for a name that is '*')")
    return tuple(_literal(f"resource {text!r}", segment, quoted) for segment, quoted in parsed)


def resource_from_text(text: str, kind: ResourceKind | None = None) -> Resource:
    """A ``Resource`` from its text form. Without ``kind``, one segment is a catalog, two a
    (top-level) namespace, more a table; a nested namespace or a column needs its ``kind``."""
    parts = parse_resource_text(text)
    if kind is None:
        kind = (ResourceKind.CATALOG, ResourceKind.NAMESPACE)[len(parts) - 1] \
            if len(parts) < 3 else ResourceKind.TABLE
    fewest = _FEWEST_SEGMENTS[kind]
    if len(parts) < fewest or (kind == ResourceKind.CATALOG and len(parts) != 1):
        raise PatternError(f"resource {text!r}: a {kind} has {_SEGMENTS_SAID[kind]}")
    catalog, rest = parts[0], parts[1:]
    if kind == ResourceKind.COLUMN:
        return Resource(catalog, rest[:-2], rest[-2], rest[-1])
    if kind == ResourceKind.TABLE:
        return Resource(catalog, rest[:-1], rest[-1])
    return Resource(catalog, rest)


_FEWEST_SEGMENTS = {ResourceKind.CATALOG: 1, ResourceKind.NAMESPACE: 2, ResourceKind.TABLE: 3,
                    ResourceKind.COLUMN: 4}
_SEGMENTS_SAID = {
    ResourceKind.CATALOG: "one segment (the catalog name)",
    ResourceKind.NAMESPACE: "two or more segments (catalog, then namespace levels)",
    ResourceKind.TABLE: "three or more segments (catalog, namespace levels, table)",
    ResourceKind.COLUMN: "four or more segments (catalog, namespace levels, table, column)",
}


def compile_actions(text: str) -> frozenset[Action]:
    """The actions an action pattern (an action, a group or ``*``) stands for."""
    if text == WILDCARD:
        return ALL_ACTIONS
    if text in ACTION_GROUPS:
        return ACTION_GROUPS[text]
    try:
        return frozenset({Action(text)})
    except ValueError:
        known = ", ".join([*Action, *ACTION_GROUPS, WILDCARD])
        raise PatternError(f"unknown action {text!r} (expected one of: {known})") from None


def resource_match(resource: str, pattern: str, effect: str = "allow") -> bool:
    """Casbin matcher function ``resourceMatch(r.obj, p.obj, p.eft)``: both in the text form.

    An allow matches the resources its pattern names; a deny also everything beneath them.
    """
    compiled, parts = compile_resource(pattern), parse_resource_text(resource)
    if effect != "deny":
        return compiled.matches(parts)
    return any(compiled.matches(parts[:size]) for size in range(1, len(parts) + 1))


def action_match(action: str, pattern: str) -> bool:
    """Casbin matcher function ``actionMatch(r.act, p.act)``: does ``action`` match?"""
    return action in compile_actions(pattern)


def meets(a: ResourcePattern, b: ResourcePattern, max_length: int) -> Iterator[tuple[str, ...]]:
    """Representative resources matched by both patterns, one per length up to ``max_length``.

    Where both patterns have a wildcard the representative uses a name no pattern mentions, so a
    third pattern matches the representative of length n iff it matches *every* resource of that
    length in the intersection. Checking these representatives is therefore exact.
    """
    for length in range(max(a.min_length, b.min_length), max_length + 1):
        parts = _meet_at(a, b, length)
        if parts is not None:
            yield parts


def _meet_at(a: ResourcePattern, b: ResourcePattern, length: int) -> tuple[str, ...] | None:
    parts = []
    for index in range(length):
        left, right = a.segment_at(index), b.segment_at(index)
        if left is False or right is False:
            return None
        if isinstance(left, str) and isinstance(right, str) and left != right:
            return None
        chosen = left if isinstance(left, str) else right
        parts.append(chosen if isinstance(chosen, str) else FRESH)
    return tuple(parts)


def horizon(*patterns: ResourcePattern) -> int:
    """A length past which no pattern distinguishes resources: enough for ``meets``."""
    return max(p.min_length for p in patterns) + 1
