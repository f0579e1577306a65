"""One table's part of a commit as the committer sends it (``Pending``), and the signal that
a try's outcome is unknown (``Unknown``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from proxy.admission.admission import ClassifiedChange
from proxy.backing.tables import TableState, parse_table_state
from proxy.commits.snapshots import added_snapshots
from proxy.commits.written import discard
from proxy.committer.heads import key_of
from proxy.committer.queue import TableKey
from proxy.committer.rebuild import Rebuilder
from proxy.errors import IcebergError


@dataclass
class Pending:
    """One table's part of the commit as it will be sent next."""

    change: ClassifiedChange
    body: dict[str, Any]
    base: TableState | None
    rebuilder: Rebuilder | None
    tries: int = 0
    rebased: int = 0
    refused: bool = False  # the last try was refused outright: nothing of it landed
    file_io: Mapping[str, str] = field(default_factory=dict)  # ``Settings.file_io``
    sent: dict[int, set[str]] = field(default_factory=dict)  # ``reconcile.SentLists``
    plain: dict[str, Any] | None = None  # judged on a known head: the body with the usual pins
    key: TableKey = field(init=False)

    def __post_init__(self) -> None:
        self.key = key_of(self.change.resource)

    def note_sent(self) -> None:
        """Remember the manifest list of each snapshot ``body`` adds, as about to be sent: a
        snapshot found later with its id is this commit's only with one of these."""
        for snapshot in added_snapshots(self.body):
            self.sent.setdefault(snapshot.snapshot_id, set()).add(snapshot.manifest_list)

    @property
    def on_head(self) -> bool:
        """Is ``body`` still pinned to the known head it was judged on (``committer.heads``)?"""
        return self.plain is not None

    def off_head(self) -> None:
        """Go on as if judged on a fresh load: the usual pins only (a rebuild re-verifies)."""
        if self.plain is not None:
            self.body, self.plain = self.plain, None

    @property
    def built(self) -> bool:
        """Is ``body`` icegov's own build (its files icegov's to remove)?"""
        return self.rebased > 0 or self.change.operation is not None

    def discard(self) -> None:
        """Remove icegov's files of ``body``, which did not land."""
        if self.built and self.base is not None:
            discard(self.body, self.base.io)

    def state_from(self, content: bytes) -> TableState:
        """The table's state in a LoadTable/CommitTable answer, read through the FileIO the
        change was judged with (never one the answer's config would choose)."""
        state = parse_table_state(self.change.resource, content, self.file_io)
        return state if self.base is None else replace(state, io=self.base.io)

    def report(self, **extra: Any) -> None:
        """What the audit record shows of how this change landed."""
        self.change.report.update(tries=self.tries, rebased=self.rebased > 0, **extra)


class Unknown(Exception):
    """The backing's answer does not say whether the commit landed."""

    def __init__(self, error: IcebergError) -> None:
        super().__init__(error.message)
        self.error = error
