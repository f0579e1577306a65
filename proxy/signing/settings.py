"""Settings of S3 remote signing (``ICEGOV__SIGNING__<FIELD>``)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

from proxy.keys import check_key


class SigningSettings(BaseModel):
    """Whether icegov signs storage requests for its clients, and for how long a grant holds."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    enabled: bool = Field(
        default=False,
        description="Advertise icegov's S3 signer in loadTable answers of s3:// tables and sign "
                    "the requests it allows with icegov's own file_io credentials.")
    uri: str | None = Field(
        default=None,
        description="The base URL clients reach icegov's signer at (s3.signer.uri); unset: "
                    "the catalog URI each client already uses.")
    key: SecretStr | None = Field(
        default=None,
        description="HMAC key of signing grants; replicas must share one (unset: a random key "
                    "per process).")
    grant_seconds: float = Field(
        default=900.0, gt=0, le=7 * 24 * 3600,
        description="How long a signer endpoint from one loadTable answer stays valid.")
    read_audit_seconds: float = Field(
        default=60.0, ge=0,
        description="Signed reads under one grant are audited as one record per window of this "
                    "length, with the count of reads signed since the last (0: every read).")

    @field_validator("key")
    @classmethod
    def _strong_key(cls, key: SecretStr | None) -> SecretStr | None:
        if key is not None:
            check_key(key.get_secret_value(), "signing key")
        return key
