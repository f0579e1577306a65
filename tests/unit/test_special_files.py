"""A local file icegov opens to verify a commit must be a regular file.

Opening a named pipe (FIFO) waits for a writer: a commit that names one under the table's
location, as a data file, a manifest list or a manifest, held icegov's reading thread forever
(the footer check's time budget answered 400 after a minute but its reader never ended; the row
checks and manifest reads had no budget at all). Each test classifies in a thread and asserts it
ends promptly with a refusal.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pyarrow as pa
import pytest
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat, ManifestEntryStatus
from pyiceberg.typedef import Record

from proxy.commits import classify_commit
from proxy.commits.intent import UnverifiableCommit
from proxy.commits.limits import CommitLimits
from tests.support.row_files import RowTable

ADDED, DELETED = ManifestEntryStatus.ADDED, ManifestEntryStatus.DELETED
SCHEMA = pa.schema([pa.field("id", pa.int64(), False), ("name", pa.string())])
PROMPTLY = 20.0  # seconds; a FIFO blocked forever before the fix


def rows(*ids: int) -> pa.Table:
    return pa.table({"id": list(ids), "name": [f"n{i}" for i in ids]}, schema=SCHEMA)


@pytest.fixture()
def rt(tmp_path: Path) -> RowTable:
    return RowTable.create(tmp_path, SCHEMA, [rows(1, 2, 3, 4)])


@pytest.fixture()
def fifos() -> Iterator[list[str]]:
    """FIFOs made by a test; any reader still waiting on one is released at the end."""
    made: list[str] = []
    yield made
    for path in made:
        with contextlib.suppress(OSError):  # no reader waiting
            os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))


def make_fifo(path: str, made: list[str]) -> str:
    local = urlparse(path).path if path.startswith("file:") else path
    if os.path.exists(local):
        os.remove(local)
    os.mkfifo(local)
    made.append(local)
    return path


def promptly(classify: Callable[[], Any]) -> Any:
    """What ``classify`` returns or raises, asserting it ends within ``PROMPTLY`` seconds."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = classify()
        except Exception as exc:
            outcome["error"] = exc
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(PROMPTLY)
    assert not thread.is_alive(), "classification is blocked on a FIFO"
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def fifo_file(rt: RowTable, made: list[str], records: int = 4) -> DataFile:
    path = make_fifo(rt.path("pipe") + ".parquet", made)
    return DataFile.from_args(content=DataFileContent.DATA, file_path=path,
                              file_format=FileFormat.PARQUET, file_size_in_bytes=100,
                              partition=Record(), record_count=records)


def classify(rt: RowTable, sid: int, manifests: list[Any], operation: str) -> Any:
    body = rt.crafter.body(rt.crafter.snapshot(sid, manifests, operation))
    return promptly(lambda: classify_commit(body, rt.table.metadata, rt.table.io,
                                            limits=CommitLimits(footer_seconds=600)))


def test_an_append_of_a_fifo_is_refused_at_once(rt: RowTable, fifos: list[str]) -> None:
    manifest = rt.crafter.manifest(901, [(ADDED, fifo_file(rt, fifos), 0)])
    with pytest.raises(UnverifiableCommit, match="is not a regular file"):
        classify(rt, 901, [manifest, *rt.crafter.parent_manifests()], "append")


def test_a_rewrite_adding_a_fifo_is_refused_at_once(rt: RowTable, fifos: list[str]) -> None:
    """The row checks of a ``replace`` read its added file before the footer checks run."""
    [(f1, seq)] = rt.data_files()
    manifest = rt.crafter.manifest(902, [(DELETED, f1, seq), (ADDED, fifo_file(rt, fifos), 0)])
    with pytest.raises(UnverifiableCommit, match="is not a regular file"):
        classify(rt, 902, [manifest], "replace")


def test_a_manifest_list_that_is_a_fifo_is_refused_at_once(rt: RowTable,
                                                           fifos: list[str]) -> None:
    snapshot = rt.crafter.snapshot(904, rt.crafter.parent_manifests(), "append")
    make_fifo(snapshot["manifest-list"], fifos)
    body = rt.crafter.body(snapshot)
    with pytest.raises(UnverifiableCommit, match="is not a regular file"):
        promptly(lambda: classify_commit(body, rt.table.metadata, rt.table.io,
                                         limits=CommitLimits()))


def test_a_manifest_that_is_a_fifo_is_refused_at_once(rt: RowTable, fifos: list[str]) -> None:
    manifest = rt.crafter.manifest(905, [(ADDED, rt.write_data("new", rows(5)), 0)])
    make_fifo(manifest.manifest_path, fifos)
    with pytest.raises(UnverifiableCommit, match="is not a regular file"):
        classify(rt, 905, [manifest, *rt.crafter.parent_manifests()], "append")
