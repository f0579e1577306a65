"""An attacker's review of issue 9's audit v2, fail-closed audit, metrics and deploy defaults.

Each test states the behaviour icegov has: every attack here is refused today (the findings once
pinned as strict xfails were fixed and un-marked), so a regression fails its test.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
import yaml
from click.testing import CliRunner
from starlette.testclient import TestClient
from structlog.testing import capture_logs

from proxy.app import Backing, create_app
from proxy.audit import AuditSettings
from proxy.audit.chain import GENESIS, canonical, digest
from proxy.audit.files import rotated_files
from proxy.audit.log import is_mutating
from proxy.audit.verify import Broken, Intact, verify
from proxy.cli import main
from proxy.keys import PUBLISHED_KEYS
from proxy.planning.settings import PlanningSettings
from proxy.routes import ENDPOINTS
from tests.support.audit import AuditDisk, a_record, no_icegov_environment, written  # noqa: F401
from tests.support.errors import assert_error_model
from tests.support.settings import settings_for_tests
from tests.support.upstream import UPSTREAM, Upstream

ROOT = Path(__file__).resolve().parents[2]


pytestmark = pytest.mark.usefixtures("no_icegov_environment")  # no ICEGOV__* of the shell


def lines_of(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines(keepends=True)


def sealed(record: dict[str, Any], key: bytes | None = None) -> bytes:
    """``record`` sealed as a forger holding ``key`` (or none) would: hash recomputed."""
    body = {k: v for k, v in record.items() if k != "hash"}
    if key is not None:
        body["mac"] = "hmac-sha256"
    else:
        body.pop("mac", None)
    data = canonical(body)  # exactly as icegov writes a line: a forger would match it
    return data[:-1] + b',"hash":"' + digest(data, key).encode() + b'"}\n'


def rechained(lines: list[bytes], key: bytes | None = None, **changes: Any) -> list[bytes]:
    """Every record re-sealed from the chain's start, ``changes`` applied to each."""
    out, prev = [], GENESIS
    for line in lines:
        record = {**json.loads(line), **changes, "prev": prev}
        line = sealed(record, key)
        prev = json.loads(line)["hash"]
        out.append(line)
    return out


def is_broken(paths: list[Path], key: bytes | None = None) -> Broken:
    result = verify(paths, key)
    assert isinstance(result, Broken), result
    return result


# --------------------------------------------------------------- audit verify: findings


def test_a_record_with_a_duplicate_key_does_not_verify(tmp_path: Path) -> None:
    log = written(tmp_path / "audit.log", 3)
    lines = lines_of(log)
    lines[1] = b'{"decision":"deny","principal":"someone-else",' + lines[1][1:]
    log.write_bytes(b"".join(lines))
    assert json.loads(lines[1])["decision"] == "allow"  # what verify's parser sees
    problem = is_broken([log])
    assert problem.line == 2


def test_a_record_rewritten_in_another_json_form_does_not_verify(tmp_path: Path) -> None:
    log = written(tmp_path / "audit.log", 3)
    lines = lines_of(log)
    lines[1] = json.dumps(json.loads(lines[1]), indent=None).encode() + b"\n"  # ", " and ": "
    log.write_bytes(b"".join(lines))
    assert is_broken([log]).line == 2


def test_a_tail_cut_while_stopped_is_visible_after_the_restart(tmp_path: Path) -> None:
    log = written(tmp_path / "audit.log", 5)
    lines = lines_of(log)
    cut_at = json.loads(lines[2])
    log.write_bytes(b"".join(lines[:3]))  # records 4 and 5 removed, whole lines
    with capture_logs() as logs:
        written(log, 2)
    assert verify([log]) == Intact(5, 1, 1, 5)  # seq 4 and 5 are now other records
    # what would pin it: the start (or close) says where the chain stood, to a log kept elsewhere
    pinned = [e for e in logs if cut_at["hash"] in json.dumps(e, default=str)]
    assert pinned, logs


