"""A real ``icegov serve --workers N`` for tests: started in its own directory with an audit
file (one per worker), ready once /readyz answers and every worker has built its app."""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.support.replicas import ICEGOV
from tests.support.servers import free_port

START_SECONDS = 60.0


@dataclass(frozen=True)
class ServedWorkers:
    """The running server: its process, base URL, directory and worker count."""

    process: subprocess.Popen[bytes]
    url: str
    workdir: Path
    count: int

    def audit_files(self) -> list[Path]:
        return [self.workdir / f"audit.w{i}.log" for i in range(self.count)]

    def stderr(self) -> str:
        return (self.workdir / "stderr.log").read_text(errors="replace")

    def ready(self) -> bool:
        with contextlib.suppress(httpx.TransportError):
            return httpx.get(f"{self.url}/readyz", timeout=2).status_code == 200
        return False


@contextlib.contextmanager
def serving_workers(workdir: Path, count: int, **env: str) -> Iterator[ServedWorkers]:
    """``icegov serve --workers count`` in ``workdir`` (no ICEGOV* of the caller's shell, audit
    to files, ``env`` on top), ready; terminated on exit. stdout and stderr go to stderr.log."""
    port = free_port()
    environment = {k: v for k, v in os.environ.items() if not k.upper().startswith("ICEGOV")}
    environment.update({"ICEGOV__AUDIT__FILE": str(workdir / "audit.log"),
                        "ICEGOV__AUDIT__STDOUT": "false", **env})
    with (workdir / "stderr.log").open("wb") as log:
        process = subprocess.Popen(
            [str(ICEGOV), "serve", "--port", str(port), "--workers", str(count)], cwd=workdir,
            env=environment, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    served = ServedWorkers(process, f"http://127.0.0.1:{port}", workdir, count)
    try:
        wait_until(served, lambda: served.ready() and all(
            p.exists() for p in served.audit_files()), "the workers to start")
        yield served
    finally:
        process.terminate()
        process.wait(timeout=30)


def wait_until(served: ServedWorkers, condition: object, what: str) -> None:
    """Poll ``condition()`` until true; fail at once if the server exits, or after 60 s."""
    assert callable(condition)
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline:
        assert served.process.poll() is None, served.stderr()
        if condition():
            return
        time.sleep(0.05)  # polling a process's progress, not waiting out a race
    raise AssertionError(f"timed out waiting for {what}")
