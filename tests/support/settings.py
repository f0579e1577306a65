"""Settings for tests: the repository's policies and principals, audit to a file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from proxy.audit import AuditSettings
from proxy.identity import IdentitySettings
from proxy.policy import PolicySettings
from proxy.settings import Settings
from tests.support.ocsf_watch import watch

REPO = Path(__file__).resolve().parents[2]
POLICIES = REPO / "policies"
TEST_SIGNING_KEY = "test-signing-key-that-is-long-enough-for-hs256!"
ADMIN = "admin:admin-secret"


def settings_for_tests(
    workdir: Path, *, anonymous_admin: bool = False, **overrides: Any
) -> Settings:
    """Settings using the demo principals and policy; audit lines go to ``workdir/audit.log``,
    and as OCSF events to ``workdir/audit.ocsf.jsonl``, each checked against its class's
    schema after the test (``tests.support.ocsf_watch``)."""
    identity: dict[str, Any] = {"principals_file": POLICIES / "principals.yaml",
                                "signing_key": TEST_SIGNING_KEY}
    if anonymous_admin:
        identity.update(anonymous_principal="tester", anonymous_roles=("admin",))
    identity.update(overrides.pop("identity", {}))
    policy = {"model_path": POLICIES / "model.conf", "policy_path": POLICIES / "policy.csv",
              **overrides.pop("policy", {})}
    if overrides.get("catalog_uri") and "governed" not in overrides:
        # a backing's default governed root is icegov's working directory: keep tests' own
        overrides["governed"] = {"root": (workdir / "_icegov_governed").as_uri()}
    return Settings(
        warehouse=overrides.pop("warehouse", workdir / "warehouse"),
        identity=IdentitySettings(**identity),
        policy=PolicySettings(**policy),
        audit=AuditSettings(stdout=False, file=workdir / "audit.log",
                            ocsf_file=watch(workdir / "audit.ocsf.jsonl")),
        **overrides,
    )
