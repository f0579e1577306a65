"""``icegov policy diff --audit`` read in pieces by forked workers gives the single pass's answer:
the same diff, the same flips in the same order, over rotated files and cuts inside records."""

from __future__ import annotations

import gc
import json
from pathlib import Path

import pytest

from proxy.audit import AuditLog, AuditSettings
from proxy.audit.files import rotated_files
from proxy.audit.pieces import piece_lines, pieces
from proxy.audit.query import raw_lines, stream_paths
from proxy.governance import Action
from proxy.policy.diff import changed_subjects, diff_policies
from proxy.policy.diff_audit import collection_paused, diff_and_flips
from proxy.policy.flips import flips
from proxy.policy.loader import CompiledPolicy, load
from proxy.policy.whocan import Candidate, candidates, merged
from tests.support.audit import no_icegov_environment  # noqa: F401
from tests.unit.test_policy_questions import decided, modified_copy

pytestmark = pytest.mark.usefixtures("no_icegov_environment")

DIGEST = "ab" * 32


def test_pieces_cut_anywhere_read_every_line_once_in_order(tmp_path: Path) -> None:
    lines = [b'{"a":1}', b"", b'{"b":"x\\ny"}', b"torn", b'{"c":[1,2]}', b"\r", b"last-no-nl"]
    path = tmp_path / "audit.log"
    path.write_bytes(b"\n".join(lines))
    second = tmp_path / "other.log"
    second.write_bytes(b"one\ntwo\n")
    expected = list(raw_lines([path, second]))
    assert expected[:len(lines)] == lines
    for size in range(1, path.stat().st_size + 2):
        cut = pieces([path, second], size)
        assert [line for piece in cut for line in piece_lines(piece)] == expected, size
        assert all(piece.start == 0 or _starts_a_line(piece.path, piece.start) for piece in cut)


def _starts_a_line(path: Path, at: int) -> bool:
    return path.read_bytes()[at - 1:at] == b"\n"


def policies(tmp_path: Path) -> tuple[CompiledPolicy, CompiledPolicy, list[Candidate]]:
    old_dir, new_dir = modified_copy(tmp_path)
    old, new = (load(d / "model.conf", d / "policy.csv") for d in (old_dir, new_dir))
    people = {"deleter": ("deleter",), "writer": ("writer",), "analyst": ("analyst",)}
    return old, new, list(merged(candidates(old, {}), candidates(new, people)))


def rotated_audit(tmp_path: Path) -> Path:
    """About 120 records over rotated files (a real AuditLog's), a third of them flipping; a
    second copy of each record carries a ``policy_digest`` (as icegov's records will)."""
    log = tmp_path / "audit.log"
    audit = AuditLog(AuditSettings(stdout=False, file=log, rotate_bytes=6000))
    cases = [("deleter", Action.DELETE, "icegov.demo.customers"),
             ("deleter", Action.DELETE, "icegov.demo.orders"),
             ("writer", Action.SELECT, "icegov.demo.customers"),
             ("writer", Action.SELECT, "icegov.demo.orders"),
             ("analyst", Action.SELECT, "icegov.audit.events"),
             ("admin", Action.DELETE, "icegov.demo.customers")]
    for n in range(60):
        who, action, resource = cases[n % len(cases)]
        audit.write(decided(f"r-{n}", who, action, resource, n % 4 != 0))
    audit.close()
    for path in stream_paths([log]):
        with_digest = [_with_digest(line) for line in raw_lines([path])]
        path.write_bytes(path.read_bytes() + b"\n".join(with_digest) + b"\n")
    return log


def _with_digest(line: bytes) -> bytes:
    record = json.loads(line)
    record["policy_digest"] = DIGEST
    record["request_id"] += "-d"
    return json.dumps(record, sort_keys=True, separators=(",", ":")).encode()


def test_workers_over_pieces_give_the_single_pass_answer(tmp_path: Path) -> None:
    old, new, among = policies(tmp_path)
    log = rotated_audit(tmp_path)
    paths = stream_paths([log])
    assert len(rotated_files(log)) >= 2
    sequential = list(flips(old, new, changed_subjects(old, new), raw_lines(paths)))
    assert len(sequential) >= 30
    assert any(f.request_id.endswith("-d") for f in sequential)
    cut = pieces(paths, 1000)
    assert any(piece.start > 0 for piece in cut) and len(cut) > 2 * len(paths)
    for workers in (1, 2):
        found, flipped = diff_and_flips(old, new, lambda: among, paths, workers=workers,
                                        piece_size=1000)
        assert flipped == sequential
        assert found == diff_policies(old, new, among)


def test_no_worker_is_the_single_pass(tmp_path: Path) -> None:
    old, new, among = policies(tmp_path)
    log = rotated_audit(tmp_path)
    paths = stream_paths([log])
    found, flipped = diff_and_flips(old, new, lambda: among, paths, workers=0)
    assert flipped == list(flips(old, new, found.touched, raw_lines(paths)))
    assert found.touched == changed_subjects(old, new)


def test_the_cycle_collector_is_off_inside_and_as_before_after() -> None:
    assert gc.isenabled()
    with collection_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with collection_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
