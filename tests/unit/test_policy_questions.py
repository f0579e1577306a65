"""``icegov policy who-can / why / diff`` and ``icegov audit query`` on the demo policy, a
modified copy of it, and audit files a real app wrote."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from proxy.audit import AuditLog, AuditRecord, AuditSettings
from proxy.audit.files import rotated_files
from proxy.cli import main
from proxy.governance import Action, Decision, Principal
from proxy.policy import PolicyAuthorizer
from proxy.policy.changes import audited
from proxy.policy.loader import files_from_text, load
from proxy.policy.model import CANONICAL_MODEL
from proxy.policy.patterns import resource_from_text
from proxy.policy.settings import PolicySettings
from proxy.policy.why import audited_policy
from tests.support.audit import no_icegov_environment  # noqa: F401
from tests.support.settings import POLICIES
from tests.support.upstream import Upstream, client_for, icegov_token

pytestmark = pytest.mark.usefixtures("no_icegov_environment")

FILES = ["--model", str(POLICIES / "model.conf"), "--policy", str(POLICIES / "policy.csv")]
PRINCIPALS = ["--principals", str(POLICIES / "principals.yaml")]


def icegov(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def who_can(action: str, resource: str) -> Result:
    result = icegov("policy", "who-can", *FILES, *PRINCIPALS, action, resource)
    assert result.exit_code == 0, result.output
    return result


def blocks(output: str) -> dict[str, list[str]]:
    """who-can's output: each candidate's name and the lines under it."""
    found: dict[str, list[str]] = {}
    current = None
    for line in output.splitlines()[1:]:
        if line.startswith("  ") and not line.startswith("    "):
            current = line.split()[1]
            found[current] = []
        elif current is not None:
            found[current].append(line.strip())
    return found


# who-can

def test_who_can_delete_orders_is_the_deleter_and_the_admin() -> None:
    found = blocks(who_can("DELETE", "icegov.demo.orders").output)
    assert set(found) == {"admin", "deleter"}
    assert found["deleter"] == [
        f"allowed by: {POLICIES / 'policy.csv'}:38: p, deleter, icegov.demo.*, DELETE, allow"]


def test_who_can_select_orders_names_eu_analysts_row_filter() -> None:
    found = blocks(who_can("SELECT", "icegov.demo.orders").output)
    assert set(found) == {"admin", "analyst", "deleter", "writer", "eu-analyst", "demo-reader"}
    eu = found["eu-analyst"]
    assert "row filter: region = 'eu'" in eu
    assert any(line.endswith("p, eu-analyst, icegov.demo.orders, SELECT, filter:region = 'eu'")
               for line in eu)
    assert not any("row filter" in line for line in found["analyst"])


def test_who_can_select_customers_shows_the_analysts_column_deny_and_mask() -> None:
    found = blocks(who_can("SELECT", "icegov.demo.customers").output)
    restricted = [line for line in found["analyst"] if line.startswith("restricted:")]
    assert [line.split(": ", 2)[2] for line in restricted] == [
        "p, analyst, icegov.demo.customers.ssn, SELECT, deny",
        "p, analyst, icegov.demo.customers.email, SELECT, mask:show-last-4"]


def test_who_can_create_a_namespace_is_the_admin_alone() -> None:
    assert set(blocks(who_can("CREATE_NAMESPACE", "icegov").output)) == {"admin"}


def test_who_can_agrees_with_explain_for_every_demo_principal() -> None:
    from proxy.policy.decisions import decide
    from proxy.policy.loader import load
    from proxy.policy.whocan import candidates
    from proxy.policy.whocan import who_can as ask
    policy = load(POLICIES / "model.conf", POLICIES / "policy.csv")
    among = candidates(policy, {"analyst": ("analyst",), "writer": ("writer",),
                                "stranger": ()})
    for action in Action:
        for text in ("icegov", "icegov.demo", "icegov.demo.orders", "icegov.other.t"):
            resource = resource_from_text(text)
            allowed = {a.candidate.principal.name for a in ask(policy, action, resource, among)}
            expected = {c.principal.name for c in among
                        if decide(policy, c.principal, action, resource).allowed}
            assert allowed == expected, (action, text)


# diff

def modified_copy(tmp_path: Path) -> tuple[Path, Path]:
    old, new = tmp_path / "old", tmp_path / "new"
    for directory in (old, new):
        directory.mkdir()
        shutil.copy(POLICIES / "model.conf", directory)
    shutil.copy(POLICIES / "policy.csv", old)
    text = (POLICIES / "policy.csv").read_text()
    text = text.replace("p, deleter, icegov.demo.*, DELETE, allow",
                        "p, deleter, icegov.demo.orders, DELETE, allow")
    text += "p, writer, icegov.demo.customers, SELECT, deny\ng, analyst, auditor\n"
    text += "p, auditor, icegov.audit.*, READ, allow\n"
    (new / "policy.csv").write_text(text)
    return old, new


def test_diff_lists_the_grants_gained_and_lost(tmp_path: Path) -> None:
    old, new = modified_copy(tmp_path)
    result = icegov("policy", "diff", *PRINCIPALS, str(old), str(new))
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert "  - p, deleter, icegov.demo.*, DELETE, allow" in lines
    assert "  + g, analyst, auditor" in lines
    lost = lines[lines.index("grants lost: 3") + 1:]
    assert [line.split("  [")[0].strip() for line in lost] == [
        "principal deleter: DELETE on icegov.demo.*",
        "principal deleter: DELETE on icegov.demo.customers",
        "principal writer: SELECT on icegov.demo.customers"]
    gained = lines[lines.index("grants gained: 6") + 1:lines.index("grants lost: 3")]
    assert {line.split("  [")[0].strip() for line in gained} == {
        f"{who}: {action} on icegov.audit.*"
        for who in ("principal analyst", "role auditor")
        for action in ("DESCRIBE", "LIST", "SELECT")}


def test_diff_of_a_policy_with_itself_is_empty(tmp_path: Path) -> None:
    old, _ = modified_copy(tmp_path)
    result = icegov("policy", "diff", *PRINCIPALS, str(old), str(old))
    assert result.exit_code == 0
    assert "grants gained: 0" in result.output and "grants lost: 0" in result.output


def test_diff_with_an_audit_file_lists_the_decisions_that_flip(tmp_path: Path) -> None:
    old, new = modified_copy(tmp_path)
    log = tmp_path / "audit.log"
    audit = AuditLog(AuditSettings(stdout=False, file=log))
    audit.write(decided("r-1", "deleter", Action.DELETE, "icegov.demo.customers", True))
    audit.write(decided("r-2", "deleter", Action.DELETE, "icegov.demo.orders", True))
    audit.write(decided("r-3", "writer", Action.SELECT, "icegov.demo.orders", True))
    audit.write(decided("r-4", "writer", Action.SELECT, "icegov.demo.customers", True))
    audit.close()
    result = icegov("policy", "diff", *PRINCIPALS, str(old), str(new), "--audit", str(log))
    assert result.exit_code == 0, result.output
    flipped = result.output.split("logged decisions that flip: ")[1].splitlines()
    assert flipped[0] == "2"
    assert [line.strip().split(" ", 2)[2] for line in flipped[1:]] == [
        "deleter: DELETE on icegov.demo.customers: logged allow, now deny",
        "writer: SELECT on icegov.demo.customers: logged allow, now deny"]


def decided(request_id: str, who: str, action: Action, resource: str,
            allowed: bool) -> AuditRecord:
    target = resource_from_text(resource)
    return AuditRecord(request_id=request_id, method="GET", path="/v1/x", endpoint="load_table",
                       principal=Principal(who, (who,)), resources=(resource,),
                       decisions=(Decision(allowed, action, target, None),),
                       decision="allow" if allowed else "deny", status=200)


# why, on records a real app wrote

def app_audit(tmp_path: Path) -> Path:
    with client_for(Upstream(), tmp_path) as client:
        token = icegov_token(client, "writer:writer-secret")
        headers = {"authorization": f"Bearer {token}", "x-request-id": "why-allowed"}
        assert client.get("/v1/cat/namespaces/demo", headers=headers).status_code == 200
        headers["x-request-id"] = "why-denied"
        assert client.delete("/v1/cat/namespaces/demo", headers=headers).status_code == 403
    return tmp_path / "audit.log"


def request_line(log: Path, request_id: str) -> dict[str, Any]:
    return next(r for r in map(json.loads, log.read_text().splitlines())
                if r["request_id"] == request_id)


def test_why_replays_an_allowed_request_with_its_rule_trace(tmp_path: Path) -> None:
    log = app_audit(tmp_path)
    digest = load(POLICIES / "model.conf", POLICIES / "policy.csv").files.digest
    assert request_line(log, "why-allowed")["policy_digest"] == digest
    result = icegov("policy", "why", *FILES, "why-allowed", "--audit", str(log))
    assert result.exit_code == 0, result.output
    assert "by writer (roles: writer)" in result.output
    assert (f"replayed against the policy it was decided under: digest {digest[:12]}, "
            "generation 1") in result.output
    assert "logged ALLOW by p, demo-reader, icegov.demo, BROWSE, allow; replay agrees:" \
        in result.output
    assert "ALLOW DESCRIBE on icegov.demo" in result.output
    assert "acts as:    demo-reader, writer" in result.output


def test_why_replays_against_the_recorded_policy_not_the_files_as_they_are_now(
        tmp_path: Path) -> None:
    log = app_audit(tmp_path)
    changed = tmp_path / "changed.csv"  # the files given say otherwise: the trail's policy rules
    changed.write_text((POLICIES / "policy.csv").read_text()
                       + "p, writer, icegov.demo, DROP_NAMESPACE, allow\n")
    result = icegov("policy", "why", "--model", str(POLICIES / "model.conf"),
                    "--policy", str(changed), "why-denied", "--audit", str(log))
    assert result.exit_code == 0, result.output
    assert "logged DENY by default deny; replay agrees:" in result.output
    assert "replayed against the policy it was decided under" in result.output


def without_policy_records(log: Path, out: Path, **changes: Any) -> Path:
    """``log``'s request records only (a trail written without policy records), each changed."""
    kept = [{**r, **changes} for r in map(json.loads, log.read_text().splitlines())
            if not r["endpoint"].startswith("policy_")]
    out.write_text("".join(json.dumps(r) + "\n" for r in kept))
    return out


