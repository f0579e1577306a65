"""The pieces of ``icegov serve --workers N`` that run in the parent and in each worker."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from proxy.ops.workers import (
    METRICS_DIR,
    SIGNING_KEY,
    TASK_KEY,
    WorkerSetupError,
    claim_slot,
    flag_variables,
    for_worker,
    in_worker,
    prepare_workers,
    shared_keys,
    worker_audit_file,
)
from proxy.settings import load_settings


def test_slots_are_claimed_once_each_and_freed_with_their_holder(tmp_path: Path) -> None:
    first, second = claim_slot(tmp_path, 2), claim_slot(tmp_path, 2)
    assert (first.index, second.index) == (0, 1)
    with pytest.raises(WorkerSetupError):
        claim_slot(tmp_path, 2)
    first.lock.close()  # the worker holding slot 0 ended
    assert claim_slot(tmp_path, 2).index == 0


def test_each_worker_writes_its_own_audit_file(tmp_path: Path) -> None:
    assert worker_audit_file(tmp_path / "audit.log", 1) == tmp_path / "audit.w1.log"
    settings = load_settings(audit={"file": tmp_path / "audit.log"})
    assert for_worker(settings, 0, tmp_path).audit.file == tmp_path / "audit.w0.log"
    assert for_worker(load_settings(audit={"file": None}), 0, tmp_path).audit.file is None


def test_flags_become_the_variables_they_override() -> None:
    assert flag_variables({"port": 9000, "catalog_uri": None, "warehouse": Path("/w")}) == {
        "ICEGOV__PORT": "9000", "ICEGOV__WAREHOUSE": "/w"}


def test_keys_left_unset_are_drawn_once_for_every_worker() -> None:
    drawn = shared_keys(load_settings())
    assert set(drawn) == {SIGNING_KEY, TASK_KEY} and all(len(v) >= 48 for v in drawn.values())
    configured = load_settings(planning={"task_key": "k" * 40},
                               identity={"signing_key": "s" * 40})
    assert shared_keys(configured) == {}


def test_the_runtime_directory_and_variables_live_as_long_as_the_workers() -> None:
    assert in_worker() is None
    with prepare_workers(3, {"ICEGOV__PORT": "9001"}) as runtime:
        assert in_worker() == (runtime, 3)
        assert os.environ["ICEGOV__PORT"] == "9001"
        assert Path(os.environ[METRICS_DIR]).is_dir()
    assert not runtime.exists() and in_worker() is None
    assert "ICEGOV__PORT" not in os.environ
