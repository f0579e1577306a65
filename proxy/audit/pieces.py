"""An audit stream cut into byte ranges that start on a line, for reading in several processes.

``pieces`` cuts each file at about equal sizes, moving every cut forward to the start of the next
line, so each line lies in exactly one piece; ``piece_lines`` yields the lines of one piece as
``raw_lines`` yields them (bytes without the newline, a torn last line included), reading fixed
blocks, never the whole file. Reading every piece in order is reading every line in order. Each
file is measured once, when cut: what is appended later is not read.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from proxy.audit.files import read_only

_BLOCK = 1 << 20


@dataclass(frozen=True)
class Piece:
    """The lines of ``path`` that start at or after ``start`` and before ``end``."""

    path: Path
    start: int
    end: int


def pieces(paths: Sequence[Path], size: int) -> list[Piece]:
    """``paths`` cut into pieces of about ``size`` bytes (at least one byte), in stream order."""
    found: list[Piece] = []
    for path in paths:
        with read_only(path) as handle:
            total = handle.seek(0, os.SEEK_END)
            cuts = [0]
            while cuts[-1] + max(size, 1) < total:
                handle.seek(cuts[-1] + max(size, 1))
                handle.readline()  # the cut moves to the start of the next line
                cuts.append(handle.tell())
            cuts.append(total)
        found += [Piece(path, a, b) for a, b in itertools.pairwise(cuts) if a < b]
    return found


def piece_lines(piece: Piece) -> Iterator[bytes]:
    """Every line of ``piece`` in order, as bytes without the newline."""
    with read_only(piece.path) as handle:
        handle.seek(piece.start)
        left = piece.end - piece.start
        pending = b""
        while left > 0:
            block = handle.read(min(_BLOCK, left))
            if not block:
                break
            left -= len(block)
            lines = (pending + block).split(b"\n")
            pending = lines.pop()
            yield from lines
        if pending:
            yield pending
