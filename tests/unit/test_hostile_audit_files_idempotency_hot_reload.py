"""Attacker's review, round 4b (unit): the audit verifier against hostile files, idempotency,
policy hot reload.

Every attack here is met today (refused or made harmless) and keeps a passing test, so a regression
shows (the findings once pinned as strict xfails were fixed and un-marked)."""

from __future__ import annotations

import hashlib
import json
import os
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pyarrow as pa
import pytest
from click.testing import CliRunner, Result
from pydantic import SecretStr
from pyiceberg.catalog.sql import SqlCatalog
from starlette.testclient import TestClient

from proxy.app import Backing, create_app
from proxy.audit import AuditSettings
from proxy.audit.files import rotated_files
from proxy.audit.verify import Broken, Intact, verify
from proxy.catalog import create_catalog_app, store
from proxy.catalog.holdings import Held, LiveHoldings
from proxy.catalog.purge import purge_table
from proxy.cli import main
from proxy.errors import BadRequest
from proxy.governance import Action, Principal
from proxy.policy import PolicyAuthorizer, PolicySettings
from proxy.policy.model import CANONICAL_MODEL
from proxy.resources import Resource
from tests.support.audit import no_icegov_environment, written  # noqa: F401
from tests.support.errors import assert_error_model
from tests.support.http import wait_for
from tests.support.settings import POLICIES, settings_for_tests
from tests.support.upstream import UPSTREAM, Upstream, client_for, icegov_token
from tests.unit.test_embedded_views import SCHEMA, create_body
from tests.unit.test_page_tokens_view_guard_keys_verify import view_answer
from tests.unit.test_pipeline import ALTER, loaded_table, table_backing

pytestmark = pytest.mark.usefixtures("no_icegov_environment")

WRITER = Principal("w", ("writer",))
RESOURCE = Resource("icegov", ("demo",), "t")
ALLOW_INSERT = "p, writer, icegov.demo.*, INSERT, allow\n"
ALLOW_DELETE = "p, writer, icegov.demo.*, DELETE, allow\n"


def icegov(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def audit_lines(tmp_path: Path, count: int = 3, **settings: str) -> list[bytes]:
    return written(tmp_path / "audit.log", count, **settings).read_bytes().splitlines(True)


def tampered(tmp_path: Path, data: bytes) -> Path:
    path = tmp_path / "tampered.log"
    path.write_bytes(data)
    return path


def assert_named_not_crashed(result: Result, line: int) -> None:
    """Exit 1 naming the bad record; never a traceback (an exception escaping the command)."""
    assert result.exception is None or isinstance(result.exception, SystemExit), \
        repr(result.exception)
    assert result.exit_code == 1, result.output
    assert f"tampered.log:{line}:" in result.output


# 1. icegov audit verify: hostile bytes must be named, never crash the tool

def test_a_non_ascii_hash_is_named_as_edited(tmp_path: Path) -> None:
    """Was a traceback (hmac.compare_digest on non-ASCII text); fixed in 2bdd21b."""
    lines = audit_lines(tmp_path)
    record = json.loads(lines[1])
    record["hash"] = "\u00e9" * 64
    data = lines[0] + json.dumps(record).encode() + b"\n" + lines[2]
    assert_named_not_crashed(icegov("audit", "verify", str(tampered(tmp_path, data))), 2)


@pytest.mark.parametrize("where", ["middle", "last"])
def test_a_deeply_nested_line_is_named_as_damaged(tmp_path: Path, where: str) -> None:
    """Was a traceback (RecursionError escaping json.loads); fixed in 2bdd21b."""
    lines = audit_lines(tmp_path)
    deep = b"[" * 200_000 + b"\n"
    data = (lines[0] + deep + lines[2]) if where == "middle" else (lines[0] + lines[1] + deep)
    assert_named_not_crashed(icegov("audit", "verify", str(tampered(tmp_path, data))), 2 if
                             where == "middle" else 3)


@pytest.mark.parametrize("name,edit,line", [
    ("non-UTF-8 bytes", lambda ls: ls[0] + b"\xff\xfe{}\n" + ls[2], 2),
    ("a NUL line", lambda ls: ls[0] + b"\x00\n" + ls[2], 2),
    ("CRLF line ends", lambda ls: b"".join(x[:-1] + b"\r\n" for x in ls), 1),
    ("a UTF-8 byte order mark", lambda ls: b"\xef\xbb\xbf" + b"".join(ls), 1),
    ("a repeated key", lambda ls: ls[0] + ls[1].replace(b"{", b'{"seq":99,', 1) + ls[2], 2),
    ("a repeated key, last wins", lambda ls: ls[0] + ls[1][:-2] + b',"seq":2}\n' + ls[2], 2),
    ("a blank line", lambda ls: ls[0] + b"\n" + ls[1] + ls[2], 2),
])
def test_hostile_bytes_are_named_not_crashed(tmp_path: Path, name: str, edit: object,
                                            line: int) -> None:
    assert callable(edit)
    data = edit(audit_lines(tmp_path))
    assert_named_not_crashed(icegov("audit", "verify", str(tampered(tmp_path, data))), line)


def test_a_repeated_key_cannot_make_two_records_share_a_hash(tmp_path: Path) -> None:
    """``{"seq":1,"seq":2}``: whatever value a parser keeps, the line is not icegov's form."""
    lines = audit_lines(tmp_path)
    record = json.loads(lines[1])
    body = {k: v for k, v in record.items() if k != "hash"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"))
    doubled = text.replace('"seq":2', '"seq":7,"seq":2')
    sealed = hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":"))
                            .encode()).hexdigest()
    forged = doubled[:-1].encode() + f',"hash":"{sealed}"}}\n'.encode()
    result = verify([tampered(tmp_path, lines[0] + forged + lines[2])])
    assert isinstance(result, Broken) and result.line == 2 and "byte for byte" in result.what


