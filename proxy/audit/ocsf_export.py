"""``icegov audit export-ocsf``: audit files as OCSF Parquet, laid out for Amazon Security Lake.

Security Lake takes one OCSF class per custom source, partitioned by region, account and day:

    OUT/<class>/region=<region>/accountId=<account>/eventDay=<YYYYMMDD>/icegov-<seqs>.parquet

``<class>`` is ``datastore_activity`` (6005) or ``api_activity`` (6003): point one custom
source at each. ``eventDay`` is the event's UTC day. A file is named after the first and last
``seq`` it holds (and the writer, when the records name one), so exporting the same records
again rewrites the same files. The columns are the OCSF event's fields (nested objects as
structs); ``unmapped`` is one JSON text column, since the evidence it holds varies in shape from
record to record. The export checks no chain: run ``icegov audit verify`` on the files first.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from proxy.audit.ocsf import DATASTORE_ACTIVITY, NotARecord, to_ocsf

PARTITION_VALUE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]{0,63}$")
CLASS_FOLDERS = {DATASTORE_ACTIVITY: "datastore_activity", 6003: "api_activity"}


class ExportError(ValueError):
    """A line that is not an audit record (named by file and line), or a bad partition value."""


def export_ocsf(files: Sequence[Path], out: Path, region: str, account_id: str,
                policy_version: str | None = None) -> list[Path]:
    """Write the records of ``files`` as OCSF Parquet under ``out``; the files written, sorted.
    Raises ``ExportError`` before writing anything when a line is not a record."""
    for what, value in (("region", region), ("account id", account_id)):
        if not PARTITION_VALUE.match(value):
            raise ExportError(f"{what} {value!r}: letters, digits and '-' only")
    groups: dict[tuple[int, str], list[dict[str, Any]]] = defaultdict(list)
    for event in _events(files, policy_version):
        groups[(event["class_uid"], _day(event["time"]))].append(event)
    written = []
    for (class_uid, day), events in sorted(groups.items()):
        folder = (out / CLASS_FOLDERS[class_uid] / f"region={region}"
                  / f"accountId={account_id}" / f"eventDay={day}")
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / _file_name(events)
        pq.write_table(_table(events), path)
        written.append(path)
    return sorted(written)


def _events(files: Sequence[Path], policy_version: str | None) -> Iterator[dict[str, Any]]:
    for path in files:
        with path.open("r", encoding="utf-8", errors="strict") as lines:
            for number, line in enumerate(lines, 1):
                if not line.strip():
                    continue
                try:
                    yield to_ocsf(json.loads(line), policy_version)
                except (NotARecord, ValueError) as exc:
                    raise ExportError(f"{path}:{number}: not an audit record: {exc}") from None


def _day(epoch_ms: int) -> str:
    return datetime.fromtimestamp(epoch_ms / 1000, UTC).strftime("%Y%m%d")


def _file_name(events: list[dict[str, Any]]) -> str:
    seqs = [e["metadata"].get("sequence", 0) for e in events]
    writers = sorted({e["metadata"].get("log_provider", "") for e in events} - {""})
    writer = f"-{'_'.join(writers)}" if writers else ""
    return f"icegov{writer}-{min(seqs):012d}-{max(seqs):012d}.parquet"


def _table(events: list[dict[str, Any]]) -> pa.Table:
    """One column per field any event has (absent: null), each typed from all its values."""
    rows = [{**e, "unmapped": json.dumps(e.get("unmapped", {}), sort_keys=True)}
            for e in events]
    names = list(dict.fromkeys(name for row in rows for name in row))
    return pa.table({name: pa.array([row.get(name) for row in rows]) for name in names})
