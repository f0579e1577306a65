"""A small thread-safe least-recently-used map with a size budget, for caches of immutable files
(committed manifests and manifest lists) shared by the threads classifying commits."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class SizedLru(Generic[K, V]):
    """At most ``capacity`` units in all, each value weighing ``size(value)`` (1 by default);
    a value heavier than the whole capacity is not kept."""

    def __init__(self, capacity: int, size: Callable[[V], int] = lambda _: 1) -> None:
        self._capacity = capacity
        self._size = size
        self._items: OrderedDict[K, V] = OrderedDict()
        self._used = 0
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        with self._lock:
            found = self._items.get(key)
            if found is not None:
                self._items.move_to_end(key)
            return found

    def pop(self, key: K) -> None:
        """Drop ``key`` (if kept)."""
        with self._lock:
            previous = self._items.pop(key, None)
            self._used -= 0 if previous is None else self._size(previous)

    def __len__(self) -> int:
        return len(self._items)

    def put(self, key: K, value: V) -> None:
        weight = self._size(value)
        if weight > self._capacity:
            return
        with self._lock:
            previous = self._items.pop(key, None)
            self._used -= 0 if previous is None else self._size(previous)
            self._items[key] = value
            self._used += weight
            while self._used > self._capacity:
                _, evicted = self._items.popitem(last=False)
                self._used -= self._size(evicted)