def test_a_long_single_line_is_named_not_exhausting(tmp_path: Path) -> None:
    lines = audit_lines(tmp_path)
    data = lines[0] + b'{"x":"' + b"a" * 16_000_000 + b'"}\n' + lines[2]
    result = verify([tampered(tmp_path, data)])
    assert isinstance(result, Broken) and result.line == 2


def test_files_in_the_wrong_order_duplicated_or_of_two_streams_are_named(tmp_path: Path) -> None:
    first = written(tmp_path / "a.log", 3)
    other = written(tmp_path / "b.log", 2)
    for paths in ([first, first], [first, other]):
        result = verify(paths)
        assert isinstance(result, Broken) and (result.line, result.seq) == (1, 1), result
        assert "repeated, inserted or reordered" in result.what


def test_a_forged_record_with_a_recomputed_hash_fails_under_a_key(tmp_path: Path) -> None:
    """Without a key a careful forger's re-sealed chain verifies (documented); with the key, the
    same forgery is named at the forged record."""
    lines = audit_lines(tmp_path, 3, hmac_key="k-secret")
    record = json.loads(lines[1])
    record["principal"] = "someone-else"
    record.pop("hash")
    body = json.dumps(record, sort_keys=True, separators=(",", ":"))
    forged = body[:-1] + f',"hash":"{hashlib.sha256(body.encode()).hexdigest()}"}}\n'
    result = verify([tampered(tmp_path, lines[0] + forged.encode() + lines[2])], b"k-secret")
    assert isinstance(result, Broken) and (result.line, result.seq) == (2, 2)


def test_a_tail_cut_at_a_line_boundary_passes_alone_and_fails_with_the_last_anchor(
        tmp_path: Path) -> None:
    """Documented limit: removing the last record is only found with an anchor past the cut."""
    lines = audit_lines(tmp_path)
    last = json.loads(lines[2])
    cut = tampered(tmp_path, b"".join(lines[:2]))
    assert isinstance(verify([cut]), Intact)
    result = icegov("audit", "verify", "--expect-last", f"3:{last['hash']}", str(cut))
    assert result.exit_code == 1 and "cut from the tail" in result.output


# 3. Policy hot reload: hostile replacements of the policy file

def policy_settings(tmp_path: Path) -> PolicySettings:
    (tmp_path / "model.conf").write_text(CANONICAL_MODEL)
    (tmp_path / "policy.csv").write_text(ALLOW_INSERT)
    return PolicySettings(model_path=tmp_path / "model.conf",
                          policy_path=tmp_path / "policy.csv", reload_interval_seconds=0.01)