def test_an_hmac_chain_downgraded_to_sha256_is_not_reported_plain_ok(tmp_path: Path) -> None:
    log = written(tmp_path / "audit.log", 3, hmac_key="secret-audit-key")
    log.write_bytes(b"".join(rechained(lines_of(log), principal="mallory")))
    result = CliRunner().invoke(main, ["audit", "verify", str(log)])
    assert result.exit_code == 0
    assert re.search(r"sha-?256|unkeyed|no key|without a key", result.output, re.I), \
        result.output


# --------------------------------------------------------------- audit verify: refused


def test_a_forged_downgrade_fails_when_the_key_is_given(tmp_path: Path) -> None:
    log = written(tmp_path / "audit.log", 3, hmac_key="secret-audit-key")
    log.write_bytes(b"".join(rechained(lines_of(log), principal="mallory")))
    assert "not sealed with HMAC" in is_broken([log], b"secret-audit-key").what


def test_a_chain_resealed_under_a_guessed_key_fails(tmp_path: Path) -> None:
    log = written(tmp_path / "audit.log", 3, hmac_key="secret-audit-key")
    log.write_bytes(b"".join(rechained(lines_of(log), b"guess", principal="mallory")))
    problem = is_broken([log], b"secret-audit-key")
    assert problem.line == 1 and "another key" in problem.what


def rotated_set(tmp_path: Path) -> list[Path]:
    log = written(tmp_path / "audit.log", 16, rotate_bytes=1600)
    chain = [*rotated_files(log), log]
    assert len(chain) >= 4
    return chain


def test_two_rotated_files_swapped_are_named(tmp_path: Path) -> None:
    chain = rotated_set(tmp_path)
    first, second = chain[1].read_bytes(), chain[2].read_bytes()
    chain[1].write_bytes(second)
    chain[2].write_bytes(first)
    problem = is_broken(chain)
    assert problem.file == str(chain[1]) and problem.line == 1


def test_a_rotated_file_rechained_to_a_forged_genesis_is_named(tmp_path: Path) -> None:
    chain = rotated_set(tmp_path)
    chain[1].write_bytes(b"".join(rechained(lines_of(chain[1]))))  # seq kept, prev from zeros
    problem = is_broken(chain)
    assert problem.file == str(chain[1]) and problem.line == 1
    assert "does not link" in problem.what


def test_a_file_deleted_from_the_middle_of_a_rotation_set_is_named(tmp_path: Path) -> None:
    chain = rotated_set(tmp_path)
    chain[2].unlink()
    survivors = [p for p in chain if p.exists()]
    problem = is_broken(survivors)
    assert problem.file == str(chain[3]) and "deleted" in problem.what


@pytest.mark.parametrize("damage", [b"\xff\xfe not utf-8\n", b"\xef\xbb\xbf{}\n",
                                    b'{"a":' + b"1" * 200_000 + b"}\n", b"NaN\n", b"\n"])
def test_odd_lines_in_the_middle_are_named(tmp_path: Path, damage: bytes) -> None:
    log = written(tmp_path / "audit.log", 3)
    lines = lines_of(log)
    log.write_bytes(b"".join([*lines[:2], damage, lines[2]]))
    assert is_broken([log]).line == 3


