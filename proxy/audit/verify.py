"""Checking an audit stream: every line's bytes and hash, every link and sequence number.

Files are read in the order given (rotated files oldest first, then the live one), as one chain.
A line verifies only when it is byte for byte what ``Chain.seal`` writes: the canonical JSON of
its body with ``,"hash":"<hex>"}`` appended (so a repeated key, which parsers resolve
differently, or a re-serialised record is named as edited). The first record that is wrong is
named with what is wrong with it: edited (its hash or its form does not match), a link broken (the
record before was rewritten, or this one was inserted), records missing (deleted) or out of order
(reordered), repeated or inserted, or a truncated tail (a final line without its newline, or not
valid JSON). Anchors (``seq:hash`` pairs kept elsewhere, e.g. from the ``audit.resumed`` and
``audit.closed`` operational log lines) then prove that nothing before or at them was rewritten
and that the tail was not cut after them.
"""

from __future__ import annotations

import hmac
import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from proxy.audit.anchors import Anchors
from proxy.audit.chain import GENESIS, HMAC_SHA256, SCHEMA, Link, canonical, digest
from proxy.audit.files import read_only

_HEX_DIGEST = re.compile(r"[0-9a-f]{64}")
"""What ``hash`` and ``prev`` hold in every record icegov writes."""


class NeedsKey(Exception):
    """The records are sealed with HMAC and no key was given."""


@dataclass(frozen=True)
class Intact:
    """The chain holds: how many records, in how many files, from which seq to which, whether
    the seal checked was keyed (HMAC under the given key) and how many anchors it matched."""

    records: int
    files: int
    first_seq: int | None
    last_seq: int | None
    keyed: bool = False
    anchors: int = 0
    last_hash: str | None = field(default=None, compare=False)

    @property
    def seal(self) -> str:
        """Which seal was checked, in words."""
        return "hmac-sha256 (key checked)" if self.keyed else "sha-256 (unkeyed)"

    def __str__(self) -> str:
        if self.records == 0:
            return f"ok: no records in {self.files} file(s)"
        anchored = "" if self.first_seq == 1 else (
            " (the chain begins before these files: earlier records were not checked)")
        lines = [f"ok: {self.records} records in {self.files} file(s), "
                 f"seq {self.first_seq}..{self.last_seq}{anchored}, sealed with {self.seal}",
                 f"last record: {self.last_seq}:{self.last_hash}"]
        if self.anchors:
            lines.append(f"anchors matched: {self.anchors}")
        return "\n".join(lines)


@dataclass(frozen=True)
class Broken:
    """The first bad record: where it is, its seq (if readable) and what is wrong."""

    file: str
    line: int
    seq: int | None
    what: str

    def __str__(self) -> str:
        seq = f"seq {self.seq}: " if self.seq is not None else ""
        return f"{self.file}:{self.line}: {seq}{self.what}"


@dataclass(frozen=True)
class _Line:
    file: str
    number: int
    raw: bytes
    last_in_file: bool


def _lines(paths: Sequence[Path]) -> Iterator[_Line]:
    for path in paths:
        with read_only(path) as handle:
            number, previous = 0, None
            for raw in handle:
                if previous is not None:
                    yield _Line(str(path), number, previous, False)
                number, previous = number + 1, raw
            if previous is not None:
                yield _Line(str(path), number, previous, True)


def verify(paths: Sequence[Path], key: bytes | None = None, *, anchors: Sequence[Link] = (),
           expect_last: Link | None = None, require_hmac: bool = False,
           writer: str | None = None, unkeyed: bool = False) -> Intact | Broken:
    """Check the chain across ``paths`` (in order); raises ``NeedsKey`` and ``OSError``.

    ``anchors``: records the chain must hold with exactly that hash; ``expect_last``: the record
    the chain must end with (nothing cut after it, nothing added); ``require_hmac``: a record
    not sealed with HMAC is broken; ``writer``: check only that worker's chain in a stream
    several workers wrote (without it, a second writer's record is named as interleaved);
    ``unkeyed``: HMAC-sealed records without the key are checked for links and form only (their
    bytes are proven by signed digests instead, ``proofs``)."""
    lines = _lines(paths)
    pinned = Anchors(anchors, expect_last)
    last: Link | None = None
    first: int | None = None
    count = 0
    last_line: _Line | None = None
    writers = _Writers(writer)
    for line in lines:
        record = _parse(line)
        if isinstance(record, Broken):
            return record
        if not writers.checks(record):
            continue
        if (other := writers.interleaved(line, record)) is not None:
            return other
        crossed = last_line.file if last_line and last_line.file != line.file else None
        problem = (_sealing(line, record, key, require_hmac, unkeyed)
                   or _linking(line, record, last, crossed, lines, writers)
                   or _form(line, record)
                   or _where(line, record["seq"], pinned.check(record["seq"], record["hash"])))
        if problem is not None:
            return problem
        last, last_line, count = Link(record["seq"], record["hash"]), line, count + 1
        first = record["seq"] if first is None else first
    if writer is not None and count == 0 and writers.skipped:
        return _no_record_of(writer, paths)
    at_end = pinned.at_end(first, last)
    if at_end is not None:
        where = last_line or _Line(str(paths[-1]) if paths else "-", 0, b"", True)
        return Broken(where.file, where.number, last.seq if last else None, at_end)
    return Intact(count, len(paths), first, last.seq if last else None, key is not None,
                  pinned.matched, last.hash if last else None)


