"""How much work verifying one commit may cost; beyond a limit the commit is refused (or, for
the row budget, classified by the stricter rule) instead of tying icegov up."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class CommitLimits(BaseModel):
    """Limits on one commit request (environment ``ICEGOV__COMMIT_LIMITS__<FIELD>``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_updates: int = Field(
        default=1000, ge=1, description="Updates in one table commit (413 beyond).")
    max_table_changes: int = Field(
        default=100, ge=1, description="Tables changed by one transaction (413 beyond).")
    max_snapshots: int = Field(
        default=16, ge=1,
        description="Snapshots added by one table commit (413 beyond, before any file is read; "
                    "Java and Spark add 1, pyiceberg 1 or 2).")
    max_manifests: int = Field(
        default=10_000, ge=1, description="Manifests listed by one new manifest list (400 beyond).")
    max_entries: int = Field(
        default=1_000_000, ge=1,
        description="Manifest entries read to verify one commit (400 beyond).")
    max_list_records: int = Field(
        default=50_000, ge=1,
        description="Manifest-list records read to verify one commit, over every list it reads "
                    "(each list is read once per commit; 400 beyond).")
    max_manifests_read: int = Field(
        default=2_000, ge=1,
        description="Manifest files opened to verify one commit (each open has a fixed cost; "
                    "400 beyond). Ordinary commits open a handful.")
    row_bytes_budget: int = Field(
        default=1024 * 1024 * 1024, ge=0,
        description="What verifying rows may cost for one commit, in bytes of decoded data "
                    "(the larger of a file's size, its declared uncompressed size and 8 bytes per "
                    "value); beyond it the stricter classification applies and the audit says "
                    "why.")
    max_footer_bytes: int = Field(
        default=16 * 1024 * 1024, ge=1,
        description="Size of one added Parquet file's footer, read to check the file is what "
                    "its manifest entry claims (400 beyond).")
    footer_bytes_budget: int = Field(
        default=256 * 1024 * 1024, ge=0,
        description="Footer bytes read to check one commit's added files, over all of them "
                    "(400 beyond).")
    partition_bytes_budget: int = Field(
        default=1024 * 1024 * 1024, ge=0,
        description="Bytes of partition source columns held decoded (string and binary "
                    "columns as dictionaries of their distinct values) to prove added data "
                    "files' partition values, over one commit (400 beyond).")
    footer_seconds: float = Field(
        default=60.0, gt=0,
        description="Time checking one commit's added files may take, their footers read in "
                    "parallel (400 beyond).")
