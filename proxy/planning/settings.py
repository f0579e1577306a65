"""Settings of server-side scan planning (``ICEGOV__PLANNING__<FIELD>``)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from proxy.keys import check_key


class PlanningSettings(BaseModel):
    """How icegov plans scans: sizes, caches, and the key that signs plan tasks.

    Plan ids and plan tasks are self-contained signed tokens: any replica holding the same
    ``task_key`` serves them. Without a key, each process draws a random one at start-up (fine
    for one process; replicas must share a key).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    task_key: SecretStr | None = Field(
        default=None, description="HMAC key for plan ids and plan tasks (shared by replicas).")
    task_ttl_seconds: int = Field(
        default=3600, gt=0, le=7 * 24 * 3600, description="How long a plan id or task is valid.")
    shard_files: int = Field(
        default=20_000, gt=0,
        description="About how many files one plan task covers; a plan over more than one "
                    "shard is answered with plan tasks.")
    submit_above_files: int = Field(
        default=1_000_000, gt=0,
        description="A plan listing more files is answered 'submitted' to clients that poll.")
    poll_wait_seconds: float = Field(
        default=5.0, gt=0, description="How long a poll waits for a submitted plan to finish.")
    manifest_cache_entries: int = Field(
        default=2_000_000, ge=0, description="Manifest entries kept decoded in memory.")
    plan_cache_plans: int = Field(default=256, ge=0, description="Plans kept for reuse.")
    answer_cache_bytes: int = Field(
        default=256 * 1024 * 1024, ge=0,
        description="Planned tasks kept as written JSON (bytes), served again as they are.")
    threads: int = Field(default=4, gt=0, le=64, description="Manifests read in parallel.")
    mask_capable_clients: tuple[str, ...] = Field(
        default=(),
        description="X-Client-Version prefixes of clients that apply read-restrictions masks. "
                    "Masked columns are served masked by governed snapshots to every client, so "
                    "this only lets such a client's principal see masked columns' names in view "
                    "checks. Honoured only for mask_capable_principals: the header is the "
                    "caller's own claim.")
    mask_capable_principals: tuple[str, ...] = Field(
        default=(),
        description="Principals or roles trusted to run the mask_capable_clients: only their "
                    "requests may be answered with masked columns for the client to mask.")

    @model_validator(mode="after")
    def _masks_trusted_to_someone(self) -> PlanningSettings:
        if self.mask_capable_clients and not self.mask_capable_principals:
            raise ValueError("mask_capable_clients needs mask_capable_principals: the "
                             "X-Client-Version header is the caller's own claim, so name the "
                             "principals or roles whose clients are trusted to apply masks")
        return self

    @field_validator("task_key")
    @classmethod
    def _strong_key(cls, key: SecretStr | None) -> SecretStr | None:
        if key is not None:
            check_key(key.get_secret_value(), "task_key")
        return key