def replaced(path: Path, by: Callable[[Path], None]) -> None:
    path.unlink()
    by(path)


def still_the_last_good_policy(auth: PolicyAuthorizer) -> None:
    assert auth.decide(WRITER, Action.INSERT, RESOURCE).allowed
    assert not auth.decide(WRITER, Action.DELETE, RESOURCE).allowed
    assert auth.status.generation == 1 and auth.status.last_error is not None
    assert auth.reload_failures == 1


@pytest.mark.parametrize("swap", [
    pytest.param(lambda p: p.mkdir(), id="a directory"),
    pytest.param(lambda p: p.symlink_to(p.parent / "nowhere.csv"), id="a dangling symlink"),
    pytest.param(lambda p: p.symlink_to(p.parent), id="a symlink to a directory"),
    pytest.param(lambda p: p.symlink_to(p), id="a symlink loop"),
    pytest.param(lambda p: p.symlink_to("/dev/zero"), id="a symlink to an endless device"),
])
def test_a_policy_file_swapped_for_a_non_file_keeps_the_last_good_policy(
        tmp_path: Path, swap: Callable[[Path], None]) -> None:
    settings = policy_settings(tmp_path)
    auth = PolicyAuthorizer.from_settings(settings)
    replaced(settings.policy_path, swap)
    assert not auth.reload_if_changed()
    assert not auth.reload_if_changed()  # counted once
    still_the_last_good_policy(auth)


def test_a_symlink_swapped_to_an_invalid_file_keeps_the_last_good_policy(tmp_path: Path) -> None:
    settings = policy_settings(tmp_path)
    auth = PolicyAuthorizer.from_settings(settings)
    (tmp_path / "other.csv").write_text(ALLOW_DELETE + "p, writer, icegov.*, ALL, allow\n")
    replaced(settings.policy_path, lambda p: p.symlink_to(tmp_path / "other.csv"))
    assert not auth.reload_if_changed()
    still_the_last_good_policy(auth)


def test_a_policy_file_swapped_for_a_fifo_does_not_hang_the_reload(tmp_path: Path) -> None:
    """Was a hang (a blocking open of the FIFO, holding the reload lock); fixed in 7881e0e."""
    settings = policy_settings(tmp_path)
    auth = PolicyAuthorizer.from_settings(settings)
    replaced(settings.policy_path, lambda p: os.mkfifo(p))
    worker = threading.Thread(target=auth.reload_if_changed, daemon=True)
    worker.start()
    worker.join(timeout=3)
    hung = worker.is_alive()
    if hung:  # unblock the reader so the thread ends: open the write end and close it
        os.close(os.open(settings.policy_path, os.O_WRONLY))
        worker.join(timeout=3)
    assert not hung
    still_the_last_good_policy(auth)


# 5. Purge: the files a live table reads, not only the roots it declares

def purge_catalog(tmp_path: Path) -> SqlCatalog:
    catalog = store.open_catalog(f"sqlite:///{tmp_path / 'catalog.db'}", tmp_path / "warehouse")
    catalog.create_namespace("demo")
    return catalog


def test_purge_keeps_data_files_a_live_table_still_reads(tmp_path: Path) -> None:
    catalog = purge_catalog(tmp_path)
    rows = pa.table({"id": pa.array([1, 2, 3], pa.int64())})
    dropped = catalog.create_table(("demo", "dropped"), schema=rows.schema)
    dropped.append(rows)
    data = [task.file.file_path for task in catalog.load_table(("demo", "dropped"))
            .scan().plan_files()]
    reader = catalog.create_table(("demo", "reader"), schema=rows.schema)
    reader.add_files(data)
    assert catalog.load_table(("demo", "reader")).scan().to_arrow().num_rows == 3

    purge_table(catalog, ("demo", "dropped"))

    assert all(Path(p.removeprefix("file://")).exists() for p in data)
    assert catalog.load_table(("demo", "reader")).scan().to_arrow().num_rows == 3


# 4. Views: registering a view answers its whole definition