def test_why_flags_a_replay_that_differs_where_the_trail_holds_no_policy(
        tmp_path: Path) -> None:
    log = without_policy_records(app_audit(tmp_path), tmp_path / "old.log", policy_digest=None)
    changed = tmp_path / "changed.csv"
    changed.write_text((POLICIES / "policy.csv").read_text()
                       + "p, writer, icegov.demo, DROP_NAMESPACE, allow\n")
    differs = icegov("policy", "why", "--model", str(POLICIES / "model.conf"),
                     "--policy", str(changed), "why-denied", "--audit", str(log))
    assert differs.exit_code == 1
    assert "names no policy digest" in differs.output
    assert "replay DIFFERS" in differs.output
    assert "ALLOW DROP_NAMESPACE on icegov.demo" in differs.output


def test_why_checks_a_digest_the_record_carries(tmp_path: Path) -> None:
    forged = without_policy_records(app_audit(tmp_path), tmp_path / "forged.log",
                                    policy_digest="0" * 64)
    result = icegov("policy", "why", *FILES, "why-allowed", "--audit", str(forged))
    assert result.exit_code == 1
    assert "policy digest MISMATCH" in result.output


def test_a_policy_record_whose_text_was_altered_is_not_replayed_against(tmp_path: Path) -> None:
    """The trail's copy counts only if it digests to what its record claims: an edited copy
    (here: a rule granting the denied drop) is ignored, and the files given are checked."""
    log = app_audit(tmp_path)
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    loaded = lines[0]["evidence"][0]["policy"]["loaded"]
    loaded["policy_csv"] += "p, writer, icegov.demo, DROP_NAMESPACE, allow\n"
    edited = tmp_path / "edited.log"
    edited.write_text("".join(json.dumps(r) + "\n" for r in lines))
    result = icegov("policy", "why", *FILES, "why-denied", "--audit", str(edited))
    assert result.exit_code == 0, result.output
    assert "matches the record's" in result.output  # the files given, not the edited copy
    assert "replay agrees" in result.output


