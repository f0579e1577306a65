"""What a table commit needs (actions) and why (evidence): the shapes the policy and audit read."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from proxy.errors import BadRequest
from proxy.governance import Action


class UnverifiableCommit(BadRequest):
    """A commit whose effect cannot be established: unreadable manifests, unknown parent, bad shape.

    It is refused with 400: a commit icegov cannot verify is never waved through.
    """


@dataclass(frozen=True)
class FileCounts:
    """Content files and records a commit adds or removes, as the manifests show them."""

    added_data_files: int = 0
    removed_data_files: int = 0
    added_delete_files: int = 0
    removed_delete_files: int = 0
    added_records: int = 0
    deleted_records: int = 0

    def __add__(self, other: FileCounts) -> FileCounts:
        return FileCounts(*(a + b for a, b in zip(self._values(), other._values(), strict=True)))

    def _values(self) -> tuple[int, ...]:
        return (self.added_data_files, self.removed_data_files, self.added_delete_files,
                self.removed_delete_files, self.added_records, self.deleted_records)


@dataclass(frozen=True)
class CommitEvidence:
    """What the audit record shows about one table commit.

    ``operations`` are the snapshot summaries' claims (one per added snapshot, in order);
    ``classification`` is what the manifests show (``INSERT``, ``DELETE``, ``UPDATE``,
    ``REWRITE``, joined with ``+`` when a commit's snapshots differ; None without snapshots).
    ``verified`` is True when every added snapshot was read and its claims held; ``mismatch``
    says why not. ``unknown_actions`` are update actions icegov has no classifier for.
    ``row_checks`` describe each row-level check done where the manifests could not decide
    (removed delete files, copy-on-write rewrites), including why one could not be completed
    (byte budget exhausted, unreadable file): then the stricter classification stands.
    """

    operations: tuple[str, ...] = ()
    classification: str | None = None
    counts: FileCounts = field(default_factory=FileCounts)
    snapshot_ids: tuple[int, ...] = ()
    verified: bool = True
    mismatch: str | None = None
    unknown_actions: tuple[str, ...] = ()
    row_checks: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict for the audit log (counts flattened in)."""
        return {
            "operations": list(self.operations),
            "classification": self.classification,
            **{name: getattr(self.counts, name) for name in self.counts.__dataclass_fields__},
            "snapshot_ids": list(self.snapshot_ids),
            "verified": self.verified,
            "mismatch": self.mismatch,
            "unknown_actions": list(self.unknown_actions),
            "row_checks": list(self.row_checks),
        }


@dataclass(frozen=True)
class CommitIntent:
    """Every action a table commit needs, with the evidence for the audit record."""

    actions: frozenset[Action]
    evidence: CommitEvidence = field(default_factory=CommitEvidence)
    landed: Callable[[], None] = field(default=lambda: None, compare=False, repr=False)
    """Tell the verification's caches the commit landed exactly as classified (its new
    manifest lists are the table's now: ``ManifestReader.remember_verified``)."""
    dependency_stamps: Mapping[int, str] = field(default_factory=dict)
    """Per new snapshot whose added rows hold the table's column dependencies, the stamp its
    summary carries (``proxy.commits.dependencies.stamp_summaries``)."""

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict: sorted action names plus the evidence."""
        return {"actions": sorted(a.value for a in self.actions), **self.evidence.to_dict()}