def test_registering_a_view_does_not_answer_a_definition_load_view_refuses(
        tmp_path: Path) -> None:
    """Was relayed unchecked (register-view not refused like register-table); fixed in
    942a4b4."""
    view = view_answer("SELECT id, ssn FROM demo.customers", ["id", "x"])
    upstream = Upstream(lambda _: httpx.Response(200, json=view))
    policy = tmp_path / "policy.csv"
    policy.write_text((POLICIES / "policy.csv").read_text()
                      + "\np, analyst, icegov.demo.*, REGISTER_TABLE, allow\n")
    with client_for(upstream, tmp_path, policy={"policy_path": policy}) as client:
        analyst = {"authorization": f"Bearer {icegov_token(client, 'analyst:analyst-secret')}"}
        assert client.get("/v1/cat/namespaces/demo/views/v", headers=analyst).status_code == 403
        register = {"name": "copy", "metadata-location": "file:///w/demo/v/metadata/v1.json"}
        registered = client.post("/v1/cat/namespaces/demo/register-view", headers=analyst,
                                 json=register)
        assert_error_model(registered, 403)
        assert "ssn" not in registered.text
        assert not [r for r in upstream.seen if r.url.path.endswith("/register-view")]
        # the positive control: an unrestricted principal's register reaches the backing and
        # its answer holds the definition
        shown = client.post("/v1/cat/namespaces/demo/register-view", json=register)
    assert shown.status_code == 200, shown.text
    assert "ssn" in shown.text


# 2. Idempotency: a replay after the principal's rights were revoked

DEMO_TABLE = "/v1/cat/namespaces/demo/tables/t"


def keyed_world(tmp_path: Path, extra: str) -> tuple[TestClient, Path]:
    policy = tmp_path / "policy.csv"
    policy.write_text((POLICIES / "policy.csv").read_text() + "\n" + extra)
    upstream = table_backing(tmp_path, httpx.Response(200, json=loaded_table(tmp_path)))
    client = client_for(upstream, tmp_path, policy={"policy_path": policy,
                                                    "reload_interval_seconds": 0.01},
                        idempotency={"db_uri": f"sqlite:///{tmp_path / 'keys.db'}"})
    return client, policy


def revoke_and_retry(tmp_path: Path, who: str, grant: str) -> httpx.Response:
    client, policy = keyed_world(tmp_path, grant)
    key = {"Idempotency-Key": str(uuid.uuid4())}
    with client:
        caller = {"authorization": f"Bearer {icegov_token(client, f'{who}:{who}-secret')}"}
        first = client.post(DEMO_TABLE, json=ALTER, headers={**caller, **key})
        assert first.status_code == 200, first.text
        with policy.open("a") as rules:
            rules.write(f"p, {who}, icegov.demo.t, ALTER, deny\n")
        wait_for(lambda: client.post(DEMO_TABLE, json=ALTER, headers=caller).status_code == 403,
                 what="the policy reload")
        again: httpx.Response = client.post(DEMO_TABLE, json=ALTER, headers={**caller, **key})
    return again


def test_a_principal_left_without_any_commit_right_gets_no_replay(tmp_path: Path) -> None:
    again = revoke_and_retry(tmp_path, "analyst", "p, analyst, icegov.demo.t, ALTER, allow\n")
    assert_error_model(again, 403)
    assert "idempotent-replayed" not in again.headers


def test_a_principal_whose_right_for_that_commit_was_revoked_gets_no_replay(
        tmp_path: Path) -> None:
    again = revoke_and_retry(tmp_path, "writer", "p, writer, icegov.demo.t, ALTER, allow\n")
    assert again.status_code == 403, (again.status_code, dict(again.headers))


# 1b. Audit files written by the app itself: rotation, HMAC, dropped files, the documented glob

