"""Identity basics: secret hashing, the principals file, identity settings, `principal add`."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from pydantic import ValidationError

from proxy.governance import Principal
from proxy.identity.cli import principal
from proxy.identity.hashing import SecretHash, SecretHashError, hash_secret, verify_secret
from proxy.identity.principals import (
    PrincipalsFileError,
    entry_yaml,
    load_principals,
    new_entry,
    parse_principals,
)
from proxy.identity.settings import IdentityConfigError, IdentitySettings
from proxy.identity.store import PrincipalStore

KEY = "k" * 40


# --- hashing ---------------------------------------------------------------------------------

def test_hash_round_trip_and_wrong_secret() -> None:
    stored = hash_secret("s3cret")
    assert stored.startswith("scrypt$16384$8$1$")
    assert verify_secret("s3cret", stored)
    assert not verify_secret("s3cret ", stored)
    assert not verify_secret("", stored)


def test_hashes_are_salted() -> None:
    assert hash_secret("same") != hash_secret("same")


def test_hash_string_round_trips_through_parse() -> None:
    stored = hash_secret("x")
    assert str(SecretHash.parse(stored)) == stored


@pytest.mark.parametrize("bad", [
    "", "plain", "bcrypt$1$2$3$AAAA$BBBB", "scrypt$16384$8$1$!!!$AAAA",
    "scrypt$1000$8$1$AAAAAAAAAAA=$AAAAAAAAAAAAAAAAAAAAAA==",   # n not a power of two
    "scrypt$1073741824$8$1$AAAAAAAAAAA=$AAAAAAAAAAAAAAAAAAAAAA==",  # n far too large
    "scrypt$16384$8$1$AA==$AAAAAAAAAAAAAAAAAAAAAA==",  # salt too short
])
def test_bad_hash_strings_are_refused(bad: str) -> None:
    with pytest.raises(SecretHashError):
        SecretHash.parse(bad)
    assert not verify_secret("anything", bad)


# --- principals file -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def writer_hash() -> str:
    return hash_secret("writer-secret")


def document(*entries: Mapping[str, object]) -> str:
    return yaml.safe_dump({"principals": list(entries)})


def test_principals_file_loads(tmp_path: Path, writer_hash: str) -> None:
    path = tmp_path / "principals.yaml"
    path.write_text(document({"name": "writer", "roles": ["writer", "etl"],
                              "secret_hash": writer_hash}))
    entries = load_principals(path)
    assert set(entries) == {"writer"}
    assert entries["writer"].principal() == Principal("writer", ("writer", "etl"), "token")
    assert entries["writer"].verify("writer-secret")
    assert not entries["writer"].verify("nope")


def test_empty_principals_file_has_no_principals() -> None:
    assert parse_principals("") == {}
    assert parse_principals("principals: []") == {}


def test_missing_principals_file(tmp_path: Path) -> None:
    with pytest.raises(PrincipalsFileError, match="does not exist"):
        load_principals(tmp_path / "absent.yaml")


@pytest.mark.parametrize(("text", "message"), [
    ("principals: [", "not valid YAML"),
    ("- name: a", "expected a mapping"),
    ("principal: []", "principal: Extra inputs are not permitted"),
    ("principals:\n  - roles: [a]\n    secret_hash: x", r"principals\[0\]\.name: Field required"),
    ("principals:\n  - name: 'a:b'\n    secret_hash: x", r"principals\[0\]\.name: String should"),
    ("principals:\n  - name: a\n    secret_hash: 'md5$x'", r"principals\[0\]\.secret_hash"),
    ("principals:\n  - name: a\n    roles: writer\n    secret_hash: x", r"principals\[0\]\.roles"),
])
def test_bad_principals_files_say_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(PrincipalsFileError, match=message) as info:
        parse_principals(text, "p.yaml")
    assert str(info.value).startswith("p.yaml: ")


def test_duplicate_principals_are_refused(writer_hash: str) -> None:
    entry = {"name": "w", "secret_hash": writer_hash}
    with pytest.raises(PrincipalsFileError, match="'w' appears more than once"):
        parse_principals(document(entry, entry))


def test_new_entry_yaml_pastes_under_principals_key() -> None:
    entry = new_entry("analyst", ["analyst", "bi"], "analyst-secret")
    text = "principals:\n" + entry_yaml(entry)
    [loaded] = parse_principals(text).values()
    assert loaded.name == "analyst" and loaded.roles == ("analyst", "bi")
    assert loaded.verify("analyst-secret")
    assert "analyst-secret" not in text


def test_new_entry_refuses_bad_names() -> None:
    with pytest.raises(ValueError, match="name"):
        new_entry("has:colon", [], "x")


def test_store_reloads_a_changed_file_and_keeps_the_last_good_one(
        tmp_path: Path, writer_hash: str) -> None:
    path = tmp_path / "principals.yaml"
    path.write_text(document({"name": "a", "secret_hash": writer_hash}))
    store = PrincipalStore(path, check_seconds=0)
    assert store.get("a") is not None and store.get("b") is None
    path.write_text(document({"name": "b", "secret_hash": writer_hash}))
    os.utime(path, ns=(1, 2))  # a different mtime even on coarse clocks
    assert store.get("b") is not None and store.get("a") is None
    path.write_text("principals: [")
    os.utime(path, ns=(3, 4))
    assert store.get("b") is not None


def test_store_without_a_file_has_no_principals() -> None:
    assert PrincipalStore(None).get("anyone") is None


# --- settings --------------------------------------------------------------------------------

def test_configured_signing_key_is_used_in_both_modes() -> None:
    settings = IdentitySettings(signing_key=KEY)  # type: ignore[arg-type]
    assert settings.token_signing_key(embedded_catalog=False) == KEY.encode()
    assert settings.token_signing_key(embedded_catalog=True) == KEY.encode()


def test_demo_mode_without_key_gets_one_random_key_per_process() -> None:
    settings = IdentitySettings()
    key = settings.token_signing_key(embedded_catalog=True)
    assert len(key) >= 32
    assert IdentitySettings().token_signing_key(embedded_catalog=True) == key


def test_forwarding_mode_without_key_refuses_to_start() -> None:
    with pytest.raises(IdentityConfigError, match="SIGNING_KEY"):
        IdentitySettings().token_signing_key(embedded_catalog=False)


@pytest.mark.parametrize("fields", [
    {"signing_key": "short"},
    {"oidc_issuer": "https://idp"},
    {"oidc_issuer": "https://idp", "oidc_audience": "icegov"},
    {"oidc_issuer": "https://idp", "oidc_audience": "a", "oidc_jwks_url": "u",
     "oidc_jwks_file": "f"},
    {"oidc_issuer": "https://idp", "oidc_audience": "a", "oidc_jwks_url": "u",
     "oidc_algorithms": ["HS256"]},
    {"oidc_jwks_url": "u"},
    {"anonymous_roles": ["reader"]},
    {"unknown_field": 1},
])
def test_inconsistent_settings_are_refused(fields: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        IdentitySettings(**fields)  # type: ignore[arg-type]


def test_settings_are_frozen() -> None:
    settings = IdentitySettings()
    with pytest.raises(ValidationError):
        settings.issuer = "other"


# --- CLI -------------------------------------------------------------------------------------

def test_principal_add_with_secret_prints_a_pasteable_entry() -> None:
    result = CliRunner().invoke(
        principal, ["add", "writer", "--role", "writer", "--role", "etl", "--secret", "w-s"])
    assert result.exit_code == 0, result.output
    [entry] = parse_principals("principals:\n" + result.stdout).values()
    assert entry.roles == ("writer", "etl") and entry.verify("w-s")
    assert "w-s" not in result.output


def test_principal_add_generates_a_secret_shown_once_on_stderr() -> None:
    result = CliRunner().invoke(principal, ["add", "bot", "--role", "writer"])
    assert result.exit_code == 0, result.output
    secret_line = next(line for line in result.stderr.splitlines() if "shown once" in line)
    secret = secret_line.rsplit(": ", 1)[1]
    assert secret not in result.stdout
    [entry] = parse_principals("principals:\n" + result.stdout).values()
    assert entry.verify(secret)


def test_principal_add_refuses_a_bad_name() -> None:
    result = CliRunner().invoke(principal, ["add", "a:b", "--secret", "x"])
    assert result.exit_code == 2
    assert "name" in result.stderr


def test_at_most_four_secrets_are_hashed_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """scrypt takes ~16 MiB a call: a flood of token requests queues for it."""
    import threading

    from proxy.identity import hashing

    inside = threading.Semaphore(0)
    release = threading.Event()

    def held_scrypt(*_: object, **__: object) -> bytes:
        inside.release()
        release.wait(timeout=10)
        return b"\0" * 32

    monkeypatch.setattr(hashing.hashlib, "scrypt", held_scrypt)
    threads = [threading.Thread(target=hashing.burn_time) for _ in range(6)]
    for thread in threads:
        thread.start()
    for _ in range(hashing.MAX_CONCURRENT_HASHES):
        assert inside.acquire(timeout=10)
    try:
        assert not hashing._HASHING.acquire(blocking=False)  # every slot is taken
        assert not inside.acquire(blocking=False)  # and no fifth hash began
    finally:
        release.set()
        for thread in threads:
            thread.join(timeout=10)
    assert inside.acquire(timeout=10) and inside.acquire(timeout=10)  # the rest ran after
