"""The OCSF file rotates with the audit file (same suffix, the same records), and an audit file's
rotation calls every listener, whatever one of them raises."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from proxy.audit import AuditLog, AuditSettings
from proxy.audit.files import AuditFile, rotated_files, rotation_suffix
from tests.support.audit import a_record, no_icegov_environment  # noqa: F401

pytestmark = pytest.mark.usefixtures("no_icegov_environment")


def seqs_in_audit(path: Path) -> list[int]:
    return [json.loads(line)["seq"] for line in path.read_text().splitlines()]


def seqs_in_ocsf(path: Path) -> list[int]:
    return [json.loads(line)["metadata"]["sequence"] for line in path.read_text().splitlines()]


def test_the_ocsf_file_is_rotated_with_the_audit_file_holding_the_same_records(
        tmp_path: Path) -> None:
    live, ocsf = tmp_path / "audit.log", tmp_path / "audit.ocsf.jsonl"
    audit = AuditLog(AuditSettings(stdout=False, file=live, ocsf_file=ocsf, rotate_bytes=3000))
    for n in range(40):
        audit.write(a_record(n))
    audit.close()
    rotated_audit, rotated_ocsf = rotated_files(live), rotated_files(ocsf)
    assert len(rotated_audit) >= 3
    assert ([rotation_suffix(p.name) for p in rotated_ocsf]
            == [rotation_suffix(p.name) for p in rotated_audit])
    for audit_file, ocsf_file in zip([*rotated_audit, live], [*rotated_ocsf, ocsf], strict=True):
        assert seqs_in_ocsf(ocsf_file) == seqs_in_audit(audit_file)
    assert sum(len(seqs_in_ocsf(p)) for p in [*rotated_ocsf, ocsf]) == 40


def test_a_restart_keeps_rotating_the_ocsf_file_it_appends_to(tmp_path: Path) -> None:
    live, ocsf = tmp_path / "audit.log", tmp_path / "audit.ocsf.jsonl"
    for run in range(2):
        audit = AuditLog(AuditSettings(stdout=False, file=live, ocsf_file=ocsf,
                                       rotate_bytes=3000))
        for n in range(15):
            audit.write(a_record(run * 100 + n))
        audit.close()
    pairs = zip([*rotated_files(live), live], [*rotated_files(ocsf), ocsf], strict=True)
    assert all(seqs_in_ocsf(o) == seqs_in_audit(a) for a, o in pairs)


def test_every_rotation_listener_is_called_and_a_failing_one_fails_no_write(
        tmp_path: Path) -> None:
    file = AuditFile(tmp_path / "audit.log", rotate_bytes=10)
    calls: list[tuple[str, Path]] = []

    def failing(rotated: Path) -> None:
        calls.append(("failing", rotated))
        raise OSError(28, "No space left on device")

    file.on_rotate(failing)
    file.on_rotate(lambda rotated: calls.append(("second", rotated)))
    file.write('{"seq":1}', 1)
    file.write('{"seq":2}', 2)  # rotates first: the listeners run, the write still lands
    file.close()
    [rotated] = rotated_files(tmp_path / "audit.log")
    assert calls == [("failing", rotated), ("second", rotated)]
    assert (tmp_path / "audit.log").read_text() == '{"seq":2}\n'


def test_a_rotation_suffix_is_only_a_rotated_file_s() -> None:
    assert rotation_suffix("a.log.000000000007-20261128T065512.123456Z") == \
        ".000000000007-20261128T065512.123456Z"
    with pytest.raises(ValueError):
        rotation_suffix("a.log.legacy-20261128T065512Z")