def test_why_follows_a_reload_each_decision_against_its_own_policy(tmp_path: Path) -> None:
    """Decisions before and after a reload each replay against the policy that made them,
    whatever the files say when why runs."""
    model, policy = tmp_path / "model.conf", tmp_path / "policy.csv"
    model.write_text(CANONICAL_MODEL)
    policy.write_text("p, writer, icegov.demo.*, INSERT, allow\n")
    log = tmp_path / "audit.log"
    audit = AuditLog(AuditSettings(stdout=False, file=log))
    authorizer = PolicyAuthorizer.from_settings(PolicySettings(model_path=model,
                                                               policy_path=policy))
    authorizer.on_change(audited(audit))
    writer, table = Principal("writer", ("writer",)), resource_from_text("icegov.demo.t")

    def logged(request_id: str) -> None:
        decision = authorizer.decide(writer, Action.DELETE, table)
        audit.write(AuditRecord(request_id=request_id, method="POST", path="/v1/x",
                                endpoint="commit_table", principal=writer,
                                resources=(str(table),), decisions=(decision,),
                                decision="allow" if decision.allowed else "deny", status=200))

    logged("before")
    policy.write_text("p, writer, icegov.demo.*, DELETE, allow\n")
    assert authorizer.reload_if_changed()
    logged("after")
    policy.write_text("")  # now nobody may: each replay still agrees with its record
    audit.close()
    files = ["--model", str(model), "--policy", str(policy)]
    before = icegov("policy", "why", *files, "before", "--audit", str(log))
    assert before.exit_code == 0, before.output
    assert "logged DENY by default deny; replay agrees" in before.output
    assert "generation 1" in before.output
    after = icegov("policy", "why", *files, "after", "--audit", str(log))
    assert after.exit_code == 0, after.output
    assert ("logged ALLOW by p, writer, icegov.demo.*, DELETE, allow; replay agrees"
            in after.output)
    assert "generation 2" in after.output


