"""Settings: only ICEGOV__ variables count, errors are one line, defaults find a policy anywhere."""

from __future__ import annotations

from pathlib import Path

import pytest

from proxy import defaults
from proxy.policy.settings import PolicySettings
from proxy.settings import SettingsError, Timeouts, load_settings


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import os

    for name in list(os.environ):
        if name.upper().startswith("ICEGOV__"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)


@pytest.mark.parametrize("name", ["READ", "read", "CONNECT", "TIMEOUTS__READ", "POOL"])
def test_plain_environment_variables_do_not_change_timeouts(
        monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    monkeypatch.setenv(name, "1.5")
    assert load_settings().timeouts == Timeouts()


def test_prefixed_variables_set_timeouts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ICEGOV__TIMEOUTS__READ", "7")
    monkeypatch.setenv("READ", "1")
    assert load_settings().timeouts == Timeouts(read=7.0)


def test_timeouts_alone_read_no_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("READ", "1")
    monkeypatch.setenv("ICEGOV__TIMEOUTS__READ", "2")
    assert Timeouts().read == 60.0


@pytest.mark.parametrize(("name", "value", "expected"), [
    ("ICEGOV__PORT", "abc", "ICEGOV__PORT: Input should be a valid integer"),
    ("ICEGOV__TIMEOUTS__READ", "soon", "ICEGOV__TIMEOUTS__READ: Input should be a valid number"),
    ("ICEGOV__TIMEOUTS__LATER", "1", "ICEGOV__TIMEOUTS__LATER: Extra inputs are not permitted"),
    ("ICEGOV__LOG_LEVEL", "chatty", "ICEGOV__LOG_LEVEL: Input should be 'debug'"),
    ("ICEGOV__IDENTITY__SIGNING_KEY", "short", "signing_key must be at least 32 bytes"),
    ("ICEGOV__POLICY__RELOAD_INTERVAL_SECONDS", "-1", "ICEGOV__POLICY__RELOAD_INTERVAL_SECONDS"),
    ("ICEGOV__CATALOG_CREDENTIAL", "no-colon", "catalog_credential must be 'client_id:"),
])
def test_bad_settings_are_one_line_naming_the_variable(
        monkeypatch: pytest.MonkeyPatch, name: str, value: str, expected: str) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(SettingsError) as error:
        load_settings()
    message = str(error.value)
    assert expected in message
    assert "\n" not in message and "pydantic" not in message and "https://" not in message


def test_secret_values_are_not_repeated_in_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ICEGOV__IDENTITY__SIGNING_KEY", "sup3r-s3cret")
    with pytest.raises(SettingsError) as error:
        load_settings()
    assert "sup3r-s3cret" not in str(error.value)


def test_without_a_local_policies_directory_the_packaged_demo_is_used() -> None:
    settings = load_settings()
    assert settings.policy.model_path == defaults.packaged("model.conf")
    assert settings.policy.policy_path == defaults.packaged("policy.csv")
    assert settings.identity.principals_file == defaults.packaged("principals.yaml")
    assert settings.policy.is_demo
    assert settings.policy.model_path.is_file() and settings.policy.policy_path.is_file()


def test_a_local_policies_directory_is_used_as_a_whole(tmp_path: Path) -> None:
    (tmp_path / "policies").mkdir()
    settings = load_settings()
    assert settings.policy.policy_path == Path("policies/policy.csv")
    assert settings.policy.model_path == Path("policies/model.conf")
    # never the demo principals (public secrets) next to a real policy
    assert settings.identity.principals_file == Path("policies/principals.yaml")
    assert not settings.policy.is_demo


def test_explicit_paths_win(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ICEGOV__POLICY__POLICY_PATH", "/etc/icegov/policy.csv")
    settings = load_settings()
    assert settings.policy.policy_path == Path("/etc/icegov/policy.csv")
    assert not settings.policy.is_demo
    assert PolicySettings(policy_path=Path("x.csv")).model_path == defaults.packaged("model.conf")


@pytest.mark.parametrize("variable,value", [
    ("ICEGOV__CATALOG_NAME", "a.b"), ("ICEGOV__CATALOG_NAME", ".."),
    ("ICEGOV__CATALOGS", '{"wh2": "x/y"}'), ("ICEGOV__CATALOGS", '{"wh2": "*"}'),
])
def test_catalog_names_must_be_plain_names(monkeypatch: pytest.MonkeyPatch, variable: str,
                                           value: str) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(SettingsError, match="not a plain name"):
        load_settings()


def test_storage_keys_in_file_io_never_show_in_a_settings_repr() -> None:
    settings = load_settings(file_io={"s3.secret-access-key": "the-storage-secret"})
    assert "the-storage-secret" not in repr(settings) and "the-storage-secret" not in str(settings)


def test_mask_capable_clients_need_principals_that_are_trusted_with_them(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ICEGOV__PLANNING__MASK_CAPABLE_CLIENTS", '["spark-masks"]')
    with pytest.raises(SettingsError, match="mask_capable_principals"):
        load_settings()
    monkeypatch.setenv("ICEGOV__PLANNING__MASK_CAPABLE_PRINCIPALS", '["etl"]')
    assert load_settings().planning.mask_capable_principals == ("etl",)


def test_a_client_version_claim_counts_only_for_a_trusted_principal() -> None:
    from proxy.governance import Principal
    from proxy.reads.read_views import ReadViews

    views = ReadViews(authorizer=None,  # type: ignore[arg-type]  # applies_masks needs none
                      mask_capable_clients=("spark-masks",),
                      mask_capable_principals=("etl", "maskers"))
    claim = ((b"X-Client-Version", b"spark-masks 1.0"),)
    assert views.applies_masks(Principal("etl"), claim)
    assert views.applies_masks(Principal("bob", ("maskers",)), claim)
    assert not views.applies_masks(Principal("mallory", ("analysts",)), claim)
    assert not views.applies_masks(Principal("etl"), ((b"x-client-version", b"pyiceberg"),))
