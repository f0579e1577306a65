"""The policy files' digest at start-up and at every reload become audit records, written by a
real AuditLog, sealed into the chain and proven by the signed digests."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import httpx
import jsonschema
import pytest
from click.testing import CliRunner
from starlette.testclient import TestClient

from proxy.app import Backing, create_app
from proxy.audit import AuditLog, AuditSettings
from proxy.audit.schema import record_schema
from proxy.cli import main
from proxy.policy import PolicyAuthorizer
from proxy.policy.changes import audited
from proxy.policy.model import CANONICAL_MODEL
from proxy.policy.settings import PolicySettings
from tests.support.audit import no_icegov_environment  # noqa: F401
from tests.support.settings import settings_for_tests
from tests.support.upstream import UPSTREAM, Upstream

pytestmark = pytest.mark.usefixtures("no_icegov_environment")

FIRST = "p, writer, icegov.demo.*, INSERT, allow\n"
SECOND = FIRST + "p, writer, icegov.demo.*, DELETE, allow\n"


def test_start_up_and_each_reload_are_audited_with_before_and_after(tmp_path: Path) -> None:
    (tmp_path / "model.conf").write_text(CANONICAL_MODEL)
    policy = tmp_path / "policy.csv"
    policy.write_text(FIRST)
    keys = tmp_path / "k.pem", tmp_path / "k.pub"
    made = CliRunner().invoke(main, ["audit", "keygen", "--private", str(keys[0]),
                                     "--public", str(keys[1])])
    assert made.exit_code == 0, made.output
    log = tmp_path / "audit" / "audit.log"
    audit = AuditLog(AuditSettings(stdout=False, file=log, signing_key=keys[0]))
    authorizer = PolicyAuthorizer.from_settings(
        PolicySettings(model_path=tmp_path / "model.conf", policy_path=policy))
    authorizer.on_change(audited(audit))
    loaded = authorizer.status.digest
    policy.write_text(SECOND)
    os.utime(policy, (1_700_000_000, 1_700_000_000))
    assert authorizer.reload_if_changed()
    assert not authorizer.reload_if_changed()  # unchanged: no record
    audit.close()

    records = [json.loads(line) for line in log.read_text().splitlines()]
    for record in records:
        jsonschema.validate(record, record_schema())
    assert [r["endpoint"] for r in records] == ["policy_loaded", "policy_reloaded"]
    start, reload = (r["evidence"][0]["policy"] for r in records)
    assert start["digest_before"] is None and start["digest_after"] == loaded
    assert reload["digest_before"] == loaded
    assert reload["digest_after"] == authorizer.status.digest != loaded
    csv = reload["files"][1]
    assert csv["path"] == str(policy) and csv["size"] == len(SECOND)
    assert csv["sha256"] == hashlib.sha256(SECOND.encode()).hexdigest()
    assert csv["mtime"] == "2023-11-14T22:13:20.000+00:00"
    assert csv["uid"] == os.getuid() and "owner" in csv

    proven = CliRunner().invoke(main, ["audit", "verify", "--public-key", str(keys[1]),
                                       str(log)])
    assert proven.exit_code == 0, proven.output
    assert "proven up to seq 2" in proven.output


def test_the_app_audits_the_policy_at_start_up_by_default(tmp_path: Path) -> None:
    log = tmp_path / "audit.log"
    settings = settings_for_tests(tmp_path, anonymous_admin=True, catalog_uri=UPSTREAM)
    settings = settings.model_copy(update={"audit": AuditSettings(stdout=False, file=log)})
    app = create_app(settings, Backing(httpx.MockTransport(Upstream()), UPSTREAM))
    with TestClient(app):
        pass
    first = json.loads(log.read_text().splitlines()[0])
    assert first["endpoint"] == "policy_loaded"
    assert first["evidence"][0]["policy"]["digest_before"] is None