def _no_record_of(writer: str, paths: Sequence[Path]) -> Broken:
    return Broken(str(paths[-1]), 0, None,
                  f"no record of writer {writer!r}: the stream holds only other writers' "
                  "records (a mistyped name, or every one of its records deleted)")


class _Writers:
    """Which records a check covers: all (one writer expected) or one worker's (``writer``)."""

    def __init__(self, writer: str | None) -> None:
        self._writer = writer
        self.skipped = 0  # records of other writers passed over
        self._seen = False
        self._first: object = None  # the first record's writer (None: a single process)

    def checks(self, record: dict[str, Any]) -> bool:
        if self._writer is None or record.get("writer") == self._writer:
            return True
        self.skipped += 1
        return False

    def interleaved(self, line: _Line, record: dict[str, Any]) -> Broken | None:
        """A record of another writer than the stream's first, when no writer was chosen."""
        found = record.get("writer")
        if not self._seen:
            self._seen, self._first = True, found
        if self._writer is not None or found == self._first:
            return None
        names = ", ".join(str(w) for w in (self._first, found))
        return Broken(line.file, line.number, record.get("seq"),
                      f"records of several writers interleave here ({names}): check each "
                      "worker's chain with --writer")


def _where(line: _Line, seq: int, what: str | None) -> Broken | None:
    return None if what is None else Broken(line.file, line.number, seq, what)


def _parse(line: _Line) -> dict[str, Any] | Broken:
    truncated = line.last_in_file and not line.raw.endswith(b"\n")
    if truncated:
        return Broken(line.file, line.number, None, "truncated tail: the last line is incomplete")
    try:
        record = json.loads(line.raw)
    except (ValueError, RecursionError):  # RecursionError: nested deeper than Python parses
        what = ("truncated tail: the last line is not valid JSON" if line.last_in_file
                else "damaged: not valid JSON")
        return Broken(line.file, line.number, None, what)
    seq = record.get("seq") if isinstance(record, dict) else None
    if (not isinstance(record, dict) or record.get("schema") != SCHEMA or type(seq) is not int
            or not isinstance(record.get("prev"), str) or not isinstance(record.get("hash"), str)):
        return Broken(line.file, line.number, seq if type(seq) is int else None,
                      f"not an {SCHEMA} record (no seq, prev or hash)")
    if not (_HEX_DIGEST.fullmatch(record["hash"]) and _HEX_DIGEST.fullmatch(record["prev"])):
        return Broken(line.file, line.number, seq,
                      "edited: its hash or prev is not a SHA-256 digest in hex")
    return record


def _sealing(line: _Line, record: dict[str, Any], key: bytes | None,
             require_hmac: bool, unkeyed: bool = False) -> Broken | None:
    mac = record.get("mac")
    if mac is not None and mac != HMAC_SHA256:
        return Broken(line.file, line.number, record["seq"], f"unknown mac {mac!r}")
    if mac == HMAC_SHA256 and key is None and unkeyed:
        return None
    if mac == HMAC_SHA256 and key is None:
        raise NeedsKey("the records are sealed with HMAC-SHA256: give the key")
    if mac is None and (key is not None or require_hmac):
        why = "although a key was given" if key is not None else "and HMAC is required"
        return Broken(line.file, line.number, record["seq"],
                      f"not sealed with HMAC {why} (plain SHA-256 instead)")
    body = {k: v for k, v in record.items() if k != "hash"}
    if not hmac.compare_digest(digest(canonical(body), key), str(record["hash"])):
        what = ("edited, or sealed with another key: its HMAC does not match its contents"
                if key is not None else "edited: its hash does not match its contents")
        return Broken(line.file, line.number, record["seq"], what)
    return None


def _form(line: _Line, record: dict[str, Any]) -> Broken | None:
    """The line must be exactly the bytes ``Chain.seal`` writes for the record it parses to."""
    body = {k: v for k, v in record.items() if k != "hash"}
    expected = canonical(body)[:-1] + f',"hash":"{record["hash"]}"}}\n'.encode("ascii")
    if line.raw == expected:
        return None
    return Broken(line.file, line.number, record["seq"],
                  "edited: the line is not byte for byte what icegov writes (re-serialised, "
                  "or a key repeated so that parsers read different values)")


def _linking(line: _Line, record: dict[str, Any], last: Link | None, crossed: str | None,
             rest: Iterator[_Line], writers: _Writers) -> Broken | None:
    seq, prev = record["seq"], record["prev"]
    where = f" (the first record of this file, after {crossed})" if crossed else ""

    def broken(what: str) -> Broken:
        return Broken(line.file, line.number, seq, what + where)

    if last is None:
        if seq == 1 and prev != GENESIS:
            return broken("the first record of the stream does not start from the chain's start")
        return None
    expected = last.seq + 1
    if seq == expected:
        if prev != last.hash:
            return broken(f"does not link to seq {last.seq} before it: that record was rewritten,"
                          " or this one was inserted")
        return None
    if seq < expected:
        return broken(f"seq {seq} after seq {last.seq}: a repeated, inserted or reordered record")
    later = _find(rest, expected, writers)
    if later is not None:
        return broken(f"reordered: seq {expected} was expected here and comes later "
                      f"({later.file}:{later.number})")
    missing = f"seq {expected}" if seq == expected + 1 else f"seq {expected}..{seq - 1}"
    return broken(f"records missing before it ({missing}): deleted")


def _find(rest: Iterator[_Line], seq: int, writers: _Writers) -> _Line | None:
    for line in rest:
        try:
            record = json.loads(line.raw)
        except (ValueError, RecursionError):
            continue
        if isinstance(record, dict) and record.get("seq") == seq and writers.checks(record):
            return line
    return None
