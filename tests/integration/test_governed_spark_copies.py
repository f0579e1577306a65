"""Governed copies on real PySpark (``proxy.governed.spark_copies``): the same files and facts
as in process, in the jobs' order, failures keeping their kind."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.expressions import EqualTo

from proxy.governed.copies import CopiedFile, CopyFailed, CopyJob, copy_governed
from proxy.governed.masks import MaskUnsupported
from proxy.governed.spark_copies import copy_on_spark
from tests.support.governed_copies import job, row_file, table

pytestmark = pytest.mark.spark


def jobs(tmp_path: Path, folder: str) -> list[CopyJob]:
    rt = table(tmp_path / "t")
    target = str(rt.data_files()[0][0].file_path)
    positions = row_file(rt.write_positions("pos", [(target, 2)], scoped=target), 2)
    out = tmp_path / folder
    return [
        job(rt, str(out / "a.parquet"), row_filter=EqualTo("region", "EU"),
            masks=((3, "show-last-4", None), (2, "sha-256", None))),
        job(rt, str(out / "b.parquet"), deletes=(positions,), keep=(1, 4)),
        job(rt, str(out / "c.parquet"), row_filter=EqualTo("region", "MARS")),
        job(rt, str(out / "d.parquet"), masks=((5, "truncate-to-month", None),)),
    ]


def rows(copied: CopiedFile) -> pa.Table:
    return pq.read_table(copied.path)


def test_spark_copies_equal_in_process_copies(spark: Any, tmp_path: Path) -> None:
    here = [copy_governed(j) for j in jobs(tmp_path / "local", "governed")]
    there = copy_on_spark(jobs(tmp_path / "spark", "governed"), "local[2]")
    assert [c.path.rsplit("/", 1)[-1] for c in there] == ["a.parquet", "b.parquet", "",
                                                         "d.parquet"]
    for local, remote in zip(here, there, strict=True):
        assert dataclasses.replace(remote, path=local.path) == local
        if local.path:
            assert rows(remote).equals(rows(local))
            assert pq.read_schema(remote.path).equals(pq.read_schema(local.path),
                                                      check_metadata=True)
    assert there[1].record_count == 5 and there[2] == CopiedFile("", 0, 0)


def test_failures_keep_their_kind_across_spark(spark: Any, tmp_path: Path) -> None:
    good, *_ = jobs(tmp_path, "governed")
    with pytest.raises(CopyFailed, match="budget"):
        copy_on_spark([good, dataclasses.replace(good, out_path=good.out_path + "2",
                                                 max_bytes=10)], "local[2]")
    with pytest.raises(MaskUnsupported):
        copy_on_spark([dataclasses.replace(good, masks=((1, "show-first-4", None),))],
                      "local[2]")
    assert copy_on_spark([], "local[2]") == []
