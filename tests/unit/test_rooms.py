"""The package's rooms and the one way imports run between them.

``proxy/`` is laid out in the order a request flows: the HTTP edge, the gate, the handlers, the
services they call, and the shared vocabulary every room speaks. A module may import its own
room and the rooms below it, never one above: a climb back up fails here. Every import counts,
also those inside functions and under ``TYPE_CHECKING``.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "proxy"

ROOMS = (
    "edge",         # the HTTP edge: dispatcher shell, request context, the governed pipeline
    "gate",         # enforcement: authorize, evidence, hiding, filtered listings
    "handlers",     # icegov's own answers, one module per endpoint family
    "signing",      # S3 remote signing: grants, decisions, SigV4 with icegov's credentials
    "plans",        # planning service: plan jobs, table reader, judged scans
    "committer",    # server-side commits: queue, known heads, pins, rebuilds
    "governed",     # governed snapshots: what row- and mask-restricted principals read
    "indexes",      # bloom-filter indexes of data files: built as data lands, read by plans
    "admission",    # what the gate hands on: typed intents, admission, catalog names
    "idempotency",  # Idempotency-Key store and replays
    "identity",     # who is calling
    "policy",       # Casbin policies and decisions
    "reads",        # a principal's view of a table: projection, disclosure, scan checks
    "audit",        # the audit stream and what a record notes
    "catalog",      # the embedded REST catalog
    "backing",      # the backing catalog: forwarding, offers, table state
    "planning",     # pure scan planning
    "commits",      # pure commit classification and data operations
    "ops",          # metrics, logs, worker slots, files replaced at run time
    "defaults",     # the packaged demo policy
)
"""Top to bottom: a room may import itself and the rooms after it."""

ENTRIES = frozenset({"app", "cli", "client"})
"""Loose modules that compose or expose the rest: they may import anything, no room imports them."""

VOCABULARY = frozenset({"errors", "governance", "resources", "restrictions", "inbound", "routes",
                        "locations", "keys"})
"""Loose modules every room speaks: they import only each other."""

SETTINGS = "settings"
"""``proxy.settings`` is vocabulary to its importers; it composes each room's settings section."""

SETTINGS_SECTIONS = frozenset({
    "proxy.audit.settings", "proxy.commits.limits", "proxy.commits.retry",
    "proxy.idempotency.settings", "proxy.identity.settings", "proxy.planning.settings",
    "proxy.governed.settings", "proxy.indexes.settings",
    "proxy.policy.settings", "proxy.signing.settings",
    "proxy.catalog.locations",  # the warehouse root's canonical form
})
"""The room modules ``proxy.settings`` may import: the sections it nests, nothing else."""

MAX_LOOSE = 12

TOP, BOTTOM = -1, len(ROOMS)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def place(module: str) -> str:
    """The room (sub-package) or loose module a ``proxy`` module belongs to."""
    return module.split(".")[1] if "." in module else ""


def rank(module: str) -> int:
    where = place(module)
    if where in ENTRIES:
        return TOP
    if where in VOCABULARY or where == SETTINGS:
        return BOTTOM
    if where in ROOMS:
        return ROOMS.index(where)
    raise AssertionError(f"{module}: in no room; add it to ROOMS, VOCABULARY or ENTRIES")


def imported(module: str, is_package: bool, source: str) -> set[str]:
    """Every ``proxy`` module the source imports (``from proxy import x`` counts as ``proxy.x``)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = module if is_package else module.rpartition(".")[0]
            if node.level:
                base = ".".join(base.split(".")[: len(base.split(".")) - node.level + 1])
                target = f"{base}.{node.module}" if node.module else base
            else:
                target = node.module or ""
            found.add(target)
            if target == "proxy":
                found.update(f"proxy.{alias.name}" for alias in node.names)
    return {name for name in found if name.startswith("proxy.")}


@dataclass(frozen=True)
class Climb:
    importer: str
    target: str

    def __str__(self) -> str:
        return f"{self.importer} ({place(self.importer)}) imports {self.target}"


def climbs(module: str, is_package: bool, source: str) -> list[Climb]:
    """The imports of one module that reach above its room."""
    found = []
    for target in sorted(imported(module, is_package, source)):
        if place(target) == place(module):
            continue
        if place(module) == SETTINGS:
            allowed = rank(target) == BOTTOM or target in SETTINGS_SECTIONS
        else:
            allowed = rank(target) >= rank(module)
        if not allowed:
            found.append(Climb(module, target))
    return found


def every_module() -> list[tuple[str, bool, str]]:
    return [(module_name(path), path.name == "__init__.py", path.read_text())
            for path in sorted(PACKAGE.rglob("*.py"))]


def test_imports_run_one_way_down_the_rooms() -> None:
    found = [str(climb) for module in every_module() for climb in climbs(*module)]
    assert not found, "imports that climb back up:\n" + "\n".join(found)


@pytest.mark.parametrize(("module", "source"), [
    ("proxy.commits.classify", "from proxy.edge.pipeline import GovernedDispatcher"),
    ("proxy.reads.projection", "def late():\n    from proxy.plans import service"),
    ("proxy.errors", "from proxy import ops"),
    ("proxy.committer.queue", "from proxy.app import create_app"),
    ("proxy.settings", "from proxy.policy.decisions import read_view"),
])
def test_a_climb_is_caught(module: str, source: str) -> None:
    assert climbs(module, False, source)


def test_a_step_down_is_not_a_climb() -> None:
    assert not climbs("proxy.handlers.commits", False,
                      "from proxy.committer.committer import Committer\nfrom proxy import errors")


def test_every_room_and_loose_module_is_placed() -> None:
    rooms = {path.name for path in PACKAGE.iterdir() if (path / "__init__.py").is_file()}
    loose = {path.stem for path in PACKAGE.glob("*.py")} - {"__init__"}
    assert rooms == set(ROOMS)
    assert loose == ENTRIES | VOCABULARY | {SETTINGS}
    assert len(loose) <= MAX_LOOSE


@pytest.mark.parametrize("room", ROOMS)
def test_every_room_says_what_it_owns_and_may_import(room: str) -> None:
    docstring = ast.get_docstring(ast.parse((PACKAGE / room / "__init__.py").read_text())) or ""
    assert "may import" in " ".join(docstring.split())