def test_why_of_an_unknown_request_is_an_input_error(tmp_path: Path) -> None:
    log = app_audit(tmp_path)
    result = icegov("policy", "why", *FILES, "no-such-request", "--audit", str(log))
    assert result.exit_code == 2


# audit query

def test_query_filters_by_principal_decision_and_table(tmp_path: Path) -> None:
    log = app_audit(tmp_path)
    denied = icegov("audit", "query", str(log), "--principal", "writer", "--decision", "deny")
    assert denied.exit_code == 0, denied.output
    records = [json.loads(line) for line in denied.output.splitlines()]
    assert [r["request_id"] for r in records] == ["why-denied"]
    by_table = icegov("audit", "query", str(log), "--table", "icegov.demo",
                      "--action", "DESCRIBE")
    assert [json.loads(line)["request_id"] for line in by_table.output.splitlines()] == [
        "why-allowed"]
    nobody = icegov("audit", "query", str(log), "--principal", "admin")
    assert nobody.exit_code == 0 and nobody.output == ""


def test_query_a_time_range_over_rotated_files_as_a_table(tmp_path: Path) -> None:
    log = tmp_path / "audit.log"
    audit = AuditLog(AuditSettings(stdout=False, file=log, rotate_bytes=1500))
    for n in range(12):
        audit.write(decided(f"q-{n}", "writer", Action.SELECT, "icegov.demo.orders", True))
    audit.close()
    assert len(rotated_files(log)) >= 2
    times = [json.loads(line)["time"] for path in [*rotated_files(log), log]
             for line in path.read_text().splitlines()]
    everything = icegov("audit", "query", str(log))
    ids = [json.loads(line)["request_id"] for line in everything.output.splitlines()]
    assert ids == [f"q-{n}" for n in range(12)]  # rotated siblings first, in chain order
    only_live = icegov("audit", "query", "--no-rotated", str(log))
    assert len(only_live.output.splitlines()) < 12
    table = icegov("audit", "query", str(log), "--format", "table", "--since", times[0],
                   "--until", "2999-01-01T00:00:00")
    rows = table.output.splitlines()
    assert rows[0].split("\t")[:3] == ["time", "request_id", "principal"]
    assert len(rows) == 13 and rows[1].split("\t")[1] == "q-0"
    after = icegov("audit", "query", str(log), "--since", "2999-01-01")
    assert after.exit_code == 0 and after.output == ""
    bad = icegov("audit", "query", str(log), "--since", "yesterday")
    assert bad.exit_code == 2


