"""A throw-away PostgreSQL server for tests: ``initdb`` in a temporary directory, ``pg_ctl start``
on a free loopback port, stopped and removed at the end.

PostgreSQL refuses to run as root; when the tests run as root, the server runs as the
``postgres`` system user (Debian's package creates it) in a directory it owns. Tests skip, with
the reason, only when no PostgreSQL binaries are installed (``deploy/setup.sh test`` installs
them).
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.servers import free_port

SERVER_USER = "postgres"
DATABASE_USER = "icegov"


def postgres_bindir() -> Path | None:
    """The directory holding ``initdb`` and ``pg_ctl``, or None."""
    found = shutil.which("initdb")
    if found and shutil.which("pg_ctl"):
        return Path(found).resolve().parent
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), reverse=True)
    return Path(candidates[0]).parent if candidates else None


def _as_server_user() -> list[str]:
    """The command prefix that runs a program as a user PostgreSQL accepts."""
    if os.geteuid() != 0:
        return []
    try:
        pwd.getpwnam(SERVER_USER)
    except KeyError:
        pytest.skip(f"running as root and there is no {SERVER_USER!r} user to run PostgreSQL")
    return ["runuser", "-u", SERVER_USER, "--"]


def _run(what: str, command: list[str]) -> None:
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{what} failed ({done.returncode}): {done.stderr[-2000:]}")


@contextlib.contextmanager
def postgres_server() -> Iterator[str]:
    """A running PostgreSQL server; yields its SQLAlchemy URI (psycopg 3, trust auth)."""
    bindir = postgres_bindir()
    if bindir is None:
        pytest.skip("no PostgreSQL binaries (initdb, pg_ctl): install the Debian package "
                    "postgresql, e.g. with deploy/setup.sh test")
    prefix = _as_server_user()
    root = Path(tempfile.mkdtemp(prefix="icegov-pg-"))  # /tmp: reachable by the server user
    if prefix:
        shutil.chown(root, SERVER_USER, SERVER_USER)
    data, port = root / "data", free_port()
    _run("initdb", [*prefix, str(bindir / "initdb"), "-D", str(data), "-U", DATABASE_USER,
          "--auth=trust", "-E", "UTF8", "--no-sync"])
    options = f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off"
    _run("pg_ctl start", [*prefix, str(bindir / "pg_ctl"), "-D", str(data), "-o", options, "-l",
          str(root / "server.log"), "-w", "-t", "60", "start"])
    try:
        yield f"postgresql+psycopg://{DATABASE_USER}@127.0.0.1:{port}/postgres"
    finally:
        with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
            _run("pg_ctl stop", [*prefix, str(bindir / "pg_ctl"), "-D", str(data), "-m",
                                 "immediate", "-w", "stop"])
        shutil.rmtree(root, ignore_errors=True)
