"""Every OCSF event icegov writes in the tests is checked against its class's JSON Schema.

``settings_for_tests`` turns the OCSF sink on beside the audit file (``audit.ocsf.jsonl`` in the
test's directory) and registers the file here; after every test, ``check_written`` validates the
lines written since the last check (a session-wide proxy's file is read once, as it grows) and
raises on the first invalid event, failing the test that wrote it.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

from tests.support.ocsf import ocsf_errors

_offsets: dict[Path, int] = {}
_lock = threading.Lock()
checked = 0  # events validated this session (reported by the session's teardown)


def watch(path: Path) -> Path:
    """Validate what icegov writes to ``path`` after each test."""
    with _lock:
        _offsets.setdefault(path, 0)
    return path


def check_written() -> None:
    """Validate every complete line written to a watched file since the last check."""
    with _lock:
        for path, offset in list(_offsets.items()):
            _offsets[path] = _check_from(path, offset)


def _check_from(path: Path, offset: int) -> int:
    global checked
    if not path.exists():
        return offset
    with path.open("rb") as handle:
        handle.seek(offset)
        data = handle.read()
    end = data.rfind(b"\n") + 1  # a line still being written is checked next time
    for line in data[:end].splitlines():
        event = json.loads(line)
        errors = ocsf_errors(event)
        if errors:
            raise AssertionError(f"{path}: OCSF event of seq "
                                 f"{event.get('metadata', {}).get('sequence')} "
                                 f"({event.get('metadata', {}).get('event_code')}) is invalid: "
                                 f"{errors[:5]}")
        checked += 1
    return offset + end
