"""``icegov audit export-ocsf``: audit files as OCSF Parquet, laid out for Amazon Security Lake.

Security Lake takes one OCSF class per custom source, partitioned by region, account and day:

    OUT/<class>/region=<region>/accountId=<account>/eventDay=<YYYYMMDD>/icegov-<seqs>.parquet

``<class>`` is ``datastore_activity`` (6005) or ``api_activity`` (6003): point one custom
source at each. ``eventDay`` is the event's UTC day. A file is named after the first and last
``seq`` it holds (and the writer, when the records name one), so exporting the same records
again rewrites the same files. The columns are the class's fixed schema (``ocsf_arrow``).

The export streams: records are read line by line (a live file's rotated siblings first, oldest
first, as ``icegov audit query`` reads them) and each (class, day) partition's events go to an
open ``ParquetWriter``, a row group at a time. At most ``batch_rows`` events are held in memory
across all partitions (the fullest partition's are written out when they would be more), and at
most ``MAX_OPEN`` partition files are open (the least recently used is finished first; a later
event of its partition starts another file). Files are written under hidden temporary names
(``.icegov-export-*``, which Parquet readers skip) and renamed only once every line has been
read: a line that is not an audit record leaves nothing behind (the temporary files and the
folders the export made are removed). The export checks no chain: run ``icegov audit verify``
on the files first.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import uuid
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from proxy.audit.files import read_only
from proxy.audit.ocsf import API_ACTIVITY, DATASTORE_ACTIVITY, NotARecord, to_ocsf
from proxy.audit.ocsf_arrow import SCHEMAS, Unfit, batch
from proxy.audit.query import stream_paths

PARTITION_VALUE = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]{0,63}")  # fullmatch: no final newline
WRITER = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
"""A worker's name as a file name may hold it (``w0``, ``w1``...): no '/', no newline."""
CLASS_FOLDERS = {DATASTORE_ACTIVITY: "datastore_activity", API_ACTIVITY: "api_activity"}
BATCH_ROWS = 10_000
MAX_OPEN = 16

Where = tuple[Path, int]  # a line: its file and number


class ExportError(ValueError):
    """A line that is not an audit record (named by file and line), or a bad partition value."""


def export_ocsf(files: Sequence[Path], out: Path, region: str, account_id: str,
                policy_version: str | None = None, rotated: bool = True,
                batch_rows: int = BATCH_ROWS) -> list[Path]:
    """Write the records of ``files`` (each one's rotated siblings first, with ``rotated``) as
    OCSF Parquet under ``out``; the files written, sorted. Raises ``ExportError``, leaving
    nothing written, when a line is not a record."""
    for what, value in (("region", region), ("account id", account_id)):
        if not PARTITION_VALUE.fullmatch(value):
            raise ExportError(f"{what} {value!r}: letters, digits and '-' only")
    sink = _Partitions(out, f"region={region}", f"accountId={account_id}", batch_rows)
    try:
        for event, where in _events(stream_paths(files, rotated), policy_version):
            sink.add(event, where)
        return sink.finish()
    except BaseException:  # nothing half-written stays
        sink.abandon()
        raise


def _events(paths: Sequence[Path],
            policy_version: str | None) -> Iterator[tuple[dict[str, Any], Where]]:
    for path in paths:
        with read_only(path) as lines:
            for number, line in enumerate(lines, 1):
                if not line.strip():
                    continue
                try:  # json.loads decodes the bytes: a line that is no UTF-8 is no record
                    yield to_ocsf(json.loads(line), policy_version), (path, number)
                except (NotARecord, ValueError, RecursionError) as exc:
                    raise ExportError(f"{path}:{number}: not an audit record: {exc}") from None


def _day(epoch_ms: int) -> str:
    try:
        return datetime.fromtimestamp(epoch_ms / 1000, UTC).strftime("%Y%m%d")
    except (OverflowError, OSError, ValueError) as exc:
        raise NotARecord(f"time {epoch_ms} ms is out of range") from exc


