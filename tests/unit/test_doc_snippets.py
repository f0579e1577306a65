"""Every fenced code block of the README and the per-reader pages is run, checked, or listed here
with the reason it cannot be.

A block is found by its page and its first line. Each kind gets something real:

- ``sh``: every command line is run where it is cheap (``icegov policy ...`` on the repository's
  policy, ``icegov audit verify`` on chains this test writes, ``make -n`` of a target), parsed by
  icegov's own CLI otherwise (``icegov serve ... --help``: unknown options and subcommands fail),
  ``pip install`` pins are compared with what is installed, benchmark flags with the script's
  ``--help``, exported ``ICEGOV__*`` names with the settings;
- ``python``: compiled; PyIceberg, DuckDB and ``IcegovClient`` snippets run against an icegov
  served in-process on 127.0.0.1 (their ``http://127.0.0.1:8181`` replaced by its address); the
  Spark snippet's settings are checked against the ones the Spark tests use;
- policy lines are loaded by ``icegov policy check``, policy test cases run by ``icegov policy
  test`` against the demo policy, ``$ icegov ...`` transcripts parsed, SQL parsed (Spark dialect),
  and the README's layout tree checked against the files it names.

A block no rule covers fails until it is given a runner or listed in ``LISTED`` with a reason; a
listed block that no longer exists fails too.
"""

from __future__ import annotations

import ast
import functools
import glob
import importlib.metadata
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import sqlglot
from click.testing import CliRunner, Result
from pyiceberg.catalog.rest import RestCatalog

from proxy.app import create_app
from proxy.cli import main
from tests.support.audit import no_icegov_environment, written  # noqa: F401
from tests.support.jars import ICEBERG_RUNTIME_JAR
from tests.support.servers import serve
from tests.support.settings import ADMIN, REPO, settings_for_tests
from tests.support.spark import EXTENSIONS
from tests.unit.test_audit_writers import interleaved_stream
from tests.unit.test_deploy import is_setting

PAGES = ("README.md", "policies/README.md", "deploy/README.md", "proxy/README.md",
         "proxy/audit/README.md", "tests/README.md", "benchmarks/README.md")
DOCUMENTED_URI = "http://127.0.0.1:8181"
HMAC_KEY = "a-documentation-test-hmac-key-of-32-bytes+"

# (page, the block's first line starts with) -> why it is not run
LISTED: dict[tuple[str, str], str] = {
    ("policies/README.md", "p, <subject>"):
        "the grammar of a rule line, with placeholders, not a rule",
    ("proxy/audit/README.md", "ok: 1200 records"):
        "sample output of `icegov audit verify` (the commands above it are run)",
    ("policies/README.md", "icegov policy who-can SELECT"):
        "a synopsis with placeholders (REQUEST_ID, OLD_DIR): each command is run on real files "
        "by tests/unit/test_policy_questions.py",
    ("proxy/audit/README.md", "icegov audit keygen"):
        "a key pair, a serving icegov and a verify of the files it wrote: the same steps are "
        "run by tests/unit/test_audit_digests.py",
    ("proxy/audit/README.md", "ok: 11 signed digest"):
        "sample output of `icegov audit verify --public-key`",
    ("deploy/README.md", "docker build"):
        "needs a container engine (the Dockerfile is checked by tests/unit/test_deploy.py)",
    ("deploy/README.md", "export ICEGOV_SIGNING_KEY"):
        "compose variables and `docker compose`: needs a container engine "
        "(compose.yaml is checked by tests/unit/test_deploy.py)",
    ("deploy/README.md", "kubectl create secret"):
        "needs a Kubernetes cluster (the manifests are checked by tests/unit/test_deploy.py)",
}


@dataclass(frozen=True)
class Block:
    page: str
    line: int
    lang: str
    text: str

    @property
    def first(self) -> str:
        return next((line.strip() for line in self.text.splitlines() if line.strip()), "")

    @property
    def listed(self) -> str | None:
        return next((why for (page, start), why in LISTED.items()
                     if page == self.page and self.first.startswith(start)), None)

    def __str__(self) -> str:
        return f"{self.page}:{self.line}"


