"""The planner's pause of the cyclic garbage collector never lasts forever."""

from __future__ import annotations

import gc

import pytest

from proxy.planning import manifest_cache
from proxy.planning.manifest_cache import _CollectorPause


def test_overlapping_pauses_still_let_the_collector_run(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1000.0]
    collected: list[int] = []
    monkeypatch.setattr(manifest_cache.time, "monotonic", lambda: now[0])
    monkeypatch.setattr(manifest_cache.gc, "collect", lambda *a: collected.append(1) or 0)
    pause = _CollectorPause()
    assert gc.isenabled()
    with pause.held():
        assert not gc.isenabled()
        now[0] += 10
        with pause.held():  # a second plan starts while the first runs: no collection yet
            assert collected == []
        now[0] += manifest_cache._MAX_PAUSE_SECONDS
        with pause.held():  # still overlapping, past the bound: the collector runs once
            assert collected == [1]
    assert gc.isenabled()  # the last plan done: the collector is back on
