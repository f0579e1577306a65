"""The digest timer: a periodic digest while no record is written, none when nothing changed,
the thread started with the audit log and stopped at close."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from proxy.audit import AuditLog, AuditSettings
from proxy.audit.digest_timer import DigestTimer
from proxy.audit.digests import DigestWriter
from proxy.audit.signing import load_private
from proxy.cli import main
from tests.support.audit import a_record, no_icegov_environment  # noqa: F401

pytestmark = pytest.mark.usefixtures("no_icegov_environment")


@pytest.fixture()
def private(tmp_path: Path) -> Path:
    key = tmp_path / "signing.pem"
    made = CliRunner().invoke(main, ["audit", "keygen", "--private", str(key),
                                     "--public", str(tmp_path / "signing.pub.pem")])
    assert made.exit_code == 0, made.output
    return key


def reasons(path: Path) -> list[str]:
    if not path.exists():
        return []
    return [json.loads(line)["reason"] for line in path.read_text().splitlines()]


def wait_for(condition: Callable[[], bool], seconds: float = 10.0) -> bool:
    """Poll ``condition`` until it holds or ``seconds`` pass (a bound, not a guess)."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def test_a_tick_writes_a_digest_only_when_due_and_records_were_written(
        tmp_path: Path, private: Path) -> None:
    now = [100.0]
    audit_file = tmp_path / "audit.log"
    audit_file.write_text("")
    digests = tmp_path / "audit.log.digests"
    writer = DigestWriter(audit_file, load_private(private), digests, None, 60.0,
                          clock=lambda: now[0])
    assert writer.write("start")
    now[0] += 30
    assert writer.tick() == pytest.approx(30.0)  # not due: the seconds left
    now[0] += 40
    assert writer.tick() == 60.0 and reasons(digests) == ["start"]  # due, but idle
    writer.after_write()  # one record: 70 s after the last digest, so written at once
    assert reasons(digests) == ["start", "periodic"]
    with audit_file.open("a") as handle:
        handle.write("x\n")
    now[0] += 1
    writer.after_write()  # a record, no digest due yet
    assert len(reasons(digests)) == 2
    now[0] += 58
    assert writer.tick() == pytest.approx(1.0) and len(reasons(digests)) == 2
    now[0] += 1
    assert writer.tick() == 60.0
    assert reasons(digests) == ["start", "periodic", "periodic"]
    now[0] += 600
    assert writer.tick() == 60.0 and len(reasons(digests)) == 3  # nothing new since


def test_without_a_period_there_is_no_tick(tmp_path: Path, private: Path) -> None:
    writer = DigestWriter(tmp_path / "audit.log", load_private(private),
                          tmp_path / "d", 10, None)
    assert writer.tick() is None and writer.every_seconds is None


def test_the_timer_ticks_as_told_and_stops_at_once() -> None:
    ticked = threading.Event()
    calls: list[float] = []

    def tick() -> float:
        calls.append(time.monotonic())
        ticked.set()
        return 3600.0  # the next tick would be an hour away: stop must not wait for it

    timer = DigestTimer(tick).start()
    assert ticked.wait(10) and timer.running
    started = time.monotonic()
    timer.stop()
    assert not timer.running and len(calls) == 1
    assert time.monotonic() - started < 5


def test_the_timer_ends_when_the_tick_says_none_and_survives_a_failing_tick() -> None:
    answers: list[object] = [RuntimeError("bug"), 0.0, None]
    done = threading.Event()

    def tick() -> float | None:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        if answer is None:
            done.set()
        return answer  # type: ignore[return-value]

    timer = DigestTimer(tick).start()
    assert done.wait(10)
    assert wait_for(lambda: not timer.running)
    assert answers == []


def test_an_idle_audit_log_is_digested_by_the_timer_and_the_timer_stops_at_close(
        tmp_path: Path, private: Path) -> None:
    digests = tmp_path / "audit.log.digests"
    audit = AuditLog(AuditSettings(stdout=False, file=tmp_path / "audit.log",
                                   signing_key=private, digest_every_records=None,
                                   digest_every_seconds=0.05))
    timer = audit._timer
    assert timer is not None and timer.running
    audit.write(a_record(1))  # no record follows: only the timer can prove it
    assert wait_for(lambda: "periodic" in reasons(digests))
    last = json.loads(digests.read_text().splitlines()[-1])
    assert last["last"]["seq"] == 1
    audit.close()
    assert not timer.running and audit._timer is None
    assert reasons(digests)[-1] == "shutdown"


def test_no_timer_without_signing_or_without_a_period(tmp_path: Path, private: Path) -> None:
    plain = AuditLog(AuditSettings(stdout=False, file=tmp_path / "a" / "audit.log"))
    by_count = AuditLog(AuditSettings(stdout=False, file=tmp_path / "b" / "audit.log",
                                      signing_key=private, digest_every_seconds=None))
    assert plain._timer is None and by_count._timer is None
    plain.close()
    by_count.close()


def test_a_write_after_close_starts_the_timer_again(tmp_path: Path, private: Path) -> None:
    audit = AuditLog(AuditSettings(stdout=False, file=tmp_path / "audit.log",
                                   signing_key=private))
    audit.close()
    audit.write(a_record(1))
    timer = audit._timer
    assert timer is not None and timer.running
    audit.close()
    assert not timer.running
