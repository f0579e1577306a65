"""A small thread-safe least-recently-used map, for facts about immutable files (an added file's
Parquet footer, the paths a manifest lists) that rebuilds of an operation would otherwise read
again. Bounded by a total weight, so it never grows without bound."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

V = TypeVar("V")


class Lru(Generic[V]):
    """At most ``capacity`` total weight of values (``weight(value)``, 1 each by default); the
    least recently used go first."""

    def __init__(self, capacity: int, weight: Callable[[V], int] = lambda _: 1) -> None:
        self._capacity = capacity
        self._weight = weight
        self._items: OrderedDict[Hashable, tuple[V, int]] = OrderedDict()
        self._total = 0
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> V | None:
        """The value stored under ``key`` (now the most recently used), or None."""
        with self._lock:
            found = self._items.get(key)
            if found is None:
                return None
            self._items.move_to_end(key)
            return found[0]

    def put(self, key: Hashable, value: V) -> None:
        """Store ``value`` (a value heavier than the whole capacity is not stored)."""
        weight = max(self._weight(value), 1)
        if weight > self._capacity:
            return
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._total -= old[1]
            self._items[key] = (value, weight)
            self._total += weight
            while self._total > self._capacity:
                _, (_, dropped) = self._items.popitem(last=False)
                self._total -= dropped

    def clear(self) -> None:
        """Forget everything (tests)."""
        with self._lock:
            self._items.clear()
            self._total = 0

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)
