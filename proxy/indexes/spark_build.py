"""Index builds as a PySpark job, for backfills too big for icegov's own threads.

``build_on_spark`` runs ``build.build_file`` for every job on Spark executors, as
``proxy.governed.spark_copies`` runs governed copies: executors need icegov and its dependencies
importable by the Python Spark starts for workers (``PYSPARK_PYTHON``) and access to the table's
storage (the jobs carry icegov's FileIO properties). A job that fails on an executor comes back
as a failure value: that file stays unindexed. pyspark is an optional dependency, imported here
only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from proxy.indexes.build import BuildJob, BuiltFilter, IndexBuildFailed, build_file

_APP_NAME = "icegov-index-builds"


def build_on_spark(jobs: Sequence[BuildJob], master: str) -> list[list[BuiltFilter] | None]:
    """``build_file`` of every job on Spark (the active session, or one built on ``master``);
    per job its filters, or None when it failed."""
    if not jobs:
        return []
    context = _spark_context(master)
    slices = max(1, min(len(jobs), int(context.defaultParallelism)))
    try:
        outcomes: list[list[BuiltFilter] | None] = context.parallelize(
            list(jobs), slices).map(_outcome).collect()
    except Exception as exc:  # the Spark job itself failed (executors lost, serialisation)
        raise IndexBuildFailed("the index builds could not be run on Spark") from exc
    if len(outcomes) != len(jobs):
        raise IndexBuildFailed("Spark answered for fewer index builds than were asked")
    return outcomes


def _spark_context(master: str) -> Any:
    try:
        from pyspark.sql import SparkSession
    except ImportError as exc:
        raise IndexBuildFailed("index backfills above spark_above_bytes need pyspark") from exc
    session = SparkSession.getActiveSession()
    if session is None:
        session = SparkSession.builder.master(master).appName(_APP_NAME).getOrCreate()
    return session.sparkContext


def _outcome(job: BuildJob) -> list[BuiltFilter] | None:
    """On an executor: the job's filters, or None."""
    try:
        return build_file(job)
    except Exception:  # a file that cannot be indexed is left unindexed
        return None
