"""Table commits classified by what they really do, verified against their manifests.

Public API::

    check_classification_complete()              # at start-up: every REST update action known
    intent = classify_commit(body, base, io)      # one table commit -> CommitIntent
    creates_table(body)                           # is this commit / table-changes entry a create?

``intent.actions`` is every right the commit needs; ``intent.evidence`` (``to_dict()``) is what
the audit record shows. A commit that cannot be verified raises ``UnverifiableCommit`` (400).

Modules: ``classify`` (orchestration, ref analysis), ``updates`` (one classifier per update
action, the dispatch table and the start-up check), ``snapshots`` (claimed snapshots, which state
each replaces), ``diff`` (what a snapshot changes, from manifests), ``rules`` (change -> action,
summary checks), ``manifests`` (reading), ``intent`` (result types).

Removed delete files: removing a delete file re-exposes the rows it deleted, so a snapshot that
does is an UPDATE, unless the removal provably exposes nothing (the delete file is expired,
orphaned by the removal of its one data file, or superseded by a new delete file for the same
data file with at least as many rows; see ``diff``) or it happens in a data-equivalent ``replace``
whose record counts show no row can become visible (see ``rules``).
"""

from proxy.commits.classify import classify_commit, creates_table
from proxy.commits.intent import CommitEvidence, CommitIntent, FileCounts, UnverifiableCommit
from proxy.commits.updates import (
    SPEC_TABLE_UPDATES,
    UPDATE_CLASSIFIERS,
    IncompleteClassification,
    check_classification_complete,
)

__all__ = [
    "SPEC_TABLE_UPDATES",
    "UPDATE_CLASSIFIERS",
    "CommitEvidence",
    "CommitIntent",
    "FileCounts",
    "IncompleteClassification",
    "UnverifiableCommit",
    "check_classification_complete",
    "classify_commit",
    "creates_table",
]
