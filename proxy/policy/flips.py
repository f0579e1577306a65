"""Which logged decisions a policy change would flip (``icegov policy diff --audit``).

Each (action, resource) decision of each record is decided by the old and the new policy
(``RuleIndex.decide``); it flips when the two disagree. Only a record whose caller acts, in either
policy, as a subject of a changed line can flip, so a line is parsed only when its caller or a
role of the caller is one of those names. The caller is read from the line's bytes first: the
last ``"principal":`` and ``"roles":[`` are the record's own (keys are sorted, and the only
objects after them, the ``rules`` entries, hold neither key); a value with an escape in it
sends the line to the parse; the answer is kept per (caller, roles) text. Of a line that
passes only the caller and the rules are decoded, and a decision is made twice (old, new) only
when a changed rule can match it or the caller's roles changed; the whole record is decoded only
for a decision that flips. ``FlipFinder`` is this prepared once, for several streams or pieces
(``proxy.policy.diff_audit`` reads pieces of one stream in several processes)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from proxy.audit.query import needle
from proxy.governance import Action
from proxy.policy.index import RuleIndex
from proxy.policy.loader import CompiledPolicy
from proxy.policy.patterns import PatternError, parse_resource_text
from proxy.policy.rules import Rule


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
    return FlipFinder(old, new, touched).flips(lines)


class FlipFinder:
    """``flips`` prepared once (the names to look for, the judge and its caches), for reading
    several streams or pieces of one with the same two policies."""

    def __init__(self, old: CompiledPolicy, new: CompiledPolicy,
                 touched: frozenset[str]) -> None:
        self.names = names_touching(touched, old, new)
        self.wanted = frozenset(needle(n) for n in self.names)
        self.judge = _Judge(old, new)
        self.seen: dict[tuple[bytes, bytes], bool] = {}  # (principal, roles) texts: may touch

    def flips(self, lines: Iterable[bytes]) -> Iterator[Flip]:
        """Every logged decision in ``lines`` that the two policies decide differently."""
        if not self.names:
            return
        for line in lines:
            if _may_touch(line, self.wanted, self.seen):
                yield from _record_flips(line, self.names, self.judge)


class _Judge:
    """Decides one logged (caller, action, resource) under both policies, skipping the work
    when no changed rule can match it and the caller's roles did not change."""

    def __init__(self, old: CompiledPolicy, new: CompiledPolicy) -> None:
        self.old, self.new = old, new
        before, after = set(old.parsed.rules), set(new.parsed.rules)
        self.changed = RuleIndex(before ^ after, ())
        self.changed_subjects = frozenset(rule.subject for rule in before ^ after)
        self.callers: dict[tuple[str, tuple[str, ...]], _Caller] = {}
        self.resources: dict[str, tuple[str, ...] | None] = {}

    def caller(self, name: str, roles: tuple[str, ...]) -> _Caller:
        found = self.callers.get((name, roles))
        if found is None:
            old, new = self.old.index, self.new.index
            all_old, all_new = old.subjects(name, roles), new.subjects(name, roles)
            acting = all_old | all_new
            found = _Caller(old.ruled(all_old), new.ruled(all_new),
                            tuple(sorted(acting & self.changed_subjects)), all_old != all_new)
            self.callers[(name, roles)] = found
        return found

    def parts(self, resource: str) -> tuple[str, ...] | None:
        if resource not in self.resources:
            try:
                self.resources[resource] = parse_resource_text(resource)
            except PatternError:
                self.resources[resource] = None
        return self.resources[resource]

    def flipped(self, caller: _Caller, action: str, resource: str) -> bool | None:
        """The new verdict when it differs from the old one, else None."""
        if not caller.roles_changed and not caller.changing:
            return None  # no changed rule is the caller's, and its roles are the same
        parts, act = self.parts(resource), _ACTIONS.get(action)
        if parts is None or act is None:
            return None
        if not caller.roles_changed and next(
                self.changed.matching(caller.changing, act, parts), None) is None:
            return None
        was = _allows(self.old.index.decide(caller.old, act, parts))
        now = _allows(self.new.index.decide(caller.new, act, parts))
        return None if was == now else now


