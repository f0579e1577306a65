"""Rules of one subject, keyed by the literal start of their resource patterns.

Exact patterns are keyed by the resource they name, wildcard patterns by their literal prefix
(``icegov.sales.*`` under ``("icegov", "sales")``), so finding the rules that could match a
resource costs a handful of dictionary lookups however many rules there are. Keys are tuples of
segments, never dotted strings: ``icegov."demo.priv"`` and ``icegov.demo.priv`` never meet.
Used for allow/deny rules (``proxy.policy.index``) and for the column and row rules
(``proxy.policy.views``) alike.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from proxy.policy.patterns import ResourcePattern

Key = tuple[str, ...]
"""Segments from the catalog down: a dot inside a name never separates anything."""


class Patterned(Protocol):
    """Anything a bucket holds: a rule for one subject, with a resource pattern."""

    @property
    def subject(self) -> str: ...

    @property
    def pattern(self) -> ResourcePattern: ...


R = TypeVar("R", bound=Patterned)


@dataclass
class Bucket(Generic[R]):
    """The rules of one subject."""

    exact: dict[Key, list[R]] = field(default_factory=lambda: defaultdict(list))
    wild: dict[Key, list[R]] = field(default_factory=lambda: defaultdict(list))
    keys: list[Key] = field(default_factory=list)  # every key of exact and wild, sorted

    def add(self, rule: R) -> None:
        pattern = rule.pattern
        if pattern.exact:
            self.exact[literal(pattern)].append(rule)
        else:
            self.wild[pattern.prefix].append(rule)

    def seal(self) -> Bucket[R]:
        """Finish building: plain dicts and the sorted keys for range scans."""
        self.exact, self.wild = dict(self.exact), dict(self.wild)
        self.keys = sorted(self.exact.keys() | self.wild.keys())
        return self

    def reaching(self, parts: Key) -> Iterator[R]:
        """Rules whose pattern could match ``parts`` or something beneath it (each once)."""
        for size in range(len(parts) + 1):
            yield from self.wild.get(parts[:size], ())
        yield from self.exact.get(parts, ())
        # keys that extend ``parts`` sort right after it, contiguously
        for position in range(bisect.bisect_right(self.keys, parts), len(self.keys)):
            key = self.keys[position]
            if key[:len(parts)] != parts:
                break
            yield from self.exact.get(key, ())
            yield from self.wild.get(key, ())


    def wild_above(self, parts: Key) -> Iterator[R]:
        """Wildcard rules whose literal prefix is ``parts`` or starts it."""
        for size in range(len(parts) + 1):
            yield from self.wild.get(parts[:size], ())

    def exact_children(self, parts: Key) -> Iterator[tuple[str, list[R]]]:
        """(name, rules) of the exact patterns naming ``parts`` + one more segment ``name``."""
        for position in range(bisect.bisect_right(self.keys, parts), len(self.keys)):
            key = self.keys[position]
            if key[:len(parts)] != parts:
                break
            if len(key) == len(parts) + 1 and key in self.exact:
                yield key[-1], self.exact[key]


def literal(pattern: ResourcePattern) -> Key:
    """The one resource an exact pattern names."""
    return tuple(segment for segment in pattern.segments if segment is not None)


def bucketed(rules: Iterable[R]) -> dict[str, Bucket[R]]:
    """Rules grouped by subject, each group indexed."""
    buckets: dict[str, Bucket[R]] = defaultdict(Bucket)
    for rule in rules:
        buckets[rule.subject].add(rule)
    return {subject: bucket.seal() for subject, bucket in buckets.items()}
