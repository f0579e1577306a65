"""Commits to one table queue inside a replica, so a replica never fights itself.

Each table has a slot while commits to it are queued or running: a lock taken in arrival order
(asyncio's lock is fair) and the newest state of the table the queue has seen — the answer to the
last commit that landed here, or the state reloaded after a conflict. The next commit in the queue
starts from that state (a pure append is rebased onto it before it is even sent) instead of
learning of it from a 409. The slot goes away with its last waiter, so nothing is kept for idle
tables and nothing stale outlives the queue. Across replicas the backing's compare-and-swap
decides. (What outlives the queue, briefly and pinned, is ``committer.heads``: the head a landed
commit left, for the gate to judge the table's next commit on.)
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field

from proxy.backing.tables import TableState

TableKey = tuple[str, tuple[str, ...], str]  # catalog, namespace, table


@dataclass
class TableSlot:
    """One table's place in the queue and the newest state seen of it."""

    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    users: int = 0
    _state: TableState | None = None
    _pending: Callable[[], TableState | None] | None = None

    def learn(self, state: TableState | None) -> None:
        """The table is now at ``state`` (None: no longer known)."""
        self._state, self._pending = state, None

    def learn_later(self, parse: Callable[[], TableState | None]) -> None:
        """The table's new state, parsed only if a later commit in the queue needs it."""
        self._state, self._pending = None, parse

    @property
    def state(self) -> TableState | None:
        if self._pending is not None:
            parse, self._pending = self._pending, None
            self._state = parse()
        return self._state

    @property
    def waited_on(self) -> bool:
        """Is another commit queued behind the one running?"""
        return self.users > 1


class TableQueue:
    """The slots of the tables being committed to in this replica."""

    def __init__(self) -> None:
        self._slots: dict[TableKey, TableSlot] = {}

    @contextlib.asynccontextmanager
    async def turn(self, keys: Sequence[TableKey]) -> AsyncIterator[dict[TableKey, TableSlot]]:
        """Wait for every table's turn (in one global order, so transactions never deadlock)."""
        ordered = sorted(set(keys))
        slots = {key: self._join(key) for key in ordered}
        taken: list[TableSlot] = []
        try:
            for key in ordered:
                await slots[key].lock.acquire()
                taken.append(slots[key])
            yield slots
        finally:
            for slot in taken:
                slot.lock.release()
            for key in ordered:
                self._leave(key)

    def _join(self, key: TableKey) -> TableSlot:
        slot = self._slots.setdefault(key, TableSlot())
        slot.users += 1
        return slot

    def _leave(self, key: TableKey) -> None:
        slot = self._slots[key]
        slot.users -= 1
        if slot.users == 0:
            del self._slots[key]

    def __len__(self) -> int:
        return len(self._slots)
