"""The demo policy shipped inside the package, so icegov runs from any directory.

In the repository the data files here are symbolic links to ``policies/`` (the source policy
authors edit), so they cannot drift; building a wheel (``pip install .``) stores their contents,
and an editable install reads ``policies/`` through the links. ``tests/unit/test_cli.py`` checks
both. Settings default to ``./policies/<file>`` when a ``policies`` directory exists in the
working directory, else to these packaged files; ``icegov init DIR`` writes editable copies.

Room: the bottom room; it may import only the shared vocabulary (it imports nothing).
"""

from __future__ import annotations

from pathlib import Path

PACKAGED_DIR = Path(__file__).resolve().parent
LOCAL_DIR = Path("policies")

MODEL = "model.conf"
POLICY = "policy.csv"
PRINCIPALS = "principals.yaml"
README = "README.md"
FILES = (MODEL, POLICY, PRINCIPALS, README)


def packaged(name: str) -> Path:
    """The packaged copy of one of ``FILES``."""
    if name not in FILES:
        raise ValueError(f"no packaged default named {name!r}")
    return PACKAGED_DIR / name


def default_path(name: str) -> Path:
    """``./policies/<name>`` when ``./policies`` is a directory, else the packaged demo copy.

    The choice is made for the directory as a whole, never per file: a ``./policies`` holding a
    real policy but no principals file must not pick up the demo principals (their secrets are
    public).
    """
    if LOCAL_DIR.is_dir():
        return LOCAL_DIR / name
    return packaged(name)


def is_packaged(path: Path) -> bool:
    """True if ``path`` is one of the packaged demo files."""
    try:  # the directory, not the file: in the repository the files are links to policies/
        return path.absolute().parent.resolve() == PACKAGED_DIR
    except OSError:
        return False


class InitError(Exception):
    """``icegov init`` cannot write its copies (a file exists, or the directory is unusable)."""


def write_copies(directory: Path, *, overwrite: bool = False) -> list[Path]:
    """Write editable copies of ``FILES`` into ``directory`` (created if needed).

    Refuses, writing nothing, when any of them exists and ``overwrite`` is False.
    """
    targets = [directory / name for name in FILES]
    existing = [str(path) for path in targets if path.exists()]
    if existing and not overwrite:
        raise InitError(f"{', '.join(existing)} already exist(s); use --force to overwrite")
    try:
        directory.mkdir(parents=True, exist_ok=True)
        for name, target in zip(FILES, targets, strict=True):
            target.write_bytes(packaged(name).read_bytes())
    except OSError as exc:
        raise InitError(f"cannot write into {directory}: {exc.strerror or exc}") from None
    return targets
