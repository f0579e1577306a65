"""Governed copies as a PySpark job, for builds too big for the proxy's own threads.

``copy_on_spark`` runs ``copies.copy_governed`` for every job on Spark executors and answers
in the jobs' order. Each executor reads the base files and writes the governed ones itself, so
executors need:

* icegov (the ``proxy`` package) and its dependencies (pyiceberg, pyarrow, pyroaring)
  importable by the Python that Spark starts for workers (``PYSPARK_PYTHON``);
* access to the storage of the base table and of the governed root: the jobs carry the
  table's FileIO properties (``CopyJob.io_properties``), so an executor uses the same
  credentials as the proxy; those properties travel in the task closures, within the cluster.

Failures keep their kind across the wire: an executor answers a failure as a value, and the
driver raises it as ``CopyFailed`` or ``MaskUnsupported`` with the executor's message (ours,
never file content). A Spark job that fails as a whole is ``CopyFailed``. pyspark is an
optional dependency, imported only here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from proxy.governed.copies import CopiedFile, CopyFailed, CopyJob, copy_governed
from proxy.governed.masks import MaskUnsupported

_APP_NAME = "icegov-governed-copies"
_MASK, _COPY = "mask", "copy"
_Outcome = CopiedFile | tuple[str, str]


def copy_on_spark(jobs: Sequence[CopyJob], master: str) -> list[CopiedFile]:
    """``copy_governed`` of every job, run on Spark (the active session, or one built on
    ``master``); the results in the jobs' order."""
    if not jobs:
        return []
    context = _spark_context(master)
    slices = max(1, min(len(jobs), int(context.defaultParallelism)))
    try:
        outcomes: list[_Outcome] = context.parallelize(list(jobs), slices).map(
            _outcome).collect()
    except Exception as exc:  # the Spark job itself failed (executors lost, serialisation)
        raise CopyFailed("the governed copies could not be run on Spark") from exc
    if len(outcomes) != len(jobs):
        raise CopyFailed("Spark answered for fewer governed copies than were asked")
    return [_result(outcome) for outcome in outcomes]


def _spark_context(master: str) -> Any:
    try:
        from pyspark.sql import SparkSession
    except ImportError as exc:
        raise CopyFailed("governed builds above spark_above_bytes need pyspark, which is not "
                         "installed; install it or raise spark_above_bytes") from exc
    session = SparkSession.getActiveSession()
    if session is None:
        session = SparkSession.builder.master(master).appName(_APP_NAME).getOrCreate()
    return session.sparkContext


def _outcome(job: CopyJob) -> _Outcome:
    """On an executor: the copy, or its failure as a (kind, message) value."""
    try:
        return copy_governed(job)
    except MaskUnsupported as refused:
        return (_MASK, str(refused))
    except CopyFailed as failed:
        return (_COPY, str(failed))
    except Exception:  # copy_governed reports its own failures; anything else stays opaque
        return (_COPY, f"governed copy of {job.data.path} failed on a Spark executor")


def _result(outcome: _Outcome) -> CopiedFile:
    if isinstance(outcome, CopiedFile):
        return outcome
    kind, message = outcome
    if kind == _MASK:
        raise MaskUnsupported(message)
    raise CopyFailed(message)
