"""Revocation: each request is judged by the principals file in force, not by its token's claims."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from proxy.errors import NotAuthorized
from proxy.governance import Principal
from proxy.identity import store as store_module
from proxy.identity.authenticator import Authenticator
from proxy.identity.hashing import hash_secret
from proxy.identity.settings import IdentitySettings
from proxy.identity.setup import Identity, build_identity
from proxy.identity.store import PrincipalStore
from proxy.identity.tokens import IcegovTokens

KEY = "revocation-test-signing-key-32-bytes-long"
HASH = hash_secret("s3cret")


def principals_yaml(**roles: list[str]) -> str:
    lines = ["principals:"]
    for name, granted in roles.items():
        lines += [f"  - name: {name}", f"    roles: [{', '.join(granted)}]",
                  f"    secret_hash: {HASH}"]
    return "\n".join(lines) + "\n"


def replace_file(path: Path, text: str) -> None:
    """Write aside, then rename: how editors and deploy tools should replace the file."""
    aside = path.with_suffix(".tmp")
    aside.write_text(text)
    aside.replace(path)


def bearer(token: str) -> tuple[tuple[bytes, bytes], ...]:
    return ((b"authorization", f"Bearer {token}".encode()),)


@pytest.fixture()
def principals(tmp_path: Path) -> Path:
    path = tmp_path / "principals.yaml"
    path.write_text(principals_yaml(writer=["writer"], analyst=["analyst"]))
    return path


@pytest.fixture()
def identity(principals: Path) -> Identity:
    settings = IdentitySettings(principals_file=principals, signing_key=KEY,
                                principals_check_seconds=0)
    return build_identity(settings, embedded_catalog=False)


def token_for(identity: Identity, name: str, *roles: str) -> tuple[tuple[bytes, bytes], ...]:
    return bearer(identity.tokens.issue(Principal(name, roles)).token)


def test_a_removed_principal_is_refused_with_a_still_valid_token(
        identity: Identity, principals: Path) -> None:
    headers = token_for(identity, "writer", "writer")
    assert identity.authenticator.authenticate(headers).name == "writer"  # now in the token cache
    replace_file(principals, principals_yaml(analyst=["analyst"]))
    with pytest.raises(NotAuthorized) as refused:
        identity.authenticator.authenticate(headers)
    assert refused.value.status == 401
    assert "no longer exists" in refused.value.message


def test_changed_roles_apply_at_once_whatever_the_token_says(
        identity: Identity, principals: Path) -> None:
    headers = token_for(identity, "writer", "writer", "admin")  # a token claiming more roles
    assert identity.authenticator.authenticate(headers) == Principal("writer", ("writer",))
    replace_file(principals, principals_yaml(writer=["analyst"], analyst=["analyst"]))
    assert identity.authenticator.authenticate(headers) == Principal("writer", ("analyst",))


def test_a_principal_added_back_is_accepted_again(identity: Identity, principals: Path) -> None:
    headers = token_for(identity, "writer", "writer")
    replace_file(principals, principals_yaml())
    with pytest.raises(NotAuthorized):
        identity.authenticator.authenticate(headers)
    replace_file(principals, principals_yaml(writer=["writer"]))
    assert identity.authenticator.authenticate(headers).roles == ("writer",)


@pytest.mark.parametrize("broken", [
    "principals: [", "principals:\n  - name: writer\n", b"\xff\xfe not utf-8", None,
])
def test_a_broken_or_missing_file_keeps_the_last_good_version_and_is_logged(
        identity: Identity, principals: Path, broken: str | bytes | None) -> None:
    headers = token_for(identity, "writer", "writer")
    with capture_logs() as logs:
        if broken is None:
            principals.unlink()
        elif isinstance(broken, bytes):
            principals.write_bytes(broken)
        else:
            replace_file(principals, broken)
        assert identity.authenticator.authenticate(headers).roles == ("writer",)
        assert identity.authenticator.authenticate(headers).roles == ("writer",)
    failures = [e for e in logs if e["event"] == "principals.reload_failed"]
    assert len(failures) == 1, "each broken version is reported once, not on every request"
    assert failures[0]["log_level"] == "error"


def test_anonymous_callers_are_not_looked_up(principals: Path) -> None:
    tokens = IcegovTokens(KEY.encode(), issuer="icegov", audience="icegov", lifetime_seconds=60)
    guest = Principal("guest", ("reader",), "anonymous")
    authenticator = Authenticator(tokens, anonymous=guest,
                                  principals=PrincipalStore(principals, check_seconds=0))
    assert authenticator.authenticate(()) == guest


# --- how cheaply and how soon the file is looked at -------------------------------------------

class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def count_reads(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    reads: list[Path] = []
    real: Callable[[Path], tuple[store_module.FileStamp, bytes]] = store_module.read_stable

    def counting(path: Path) -> tuple[store_module.FileStamp, bytes]:
        reads.append(path)
        return real(path)

    monkeypatch.setattr(store_module, "read_stable", counting)
    return reads


def age(path: Path) -> None:
    """Make the file look long untouched (its stamp is then trusted)."""
    old = time.time_ns() - 3600 * 10**9
    os.utime(path, ns=(old, old))


def test_the_file_is_checked_at_most_once_per_interval(
        principals: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock()
    store = PrincipalStore(principals, check_seconds=1.0, clock=clock)
    replace_file(principals, principals_yaml(analyst=["analyst"]))
    clock.now += 0.5
    assert store.principal("writer") is not None  # not looked at yet
    clock.now += 0.6
    assert store.principal("writer") is None  # looked at: writer is gone


def test_an_unchanged_file_is_only_stat_ed(
        principals: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    age(principals)
    store = PrincipalStore(principals, check_seconds=0)
    reads = count_reads(monkeypatch)
    for _ in range(50):
        assert store.principal("writer") == Principal("writer", ("writer",))
    assert reads == []


def test_a_touched_file_with_the_same_contents_is_hashed_but_not_swapped(
        principals: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = PrincipalStore(principals, check_seconds=0)
    digest = store.digest
    reads = count_reads(monkeypatch)
    with capture_logs() as logs:
        replace_file(principals, principals.read_text())
        assert store.principal("writer") is not None
    assert reads and store.digest == digest
    assert not [e for e in logs if e["event"] == "principals.reloaded"]


def test_a_same_size_rewrite_within_one_mtime_tick_is_still_noticed(principals: Path) -> None:
    principals.write_text(principals_yaml(writer=["aaaa"]))
    store = PrincipalStore(principals, check_seconds=0)
    stat = os.stat(principals)
    with principals.open("r+") as handle:  # in place: same inode, same size
        handle.write(principals_yaml(writer=["bbbb"]))
    os.utime(principals, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # and the same mtime
    assert os.stat(principals).st_size == stat.st_size
    assert store.principal("writer") == Principal("writer", ("bbbb",))


# --- over HTTP, through the whole app ---------------------------------------------------------

def test_revocation_and_role_changes_reach_requests_through_the_app(tmp_path: Path) -> None:
    import yaml
    from starlette.testclient import TestClient

    from proxy.app import create_app
    from tests.support.errors import assert_error_model
    from tests.support.settings import POLICIES, settings_for_tests

    principals = tmp_path / "principals.yaml"
    shutil.copy(POLICIES / "principals.yaml", principals)
    settings = settings_for_tests(tmp_path, identity={"principals_file": principals,
                                                      "principals_check_seconds": 0})

    def edit(change: Callable[[dict[str, Any]], None]) -> None:
        document = yaml.safe_load(principals.read_text())
        entries = {entry["name"]: entry for entry in document["principals"]}
        change(entries)
        replace_file(principals, yaml.safe_dump({"principals": list(entries.values())}))

    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        def bearer_for(name: str, secret: str) -> dict[str, str]:
            answer = client.post("/v1/oauth/tokens", data={
                "grant_type": "client_credentials", "client_id": name, "client_secret": secret})
            assert answer.status_code == 200, answer.text
            return {"authorization": f"Bearer {answer.json()['access_token']}"}

        edit(lambda entries: entries.update(
            carol={"name": "carol", "roles": ["admin"], "secret_hash": HASH}))
        carol, analyst = bearer_for("carol", "s3cret"), bearer_for("analyst", "analyst-secret")
        assert client.get("/v1/namespaces", headers=analyst).status_code == 200
        assert client.post("/v1/namespaces", headers=carol,
                           json={"namespace": ["made_by_carol"]}).status_code == 200

        edit(lambda entries: entries.pop("analyst"))
        assert_error_model(client.get("/v1/namespaces", headers=analyst), 401,
                           "NotAuthorizedException")

        edit(lambda entries: entries["carol"].update(roles=["analyst"]))
        assert_error_model(client.post("/v1/namespaces", headers=carol,
                                       json={"namespace": ["demoted"]}), 403, "ForbiddenException")
        assert client.get("/v1/namespaces", headers=carol).status_code == 200