def app_audit(tmp_path: Path, requests: int = 12) -> Path:
    """``requests`` requests through icegov with a keyed, rotating audit; the live file's path."""
    log = tmp_path / "audit.log"
    audit = AuditSettings(stdout=False, file=log, rotate_bytes=2_000, hmac_key=SecretStr(KEY))
    upstream = Upstream(lambda _: httpx.Response(200, json={"namespace": ["db"]}))
    settings = settings_for_tests(tmp_path, anonymous_admin=True, catalog_uri=UPSTREAM)
    app = create_app(settings.model_copy(update={"audit": audit}),
                     Backing(httpx.MockTransport(upstream), UPSTREAM))
    with TestClient(app, raise_server_exceptions=False) as client:
        for n in range(requests):
            client.post("/v1/cat/namespaces", json={"namespace": [f"n{n}"]})
    return log


KEY = "r4b-audit-key"


def shell_glob(log: Path) -> list[Path]:
    """What ``icegov audit verify audit.log.[0-9]* audit.log`` passes, as proxy/audit/README.md
    says to run it."""
    return [*sorted(log.parent.glob(f"{log.name}.[0-9]*")), log]


def test_an_app_written_rotated_keyed_stream_verifies_and_names_a_dropped_file(
        tmp_path: Path) -> None:
    log = app_audit(tmp_path)
    rotated = rotated_files(log)
    assert len(rotated) >= 3
    assert isinstance(verify([*rotated, log], KEY.encode()), Intact)
    for dropped in (rotated[1], rotated[-1]):  # one from the middle, the newest rotated one
        files = [p for p in [*rotated, log] if p != dropped]
        result = verify(files, KEY.encode())
        assert isinstance(result, Broken) and "missing" in result.what, result
    swapped = verify([rotated[1], rotated[0], *rotated[2:], log], KEY.encode())
    assert isinstance(swapped, Broken)


def test_the_documented_glob_verifies_an_app_written_stream(tmp_path: Path) -> None:
    log = app_audit(tmp_path)
    result = icegov("audit", "verify", "--key", KEY, *map(str, shell_glob(log)))
    assert result.exit_code == 0, result.output


def test_the_documented_glob_verifies_a_stream_with_a_legacy_file_set_aside(
        tmp_path: Path) -> None:
    (tmp_path / "audit.log").write_text('{"event": "audit", "request_id": "old"}\n')
    log = app_audit(tmp_path)
    assert list(tmp_path.glob("audit.log.legacy-*"))
    result = icegov("audit", "verify", "--key", KEY, *map(str, shell_glob(log)))
    assert result.exit_code == 0, result.output


def test_verifying_a_writer_with_no_records_among_others_is_not_ok(tmp_path: Path) -> None:
    shared = tmp_path / "captured-stdout.log"
    for worker in ("w0", "w1"):
        log = written(tmp_path / f"{worker}.log", 3, writer=worker)
        with shared.open("ab") as out:
            out.write(log.read_bytes())
    assert isinstance(verify([shared], writer="w1"), Intact)
    result = icegov("audit", "verify", "--writer", "w9", str(shared))
    assert result.exit_code != 0, result.output


def test_purging_a_table_whose_metadata_names_a_live_views_file_under_it_keeps_the_view(
        tmp_path: Path) -> None:
    """A live view placed under the dropped table's location, whose current metadata file the
    dropped table's (registered, crafted) metadata log names: the purge keeps it."""
    catalog = purge_catalog(tmp_path)
    home = tmp_path / "warehouse" / "demo" / "home"
    with TestClient(create_catalog_app(catalog, 1 << 20)) as http:
        view = http.post("/v1/namespaces/demo/views", json={
            **create_body("v", sql="SELECT 1 AS id"), "location": (home / "v").as_uri()})
        assert view.status_code == 200, view.text
        view_file = view.json()["metadata-location"]
        table = http.post("/v1/namespaces/demo/tables", json={"name": "t", "schema": SCHEMA})
        crafted = table.json()["metadata"]
        crafted["location"] = home.as_uri()
        crafted["metadata-log"] = [{"metadata-file": view_file, "timestamp-ms": 0}]
        own = home / "metadata" / "00000-crafted.metadata.json"
        own.parent.mkdir(parents=True)
        own.write_text(json.dumps(crafted))
        registered = http.post("/v1/namespaces/demo/register", json={
            "name": "home", "metadata-location": own.as_uri()})
        assert registered.status_code == 200, registered.text
        dropped = http.delete("/v1/namespaces/demo/tables/home",
                              params={"purgeRequested": "true"})
        assert dropped.status_code == 204, dropped.text
        assert Path(view_file.removeprefix("file://")).exists()
        assert http.get("/v1/namespaces/demo/views/v").status_code == 200
    assert not own.exists()  # the dropped table's own file went


