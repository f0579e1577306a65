"""Signed audit digests: a real AuditLog writes them, `icegov audit verify --public-key` checks
a real audit directory with the public key only, and names each injected fault by its kind."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from proxy.audit import AuditLog, AuditSettings
from proxy.audit.chain import Chain
from proxy.audit.files import rotated_files
from proxy.cli import main
from tests.support.audit import a_record, no_icegov_environment  # noqa: F401

pytestmark = pytest.mark.usefixtures("no_icegov_environment")


def icegov(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


@pytest.fixture()
def keys(tmp_path: Path) -> tuple[Path, Path]:
    private, public = tmp_path / "keys" / "signing.pem", tmp_path / "keys" / "signing.pub.pem"
    private.parent.mkdir()
    made = icegov("audit", "keygen", "--private", str(private), "--public", str(public))
    assert made.exit_code == 0, made.output
    assert private.stat().st_mode & 0o077 == 0
    return private, public


def write_log(directory: Path, private: Path, count: int = 30, close: bool = True,
              **settings: object) -> AuditLog:
    options: dict[str, object] = {"rotate_bytes": 4000, "digest_every_records": 4, **settings}
    audit = AuditLog(AuditSettings(stdout=False, file=directory / "audit.log",
                                   signing_key=private, **options))
    for n in range(count):
        audit.write(a_record(n))
    if close:
        audit.close()
    return audit


def chain_files(directory: Path) -> list[Path]:
    log = directory / "audit.log"
    return [*rotated_files(log), log]


def verify(public: Path, files: list[Path], *extra: str) -> Result:
    return icegov("audit", "verify", "--public-key", str(public), *extra, *map(str, files))


@pytest.fixture()
def audit_dir(tmp_path: Path, keys: tuple[Path, Path]) -> Path:
    directory = tmp_path / "audit"
    write_log(directory, keys[0])
    assert len(chain_files(directory)) >= 3
    return directory


def lines_of(path: Path) -> list[str]:
    return path.read_text().splitlines(keepends=True)


def test_a_clean_directory_verifies_with_the_public_key_alone(
        audit_dir: Path, keys: tuple[Path, Path]) -> None:
    result = verify(keys[1], chain_files(audit_dir))
    assert result.exit_code == 0, result.output
    digests = (audit_dir / "audit.log.digests").read_text().splitlines()
    reasons = [json.loads(d)["reason"] for d in digests]
    assert reasons[0] == "start" and reasons[-1] == "shutdown"
    assert {"periodic", "rotation"} <= set(reasons)
    assert result.output.startswith(f"ok: {len(digests)} signed digest(s) verified")
    assert "proven up to seq 30" in result.output
    assert "unprovable: none in these files" in result.output


def test_a_modified_byte_is_named_modified(audit_dir: Path, keys: tuple[Path, Path]) -> None:
    target = chain_files(audit_dir)[1]
    data = bytearray(target.read_bytes())
    data[data.index(b'"status":200') + 10] = ord("1")
    target.write_bytes(bytes(data))
    result = verify(keys[1], chain_files(audit_dir))
    assert result.exit_code == 1
    assert f"modified: {target}:1: seq" in result.output


def test_a_deleted_file_is_named_deleted(audit_dir: Path, keys: tuple[Path, Path]) -> None:
    files = chain_files(audit_dir)
    files[1].unlink()
    result = verify(keys[1], chain_files(audit_dir))
    assert result.exit_code == 1
    assert f"deleted: {files[1].name.split('.')[0]}" in result.output
    assert "is missing" in result.output


def test_an_inserted_line_is_named_inserted(audit_dir: Path, keys: tuple[Path, Path]) -> None:
    target = chain_files(audit_dir)[0]
    lines = lines_of(target)
    target.write_text("".join([*lines[:3], lines[2], *lines[3:]]))
    result = verify(keys[1], chain_files(audit_dir))
    assert result.exit_code == 1
    assert f"inserted: {target}:4:" in result.output


def test_two_swapped_lines_are_named_reordered(audit_dir: Path, keys: tuple[Path, Path]) -> None:
    target = chain_files(audit_dir)[0]
    lines = lines_of(target)
    lines[1], lines[2] = lines[2], lines[1]
    target.write_text("".join(lines))
    result = verify(keys[1], chain_files(audit_dir))
    assert result.exit_code == 1
    assert f"reordered: {target}:2:" in result.output


def test_a_cut_tail_is_named_truncated(audit_dir: Path, keys: tuple[Path, Path]) -> None:
    live = audit_dir / "audit.log"
    live.write_text("".join(lines_of(live)[:-2]))
    result = verify(keys[1], chain_files(audit_dir))
    assert result.exit_code == 1
    assert "truncated: " in result.output and "cut from the tail" in result.output


def test_a_chain_resealed_after_an_edit_is_still_caught(
        audit_dir: Path, keys: tuple[Path, Path]) -> None:
    """Unkeyed, the chain alone verifies after a forger re-seals it; the digest does not."""
    files = chain_files(audit_dir)
    chain = Chain(None)
    for path in files:
        out = []
        for line in lines_of(path):
            record = json.loads(line)
            for field in ("schema", "seq", "prev", "hash"):
                record.pop(field)
            record["status"] = 500 if record["request_id"] == "req-3" else record["status"]
            out.append(chain.seal(record)[0] + "\n")
        path.write_text("".join(out))
    assert icegov("audit", "verify", *map(str, files)).exit_code == 0  # the chain holds
    result = verify(keys[1], files)
    assert result.exit_code == 1
    assert "modified: " in result.output


def test_records_after_the_last_digest_are_named_unprovable(
        tmp_path: Path, keys: tuple[Path, Path]) -> None:
    directory = tmp_path / "live"
    audit = write_log(directory, keys[0], count=10, close=False, rotate_bytes=None,
                      digest_every_records=4)
    try:
        result = verify(keys[1], chain_files(directory))
    finally:
        audit.close()
    assert result.exit_code == 0, result.output
    assert "proven up to seq 8" in result.output
    assert "unprovable: seq 9..10, written after digest 3 (periodic" in result.output


def test_an_edited_digest_is_named_and_not_trusted(
        audit_dir: Path, keys: tuple[Path, Path]) -> None:
    digests = audit_dir / "audit.log.digests"
    lines = lines_of(digests)
    lines[1] = lines[1].replace('"reason":"', '"reason":"x')
    digests.write_text("".join(lines))
    result = verify(keys[1], chain_files(audit_dir))
    assert result.exit_code == 1
    assert f"digests: {digests}:2: the signature does not verify" in result.output
    assert "written after digest 1 (start" in result.output


def test_a_digest_dropped_from_the_middle_is_named(
        audit_dir: Path, keys: tuple[Path, Path]) -> None:
    digests = audit_dir / "audit.log.digests"
    lines = lines_of(digests)
    digests.write_text("".join(lines[:2] + lines[3:]))
    result = verify(keys[1], chain_files(audit_dir))
    assert result.exit_code == 1
    assert "does not follow digest 2: digests were deleted" in result.output


def test_another_public_key_proves_nothing(audit_dir: Path, tmp_path: Path) -> None:
    other = icegov("audit", "keygen", "--private", str(tmp_path / "o.pem"),
                   "--public", str(tmp_path / "o.pub"))
    assert other.exit_code == 0
    result = verify(tmp_path / "o.pub", chain_files(audit_dir))
    assert result.exit_code == 1
    assert "the signature does not verify with this public key" in result.output


def test_hmac_sealed_records_verify_without_the_hmac_key(
        tmp_path: Path, keys: tuple[Path, Path]) -> None:
    directory = tmp_path / "keyed"
    write_log(directory, keys[0], count=12, hmac_key="secret")
    assert verify(keys[1], chain_files(directory)).exit_code == 0
    live = directory / "audit.log"
    live.write_text(live.read_text().replace('"status":200', '"status":201', 1))
    result = verify(keys[1], chain_files(directory))
    assert result.exit_code == 1 and "modified: " in result.output


def test_keygen_never_overwrites(keys: tuple[Path, Path]) -> None:
    again = icegov("audit", "keygen", "--private", str(keys[0]), "--public", str(keys[1]))
    assert again.exit_code == 1 and "exists" in again.output


def test_digests_resume_across_restarts(tmp_path: Path, keys: tuple[Path, Path]) -> None:
    directory = tmp_path / "restart"
    write_log(directory, keys[0], count=5)
    write_log(directory, keys[0], count=5)
    numbers = [json.loads(d)["digest"]
               for d in (directory / "audit.log.digests").read_text().splitlines()]
    assert numbers == list(range(1, len(numbers) + 1))
    assert verify(keys[1], chain_files(directory)).exit_code == 0
