"""``icegov policy why``: replay a logged decision against a policy and trace its rules.

The record is found by its ``request_id`` (the last record with that id: a change's advance
record comes before its outcome). Every (action, resource) decision it logged is decided again
with ``proxy.policy.decisions.explain`` (what ``icegov policy explain`` prints), and compared with
what was logged: the allow/deny and the deciding line.

Each decision is replayed against the policy it was made under: the record names that policy's
digest (``policy_digest``), and the trail holds the policy itself — every load and reload is a
policy record (``proxy.policy.changes``) keeping both files' text as loaded. ``PolicyTrail``
gathers those while the record is searched for (one pass over the files), and a policy is taken
from the trail only if its text digests to what the record claims. Where the trail holds no such
policy (a trail written without policy records, or rotated away), the files given are used and
checked against the digest: a mismatch is said, and fails the command. A record that names no
digest is said to be replayed against the files given, whatever was in force then. The trail is
not verified here: run ``icegov audit verify`` on it first.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from proxy.audit.query import Query
from proxy.governance import Action, Principal
from proxy.policy.decisions import Explanation, explain
from proxy.policy.loader import CompiledPolicy, PolicyFiles, files_from_text
from proxy.policy.patterns import PatternError, resource_from_text
from proxy.resources import Resource

DIGEST_FIELDS = ("policy_digest",)
"""Top-level record fields that may carry the policy digest a decision was made under."""

POLICY_ENDPOINTS = frozenset({"policy_loaded", "policy_reloaded"})
_POLICY_NEEDLE = b'"endpoint":"policy_'  # a record's own key: a quote inside a value is escaped


@dataclass(frozen=True)
class AuditedPolicy:
    """A policy as a policy record kept it: the files' text and where they were loaded from."""

    files: PolicyFiles
    time: str
    generation: int


class PolicyTrail:
    """The policies an audit trail recorded as loaded, by digest (``watch`` the lines)."""

    def __init__(self) -> None:
        self._found: dict[str, AuditedPolicy] = {}

    def watch(self, lines: Iterable[bytes]) -> Iterator[bytes]:
        """Pass ``lines`` on, keeping every policy record's policy on the way."""
        for line in lines:
            if _POLICY_NEEDLE in line:
                self._keep(line)
            yield line

    def get(self, digest: str) -> AuditedPolicy | None:
        """The policy the trail recorded with ``digest``, if any."""
        return self._found.get(digest)

    def _keep(self, line: bytes) -> None:
        try:
            record = json.loads(line)
        except (ValueError, RecursionError):
            return
        audited = audited_policy(record) if isinstance(record, dict) else None
        if audited is not None:
            self._found[audited.files.digest] = audited


def audited_policy(record: dict[str, Any]) -> AuditedPolicy | None:
    """The policy a policy record kept, when its text digests to the digest it claims."""
    if record.get("endpoint") not in POLICY_ENDPOINTS:
        return None
    for entry in record.get("evidence") or ():
        policy = entry.get("policy") if isinstance(entry, dict) else None
        if not isinstance(policy, dict) or not isinstance(loaded := policy.get("loaded"), dict):
            continue
        model, rules = loaded.get("model_conf"), loaded.get("policy_csv")
        if not (isinstance(model, str) and isinstance(rules, str)) or "\0" in model:
            continue  # a NUL in the model would let another split of the bytes claim the digest
        paths = [f.get("path") for f in policy.get("files") or () if isinstance(f, dict)]
        try:
            files = files_from_text(_recorded(paths, 0, "model.conf"),
                                    _recorded(paths, 1, "policy.csv"), model, rules)
        except UnicodeEncodeError:  # an unpaired surrogate: no UTF-8 file loads to that text
            continue
        if files.digest == policy.get("digest_after"):
            generation = policy.get("generation")
            return AuditedPolicy(files, str(record.get("time")),
                                 generation if type(generation) is int else 0)
    return None


@dataclass(frozen=True)
class Replay:
    """One logged decision, decided again."""

    logged: dict[str, Any]  # the record's rules entry: action, resource, allowed, rule
    resource: Resource
    explanation: Explanation

    @property
    def agrees(self) -> bool:
        """Same verdict and same deciding line as logged."""
        decision = self.explanation.decision
        return (decision.allowed == bool(self.logged.get("allowed"))
                and decision.rule == self.logged.get("rule"))


def _recorded(paths: list[Any], index: int, default: str) -> Path:
    path = paths[index] if index < len(paths) else None
    return Path(path) if isinstance(path, str) else Path(default)


def find_record(request_id: str, lines: Iterable[bytes]) -> dict[str, Any] | None:
    """The last record with ``request_id``."""
    found = find_requests(request_id, lines)
    return found[-1] if found else None


def find_requests(request_id: str, lines: Iterable[bytes]) -> list[dict[str, Any]]:
    """Every request logged with ``request_id``, each as its last record (a change's advance
    record comes before its outcome), in the order they were first logged. A client may choose
    its request id, so one id can name several requests: records of one request share caller,
    method, path and endpoint."""
    found: dict[tuple[Any, ...], dict[str, Any]] = {}
    for record in Query(request_ids=(request_id,)).run(lines):
        key = tuple(json.dumps(record.get(name), sort_keys=True)
                    for name in ("principal", "method", "path", "endpoint"))
        found[key] = record  # a dict keeps the first position, holds the last record
    return list(found.values())


def record_digest(record: dict[str, Any]) -> str | None:
    """The policy digest the record says it was decided under, if it says."""
    for name in DIGEST_FIELDS:
        value = record.get(name)
        if isinstance(value, str):
            return value
    policy = record.get("policy")
    if isinstance(policy, dict) and isinstance(policy.get("digest"), str):
        return str(policy["digest"])
    return None


def digest_note(record: dict[str, Any], policy: CompiledPolicy) -> tuple[bool, str]:
    """(usable, what to say) about the policy the record was decided under."""
    logged = record_digest(record)
    ours = policy.files.digest
    if logged is None:
        return True, (f"the record names no policy digest: replayed against the files given "
                      f"(digest {ours[:12]}), which may not be the policy in force then")
    if logged == ours:
        return True, f"policy digest {ours[:12]} matches the record's"
    return False, (f"policy digest MISMATCH: the record was decided under {logged[:12]}, "
                   f"the files given are {ours[:12]}")


def replay(record: dict[str, Any], policy: CompiledPolicy) -> list[Replay]:
    """Every decision the record logged, decided again by ``policy``."""
    principal = principal_of(record)
    if principal is None:
        return []
    replays = []
    for entry in record.get("rules") or ():
        if not isinstance(entry, dict):
            continue
        try:
            action = Action(str(entry.get("action")))
            resource = resource_from_text(str(entry.get("resource")))
        except (ValueError, PatternError):
            continue
        replays.append(Replay(entry, resource, explain(policy, principal, action, resource)))
    return replays


def principal_of(record: dict[str, Any]) -> Principal | None:
    """Who the record says called (None: no principal, e.g. unauthenticated, or roles that are
    not a list of names, which no record icegov writes holds)."""
    name, roles = record.get("principal"), record.get("roles") or []
    if not isinstance(name, str) or not isinstance(roles, list) or not all(
            isinstance(role, str) for role in roles):
        return None
    return Principal(name, tuple(roles))

