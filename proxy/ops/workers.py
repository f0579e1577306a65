"""Several uvicorn worker processes behind one port (``icegov serve --workers N``).

uvicorn starts each worker as a fresh process that builds the app from the environment, so the
parent (``prepare_workers``) writes into the environment everything the workers must share:

- the flags given on the command line, as the ``ICEGOV__*`` variables they stand for;
- the token signing key and the plan-task key, drawn once when none is configured, so a token
  or plan task made by one worker is good on every other (the same rule as for replicas);
- a private runtime directory (``ICEGOV_WORKERS_DIR``) holding the worker slots and
  ``PROMETHEUS_MULTIPROC_DIR``, where prometheus-client keeps every worker's counters so that a
  scrape, whichever worker answers it, reports the sum.

Each worker claims a slot ``0..N-1`` (an exclusive lock on ``slot-<i>.lock``, held until the
process ends; a worker restarted by uvicorn takes the slot its predecessor freed). The slot
names the worker's own audit file (``audit.log`` → ``audit.w<i>.log``): one hash chain per
writer, so that every file verifies on its own, and it is the bounded ``worker`` label of the
metrics a worker keeps for itself (cache lookups, policy generation, audit failures).
"""

from __future__ import annotations

import fcntl
import os
import secrets
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from proxy.settings import Settings

WORKERS_DIR = "ICEGOV_WORKERS_DIR"
WORKER_COUNT = "ICEGOV_WORKER_COUNT"
METRICS_DIR = "PROMETHEUS_MULTIPROC_DIR"
SIGNING_KEY = "ICEGOV__IDENTITY__SIGNING_KEY"
TASK_KEY = "ICEGOV__PLANNING__TASK_KEY"


class WorkerSetupError(RuntimeError):
    """The worker environment is unusable (no free slot, or not set up by the parent)."""


@dataclass(frozen=True)
class WorkerSlot:
    """This worker's slot: its index, and the open lock file that holds it."""

    index: int
    lock: IO[bytes]


def flag_variables(given: Mapping[str, Any]) -> dict[str, str]:
    """Command-line flags as the ``ICEGOV__*`` variables they override."""
    return {f"ICEGOV__{name.upper()}": str(value) for name, value in given.items()
            if value is not None}


def shared_keys(settings: Settings) -> dict[str, str]:
    """Keys every worker must share, drawn now for those the settings leave unset."""
    keys: dict[str, str] = {}
    if settings.identity.signing_key is None and settings.embedded:
        keys[SIGNING_KEY] = secrets.token_urlsafe(48)
    if settings.planning.task_key is None:
        keys[TASK_KEY] = secrets.token_urlsafe(48)
    return keys


@contextmanager
def prepare_workers(count: int, variables: Mapping[str, str]) -> Iterator[Path]:
    """Put ``variables`` and a fresh runtime directory into the environment for ``count``
    workers; the directory (metrics files, slot locks) is removed on exit."""
    runtime = Path(tempfile.mkdtemp(prefix="icegov-workers-"))
    (runtime / "metrics").mkdir()
    saved = {name: os.environ.get(name) for name in (*variables, WORKERS_DIR, WORKER_COUNT,
                                                    METRICS_DIR)}
    os.environ.update(variables)
    os.environ.update({WORKERS_DIR: str(runtime), WORKER_COUNT: str(count),
                       METRICS_DIR: str(runtime / "metrics")})
    try:
        yield runtime
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        shutil.rmtree(runtime, ignore_errors=True)


_HELD: list[WorkerSlot] = []  # a slot is held while its lock file stays open


def claim_slot(runtime: Path, count: int) -> WorkerSlot:
    """The first free slot of ``count``, held for the life of the process;
    ``WorkerSetupError`` when every slot is held."""
    for index in range(count):
        lock = (runtime / f"slot-{index}.lock").open("ab")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            continue
        slot = WorkerSlot(index, lock)
        _HELD.append(slot)
        return slot
    raise WorkerSetupError(f"all {count} worker slots are taken")


def in_worker() -> tuple[Path, int] | None:
    """The runtime directory and worker count when running as one of several workers."""
    runtime, count = os.environ.get(WORKERS_DIR), os.environ.get(WORKER_COUNT)
    if not runtime or not count:
        return None
    return Path(runtime), int(count)


def worker_audit_file(path: Path, index: int) -> Path:
    """The audit file of worker ``index``: ``audit.log`` → ``audit.w<index>.log``."""
    return path.with_name(f"{path.stem}.w{index}{path.suffix}")


def for_worker(settings: Settings, index: int, runtime: Path) -> Settings:
    """``settings`` with the audit chain made this worker's own: its own file, and its records
    naming it (``writer``), so chains sharing stdout can be told apart; on stdout each record
    is written whole under a lock the workers share (``runtime``'s ``stdout.lock``)."""
    audit = settings.audit
    writer = f"w{index}" if audit.writer is None else f"{audit.writer}-w{index}"
    update: dict[str, object] = {"writer": writer, "stdout_lock": runtime / "stdout.lock"}
    if audit.file is not None:
        update["file"] = worker_audit_file(audit.file, index)
    if audit.ocsf_file is not None:  # OCSF events: one file per worker, as for the chain
        update["ocsf_file"] = worker_audit_file(audit.ocsf_file, index)
    return settings.model_copy(update={"audit": audit.model_copy(update=update)})