@dataclass(frozen=True)
class _Caller:
    old: tuple[str, ...]  # ruled subjects under the old policy
    new: tuple[str, ...]
    changing: tuple[str, ...]  # the subjects it acts as (either policy) with changed rules
    roles_changed: bool


_PRINCIPAL, _ROLES, _RULES = b'"principal":', b'"roles":[', b'"rules":'
_DECODER = json.JSONDecoder()
_SEEN_MAX = 100_000
_ACTIONS = {action.value: action for action in Action}


def _may_touch(line: bytes, wanted: frozenset[bytes],
               seen: dict[tuple[bytes, bytes], bool]) -> bool:
    """False only when the line's caller and roles, read from its bytes, are none of
    ``wanted`` (JSON string texts); anything unusual is True (parsed and checked). ``seen``
    keeps the answer for each (caller, roles) text pair met."""
    at, roles_at = line.rfind(_PRINCIPAL), line.rfind(_ROLES)
    if at < 0 or roles_at < 0:
        return True
    start = at + len(_PRINCIPAL)
    if line.startswith(b"null", start):
        return False
    end = line.find(b'"', start + 1) + 1
    roles_end = line.find(b"]", roles_at)
    if end <= start or roles_end < 0:
        return True
    key = line[start:end], line[roles_at + len(_ROLES):roles_end]
    found = seen.get(key)
    if found is None:
        if len(seen) >= _SEEN_MAX:
            seen.clear()  # a stream of ever new callers costs time, never unbounded memory
        found = seen[key] = _names_may_touch(*key, wanted)
    return found


def _names_may_touch(principal: bytes, roles: bytes, wanted: frozenset[bytes]) -> bool:
    if b"\\" in principal or b"\\" in roles:
        return True
    if principal in wanted:
        return True
    pieces = roles.split(b",") if roles else []
    if any(len(p) < 2 or p[:1] != b'"' or p[-1:] != b'"' for p in pieces):
        return True  # a comma inside a role: read it properly
    return any(piece in wanted for piece in pieces)


def _record_flips(line: bytes, names: frozenset[str], judge: _Judge) -> Iterator[Flip]:
    """The flips of one record; only its caller and rules are decoded unless one flips."""
    try:
        text = line.decode("utf-8")
        record = _caller_and_rules(text)
    except (ValueError, RecursionError):  # RecursionError: nested deeper than Python parses
        return
    if record is None:
        return
    name, roles, rules = record
    if name not in names and names.isdisjoint(roles):
        return
    caller = judge.caller(name, roles)
    for entry in rules:
        if not isinstance(entry, dict):
            continue
        action, resource = str(entry.get("action")), str(entry.get("resource"))
        now = judge.flipped(caller, action, resource)
        if now is not None:
            whole = _whole(text)
            if whole is None:
                return  # no record after all: its flips are none
            yield Flip(str(whole.get("request_id")), str(whole.get("time")), name, action,
                       resource, bool(entry.get("allowed")), now)


def _whole(text: str) -> dict[str, Any] | None:
    """The whole record, or None when the line is no JSON object Python can parse."""
    try:
        record = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return record if isinstance(record, dict) else None


def _caller_and_rules(text: str) -> tuple[str, tuple[str, ...], list[Any]] | None:
    """The record's principal, roles and rules (the last of each key: see the module)."""
    found = []
    for key in ('"principal":', '"roles":', '"rules":'):
        at = text.rfind(key)
        if at < 0:
            return None
        found.append(_DECODER.raw_decode(text, at + len(key))[0])
    name, roles, rules = found
    if not isinstance(name, str) or not isinstance(roles, list) or not isinstance(rules, list) \
            or not all(isinstance(role, str) for role in roles):
        return None  # no record icegov writes: its roles are a list of names
    return name, tuple(roles), rules


def _allows(rule: Rule | None) -> bool:
    return rule is not None and rule.allow