def test_query_skips_and_counts_a_torn_line(tmp_path: Path) -> None:
    log = tmp_path / "audit.log"
    log.write_text('{"request_id": "a", "principal": "writer"}\n{"request_id": "b", "princ\n')
    result = CliRunner().invoke(main, ["audit", "query", str(log)])
    assert [json.loads(line)["request_id"] for line in result.stdout.splitlines()] == ["a"]
    assert "skipped 1 line(s)" in result.stderr


def test_diff_audit_flips_through_a_changed_role_grant(tmp_path: Path) -> None:
    old, new = modified_copy(tmp_path)  # adds g, analyst, auditor (auditor reads icegov.audit)
    log = tmp_path / "audit.log"
    audit = AuditLog(AuditSettings(stdout=False, file=log))
    audit.write(decided("g-1", "analyst", Action.SELECT, "icegov.audit.events", False))
    audit.write(decided("g-2", "analyst", Action.SELECT, "icegov.demo.orders", True))
    audit.close()
    result = icegov("policy", "diff", *PRINCIPALS, str(old), str(new), "--audit", str(log))
    flipped = result.output.split("logged decisions that flip: ")[1].splitlines()
    assert [line.strip().split(" ", 1)[1] for line in flipped[1:]] == [
        "g-1 analyst: SELECT on icegov.audit.events: logged deny, now allow"]


def test_a_recorded_model_holding_a_nul_is_not_taken_from_the_trail() -> None:
    """The digest hashes model, NUL, policy: a policy holding a NUL has another split of the same
    bytes (part of it moved into the model) claiming the same digest, so a recorded model
    holding a NUL is never replayed against."""
    model, rules = CANONICAL_MODEL, "p, writer, icegov.demo.*, INSERT, allow\n#\0\n"
    digest = files_from_text(Path("m"), Path("p"), model, rules).digest

    def record(model_conf: str, policy_csv: str) -> dict[str, Any]:
        return {"endpoint": "policy_loaded", "time": "t", "evidence": [{"policy": {
            "generation": 1, "digest_after": digest, "files": [],
            "loaded": {"model_conf": model_conf, "policy_csv": policy_csv}}}]}

    assert audited_policy(record(model, rules)) is not None
    head, tail = rules.split("\0")
    assert files_from_text(Path("m"), Path("p"), model + "\0" + head, tail).digest == digest
    assert audited_policy(record(model + "\0" + head, tail)) is None


def test_a_request_id_a_client_reuses_shows_every_request_logged_under_it(
        tmp_path: Path) -> None:
    """X-Request-ID is the client's to choose: a later request reusing a victim's id does not
    hide the victim's decision from why — both are replayed, and the note says so."""
    with client_for(Upstream(), tmp_path) as client:
        writer = icegov_token(client, "writer:writer-secret")
        reader = icegov_token(client, "analyst:analyst-secret")
        same = {"x-request-id": "shared-id"}
        assert client.delete("/v1/cat/namespaces/demo", headers={
            **same, "authorization": f"Bearer {writer}"}).status_code == 403
        client.get("/v1/cat/namespaces/demo", headers={**same,
                                                       "authorization": f"Bearer {reader}"})
    result = icegov("policy", "why", *FILES, "shared-id", "--audit",
                    str(tmp_path / "audit.log"))
    assert result.exit_code == 0, result.output
    assert "2 different requests were logged with request id 'shared-id'" in result.output
    assert "DELETE /v1/cat/namespaces/demo by writer" in result.output
    assert "GET /v1/cat/namespaces/demo by analyst" in result.output
