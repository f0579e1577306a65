"""Resource and action patterns: the two wildcard languages of a policy line.

Resources are dotted paths (``icegov.sales.orders``). A pattern is a dotted path whose segments are
literal names or ``*``:

* ``*`` as the **last** segment matches one or more further segments: ``icegov.sales.*`` matches
  every table and nested namespace under ``icegov.sales`` (at any depth) but not ``icegov.sales``
  itself; ``*`` alone matches every resource, catalogs included.
* ``*`` anywhere else matches exactly one segment: ``icegov.*.orders`` matches
  ``icegov.sales.orders`` but not ``icegov.sales.eu.orders``.
* a literal segment matches itself only (case-sensitive). ``*`` is a whole segment or nothing:
  ``sales_*`` is rejected, not silently read as a literal.

Actions are an ``Action`` value, a group name from ``ACTION_GROUPS``, or ``*`` for all of them.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass

from proxy.governance import Action

WILDCARD = "*"
FRESH = "\x00"  # a segment no pattern can name literally: stands for "any other name"

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

    text: str
    segments: tuple[str, ...]  # without the trailing "*" when ``open``
    open: bool  # ends in "*": needs at least one segment beyond ``segments``
    prefix: str  # the literal segments before the first "*", dotted: the index key

    @property
    def exact(self) -> bool:
        """True when the pattern names exactly one resource."""
        return not self.open and WILDCARD not in self.segments

    @property
    def min_length(self) -> int:
        """The fewest segments a matching resource has."""
        return len(self.segments) + (1 if self.open else 0)

    def matches(self, parts: tuple[str, ...]) -> bool:
        """True if the resource split into ``parts`` matches this pattern."""
        size = len(self.segments)
        if len(parts) < size + self.open or (not self.open and len(parts) != size):
            return False
        return all(seg in (WILDCARD, part) for seg, part in zip(self.segments, parts, strict=False))

    def segment_at(self, index: int) -> str | None:
        """What the pattern demands at position ``index``: a literal, ``*``, or None (nothing)."""
        if index < len(self.segments):
            return self.segments[index]
        return WILDCARD if self.open else None


def compile_resource(text: str) -> ResourcePattern:
    """Parse a resource pattern, rejecting empty and partially wildcarded segments."""
    segments = tuple(text.split("."))
    for segment in segments:
        _check_segment(text, segment)
    is_open = segments[-1] == WILDCARD
    body = segments[:-1] if is_open else segments
    literal = itertools.takewhile(lambda segment: segment != WILDCARD, body)
    return ResourcePattern(text, body, is_open, ".".join(literal))


def _check_segment(text: str, segment: str) -> None:
    if not segment:
        raise PatternError(f"resource pattern {text!r} has an empty segment")
    if WILDCARD in segment and segment != WILDCARD:
        raise PatternError(
            f"resource pattern {text!r}: '*' must be a whole segment (got {segment!r})")
    if any(ch.isspace() or not ch.isprintable() for ch in segment):
        raise PatternError(f"resource pattern {text!r} contains whitespace or control characters")


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


def split_resource(resource: str) -> tuple[str, ...]:
    """A resource path as its segments."""
    return tuple(resource.split("."))


def resource_match(resource: str, pattern: str) -> bool:
    """Casbin matcher function ``resourceMatch(r.obj, p.obj)``: does ``resource`` match?"""
    return compile_resource(pattern).matches(split_resource(resource))


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
        if left is None or right is None:
            return None
        if left != WILDCARD and right != WILDCARD and left != right:
            return None
        parts.append(right if left == WILDCARD else left)
    return tuple(FRESH if part == WILDCARD else part for part in parts)


def horizon(*patterns: ResourcePattern) -> int:
    """A length past which no pattern distinguishes resources: enough for ``meets``."""
    return max(p.min_length for p in patterns) + 1
