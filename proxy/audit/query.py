"""``icegov audit query``: the records of an audit stream that match a filter, streamed.

Files are read line by line (rotated siblings of a live file first, oldest first), never whole.
Each filter first looks for its value's exact JSON text in the line's bytes (records are written
as compact JSON, so a record that matches holds that text); only lines that pass are parsed and
then checked field by field, so the byte test narrows the work and never decides alone. A line
that is not a JSON object (a crash's torn line, or one nested deeper than Python parses) is
skipped and counted.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from proxy.audit.files import read_only, rotated_files

Record = dict[str, Any]


def stream_paths(paths: Iterable[Path], rotated: bool = True) -> list[Path]:
    """The files to read, in chain order: each path's rotated siblings first (``rotated``)."""
    found: list[Path] = []
    for path in paths:
        siblings = rotated_files(path) if rotated else []
        found += [p for p in siblings if p not in found]
        if path not in found:
            found.append(path)
    return found


def raw_lines(paths: Sequence[Path]) -> Iterator[bytes]:
    """Every line of ``paths`` in order, as bytes without the newline."""
    for path in paths:
        with read_only(path) as handle:
            for line in handle:
                yield line.rstrip(b"\n")


def needle(value: str) -> bytes:
    """A string value as a compact JSON record writes it (quotes, escapes)."""
    return json.dumps(value).encode("ascii")


def parse_time(text: str) -> datetime:
    """An ISO 8601 time; without a zone it is UTC."""
    moment = datetime.fromisoformat(text)
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


@dataclass
class Query:
    """What to keep: every given field must match (values within one field: any of them)."""

    principals: tuple[str, ...] = ()
    tables: tuple[str, ...] = ()  # resources in their text form, as records carry them
    actions: tuple[str, ...] = ()
    decisions: tuple[str, ...] = ()
    request_ids: tuple[str, ...] = ()
    since: datetime | None = None
    until: datetime | None = None  # exclusive
    skipped: int = field(default=0, compare=False)  # lines that are not records

    def _needles(self) -> list[tuple[bytes, ...]]:
        groups = (self.principals, self.tables, self.actions, self.decisions, self.request_ids)
        return [tuple(needle(v) for v in group) for group in groups if group]

    def keeps(self, record: Record) -> bool:
        """Whether a parsed record matches every given field."""
        checks: list[tuple[tuple[str, ...], Callable[[Record], Iterable[Any]]]] = [
            (self.principals, lambda r: [r.get("principal")]),
            (self.tables, lambda r: r.get("resources") or ()),
            (self.actions, lambda r: r.get("actions") or ()),
            (self.decisions, lambda r: [r.get("decision")]),
            (self.request_ids, lambda r: [r.get("request_id")]),
        ]
        for wanted, values in checks:
            if wanted and not any(v in wanted for v in values(record)):
                return False
        return self._in_time(record)

    def _in_time(self, record: Record) -> bool:
        if self.since is None and self.until is None:
            return True
        try:
            moment = parse_time(str(record.get("time")))
        except ValueError:
            return False
        return ((self.since is None or moment >= self.since)
                and (self.until is None or moment < self.until))

    def run(self, lines: Iterable[bytes]) -> Iterator[Record]:
        """The matching records of ``lines``, in order."""
        needles = self._needles()
        window = _canonical(self.since), _canonical(self.until, ceiling=True)
        for line in lines:
            if not all(any(n in line for n in group) for group in needles):
                continue
            if window != (None, None) and _outside(line, *window):
                continue
            try:
                record = json.loads(line)
            except (ValueError, RecursionError):  # RecursionError: nested deeper than parsed
                self.skipped += 1
                continue
            if isinstance(record, dict) and self.keeps(record):
                yield record
            elif not isinstance(record, dict):
                self.skipped += 1


_TIME = b'"time":"'
_TIME_SIZE = len("2026-11-27T15:29:00.123+00:00")


def _canonical(moment: datetime | None, ceiling: bool = False) -> bytes | None:
    """A bound in the text form records carry (UTC, milliseconds): such texts sort as times.
    A bound between two milliseconds is cut down to the one before (``since``: a text before it
    is before the bound) or, with ``ceiling``, up to the one after (``until``: a text at or
    after it is at or after the bound). None when UTC cannot hold it (year 1 or 9999 in another
    zone): the parsed check alone decides then."""
    if moment is None:
        return None
    try:
        moment = moment.astimezone(UTC)
        if ceiling and moment.microsecond % 1000:
            moment += timedelta(microseconds=1000 - moment.microsecond % 1000)
    except OverflowError:
        return None
    return moment.isoformat(timespec="milliseconds").encode("ascii")


def _outside(line: bytes, since: bytes | None, until: bytes | None) -> bool:
    """True only when the line's ``time`` is in the canonical form and outside the window;
    anything else is left to the parsed check. The last ``"time":"`` is the record's own: keys
    are sorted, no top-level object follows ``time``, and a string cannot hold an unescaped
    quote."""
    at = line.rfind(_TIME)
    if at < 0:
        return False
    start = at + len(_TIME)
    text = line[start:start + _TIME_SIZE]
    if not text.endswith(b"+00:00") or line[start + _TIME_SIZE:start + _TIME_SIZE + 1] != b'"':
        return False
    return (since is not None and text < since) or (until is not None and text >= until)


TABLE_COLUMNS = ("time", "request_id", "principal", "decision", "status", "actions",
                 "resources")


def table_row(record: Record) -> str:
    """One record as a line of the table output (tab-separated)."""
    cells = []
    for name in TABLE_COLUMNS:
        value = record.get(name)
        if isinstance(value, list):
            value = ",".join(str(v) for v in value)
        cells.append("-" if value is None else str(value))
    return "\t".join(cells)
