"""Where audit records go, how they are sealed, and what happens when they cannot be written."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, SecretStr


class AuditSettings(BaseModel):
    """The audit stream's settings (``ICEGOV__AUDIT__<FIELD>``)."""

    model_config = ConfigDict(frozen=True)

    stdout: bool = True
    file: Path | None = None
    hmac_key: SecretStr | None = Field(
        default=None, description="Seal each record with HMAC-SHA256 under this key instead of a "
                                  "plain SHA-256 hash (verify then needs the key).")
    rotate_bytes: int | None = Field(
        default=None, gt=0, description="Rotate the audit file before it would grow past this.")
    rotate_seconds: float | None = Field(
        default=None, gt=0, description="Rotate the audit file once it has been open this long.")
    writer: str | None = Field(
        default=None, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$",
        description="Who writes this chain: a replica's name (e.g. its host name), so streams "
                    "gathered in one store can be told apart; every record carries it "
                    "(`icegov audit verify --writer`). `icegov serve --workers` names each "
                    "worker's chain after this name and its slot (`<name>-w0`, or `w0`).")
    stdout_lock: Path | None = Field(
        default=None, description="Set by `icegov serve --workers`: a lock file the workers "
                                  "hold while each writes a record to the stdout they share, "
                                  "so no record is split by another's.")
    ocsf_file: Path | None = Field(
        default=None, description="Also append every record, as an OCSF 1.8.0 event (6005 "
                                  "Datastore Activity / 6003 API Activity, security_control "
                                  "profile), to this file (proxy/audit/README.md).")
    fail_closed: bool = Field(
        default=False, description="Refuse mutating requests (503) while the last audit write "
                                   "failed.")

    # --- signed digests (proxy/audit/digests.py) ---
    signing_key: Path | None = Field(
        default=None, description="An Ed25519 private key (PKCS#8 PEM, `icegov audit keygen`): "
                                  "with `file`, icegov writes signed digests of the audit files "
                                  "(at start, rotation, shutdown and periodically) that "
                                  "`icegov audit verify --public-key` checks without any secret.")
    digest_file: Path | None = Field(
        default=None, description="Where the signed digests go (default `<file>.digests`).")
    digest_every_records: int | None = Field(
        default=1000, gt=0, description="Write a digest after this many records.")
    digest_every_seconds: float | None = Field(
        default=60.0, gt=0, description="Write a digest this long after the last one when "
                                        "records were written since (checked as records are "
                                        "written and by a timer while none are).")
    policy_records: bool = Field(
        default=True, description="Write the policy in force as an audit record at start-up and "
                                  "every reload: its digest before/after, the files' owner and "
                                  "mtime, and both files' text as loaded, which `icegov policy "
                                  "why` replays decisions against (proxy/policy/changes.py).")
    # --- end signed digests ---

    def key_bytes(self) -> bytes | None:
        """The HMAC key as bytes, or None for plain SHA-256 hashes."""
        return self.hmac_key.get_secret_value().encode("utf-8") if self.hmac_key else None
