"""Settings of governed snapshots (``ICEGOV__GOVERNED__<FIELD>``)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class GovernedSettings(BaseModel):
    """Where governed data lives, how fresh it must be, and what a build may cost."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    root: str | None = Field(
        default=None,
        description="Location (local path or object-store URI) under which governed files and "
                    "metadata are written, one tree per table and view. Outside every table's "
                    "location. Default: '_icegov_governed' in the embedded warehouse; with a "
                    "backing catalog, beside the table's namespace directory.")
    wait_seconds: float = Field(
        default=10.0, ge=0,
        description="How long a restricted loadTable waits for the governed build of the "
                    "base's current snapshot before it is served the newest complete one.")
    build_max_bytes: int = Field(
        default=16 * 1024**3, gt=0,
        description="Bytes of base data one build may read; a bigger build fails closed (503).")
    build_max_seconds: float = Field(
        default=3600.0, gt=0, description="Time one build may take before it is abandoned.")
    spark_above_bytes: int = Field(
        default=512 * 1024**2, ge=0,
        description="Builds that copy more base bytes than this run as a PySpark job.")
    spark_master: str = Field(
        default="local[*]", description="The Spark master governed copies run on.")
    copy_proven_files: bool = Field(
        default=False,
        description="Storage isolation: copy even files proven to hold only permitted rows, so "
                    "restricted engines need storage access only to the governed location.")
    retain_unused_seconds: float = Field(
        default=24 * 3600.0, gt=0,
        description="How long governed files no governed snapshot lists any more are kept "
                    "before they are removed (readers may still be reading them).")
    threads: int = Field(default=2, gt=0, le=64, description="Files copied in parallel.")