# 4b. Views: a rename that sheds a deny on the view's name

RENAMER_POLICY = """\
p, admin, *, *, allow
p, analyst, icegov, BROWSE, allow
p, analyst, icegov.demo, BROWSE, allow
p, analyst, icegov.demo.*, READ, allow
p, analyst, icegov.demo.*, RENAME_TABLE, allow
p, analyst, icegov.demo.*, CREATE_TABLE, allow
p, analyst, icegov.demo.secret, SELECT, deny
"""


@pytest.fixture()
def renamer(tmp_path: Path) -> Iterator[tuple[TestClient, dict[str, str], dict[str, str]]]:
    """icegov on its embedded catalog; an analyst that may rename and create in ``demo`` and
    read all of it but ``demo.secret``; ``demo`` exists."""
    policy = tmp_path / "policy.csv"
    policy.write_text(RENAMER_POLICY)
    app = create_app(settings_for_tests(tmp_path, policy={"policy_path": policy}))
    with TestClient(app, raise_server_exceptions=False) as client:
        admin = {"authorization": f"Bearer {icegov_token(client)}"}
        analyst = {"authorization":
                   f"Bearer {icegov_token(client, 'analyst:analyst-secret')}"}
        client.post("/v1/namespaces", json={"namespace": ["demo"]}, headers=admin)
        yield client, admin, analyst


def renamed(client: TestClient, kind: str, who: dict[str, str]) -> httpx.Response:
    answer: httpx.Response = client.post(f"/v1/{kind}/rename", headers=who, json={
        "source": {"namespace": ["demo"], "name": "secret"},
        "destination": {"namespace": ["demo"], "name": "open"}})
    return answer


def test_renaming_a_denied_table_to_an_allowed_name_is_refused(
        renamer: tuple[TestClient, dict[str, str], dict[str, str]]) -> None:
    client, admin, analyst = renamer
    created = client.post("/v1/namespaces/demo/tables", headers=admin,
                          json={"name": "secret", "schema": SCHEMA})
    assert created.status_code == 200, created.text
    assert client.get("/v1/namespaces/demo/tables/secret", headers=analyst).status_code == 403
    assert_error_model(renamed(client, "tables", analyst), 403)
    assert client.get("/v1/namespaces/demo/tables/open", headers=analyst).status_code == 404


def test_renaming_a_denied_view_to_an_allowed_name_is_refused(
        renamer: tuple[TestClient, dict[str, str], dict[str, str]]) -> None:
    client, admin, analyst = renamer
    created = client.post("/v1/namespaces/demo/views", headers=admin,
                          json=create_body("secret", sql="SELECT salary FROM hr.payroll"))
    assert created.status_code == 200, created.text
    assert client.get("/v1/namespaces/demo/views/secret", headers=analyst).status_code == 403
    assert_error_model(renamed(client, "views", analyst), 403)
    assert client.get("/v1/namespaces/demo/views/secret", headers=admin).status_code == 200
    assert client.get("/v1/namespaces/demo/views/open", headers=admin).status_code == 404


@pytest.mark.parametrize("value", [
    b"0190a5b4-7c2e-7d1a-9b3c-4d5e6f708192" + "\u00e9".encode(),
    "\uff10190a5b4-7c2e-7d1a-9b3c-4d5e6f708192".encode(),  # a fullwidth digit first
    b"0190a5b4-7c2e-7d1a-9b3c-4d5e6f708192" * 300,
    b"\xff" * 36,
])
def test_long_and_non_ascii_keys_are_400_and_never_forwarded(tmp_path: Path,
                                                             value: bytes) -> None:
    upstream = Upstream()
    client = client_for(upstream, tmp_path,
                        idempotency={"db_uri": f"sqlite:///{tmp_path / 'keys.db'}"})
    with client:
        answer = client.post("/v1/cat/namespaces", json={"namespace": ["db"]},
                             headers={"Idempotency-Key": value})
    assert_error_model(answer, 400, "BadRequestException")
    assert upstream.seen == []


