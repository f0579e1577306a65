"""Policy settings: where the Casbin model and policy live, and how often they are re-read.

Nested in the main settings as ``policy`` (environment ``ICEGOV__POLICY__<FIELD>``). The paths
default to ``./policies/...`` when ``./policies`` exists, else to the demo policy packaged with
icegov (``proxy.defaults``).
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from proxy import defaults


class PolicySettings(BaseModel):
    """The policy files and their hot reload."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model_path: Path = Field(default_factory=lambda: defaults.default_path(defaults.MODEL),
                             description="The Casbin model (the policy language's semantics).")
    policy_path: Path = Field(default_factory=lambda: defaults.default_path(defaults.POLICY),
                              description="The rules: 'p' and 'g' lines.")
    reload_interval_seconds: float = Field(
        default=1.0, gt=0, le=3600,
        description="How often both files are checked for changes (mtime, size and hash).")
    decision_cache_size: int = Field(
        default=65536, ge=0,
        description="Decisions remembered per policy generation (LRU); 0 disables the cache.")

    @property
    def is_demo(self) -> bool:
        """True when the rules in force are the demo policy packaged with icegov."""
        return defaults.is_packaged(self.policy_path)
