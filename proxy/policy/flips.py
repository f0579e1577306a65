"""Which logged decisions a policy change would flip (``icegov policy diff --audit``).

Each (action, resource) decision of each record is decided by the old and the new policy
(``RuleIndex.decide``); it flips when the two disagree. Only a record whose caller acts, in either
policy, as a subject of a changed line can flip, so a line is parsed only when its caller or a
role of the caller is one of those names. The caller is read from the line's bytes first: the
last ``"principal":`` and ``"roles":[`` are the record's own (keys are sorted, and the only
objects after them, the ``rules`` entries, hold neither key); a value with an escape in it
sends the line to the full parse. Decisions are remembered per (principal, roles, action,
resource), so a million records cost far fewer decisions.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from proxy.audit.query import needle
from proxy.governance import Action
from proxy.policy.loader import CompiledPolicy
from proxy.policy.patterns import PatternError, parse_resource_text


@dataclass(frozen=True)
class Flip:
    """A logged decision the new policy decides the other way."""

    request_id: str
    time: str
    principal: str
    action: str
    resource: str
    logged: bool  # what the record says was decided
    now: bool  # what the new policy decides


def names_touching(touched: frozenset[str], *policies: CompiledPolicy) -> frozenset[str]:
    """Every name whose subjects (in some policy) include a touched subject."""
    found = set(touched)
    for policy in policies:
        for member in {g.member for g in policy.parsed.grants}:
            if not policy.index.subjects(member).isdisjoint(touched):
                found.add(member)
    return frozenset(found)


def flips(old: CompiledPolicy, new: CompiledPolicy, touched: frozenset[str],
          lines: Iterable[bytes]) -> Iterator[Flip]:
    """Every logged decision in ``lines`` that ``old`` and ``new`` decide differently."""
    names = names_touching(touched, old, new)
    if not names:
        return
    wanted = frozenset(needle(n) for n in names)

    @functools.lru_cache(maxsize=1 << 16)
    def flipped(name: str, roles: tuple[str, ...], action: str, resource: str) -> bool | None:
        try:
            parts, act = parse_resource_text(resource), Action(action)
        except (PatternError, ValueError):
            return None
        was = _allows(old, name, roles, act, parts)
        now = _allows(new, name, roles, act, parts)
        return None if was == now else now

    for line in lines:
        if _may_touch(line, wanted):
            yield from _record_flips(line, names, flipped)


_PRINCIPAL, _ROLES = b'"principal":', b'"roles":['


def _may_touch(line: bytes, wanted: frozenset[bytes]) -> bool:
    """False only when the line's caller and roles, read from its bytes, are none of
    ``wanted`` (JSON string texts); anything unusual is True (parsed and checked)."""
    at, roles_at = line.rfind(_PRINCIPAL), line.rfind(_ROLES)
    if at < 0 or roles_at < 0:
        return True
    start = at + len(_PRINCIPAL)
    if line.startswith(b"null", start):
        return False
    end = line.find(b'"', start + 1) + 1
    roles_end = line.find(b"]", roles_at)
    principal, roles = line[start:end], line[roles_at + len(_ROLES):roles_end]
    if b"\\" in principal or b"\\" in roles or end <= start or roles_end < 0:
        return True
    if principal in wanted:
        return True
    pieces = roles.split(b",") if roles else []
    if any(len(p) < 2 or p[:1] != b'"' or p[-1:] != b'"' for p in pieces):
        return True  # a comma inside a role: read it properly
    return any(piece in wanted for piece in pieces)


Flipped = Callable[[str, tuple[str, ...], str, str], "bool | None"]


def _record_flips(line: bytes, names: frozenset[str], flipped: Flipped) -> Iterator[Flip]:
    try:
        record = json.loads(line)
    except ValueError:
        return
    if not isinstance(record, dict) or not isinstance(record.get("principal"), str):
        return
    name, roles = record["principal"], tuple(str(r) for r in record.get("roles") or ())
    if name not in names and names.isdisjoint(roles):
        return
    for entry in record.get("rules") or ():
        if not isinstance(entry, dict):
            continue
        now = flipped(name, roles, str(entry.get("action")), str(entry.get("resource")))
        if now is not None:
            yield Flip(str(record.get("request_id")), str(record.get("time")), name,
                       str(entry.get("action")), str(entry.get("resource")),
                       bool(entry.get("allowed")), now)


def _allows(policy: CompiledPolicy, name: str, roles: tuple[str, ...], action: Action,
            parts: tuple[str, ...]) -> bool:
    index = policy.index
    rule = index.decide(index.ruled(index.subjects(name, roles)), action, parts)
    return rule is not None and rule.allow
