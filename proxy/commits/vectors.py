"""One deletion vector per data file.

Iceberg (format 3) allows a data file at most one live deletion vector, and the Java reader
refuses to read a table where one has two (``Can't index multiple DVs``): a snapshot that adds a
vector beside the one a data file already has, instead of replacing it, would break every Spark
read of the table — from a DELETE right. Such a snapshot is refused (400). Only snapshots that
add a live vector are checked; the delete manifests they keep are read for theirs.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from pyiceberg.manifest import ManifestContent, ManifestFile

from proxy.commits.confine import canonical_location, shown_path
from proxy.commits.intent import UnverifiableCommit
from proxy.commits.manifests import ContentFile, Entry, ManifestReader


def check_one_vector_per_file(reader: ManifestReader, kept: Iterable[ManifestFile],
                              fresh: Iterable[Entry]) -> None:
    """400 when the snapshot (its ``fresh`` entries and the manifests it ``kept``) leaves a
    data file with more than one live deletion vector, and one of them is listed fresh."""
    fresh_vectors = [e.file for e in fresh if e.live and _is_vector(e.file)]
    if not fresh_vectors:
        return
    live = Counter(_target(f) for f in fresh_vectors)
    for manifest in kept:
        if manifest.content == ManifestContent.DELETES:
            live.update(_target(e.file) for e in reader.entries(manifest)
                        if e.live and _is_vector(e.file))
    for vector in fresh_vectors:
        if live[_target(vector)] > 1:
            raise UnverifiableCommit(
                f"data file {shown_path(vector.referenced_data_file or '')} would have two "
                "deletion vectors: a new vector must replace the one it has")


def _is_vector(file: ContentFile) -> bool:
    return not file.is_data and file.offset is not None


def _target(file: ContentFile) -> str:
    return canonical_location(file.referenced_data_file or "")
