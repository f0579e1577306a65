"""Policy loads as audit records: the policy files' digest at start-up and at every reload.

``PolicyAuthorizer.on_change`` calls a listener with a ``PolicyChange`` once at once (the policy
loaded at start-up: ``before`` is None) and again after every reload that put a new policy in
force. ``audited(audit)`` is such a listener: it writes one audit record per change, endpoint
``policy_loaded`` or ``policy_reloaded``, request id ``policy-<generation>``, whose evidence names
the digest before and after (SHA-256 over model.conf, a NUL byte and policy.csv, as loaded) and,
per file, its path, size, SHA-256, owner and modification time on disk: who changed it, as far
as the file system tells; and ``loaded``, the text of both files as loaded (``model_conf``,
``policy_csv``, digesting to ``digest_after``), which ``icegov policy why`` replays a later
decision against: the trail keeps every policy a decision in it was made under.
"""

from __future__ import annotations

import hashlib
import pwd
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from proxy.audit import AuditLog, AuditRecord
from proxy.policy.loader import PolicyFiles


@dataclass(frozen=True)
class PolicyChange:
    """A policy now in force: its generation, the digest before (None at start-up), and the
    files as loaded (their paths, text and digest: the digest after)."""

    generation: int
    before: str | None
    loaded: PolicyFiles

    @property
    def after(self) -> str:
        return self.loaded.digest

    @property
    def files(self) -> tuple[Path, Path]:
        return self.loaded.model_path, self.loaded.policy_path


PolicyListener = Callable[[PolicyChange], None]


def policy_record(change: PolicyChange) -> AuditRecord:
    """The audit record of one policy change."""
    endpoint = "policy_loaded" if change.before is None else "policy_reloaded"
    evidence: dict[str, Any] = {"policy": {
        "generation": change.generation, "digest_before": change.before,
        "digest_after": change.after, "files": [file_facts(p) for p in change.files],
        "loaded": {"model_conf": change.loaded.model_text,
                   "policy_csv": change.loaded.policy_text}}}
    return AuditRecord(request_id=f"policy-{change.generation}", method="INTERNAL",
                       path=str(change.files[-1]), endpoint=endpoint, decision="allow",
                       evidence=[evidence], status=200)


def file_facts(path: Path) -> dict[str, Any]:
    """What the file system says of a policy file now (an unreadable file says why)."""
    try:
        stat = path.stat()
        data = path.read_bytes()
    except OSError as exc:
        return {"path": str(path), "error": exc.strerror or type(exc).__name__}
    return {"path": str(path), "size": len(data), "sha256": hashlib.sha256(data).hexdigest(),
            "owner": _owner(stat.st_uid), "uid": stat.st_uid,
            "mtime": datetime.fromtimestamp(stat.st_mtime, UTC).isoformat(
                timespec="milliseconds")}


def _owner(uid: int) -> str | None:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:  # a uid with no name here
        return None


def audited(audit: AuditLog) -> PolicyListener:
    """A listener writing each policy change to ``audit``."""

    def write(change: PolicyChange) -> None:
        audit.write(policy_record(change))

    return write



