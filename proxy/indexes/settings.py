"""Settings of bloom-filter indexes (``ICEGOV__INDEXES__<FIELD>``)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

from proxy.keys import check_key


class IndexSettings(BaseModel):
    """How icegov builds the bloom-filter indexes tables ask for
    (``icegov.index.bloom-filter-columns``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    enabled: bool = Field(default=True, description="Build and use bloom-filter indexes.")
    fpp: float = Field(default=0.01, gt=0.0, lt=0.5,
                       description="False-positive rate each filter is sized for.")
    threads: int = Field(default=2, gt=0, le=64, description="Files indexed in parallel.")
    spark_above_bytes: int = Field(
        default=1 << 30, ge=0,
        description="A backfill reading more data than this runs on PySpark.")
    spark_master: str = Field(default="local[2]",
                              description="Spark master for large backfills.")
    max_file_bytes: int = Field(
        default=4 << 30, gt=0, description="Data files larger than this are not indexed.")
    key: SecretStr | None = Field(
        default=None,
        description="HMAC key sealing every stored filter (shared by replicas): a filter file "
                    "without a valid seal is ignored and built again. Unset, filters are "
                    "unsealed and trusted as far as the table's storage is.")

    @field_validator("key")
    @classmethod
    def _strong_key(cls, key: SecretStr | None) -> SecretStr | None:
        if key is not None:
            check_key(key.get_secret_value(), "indexes.key")
        return key

    def key_bytes(self) -> bytes | None:
        """The sealing key, if one is set."""
        return None if self.key is None else self.key.get_secret_value().encode()
