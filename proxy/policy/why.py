"""``icegov policy why``: replay a logged decision against a policy and trace its rules.

The record is found by its ``request_id`` (the last record with that id: a change's advance
record comes before its outcome). Every (action, resource) decision it logged is decided again
with ``proxy.policy.decisions.explain`` (what ``icegov policy explain`` prints), and compared with
what was logged: the allow/deny and the deciding line. A record that names the policy digest it
was decided under is checked against the digest of the files given; one that names none is said
to be replayed against the files given, whatever was in force then.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from proxy.audit.query import Query
from proxy.governance import Action, Principal
from proxy.policy.decisions import Explanation, explain
from proxy.policy.loader import CompiledPolicy
from proxy.policy.patterns import PatternError, resource_from_text
from proxy.resources import Resource

DIGEST_FIELDS = ("policy_digest",)
"""Top-level record fields that may carry the policy digest a decision was made under."""


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


def find_record(request_id: str, lines: Iterable[bytes]) -> dict[str, Any] | None:
    """The last record with ``request_id``."""
    found = None
    for record in Query(request_ids=(request_id,)).run(lines):
        found = record
    return found


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
    """Who the record says called (None: no principal, e.g. unauthenticated)."""
    name = record.get("principal")
    if not isinstance(name, str):
        return None
    return Principal(name, tuple(str(r) for r in record.get("roles") or ()))

