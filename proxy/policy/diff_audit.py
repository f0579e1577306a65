"""``icegov policy diff --audit``: the diff and the audit pass at once, on every core.

The audit pass needs only the subjects of the changed lines (``changed_subjects``), not the
diff's decisions, so it starts first: the audit files are cut into pieces that start on a line
(``proxy.audit.pieces``) and forked worker processes find each piece's flips
(``FlipFinder``, prepared once before the fork and inherited, never pickled) while this process
computes the diff. The pieces' flips are joined in stream order, so the answer is the one a
single pass over the lines gives, in the same order. With one core, or a stream too small to
cut, it is that single pass.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from proxy.audit.pieces import Piece, piece_lines, pieces
from proxy.audit.query import raw_lines
from proxy.policy.diff import PolicyDiff, changed_subjects, diff_policies
from proxy.policy.flips import Flip, FlipFinder
from proxy.policy.loader import CompiledPolicy
from proxy.policy.whocan import Candidate

_MIN_PIECE = 4 << 20  # smaller streams are read in one pass: a fork costs more
_PIECES_PER_WORKER = 4  # a worker slowed by the diff beside it leaves pieces to the others

_finder: list[FlipFinder] = []  # the forked workers' (set before the fork, inherited)


def diff_and_flips(old: CompiledPolicy, new: CompiledPolicy,
                   among: Callable[[], Iterable[Candidate]], paths: Sequence[Path],
                   workers: int | None = None,
                   piece_size: int | None = None) -> tuple[PolicyDiff, list[Flip]]:
    """The diff of ``old`` and ``new`` over the candidates ``among()`` gives (called once the
    workers run: gathering them overlaps the audit pass) and every logged decision in
    ``paths`` (read in that order) that the change flips. ``workers`` processes read the
    audit (default: one per usable core; 0 or 1: one pass, here); ``piece_size`` bytes each
    piece (default: about four pieces per worker)."""
    finder = FlipFinder(old, new, changed_subjects(old, new))
    count = _usable_cores() if workers is None else workers
    total = sum(path.stat().st_size for path in paths)
    size = piece_size or max(_MIN_PIECE, total // max(1, count * _PIECES_PER_WORKER) + 1)
    work = pieces(paths, size) if count > 1 and finder.names else []
    if len(work) < 2 or "fork" not in multiprocessing.get_all_start_methods():
        found = diff_policies(old, new, among())
        return found, list(finder.flips(raw_lines(paths)))
    _finder[:] = [finder]
    try:
        context = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(min(count, len(work)), mp_context=context) as pool:
            futures = [pool.submit(_piece_flips, piece) for piece in work]
            try:
                found = diff_policies(old, new, among())
                flipped = [flip for future in futures for flip in future.result()]
            except BaseException:
                pool.shutdown(wait=True, cancel_futures=True)  # no piece read for nothing
                raise
    finally:
        _finder.clear()
    return found, flipped


def _piece_flips(piece: Piece) -> list[Flip]:
    """A worker's task: the flips of one piece, with the finder inherited from the fork."""
    return list(_finder[0].flips(piece_lines(piece)))


def _usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1