def blocks() -> Iterator[Block]:
    """Every fenced block of every page (indented fences too), in page order."""
    for page in PAGES:
        lines = (REPO / page).read_text().split("\n")
        index = 0
        while index < len(lines):
            fence = re.match(r"^(\s*)```(\S*)\s*$", lines[index])
            if fence:
                indent, end = fence.group(1), index + 1
                while not lines[end].startswith(indent + "```"):
                    end += 1
                body = "\n".join(line[len(indent):] for line in lines[index + 1:end])
                yield Block(page, index + 1, fence.group(2), body)
                index = end
            index += 1


ALL = list(blocks())


def icegov(*args: str, **env: str) -> Result:
    return CliRunner().invoke(main, list(args), env=env)


# --- shell ---------------------------------------------------------------------------------

def commands(text: str) -> Iterator[list[str]]:
    """The block's command lines as argument lists (continuations joined, comments dropped)."""
    for line in text.replace("\\\n", " ").splitlines():
        words = shlex.split(line, comments=True)
        if words:
            yield words


def run_make(words: list[str], where: Path) -> None:
    dry = subprocess.run(["make", "-n", *words[1:]], cwd=REPO, capture_output=True, text=True,
                         timeout=60)
    assert dry.returncode == 0, dry.stderr


def check_pins(words: list[str], where: Path) -> None:
    assert words[1] == "install"
    for pin in words[2:]:
        name, version = pin.split("==")
        assert importlib.metadata.version(name) == version, pin


