"""Real icegov replicas for tests: ``icegov serve`` subprocesses sharing one backing database.

Each replica is its own operating-system process (its own caches, commit queues and plan state),
started from the installed ``icegov`` console script with ``ICEGOV__*`` environment variables
only, as an operator would run it. What replicas share is what issue 9 §3 says they may share: the
embedded catalog's database and warehouse, the token signing key, the plan-task key and the
idempotency store. Every replica is terminated when the block exits, whatever happened inside.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.support.servers import free_port
from tests.support.settings import POLICIES, TEST_SIGNING_KEY

ICEGOV = Path(sys.executable).parent / "icegov"
PLAN_TASK_KEY = "replicas-share-this-plan-task-key"
START_SECONDS = 60.0
STOP_SECONDS = 10.0


@dataclass(frozen=True)
class SharedState:
    """What every replica of one deployment is given: the backing database and the keys."""

    catalog_db_uri: str
    idempotency_db_uri: str
    warehouse: Path
    signing_key: str = TEST_SIGNING_KEY
    plan_task_key: str = PLAN_TASK_KEY
    shard_files: int = 2  # small plan shards: a plan over a few files is answered with tasks


@dataclass(frozen=True)
class Replica:
    """One running icegov process: its base URL and its own directory (audit, stderr)."""

    name: str
    url: str
    workdir: Path

    @property
    def audit_log(self) -> Path:
        return self.workdir / "audit.log"

    @property
    def stderr_log(self) -> Path:
        return self.workdir / "stderr.log"


def replica_environment(shared: SharedState, workdir: Path, port: int) -> dict[str, str]:
    """The process environment of one replica: the caller's, minus any ICEGOV__ variable,
    plus this deployment's settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ICEGOV__")}
    env.update({
        "ICEGOV__HOST": "127.0.0.1",
        "ICEGOV__PORT": str(port),
        "ICEGOV__LOG_LEVEL": "warning",
        "ICEGOV__WAREHOUSE": str(shared.warehouse),
        "ICEGOV__CATALOG_DB_URI": shared.catalog_db_uri,
        "ICEGOV__IDEMPOTENCY__DB_URI": shared.idempotency_db_uri,
        "ICEGOV__IDENTITY__SIGNING_KEY": shared.signing_key,
        "ICEGOV__IDENTITY__PRINCIPALS_FILE": str(POLICIES / "principals.yaml"),
        "ICEGOV__POLICY__MODEL_PATH": str(POLICIES / "model.conf"),
        "ICEGOV__POLICY__POLICY_PATH": str(POLICIES / "policy.csv"),
        "ICEGOV__PLANNING__TASK_KEY": shared.plan_task_key,
        "ICEGOV__PLANNING__SHARD_FILES": str(shared.shard_files),
        "ICEGOV__AUDIT__STDOUT": "false",
        "ICEGOV__AUDIT__FILE": str(workdir / "audit.log"),
    })
    return env


def _describe_exit(replica: Replica, process: subprocess.Popen[bytes]) -> str:
    tail = replica.stderr_log.read_text(errors="replace")[-3000:]
    return f"replica {replica.name} exited with {process.returncode} before it was ready:\n{tail}"


def wait_until_ready(replica: Replica, process: subprocess.Popen[bytes],
                     timeout: float = START_SECONDS) -> None:
    """Poll ``/readyz`` until it answers 200; fail at once if the process exits first."""
    deadline = time.monotonic() + timeout
    with httpx.Client(base_url=replica.url, timeout=2.0) as client:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(_describe_exit(replica, process))
            with contextlib.suppress(httpx.TransportError):
                if client.get("/readyz").status_code == 200:
                    return
            time.sleep(0.05)  # polling a starting process, not waiting out a race
    raise RuntimeError(f"replica {replica.name} not ready after {timeout:.0f}s")


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=STOP_SECONDS)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=STOP_SECONDS)


@contextlib.contextmanager
def running_replica(name: str, shared: SharedState, root: Path) -> Iterator[Replica]:
    """One ``icegov serve`` process of the deployment ``shared``, ready; stopped on exit."""
    workdir = root / name
    workdir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    replica = Replica(name, f"http://127.0.0.1:{port}", workdir)
    with replica.stderr_log.open("wb") as stderr:
        process = subprocess.Popen(
            [str(ICEGOV), "serve"], cwd=workdir, env=replica_environment(shared, workdir, port),
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr)
    try:
        wait_until_ready(replica, process)
        yield replica
    finally:
        _stop(process)


@contextlib.contextmanager
def running_replicas(shared: SharedState, root: Path, count: int = 2) -> Iterator[list[Replica]]:
    """``count`` replicas of one deployment, started one after the other (see the module tests
    for what happens when they start at the same moment on a fresh database)."""
    with contextlib.ExitStack() as stack:
        yield [stack.enter_context(running_replica(f"replica-{chr(ord('a') + i)}", shared, root))
               for i in range(count)]