@dataclass
class _Part:
    """One Parquet file being written: a partition's events, or some of them."""

    class_uid: int
    folder: Path
    temp: Path
    writer: pq.ParquetWriter | None = None
    pending: list[dict[str, Any]] = field(default_factory=list)
    where: list[Where] = field(default_factory=list)
    seqs: tuple[int, int] | None = None
    writers: set[str] = field(default_factory=set)

    def add(self, event: dict[str, Any], where: Where) -> None:
        self.pending.append(event)
        self.where.append(where)
        metadata = event["metadata"]
        seq = metadata.get("sequence", 0)
        self.seqs = (seq, seq) if self.seqs is None else (min(self.seqs[0], seq),
                                                          max(self.seqs[1], seq))
        if metadata.get("log_provider"):
            self.writers.add(metadata["log_provider"])

    def flush(self) -> None:
        """Write the pending events as one row group."""
        if not self.pending:
            return
        rows = _fitting(self.class_uid, self.pending, self.where)
        if self.writer is None:
            self.writer = pq.ParquetWriter(self.temp, SCHEMAS[self.class_uid])
        self.writer.write_batch(rows)
        self.pending, self.where = [], []

    def close(self) -> None:
        self.flush()
        if self.writer is not None:
            self.writer.close()
            self.writer = None

    def name(self) -> str:
        first, last = self.seqs or (0, 0)
        writer = f"-{'_'.join(sorted(self.writers))}" if self.writers else ""
        return f"icegov{writer}-{first:012d}-{last:012d}.parquet"


def _fitting(class_uid: int, events: list[dict[str, Any]], where: list[Where]) -> Any:
    """The events as one record batch; an event that does not fit is named by its line."""
    try:
        return batch(class_uid, events)
    except Unfit:
        for event, (path, number) in zip(events, where, strict=True):
            try:
                batch(class_uid, [event])
            except Unfit as exc:
                raise ExportError(f"{path}:{number}: not an audit record: {exc}") from None
        raise


class _Partitions:
    """The open partition files, the events held back, and the files finished."""

    def __init__(self, out: Path, region: str, account: str, batch_rows: int) -> None:
        self._out, self._region, self._account = out, region, account
        self._batch_rows = max(1, batch_rows)
        self._open: OrderedDict[tuple[int, str], _Part] = OrderedDict()
        self._finished: list[_Part] = []
        self._made: list[Path] = []  # folders this export created, outermost first
        self._held = 0

    def add(self, event: dict[str, Any], where: Where) -> None:
        try:
            key = (event["class_uid"], _day(event["time"]))
            writer = event["metadata"].get("log_provider")
            if writer is not None and not WRITER.fullmatch(writer):
                raise NotARecord(f"writer {writer!r:.40} is no worker name")
        except NotARecord as exc:
            raise ExportError(f"{where[0]}:{where[1]}: not an audit record: {exc}") from None
        part = self._open.get(key)
        if part is None:
            part = self._start(*key)
        self._open.move_to_end(key)
        part.add(event, where)
        self._held += 1
        if self._held >= self._batch_rows:
            fullest = max(self._open.values(), key=lambda p: len(p.pending))
            self._held -= len(fullest.pending)
            fullest.flush()

    def _start(self, class_uid: int, day: str) -> _Part:
        if len(self._open) >= MAX_OPEN:
            _, oldest = self._open.popitem(last=False)
            self._held -= len(oldest.pending)
            oldest.close()
            self._finished.append(oldest)
        folder = (self._out / CLASS_FOLDERS[class_uid] / self._region / self._account
                  / f"eventDay={day}")
        self._make(folder)
        part = _Part(class_uid, folder, folder / f".icegov-export-{uuid.uuid4().hex}.tmp")
        self._open[(class_uid, day)] = part
        return part

    def _make(self, folder: Path) -> None:
        missing = [p for p in (folder, *folder.parents) if not p.exists()]
        folder.mkdir(parents=True, exist_ok=True)
        self._made += [p for p in reversed(missing) if p not in self._made]

    def finish(self) -> list[Path]:
        """Close every file and give each its name (the same records: the same name)."""
        for part in self._open.values():
            part.close()
        self._finished += self._open.values()
        self._open.clear()
        written: list[Path] = []
        for part in self._finished:
            target = part.folder / part.name()
            count = 1
            while target in written:  # two files of one partition with the same seq range
                count += 1
                target = part.folder / part.name().replace(".parquet", f"-{count}.parquet")
            os.replace(part.temp, target)
            written.append(target)
        return sorted(written)

    def abandon(self) -> None:
        """Remove every temporary file and every folder this export made (if left empty)."""
        for part in [*self._open.values(), *self._finished]:
            if part.writer is not None:
                with contextlib.suppress(Exception):
                    part.writer.close()
            with contextlib.suppress(OSError):
                part.temp.unlink()
        for folder in reversed(self._made):
            with contextlib.suppress(OSError):
                folder.rmdir()
