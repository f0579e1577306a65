"""The command line: `icegov init`, start-up errors as one line, and a real non-editable install
served from an empty directory."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import sysconfig
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner, Result

from proxy import defaults
from proxy.cli import main
from proxy.ops.logs import reset_logging

REPOSITORY = Path(__file__).resolve().parents[2]
KEY = "cli-test-signing-key-that-is-32-bytes-or-more"


@pytest.fixture(autouse=True)
def isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """Each test in an empty directory, with no ICEGOV__ settings, and logging undone after."""
    for name in list(os.environ):
        if name.upper().startswith("ICEGOV__"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    yield
    reset_logging()


def icegov(*args: str, **env: str) -> Result:
    return CliRunner().invoke(main, list(args), env=env)


def one_error_line(result: Result) -> str:
    assert result.exit_code == 2, (result.exit_code, result.output)
    lines = result.stderr.strip().splitlines()
    error_lines = [line for line in lines if line.startswith("icegov: error: ")]
    assert len(error_lines) == 1, lines
    assert "Traceback" not in result.stderr
    return error_lines[0]


# --- the packaged demo policy -----------------------------------------------------------------

@pytest.mark.parametrize("name", defaults.FILES)
def test_packaged_defaults_are_the_repository_policies(name: str) -> None:
    source = REPOSITORY / "policies" / name
    assert defaults.packaged(name).read_bytes() == source.read_bytes(), (
        f"proxy/defaults/{name} drifted from policies/{name}: it should be a symbolic link "
        f"(cd proxy/defaults && ln -sf ../../policies/{name} {name})")
    assert defaults.is_packaged(defaults.packaged(name))
    assert not defaults.is_packaged(source)


# --- icegov init ------------------------------------------------------------------------------

def test_init_writes_editable_copies_and_says_how_to_use_them(tmp_path: Path) -> None:
    result = icegov("init", "conf")
    assert result.exit_code == 0, result.output
    for name in defaults.FILES:
        assert (tmp_path / "conf" / name).read_bytes() == defaults.packaged(name).read_bytes()
    assert f"ICEGOV__POLICY__POLICY_PATH={tmp_path / 'conf' / 'policy.csv'}" in result.stdout
    assert "ICEGOV__IDENTITY__PRINCIPALS_FILE=" in result.stdout
    assert "secrets are public" in result.stdout


def test_init_defaults_to_policies_which_serve_then_reads(tmp_path: Path) -> None:
    assert icegov("init").exit_code == 0
    assert (tmp_path / "policies" / "policy.csv").is_file()
    from proxy.settings import load_settings

    settings = load_settings()
    assert settings.policy.policy_path == Path("policies/policy.csv")
    assert not settings.policy.is_demo


def test_init_does_not_overwrite_without_force(tmp_path: Path) -> None:
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "policy.csv").write_text("p, me, *, *, allow\n")
    line = one_error_line(icegov("init"))
    assert "policy.csv" in line and "--force" in line
    assert (tmp_path / "policies" / "policy.csv").read_text() == "p, me, *, *, allow\n"
    assert not (tmp_path / "policies" / "model.conf").exists(), "nothing is written on refusal"
    assert icegov("init", "--force").exit_code == 0
    assert (tmp_path / "policies" / "policy.csv").read_bytes() == (
        defaults.packaged("policy.csv").read_bytes())


# --- start-up errors --------------------------------------------------------------------------

@pytest.mark.parametrize(("env", "expected"), [
    ({"ICEGOV__PORT": "abc"}, "ICEGOV__PORT: Input should be a valid integer"),
    ({"ICEGOV__TIMEOUTS__READ": "x"}, "ICEGOV__TIMEOUTS__READ"),
    ({"ICEGOV__IDENTITY__SIGNING_KEY": "short"}, "signing_key must be at least 32 bytes"),
    ({"ICEGOV__POLICY__POLICY_PATH": "missing.csv"}, "missing.csv: No such file or directory"),
    ({"ICEGOV__POLICY__MODEL_PATH": "nope/model.conf"}, "nope/model.conf"),
    ({"ICEGOV__CATALOG_DB_URI": "postgresql+nosuchdriver://u@127.0.0.1:1/db"},
     "catalog database postgresql+nosuchdriver"),
    ({"ICEGOV__CATALOG_DB_URI": "postgresql+psycopg2://u@127.0.0.1:1/db"},
     "driver (psycopg2) is not installed"),
])
def test_bad_settings_or_files_are_one_line_and_exit_2(env: dict[str, str], expected: str) -> None:
    assert expected in one_error_line(icegov("serve", **env))


def test_a_broken_policy_is_one_line_naming_the_file_and_line(tmp_path: Path) -> None:
    assert icegov("init").exit_code == 0
    with (tmp_path / "policies" / "policy.csv").open("a") as policy:
        policy.write("p, writer, icegov.*, FROBNICATE, allow\n")
    line = one_error_line(icegov("serve"))
    assert "policies/policy.csv:" in line and "FROBNICATE" in line


def test_a_broken_principals_file_is_one_line(tmp_path: Path) -> None:
    assert icegov("init").exit_code == 0
    (tmp_path / "policies" / "principals.yaml").write_text("principals: [\n")
    line = one_error_line(icegov("serve"))
    assert "principals.yaml" in line and "not valid YAML" in line


def test_forwarding_without_a_signing_key_is_one_line() -> None:
    line = one_error_line(icegov("serve", ICEGOV__CATALOG_URI="http://127.0.0.1:9"))
    assert "ICEGOV__IDENTITY__SIGNING_KEY" in line


def test_catalog_command_reports_bad_settings_the_same_way() -> None:
    assert "ICEGOV__PORT" in one_error_line(icegov("catalog", ICEGOV__PORT="x"))


# --- a real install, served from an empty directory -------------------------------------------

def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def install_icegov(tmp_path: Path) -> Path:
    """``pip install`` (not editable) of a copy of the source, links and all, into a fresh venv.

    The venv sees this test environment's site-packages through a .pth line (dependencies without
    downloads); .pth files there are not processed, so the editable install stays invisible.
    """
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPOSITORY / name, source / name)
    ignore = shutil.ignore_patterns("__pycache__")
    shutil.copytree(REPOSITORY / "proxy", source / "proxy", ignore=ignore, symlinks=True)
    shutil.copytree(REPOSITORY / "policies", source / "policies", ignore=ignore)
    assert (source / "proxy" / "defaults" / "policy.csv").is_symlink()
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    where = "import sysconfig; print(sysconfig.get_path('purelib'))"
    purelib = subprocess.run([python, "-c", where], check=True, capture_output=True,
                             text=True).stdout.strip()
    Path(purelib, "test-dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    installed = subprocess.run(
        [python, "-m", "pip", "install", "-q", "--no-deps", "--ignore-installed", str(source)],
        capture_output=True, text=True, timeout=120)
    assert installed.returncode == 0, installed.stderr[-2000:]
    shutil.rmtree(source)
    return venv / "bin"


def wait_until_healthy(process: subprocess.Popen[str], url: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert process.poll() is None, f"icegov exited: {process.communicate()[1][-3000:]}"
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)  # polling for a port to open, not papering over a race
    raise AssertionError("icegov did not become healthy within 30 s")


def test_pip_installed_icegov_serves_the_packaged_demo_from_an_empty_directory(
        tmp_path: Path) -> None:
    bin_dir = install_icegov(tmp_path)
    empty = tmp_path / "empty"
    empty.mkdir()
    located = subprocess.run([bin_dir / "python", "-c", "import proxy; print(proxy.__file__)"],
                             cwd=empty, check=True, capture_output=True, text=True).stdout
    assert str(REPOSITORY) not in located and str(tmp_path / "venv") in located
    installed_defaults = Path(located.strip()).parent / "defaults"
    for name in defaults.FILES:  # real files, with the repository's contents
        assert not (installed_defaults / name).is_symlink()
        assert (installed_defaults / name).read_bytes() == (
            REPOSITORY / "policies" / name).read_bytes()

    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("ICEGOV__")}
    process = subprocess.Popen([bin_dir / "icegov", "serve", "--port", str(port)], cwd=empty,
                               env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_healthy(process, url)
        token = httpx.post(f"{url}/v1/oauth/tokens", data={
            "grant_type": "client_credentials", "client_id": "analyst",
            "client_secret": "analyst-secret"})
        assert token.status_code == 200, token.text
        bearer = {"authorization": f"Bearer {token.json()['access_token']}"}
        config = httpx.get(f"{url}/v1/config", headers=bearer)
        assert config.status_code == 200, config.text
        assert httpx.get(f"{url}/v1/config").status_code == 401
    finally:
        process.terminate()
        _, stderr = process.communicate(timeout=15)
    assert '"event": "policy.demo"' in stderr
    assert str(defaults.PACKAGED_DIR) not in stderr  # the installed copy, not the repository's
    assert (empty / "warehouse").is_dir()


def test_demo_files_in_force_are_announced_loudly(tmp_path: Path) -> None:
    from structlog.testing import capture_logs

    from proxy.cli import _announce_policy
    from proxy.settings import load_settings

    with capture_logs() as logs:
        _announce_policy(load_settings())
    (announced,) = logs
    assert announced["event"] == "policy.demo" and announced["log_level"] == "warning"
    assert announced["demo"] == ["model", "policy", "principals"]

    (tmp_path / "mine.csv").write_text("p, me, icegov, BROWSE, allow\n")
    with capture_logs() as logs:
        _announce_policy(load_settings(policy={"policy_path": tmp_path / "mine.csv"}))
    assert logs[0]["demo"] == ["model", "principals"], "demo principals beside a real policy"

    assert icegov("init").exit_code == 0
    with capture_logs() as logs:
        _announce_policy(load_settings())
    assert logs[0]["event"] == "policy.files" and logs[0]["log_level"] == "info"
