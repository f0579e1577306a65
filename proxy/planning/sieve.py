"""Which data files a plan keeps, and which mechanism pruned each file it drops.

A ``Sieve`` asks, in order: the scan filter on the file's partition (``partitions``) and its
column metrics (``metrics``: empty files too), the filter inferred from column dependencies
for a file icegov verified them on (``dependencies``: ``proxy.planning.inferred``), the
principal's row filter (``row_filter``). The first that rules the file out is counted in a
``Tally``; a plan's tally (``Plan.pruned``) goes to its audit evidence and to the
``icegov_plan_files_pruned_total`` metric. Files of manifests pruned by their partition
summaries are counted too (from the manifest list's file counts): ``partitions`` for the scan
filter, ``row_filter`` for the row filter. Other mechanisms add their own key.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping

from pyiceberg.manifest import DataFile, ManifestFile

from proxy.planning.pruning import Pruner

PARTITIONS = "partitions"
METRICS = "metrics"
DEPENDENCIES = "dependencies"
ROW_FILTER = "row_filter"
INDEXES = "indexes"
MECHANISMS: tuple[str, ...] = (PARTITIONS, METRICS, DEPENDENCIES, ROW_FILTER, INDEXES)
"""Every mechanism a tally may name, in the order they are asked (bloom-filter indexes last:
``Planner``'s ``FileIndex``)."""

Tally = Counter[str]


class Sieve:
    """Decides per data file; thread-safe as its ``Pruner``s are."""

    def __init__(self, scan: Pruner, row: Pruner, dependencies: Pruner | None = None) -> None:
        self._scan = scan
        self._row = row
        self._dependencies = dependencies

    @property
    def infers(self) -> bool:
        """True when column dependencies may prune (some file must then say it may)."""
        return self._dependencies is not None

    def rejection(self, data_file: DataFile, dependable: bool = False) -> str | None:
        """The mechanism that prunes ``data_file`` (None: it is planned); ``dependable``: its
        rows were verified to hold the table's column dependencies."""
        reason = self._scan.rejection(data_file)
        if reason is not None:
            return reason
        if dependable and self._dependencies is not None \
                and self._dependencies.rejection(data_file) is not None:
            return DEPENDENCIES
        if not self._row.matches_all and self._row.rejection(data_file) is not None:
            return ROW_FILTER
        return None

    def manifest_rejection(self, manifest: ManifestFile) -> str | None:
        """The mechanism that prunes a whole data manifest by its partition summaries (one
        thread only: pyiceberg's manifest evaluator keeps state)."""
        if not self._scan.manifest_may_match(manifest):
            return PARTITIONS
        if not self._row.manifest_may_match(manifest):
            return ROW_FILTER
        return None


def manifest_files(manifest: ManifestFile) -> int:
    """How many live files a manifest holds, as its manifest list says (0 when it does not)."""
    return (manifest.added_files_count or 0) + (manifest.existing_files_count or 0)


def total(tallies: Iterable[Mapping[str, int]]) -> dict[str, int]:
    """Tallies summed, every mechanism named (zero when it pruned nothing)."""
    summed: Tally = Counter()
    for tally in tallies:
        summed.update(tally)
    return {key: summed.get(key, 0) for key in (*MECHANISMS, *sorted(set(summed) -
                                                                   set(MECHANISMS)))}