def purge_racing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, look: int,
                 race: Callable[[SqlCatalog, str], None]) -> SqlCatalog:
    """Purge ``demo.t`` (three rows), running ``race(catalog, its metadata file)`` as the purge
    takes its ``look``-th look at what the live tables hold (1: while writes go on; 2: alone
    under the adoption lock)."""
    catalog = purge_catalog(tmp_path)
    rows = pa.table({"id": pa.array([1, 2, 3], pa.int64())})
    catalog.create_table(("demo", "t"), schema=rows.schema).append(rows)
    current = catalog.load_table(("demo", "t")).metadata_location
    learn = LiveHoldings.learn
    looks = [0]

    def racing(self: LiveHoldings) -> Held | None:
        looks[0] += 1
        if looks[0] == look:
            race(catalog, current)
        return learn(self)
    monkeypatch.setattr(LiveHoldings, "learn", racing)
    purge_table(catalog, ("demo", "t"))
    assert looks[0] == 2
    return catalog


def undrop(catalog: SqlCatalog, location: str) -> None:
    store.register_table(catalog, ("demo", "undropped"), location, False)


def test_a_table_registered_while_a_purge_learns_keeps_its_files(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An undrop that lands after the purge's first look is seen by its last one."""
    catalog = purge_racing(tmp_path, monkeypatch, 1, undrop)
    assert catalog.load_table(("demo", "undropped")).scan().to_arrow().num_rows == 3


def test_a_table_registered_while_a_purge_deletes_never_lands_on_deleted_files(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An undrop racing the purge's last look and deletes waits for the purge, then finds its
    metadata file gone and is refused: no table is left naming deleted files."""
    outcome: list[BaseException | None] = []
    racers: list[threading.Thread] = []

    def undrop_aside(catalog: SqlCatalog, location: str) -> None:
        def run() -> None:
            try:
                undrop(catalog, location)
                outcome.append(None)
            except BaseException as exc:  # the outcome is what is asserted
                outcome.append(exc)
        racers.append(threading.Thread(target=run))
        racers[0].start()

    catalog = purge_racing(tmp_path, monkeypatch, 2, undrop_aside)
    racers[0].join(timeout=60)
    assert not racers[0].is_alive()
    [refused] = outcome
    assert isinstance(refused, BadRequest), refused
    assert not catalog.table_exists(("demo", "undropped"))


def test_a_table_registered_before_a_purge_keeps_its_files(tmp_path: Path) -> None:
    catalog = purge_catalog(tmp_path)
    rows = pa.table({"id": pa.array([1, 2, 3], pa.int64())})
    dropped = catalog.create_table(("demo", "t"), schema=rows.schema)
    dropped.append(rows)
    store.register_table(catalog, ("demo", "undropped"),
                         catalog.load_table(("demo", "t")).metadata_location, False)
    purge_table(catalog, ("demo", "t"))
    assert catalog.load_table(("demo", "undropped")).scan().to_arrow().num_rows == 3


def test_vended_credentials_in_a_create_answer_are_not_kept_at_rest(tmp_path: Path) -> None:
    secret = "AKIA-r4b-not-at-rest"
    created = {**loaded_table(tmp_path),
               "config": {"s3.secret-access-key": secret},
               "storage-credentials": [{"prefix": "s3://b/", "config": {
                   "s3.secret-access-key": secret}}]}
    upstream = Upstream(lambda _: httpx.Response(200, json=created))
    client = client_for(upstream, tmp_path,
                        idempotency={"db_uri": f"sqlite:///{tmp_path / 'keys.db'}"})
    with client:
        answer = client.post("/v1/cat/namespaces/demo/tables", json={"name": "t", "schema": SCHEMA},
                             headers={"Idempotency-Key": str(uuid.uuid4()),
                                      "X-Iceberg-Access-Delegation": "vended-credentials"})
        assert answer.status_code == 200, answer.text
    at_rest = secret.encode() in (tmp_path / "keys.db").read_bytes()
    assert not at_rest, "the vended secret is stored in the idempotency database"
