"""Audit-log helpers for the tests: records, a written chain, a disk that fails on demand, and
a clean ``ICEGOV__*`` environment."""

from __future__ import annotations

import errno
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from proxy.audit import AuditLog, AuditRecord, AuditSettings
from proxy.audit import files as audit_files
from proxy.audit.verify import Intact, verify
from proxy.ops.logs import reset_logging


def a_record(n: int, method: str = "GET", endpoint: str = "load_table") -> AuditRecord:
    """The ``n``-th of a run of allowed requests."""
    return AuditRecord(request_id=f"req-{n}", method=method, path=f"/v1/namespaces/db/tables/t{n}",
                       endpoint=endpoint, resources=(f"icegov.db.t{n}",), decision="allow",
                       status=200)


def written(path: Path, count: int, method: str = "GET", endpoint: str = "load_table",
            **settings: Any) -> Path:
    """``count`` records written to ``path`` by a fresh audit log (then closed)."""
    audit = AuditLog(AuditSettings(stdout=False, file=path, **settings))
    for n in range(count):
        audit.write(a_record(n, method, endpoint))
    audit.close()
    return path


class AuditDisk:
    """Every write to the audit file fails while ``full``; ``fail_next`` writes fail, then
    the disk is fine again."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.full = False
        self.fail_next = 0
        real = audit_files._write_all

        def write_all(handle: Any, data: bytes) -> None:
            if self.full or self.fail_next:
                self.fail_next = max(0, self.fail_next - 1)
                raise OSError(28, "No space left on device")
            real(handle, data)

        monkeypatch.setattr(audit_files, "_write_all", write_all)


@pytest.fixture()
def no_icegov_environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No ``ICEGOV__*`` variable of the caller's shell reaches the test; logging reset after."""
    for name in list(os.environ):
        if name.upper().startswith("ICEGOV__"):
            monkeypatch.delenv(name)
    yield
    reset_logging()


def refused_or_intact(first_path: Path, second_path: Path, verified: Path) -> None:
    """Open a second writer on ``second_path`` while one writes ``first_path``: it must be
    refused, or (if let in) the file must still verify after both wrote."""
    first = AuditLog(AuditSettings(stdout=False, file=first_path))
    first.write(a_record(0))
    try:
        second = AuditLog(AuditSettings(stdout=False, file=second_path))
    except OSError as exc:  # refused: the file already has a writer
        assert exc.errno == errno.EBUSY
        first.close()
        return
    for n in range(1, 5):
        (first if n % 2 else second).write(a_record(n))
    first.close()
    second.close()
    assert isinstance(verify([verified]), Intact)


POLICY_ENDPOINTS = frozenset({"policy_loaded", "policy_reloaded"})


def request_records(log: Path) -> list[dict[str, Any]]:
    """The records of requests in ``log``: every record but the policy loads icegov writes at
    start-up and at each reload (``proxy.policy.changes``)."""
    records = [json.loads(line) for line in log.read_text().splitlines()]
    return [r for r in records if r.get("endpoint") not in POLICY_ENDPOINTS]
