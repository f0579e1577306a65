"""``icegov policy diff --audit``: the diff and the audit pass at once, on every core.

The audit pass needs only the subjects of the changed lines (``changed_subjects``), not the
diff's decisions, so it starts first: the audit files are cut into pieces that start on a line
(``proxy.audit.pieces``) and forked worker processes (one per core but this one) find each
piece's flips (``FlipFinder``, prepared once before the fork and inherited, never pickled) from
the first piece on, while this process reads the principals and computes the diff, then reads
the pieces no worker has begun, from the last one back. The pieces' flips are joined in stream
order, so the answer is the one a single pass over the lines gives, in the same order. With one
core, or a stream too small to cut, it is that single pass.

``collection_paused`` keeps Python's cycle collector off meanwhile: loading, diffing and reading
allocate millions of acyclic objects (freed by reference counting as before) next to the large,
long-lived compiled policies, which every full collection would walk again (about a fifth of
the CPU time at 10k rules and 1M records).
"""

from __future__ import annotations

import gc
import multiprocessing
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from contextlib import contextmanager
from pathlib import Path

from proxy.audit.pieces import Piece, piece_lines, pieces
from proxy.audit.query import raw_lines
from proxy.policy.diff import PolicyDiff, changed_subjects, diff_policies
from proxy.policy.flips import Flip, FlipFinder
from proxy.policy.loader import CompiledPolicy
from proxy.policy.whocan import Candidate

_MIN_PIECE = 4 << 20  # smaller streams are read in one pass: a fork costs more
_PIECES_PER_PROCESS = 8  # small enough that no process waits long on another's last piece

_finder: list[FlipFinder] = []  # the forked workers' (set before the fork, inherited)


def diff_and_flips(old: CompiledPolicy, new: CompiledPolicy,
                   among: Callable[[], Iterable[Candidate]], paths: Sequence[Path],
                   workers: int | None = None,
                   piece_size: int | None = None) -> tuple[PolicyDiff, list[Flip]]:
    """The diff of ``old`` and ``new`` over the candidates ``among()`` gives (called once the
    workers run: gathering them overlaps the audit pass) and every logged decision in
    ``paths`` (read in that order) that the change flips. ``workers`` processes read the
    audit beside this one (default: one per usable core but this one; 0: one pass, here);
    ``piece_size`` bytes each piece (default: about eight pieces per process)."""
    finder = FlipFinder(old, new, changed_subjects(old, new))
    count = max(0, _usable_cores() - 1 if workers is None else workers)
    total = sum(path.stat().st_size for path in paths)
    size = piece_size or max(_MIN_PIECE, total // ((count + 1) * _PIECES_PER_PROCESS) + 1)
    work = pieces(paths, size) if count and finder.names else []
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
                flipped = _joined(futures, work, finder)
            except BaseException:
                pool.shutdown(wait=True, cancel_futures=True)  # no piece read for nothing
                raise
    finally:
        _finder.clear()
    return found, flipped


def _joined(futures: list[Future[list[Flip]]], work: list[Piece],
            finder: FlipFinder) -> list[Flip]:
    """Every piece's flips in stream order; this process reads each piece no worker has
    begun (last first: the workers go from the first on)."""
    done: dict[int, list[Flip]] = {}
    for number in reversed(range(len(work))):
        if futures[number].cancel():
            done[number] = list(finder.flips(piece_lines(work[number])))
    return [flip for number, future in enumerate(futures)
            for flip in (done[number] if number in done else future.result())]


def _piece_flips(piece: Piece) -> list[Flip]:
    """A worker's task: the flips of one piece, with the finder inherited from the fork."""
    return list(_finder[0].flips(piece_lines(piece)))


@contextmanager
def collection_paused() -> Iterator[None]:
    """No cycle collection inside (see the module); the collector's state is restored after."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1