def test_a_crash_mid_line_never_lets_the_next_record_chain_from_the_torn_one(
        tmp_path: Path) -> None:
    log = written(tmp_path / "audit.log", 3)
    last = lines_of(log)[-1]
    with log.open("ab") as handle:
        handle.write(last[: len(last) // 2])  # a torn copy whose seq would read 3 again
    written(log, 1)
    records = [json.loads(line) for line in lines_of(log) if line.startswith(b'{"') and
               line.rstrip().endswith(b"}")]
    assert [r["seq"] for r in records] == [1, 2, 3, 4]
    assert records[3]["prev"] == records[2]["hash"]
    assert is_broken([log]).line == 4  # the tear itself stays visible


def test_a_resumed_chain_does_not_trust_a_forged_last_line_silently(tmp_path: Path) -> None:
    log = written(tmp_path / "audit.log", 2)
    forged = {**json.loads(lines_of(log)[-1]), "seq": 10**9, "prev": "f" * 64}
    with log.open("ab") as handle:
        handle.write(sealed(forged))
    written(log, 1)
    assert is_broken([log]).line == 3  # the forged line, not the next one, is named


# --------------------------------------------------------------- fail closed


def fail_closed_client(tmp: Path, upstream: Upstream) -> TestClient:
    settings = settings_for_tests(tmp, anonymous_admin=True, catalog_uri=UPSTREAM)
    audit = AuditSettings(stdout=False, file=tmp / "audit.log", fail_closed=True)
    settings = settings.model_copy(update={"audit": audit})
    return TestClient(create_app(settings, Backing(httpx.MockTransport(upstream), UPSTREAM)),
                      raise_server_exceptions=False)


IDENT = {"namespace": ["db"], "name": "t"}
BODIES: dict[str, Any] = {
    "create_namespace": {"namespace": ["x"]},
    "update_namespace_properties": {"updates": {"k": "v"}},
    "create_table": {"name": "t2", "schema": {"type": "struct", "fields": []}},
    "register_table": {"name": "t2", "metadata-location": "file:///w/db/t/m.json"},
    "report_metrics": {"report-type": "scan-report"},
    "rename_table": {"source": IDENT, "destination": {"namespace": ["db"], "name": "t2"}},
    "create_view": {"name": "v2", "schema": {"type": "struct", "schema-id": 0, "fields": []},
                    "view-version": {"version-id": 1, "timestamp-ms": 0, "schema-id": 0,
                                     "representations": [{"type": "sql", "sql": "select 1",
                                                          "dialect": "spark"}],
                                     "default-namespace": ["db"]}},
    "register_view": {"name": "v2", "metadata-location": "file:///w/db/v/m.json"},
    "replace_view": {"updates": []},
    "rename_view": {"source": {"namespace": ["db"], "name": "v"},
                    "destination": {"namespace": ["db"], "name": "v2"}},
    "commit_table": {"requirements": [], "updates": []},
    "commit_transaction": {"table-changes": [{"identifier": IDENT, "requirements": [],
                                              "updates": []}]},
}
PARAMS = {"prefix": "cat", "namespace": "db", "table": "t", "view": "v", "plan-id": "p"}
MUTATING = [e for e in ENDPOINTS if is_mutating(e.method, e.name)]


def url_of(template: str) -> str:
    return re.sub(r"\{([\w-]+)\}", lambda m: PARAMS[m.group(1)], template)


def test_every_endpoint_that_can_change_the_catalog_counts_as_mutating() -> None:
    names = {e.name for e in MUTATING}
    assert names >= {"create_namespace", "drop_namespace", "update_namespace_properties",
                     "create_table", "register_table", "commit_table", "drop_table",
                     "rename_table", "commit_transaction", "create_view", "register_view",
                     "replace_view", "drop_view", "rename_view"}


@pytest.mark.parametrize("endpoint", MUTATING, ids=lambda e: e.name)
def test_fail_closed_refuses_every_mutating_endpoint_while_the_audit_is_down(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, endpoint: Any) -> None:
    disk = AuditDisk(monkeypatch)
    upstream = Upstream()
    with fail_closed_client(tmp_path, upstream) as client:
        disk.full = True
        assert client.get("/v1/namespaces/db").status_code == 200  # reads answer
        seen = len(upstream.seen)
        body = BODIES.get(endpoint.name)
        refused = client.request(endpoint.method, url_of(endpoint.template),
                                 json=body if body is not None else None)
        error = assert_error_model(refused, 503, "ServiceUnavailableException")
        assert error["message"] == "audit log unavailable"
        assert len(upstream.seen) == seen
        assert client.get("/v1/namespaces/db").status_code == 200


NO_EVIDENCE = [e for e in MUTATING if e.name not in ("commit_table", "commit_transaction")]


@pytest.mark.parametrize("endpoint", NO_EVIDENCE, ids=lambda e: e.name)
def test_fail_closed_a_sink_dying_at_the_advance_record_stops_every_change(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, endpoint: Any) -> None:
    disk = AuditDisk(monkeypatch)
    upstream = Upstream()
    with fail_closed_client(tmp_path, upstream) as client:
        assert client.get("/v1/namespaces/db").status_code == 200  # healthy
        seen = len(upstream.seen)
        disk.fail_next = 1  # the record written before the change is sent is lost
        body = BODIES.get(endpoint.name)
        answer = client.request(endpoint.method, url_of(endpoint.template),
                                json=body if body is not None else None)
        error = assert_error_model(answer, 503, "ServiceUnavailableException")
        assert error["message"] == "audit log unavailable"
        assert len(upstream.seen) == seen, [str(r.url) for r in upstream.seen[seen:]]


def test_fail_closed_refusals_carry_nothing_of_the_record_or_the_os_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    disk = AuditDisk(monkeypatch)
    with fail_closed_client(tmp_path, Upstream()) as client:
        disk.full = True
        client.get("/v1/namespaces/db")
        refused = client.post("/v1/namespaces", json={"namespace": ["x"]})
    text = refused.text
    assert refused.status_code == 503
    for leak in ("No space", "audit.log", str(tmp_path), "errno", "seq", "tester"):
        assert leak not in text


# --------------------------------------------------------------- metrics


def test_metrics_from_client_controlled_values_stay_bounded(tmp_path: Path) -> None:
    upstream = Upstream(lambda r: httpx.Response(int(r.headers.get("x-status", "200")),
                                                 json={"ok": True}))
    settings = settings_for_tests(tmp_path, anonymous_admin=True, catalog_uri=UPSTREAM)
    app = create_app(settings, Backing(httpx.MockTransport(upstream), UPSTREAM))
    with TestClient(app, raise_server_exceptions=False) as client:
        for n in range(60):
            headers = {"x-client-version": f"v{n}", "user-agent": f"ua{n}"}
            client.get(f"/v1/ns{n}/namespaces", headers=headers)
            client.get(f"/v1/namespaces/db{n}/tables/t{n}/nope", headers=headers)
            client.request("PATCH", f"/v1/namespaces/db{n}", headers=headers)
            client.get("/v1/namespaces/db", headers={**headers, "authorization": f"Bearer {n}"})
        text = client.get("/metrics").text
    series = [line for line in text.splitlines() if line.startswith("icegov_requests_total{")]
    assert len(series) <= 8, series
    for word in ("ns5", "db5", "t5", "ua5", "v5\"", "PATCH"):
        assert word not in text


# --------------------------------------------------------------- deploy


def compose_key_fallbacks() -> dict[str, str]:
    """Keys the compose quickstart would fall back to when the operator sets none."""
    env = yaml.safe_load((ROOT / "deploy/compose.yaml").read_text())["x-icegov-env"]
    fallbacks = {}
    for name, value in env.items():
        found = re.fullmatch(r"\$\{[A-Z_]+:-(.*)\}", str(value))
        if found and name.endswith("_KEY"):
            fallbacks[name] = found.group(1)
    return fallbacks


def test_the_quickstart_has_no_public_key_to_fall_back_to() -> None:
    assert compose_key_fallbacks() == {}


@pytest.mark.parametrize("key", sorted(PUBLISHED_KEYS))
def test_a_token_forged_with_a_once_published_quickstart_key_is_not_accepted(
        tmp_path: Path, key: str) -> None:
    try:
        settings = settings_for_tests(tmp_path, identity={"signing_key": key},
                                      catalog_uri=UPSTREAM)
        upstream = Upstream(lambda _: httpx.Response(200, json={"namespaces": [["secret"]]}))
        app = create_app(settings, Backing(httpx.MockTransport(upstream), UPSTREAM))
    except ValueError:
        return  # refused to start with a public key: the fix
    now = int(time.time())
    forged = jwt.encode({"sub": "admin", "roles": ["admin"], "iss": "icegov", "aud": "icegov",
                         "iat": now, "exp": now + 600}, key, algorithm="HS256")
    with TestClient(app, raise_server_exceptions=False) as client:
        answer = client.get("/v1/namespaces", headers={"authorization": f"Bearer {forged}"})
    assert answer.status_code == 401, answer.text


def test_the_secret_templates_placeholder_plan_task_key_is_refused() -> None:
    secret = yaml.safe_load((ROOT / "deploy/k8s/secret.yaml").read_text())
    with pytest.raises(ValueError):
        PlanningSettings(task_key=secret["stringData"]["plan-task-key"])