@functools.cache
def script_help(script: str) -> str:
    shown = subprocess.run([sys.executable, script, "--help"], cwd=REPO, capture_output=True,
                           text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr
    return shown.stdout


def check_python(words: list[str], where: Path) -> None:
    if len(words) == 1:
        return  # the interpreter itself
    shown = script_help(words[1])
    for flag in (word for word in words[2:] if word.startswith("--")):
        assert flag in shown, f"{words[1]} has no {flag}"


def check_exports(words: list[str], where: Path) -> None:
    for assignment in words[1:]:
        name = assignment.split("=", 1)[0]
        assert is_setting(name), name


def run_icegov(words: list[str], where: Path, env: dict[str, str]) -> None:
    args = words[1:]
    if args[:1] == ["policy"]:
        result = icegov(*args, **env)
        assert result.exit_code == 0, result.output
    elif args[:2] == ["audit", "verify"]:
        result = icegov(*audit_arguments(args, where), **env)
        assert result.exit_code == 0, result.output
        assert result.output.startswith("ok: "), result.output
    else:  # needs servers or a remote catalog: parsed by the CLI, options and all
        result = icegov(*args, "--help")
        assert result.exit_code == 0, result.output


def audit_arguments(args: list[str], where: Path) -> list[str]:
    """``args`` with globs expanded in ``where`` and ``SEQ:<hash>`` anchors filled in."""
    hashes = {}
    for log in sorted(where.glob("*.log*")):
        for line in log.read_text().splitlines():
            record = json.loads(line)
            hashes[str(record["seq"])] = record["hash"]
    filled: list[str] = []
    for arg in args:
        arg = re.sub(r"^(\d+):<hash>$", lambda m: f"{m.group(1)}:{hashes[m.group(1)]}", arg)
        if "*" in arg or "[" in arg:
            filled.extend(sorted(glob.glob(str(where / arg))))
        elif (where / arg).exists():
            filled.append(str(where / arg))
        else:
            filled.append(arg)
    return filled


def audit_directory(tmp_path: Path, words: list[str], env: dict[str, str]) -> Path:
    """A directory holding the files an ``icegov audit verify`` line names, written by icegov."""
    where = Path(tempfile.mkdtemp(dir=tmp_path))
    if "--writer" in words:
        interleaved_stream(where / words[-1])
        return where
    anchors = [int(word.split(":")[0]) for word in words if re.match(r"^\d+:<hash>$", word)]
    keyed = {"hmac_key": HMAC_KEY} if "ICEGOV__AUDIT__HMAC_KEY" in env else {}
    written(where / "audit.log", max([3, *anchors]), rotate_bytes=100_000, **keyed)
    return where


def run_shell(block: Block, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    for words in commands(block.text):
        env = {}
        while re.match(r"^[A-Z_]+=", words[0]):
            name, value = words.pop(0).split("=", 1)
            env[name] = HMAC_KEY if value == "…" else value
        program = words[0]
        if program == "icegov":
            where = audit_directory(tmp_path, words, env) if words[1:3] == ["audit", "verify"] \
                else REPO
            run_icegov(words, where, env)
        elif program == "make":
            run_make(words, REPO)
        elif program == ".venv/bin/pip":
            check_pins(words, REPO)
        elif program == ".venv/bin/python":
            check_python(words, REPO)
        elif program == "export":
            check_exports(words, REPO)
        else:
            pytest.fail(f"{block}: no runner for `{program}`: add one or list the block")


# --- policy lines, policy tests, transcripts, SQL ------------------------------------------

def is_policy(block: Block) -> bool:
    lines = [line.strip() for line in block.text.splitlines() if line.strip()]
    return bool(lines) and all(line.startswith(("p,", "g,", "#")) for line in lines)


def check_policy_lines(block: Block, tmp_path: Path) -> None:
    policy = tmp_path / "policy.csv"
    policy.write_text(block.text.strip() + "\n")
    result = icegov("policy", "check", "--model", str(REPO / "policies/model.conf"),
                    "--policy", str(policy))
    assert result.exit_code == 0, result.output


def run_policy_cases(block: Block, tmp_path: Path) -> None:
    cases = tmp_path / "cases.yaml"
    cases.write_text(block.text)
    result = icegov("policy", "test", "--model", str(REPO / "policies/model.conf"),
                    "--policy", str(REPO / "policies/policy.csv"), str(cases))
    assert result.exit_code == 0, result.output


def parse_transcript(block: Block) -> None:
    words = shlex.split(block.first.removeprefix("$ "))
    assert words[0] == "icegov"
    result = icegov(*words[1:], "--help")
    assert result.exit_code == 0, result.output


def parse_sql(block: Block) -> None:
    statements = [s for s in sqlglot.parse(block.text, read="spark") if s is not None]
    assert statements, block


def check_layout(block: Block) -> None:
    """Every file and folder the README's layout tree names exists where it says."""
    top = REPO
    for line in block.text.splitlines():
        if not line.strip() or line.startswith("    "):
            continue  # a description's continuation
        names = re.split(r"\s{2,}", line.strip())[0]
        for name in names.split(", "):
            path = (REPO if not line.startswith(" ") else top) / name.split(":")[0]
            assert path.exists(), f"the layout names {path.relative_to(REPO)}, which is gone"
        if not line.startswith(" "):
            top = REPO / names


# --- python --------------------------------------------------------------------------------

def check_spark_settings(block: Block) -> None:
    """The snippet's Spark settings are the ones tests/support/spark.py starts Spark with."""
    used = (REPO / "tests/support/spark.py").read_text()
    tree = ast.parse(block.text)
    formatted = [node for node in ast.walk(tree) if isinstance(node, ast.JoinedStr)]
    pieces = {id(value) for node in formatted for value in node.values}
    strings = {node.value for node in ast.walk(tree) if isinstance(node, ast.Constant)
               and isinstance(node.value, str) and id(node) not in pieces}
    joined = {"".join(str(v.value) if isinstance(v, ast.Constant) else "{name}"
                      for v in node.values) for node in formatted}
    for key in sorted(strings | joined):
        if key.startswith("spark.sql.catalog.{name}"):
            option = key.removeprefix("spark.sql.catalog.{name}").lstrip(".")
            assert option in ("", "type", "uri", "credential"), key
        elif key.startswith("spark."):
            assert f'"{key}"' in used, key
    assert ICEBERG_RUNTIME_JAR in strings and EXTENSIONS in strings
    assert "org.apache.iceberg.spark.SparkCatalog" in used
    for sql in (s for s in strings if s.split(" ")[0] in ("CREATE", "INSERT", "DELETE", "SELECT")):
        assert sqlglot.parse_one(sql, read="spark") is not None


@pytest.fixture(scope="module")
def icegov_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """icegov with the demo policy on an embedded catalog, served on 127.0.0.1."""
    with serve(create_app(settings_for_tests(tmp_path_factory.mktemp("doc-icegov")))) as url:
        yield url


def files_added(url: str, table: str, rows: pa.Table) -> str:
    """Append ``rows`` to ``table`` as the admin; the data file that append wrote."""
    loaded = RestCatalog("admin", uri=url, credential=ADMIN).load_table(table)
    before = {task.file.file_path for task in loaded.scan().plan_files()}
    loaded.append(rows)
    after = {task.file.file_path for task in loaded.refresh().scan().plan_files()}
    (added,) = after - before
    return added


def prepare(url: str) -> dict[str, Any]:
    """The demo tables the snippets use, and the names they leave to the reader."""
    admin = RestCatalog("admin", uri=url, credential=ADMIN)
    admin.create_namespace_if_not_exists("demo")
    events = pa.schema([("id", pa.int64()), ("name", pa.string())])
    admin.create_table_if_not_exists("demo.events", schema=events)
    admin.create_table_if_not_exists("demo.archive", schema=events)
    admin.create_table_if_not_exists(
        "demo.orders", schema=pa.schema([("id", pa.int64()), ("region", pa.string())]))
    admin.load_table("demo.orders").append(pa.table({"id": [1, 2], "region": ["eu", "us"]}))
    one = pa.table({"id": [1], "name": ["a"]})
    return {"RestCatalog": RestCatalog,
            "old_file": files_added(url, "demo.archive", one),
            "a_file_of_events": files_added(url, "demo.events", one)}


def run_python(block: Block, url: str) -> None:
    names = prepare(url)
    source = block.text.replace(DOCUMENTED_URI, url).replace(
        '"file:///.../data/00000-0-....parquet"', "a_file_of_events")
    exec(compile(source, str(block), "exec"), names)  # the page's own snippet


PYTHON_RUN = ("import pyarrow as pa", "import duckdb", "catalog = RestCatalog(")


# --- the test ------------------------------------------------------------------------------

def runner(block: Block) -> Callable[..., None] | None:
    """What this block gets, or None when nothing covers it."""
    if block.page == "README.md" and block.first.startswith("proxy/"):
        return lambda **_: check_layout(block)
    if block.lang == "sh":
        return lambda tmp_path, monkeypatch, **_: run_shell(block, tmp_path, monkeypatch)
    if block.lang == "python":
        compile(block.text, str(block), "exec")
        if "SparkSession" in block.text:
            return lambda **_: check_spark_settings(block)
        if block.first.startswith(PYTHON_RUN):
            return lambda request, **_: run_python(block, request.getfixturevalue("icegov_url"))
        return None
    if block.lang == "" and is_policy(block):
        return lambda tmp_path, **_: check_policy_lines(block, tmp_path)
    if block.lang == "yaml" and "expect:" in block.text:
        return lambda tmp_path, **_: run_policy_cases(block, tmp_path)
    if block.lang == "" and block.first.startswith("$ icegov "):
        return lambda **_: parse_transcript(block)
    if block.lang == "sql":
        return lambda **_: parse_sql(block)
    return None


@pytest.mark.usefixtures("no_icegov_environment")
@pytest.mark.parametrize("block", ALL, ids=str)
def test_every_block_runs_or_is_listed(block: Block, tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch,
                                       request: pytest.FixtureRequest) -> None:
    if block.listed:
        pytest.skip(f"listed: {block.listed}")
    run = runner(block)
    assert run is not None, f"{block} ({block.lang or 'no language'}): nothing runs it; " \
                            "add a runner or list it with the reason"
    run(tmp_path=tmp_path, monkeypatch=monkeypatch, request=request)


def test_every_listed_block_exists() -> None:
    for page, start in LISTED:
        assert any(b.page == page and b.first.startswith(start) for b in ALL), (page, start)


def test_the_pages_are_found_and_the_readme_is_short() -> None:
    assert {block.page for block in ALL} >= {"README.md", "proxy/README.md", "deploy/README.md"}
    assert len((REPO / "README.md").read_text().splitlines()) <= 300
    assert os.path.exists(REPO / "tests/README.md")


def anchors(page: Path) -> set[str]:
    """GitHub's anchors for the page's headings."""
    headings = re.findall(r"^#+ (.+)$", re.sub(r"```.*?```", "", page.read_text(), flags=re.S),
                          flags=re.M)
    return {re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
            for heading in headings}


def test_every_link_between_the_pages_resolves() -> None:
    for name in PAGES:
        page = REPO / name
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
            if re.match(r"^[a-z]+:", target):
                continue  # a web address
            path, _, anchor = target.partition("#")
            linked = (page.parent / path).resolve() if path else page
            assert linked.exists(), f"{name}: {target}"
            if anchor:
                assert anchor in anchors(linked), f"{name}: {target}"
