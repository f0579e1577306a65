"""The demo policy shipped inside the package, so icegov runs from any directory.

The files here are byte-for-byte copies of the repository's ``policies/`` (the source policy
authors edit; ``tests/unit/test_cli.py`` fails when the two drift apart). Settings default to
``./policies/<file>`` when a ``policies`` directory exists in the working directory, else to these
packaged copies; ``icegov init DIR`` writes editable copies of them.
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
    try:
        return path.resolve().parent == PACKAGED_DIR
    except OSError:
        return False
