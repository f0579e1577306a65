"""The OCSF sink (``ICEGOV__AUDIT__OCSF_FILE``): every sealed record, as an OCSF event, one JSON
line each, appended to a file beside the audit stream.

The file is a copy for SIEMs, not the chain: ``icegov audit verify`` checks the audit file, and
each OCSF event carries its record's ``seq``, ``prev`` and ``hash`` (``unmapped.icegov``,
``metadata.sequence``/``uid``) so it can be matched to the verified record. It rotates with the
audit file: when the audit file is renamed ``audit.log.<first seq>-<UTC time>``, the OCSF file is
renamed with the same suffix (``audit.ocsf.jsonl.<first seq>-<UTC time>``, the pair sorting
together) and the next event starts a new one. Beside stdout alone (no audit file), it is not
rotated.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import structlog

from proxy.audit.files import rotation_suffix
from proxy.audit.ocsf import NotARecord, to_ocsf

log = structlog.get_logger("icegov")


class OcsfFile:
    """Appends each sealed line's OCSF event to ``path`` (one flushed line per record; each
    record names the digest of the policy that decided it, the event's policy version)."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._fd: int | None = None

    @property
    def name(self) -> str:
        return f"ocsf:{self._path}"

    def write(self, line: str, seq: int) -> None:
        try:
            event = to_ocsf(json.loads(line))
        except (NotARecord, ValueError) as exc:  # never for a line icegov sealed
            raise OSError(f"record {seq} has no OCSF form: {exc}") from exc
        data = (json.dumps(event, separators=(",", ":"), sort_keys=True) + "\n").encode()
        if self._fd is None:
            self._fd = os.open(self._path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        written = 0
        while written < len(data):
            written += os.write(self._fd, data[written:])

    def rotate(self, rotated_audit_file: Path) -> None:
        """The audit file was just renamed ``rotated_audit_file``: rename this file with the same
        suffix (when it holds anything); the next write starts a new one. Raises OSError."""
        self.close()
        if not self._path.exists() or self._path.stat().st_size == 0:
            return
        suffix = rotation_suffix(rotated_audit_file.name)
        target = self._path.with_name(self._path.name + suffix)
        os.rename(self._path, target)
        log.info("audit.ocsf_rotated", file=str(target))

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
