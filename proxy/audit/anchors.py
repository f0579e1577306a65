"""Anchors: records known from outside the audit files, which the chain must hold.

A hash chain alone cannot show that its tail was cut (the remaining records still link) or that a
forger without the HMAC key re-sealed everything from some point on. A ``seq:hash`` pair kept
elsewhere - the ``audit.resumed`` / ``audit.closed`` lines of the operational log, or a
``last record`` line of an earlier ``icegov audit verify`` - pins the chain: the record with that
seq must be present and carry exactly that hash, and with ``expect_last`` the chain must end at
it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from proxy.audit.chain import Link

_ANCHOR = re.compile(r"([1-9][0-9]{0,18}):([0-9a-fA-F]{64})")


def parse_anchor(text: str) -> Link:
    """``SEQ:HASH`` as a link; raises ``ValueError`` when it is not one."""
    match = _ANCHOR.fullmatch(text.strip())
    if match is None:
        raise ValueError("expected SEQ:HASH (a positive seq and a 64-digit hex hash)")
    return Link(int(match.group(1)), match.group(2).lower())


class Anchors:
    """The anchors of one verification, matched as the records go by."""

    def __init__(self, anchors: Sequence[Link], expect_last: Link | None) -> None:
        self._expect_last = expect_last
        wanted = [*anchors, *([expect_last] if expect_last else [])]
        self._pending: dict[int, set[str]] = {}
        for anchor in wanted:
            self._pending.setdefault(anchor.seq, set()).add(anchor.hash)
        self.matched = 0

    def check(self, seq: int, sealed: str) -> str | None:
        """What is wrong with the record ``seq`` sealed as ``sealed``, if an anchor names it."""
        hashes = self._pending.pop(seq, None)
        if hashes is None:
            return None
        wrong = sorted(h for h in hashes if h != sealed)
        if wrong:
            return (f"does not match the anchor {seq}:{wrong[0]}: the chain was rewritten at or "
                    "before this record")
        self.matched += len(hashes)
        return None

    def at_end(self, first: int | None, last: Link | None) -> str | None:
        """What is wrong once every record was read: anchors never reached, or another end."""
        end = last.seq if last else 0
        if self._pending:
            seq = min(self._pending)
            if seq > end:
                return (f"the chain ends at seq {end} but the anchor seq {seq} comes after it: "
                        "records were cut from the tail")
            return (f"the anchor seq {seq} lies before these files (they start at seq {first}): "
                    "give the earlier files too")
        expected = self._expect_last
        if expected is not None and last is not None and last.seq > expected.seq:
            return (f"the chain goes on after the expected last record seq {expected.seq} "
                    f"(to seq {last.seq})")
        return None
