"""The size-bounded LRU behind the manifest caches."""

from __future__ import annotations

from proxy.commits.lru import SizedLru


def test_least_recently_used_goes_first_within_the_size_budget() -> None:
    cache: SizedLru[str, list[int]] = SizedLru(5, len)
    cache.put("a", [1, 2])
    cache.put("b", [1, 2])
    assert cache.get("a") == [1, 2]  # now the most recently used
    cache.put("c", [1, 2])  # 6 > 5: "b" goes
    assert (cache.get("a"), cache.get("b"), cache.get("c")) == ([1, 2], None, [1, 2])
    cache.put("huge", [0] * 6)  # heavier than the whole budget: not kept, nothing evicted
    assert cache.get("huge") is None and cache.get("a") == [1, 2]
    cache.put("a", [9])  # replacing frees the old weight
    cache.put("d", [1, 2])
    assert cache.get("c") == [1, 2] and cache.get("d") == [1, 2] and cache.get("a") == [9]
