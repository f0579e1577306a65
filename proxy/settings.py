"""Settings: one frozen model, loaded once from ``ICEGOV__*`` environment variables and flags.

Only ``Settings`` reads the environment; every nested group is a plain pydantic model filled from
``ICEGOV__<GROUP>__<FIELD>``. ``load_settings`` turns any problem into one ``SettingsError`` line
naming the variable to fix.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal
from urllib.parse import unquote, urlparse

import httpx
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, SettingsConfigDict

from proxy.audit.settings import AuditSettings
from proxy.commits.limits import CommitLimits
from proxy.commits.retry import CommitRetry
from proxy.governed.settings import GovernedSettings
from proxy.idempotency.settings import IdempotencySettings
from proxy.identity.settings import IdentitySettings
from proxy.indexes.settings import IndexSettings
from proxy.keys import check_key
from proxy.planning.settings import PlanningSettings
from proxy.policy.settings import PolicySettings
from proxy.resources import is_plain_name
from proxy.signing.settings import SigningSettings

_MANGLED_URI = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:/")
"""``Path("s3://b/wh")`` is ``s3:/b/wh``: a URI that went through a path type, never a directory
anyone means."""

NO_DATABASE_FOR_OBJECT_STORE = (
    "ICEGOV__CATALOG_DB_URI must be set when ICEGOV__WAREHOUSE is an object-store URI (the "
    "embedded catalog's database cannot live in the object store)")


class Timeouts(BaseModel):
    """Timeouts (seconds) for calls to the backing catalog (``ICEGOV__TIMEOUTS__<FIELD>``).

    A plain model, not settings of its own: only the main settings read the environment, so
    nothing but ``ICEGOV__``-prefixed variables can change it.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    connect: float = 5.0
    read: float = 60.0
    write: float = 30.0
    pool: float = 5.0
    answer: float = Field(default=120.0, gt=0, description=(
        "Whole answers icegov reads itself (loads, listings, commits): from the request going "
        "out to the answer's last byte. Each read is also bounded by ``read``."))

    def for_httpx(self) -> httpx.Timeout:
        """The per-step timeouts in httpx's terms (``answer`` is the forwarder's own)."""
        return httpx.Timeout(connect=self.connect, read=self.read, write=self.write,
                             pool=self.pool)


_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")


class Settings(BaseSettings):
    """Everything icegov reads at start-up. Environment: ``ICEGOV__<FIELD>`` (nested: ``__``)."""

    model_config = SettingsConfigDict(
        env_prefix="ICEGOV__", env_nested_delimiter="__", frozen=True, extra="forbid"
    )

    host: str = "127.0.0.1"
    log_level: Literal["debug", "info", "warning", "error"] = Field(
        default="info", description="Operational log level (JSON lines on stderr).")
    port: int = 8181
    catalog_uri: str | None = Field(
        default=None, description="Backing Iceberg REST catalog; None serves the embedded catalog."
    )
    catalog_token: SecretStr | None = Field(
        default=None, description="Static bearer token for the backing catalog."
    )
    catalog_credential: SecretStr | None = Field(
        default=None, description="OAuth2 client credentials 'client_id:client_secret'."
    )
    catalog_oauth_uri: str | None = Field(
        default=None, description="Token endpoint; defaults to {catalog_uri}/v1/oauth/tokens."
    )
    catalog_oauth_scope: str = "catalog"
    warehouse: Path | str = Field(
        default=Path("warehouse"),
        description="The embedded catalog's warehouse: a local directory, or an object-store "
                    "URI (s3://bucket/prefix; FileIO properties from file_io, and "
                    "catalog_db_uri required).")
    catalog_db_uri: str | None = Field(
        default=None, description="SQLAlchemy URI of the embedded catalog's database."
    )
    file_io: dict[str, str] = Field(
        default_factory=dict, repr=False,  # may hold storage keys
        description="FileIO properties icegov reads table files with (metadata, manifests, "
                    "delete files), e.g. s3.endpoint, s3.region, s3.access-key-id, "
                    "s3.secret-access-key; the backing catalog's per-table config wins over "
                    "them; py-io-impl is refused.")
    max_body_bytes: int = 16 * 1024 * 1024
    timeouts: Timeouts = Field(default_factory=Timeouts)
    max_connections: int = 100
    forward_headers: list[str] = Field(
        default_factory=list,
        description="Caller headers passed on to the backing besides the Iceberg protocol's "
                    "own (proxy.backing.forward.FORWARDED_HEADERS), e.g. x-amz-date for a "
                    "backing that checks the caller's SigV4 signature. Every other header stops "
                    "at icegov.")
    catalog_name: str = Field(
        default="icegov", description="First segment of every policy resource path.")
    catalogs: dict[str, str] = Field(
        default_factory=dict,
        description="URL {prefix} -> catalog name (the first segment of policy resources). "
                    "Requests without a prefix, and with the prefix the backing catalog's "
                    "/v1/config advertises, belong to catalog_name; any other prefix is 404.")
    name_case: Literal["exact", "lower"] = Field(
        default="exact",
        description="How the backing resolves names. exact: as sent (Iceberg's REST and JDBC "
                    "catalogs, the embedded one). lower: it folds them to lower case (Hive, "
                    "Glue and others): a namespace, table or view name that lower-casing or "
                    "case-folding changes is 400, so every name the policy is matched against "
                    "is the one the backing resolves.")
    endpoints_refresh_seconds: float = Field(
        default=300.0, gt=0,
        description="How often the backing catalog's advertised endpoints are re-read.")
    commit_limits: CommitLimits = Field(default_factory=CommitLimits)
    commit_retry: CommitRetry = Field(default_factory=CommitRetry)
    identity: IdentitySettings = Field(default_factory=IdentitySettings)
    # factories, not instances: the policy paths depend on the working directory at load time
    policy: PolicySettings = Field(default_factory=PolicySettings)
    audit: AuditSettings = Field(default_factory=AuditSettings)
    idempotency: IdempotencySettings = Field(default_factory=IdempotencySettings)
    planning: PlanningSettings = Field(default_factory=PlanningSettings)
    governed: GovernedSettings = Field(default_factory=GovernedSettings)
    signing: SigningSettings = Field(default_factory=SigningSettings)
    indexes: IndexSettings = Field(default_factory=IndexSettings)

    @model_validator(mode="after")
    def _catalog_names_are_names(self) -> Settings:
        for name in (self.catalog_name, *self.catalogs.values()):
            if not is_plain_name(name):
                raise ValueError(f"catalog name {name!r} is not a plain name (policy resources "
                                 "start with it)")
        return self

    @field_validator("forward_headers")
    @classmethod
    def _header_names(cls, names: list[str]) -> list[str]:
        for name in names:
            if not _HEADER_NAME.fullmatch(name):
                raise ValueError(f"forward_headers: {name!r} is not a header name")
        return [name.lower() for name in names]

    @field_validator("file_io")
    @classmethod
    def _file_io_loads_no_code(cls, file_io: dict[str, str]) -> dict[str, str]:
        if any(key.startswith("py-io-impl") for key in file_io):
            raise ValueError("py-io-impl may not be set (icegov chooses its FileIO)")
        return file_io

    @field_validator("warehouse", mode="before")
    @classmethod
    def _warehouse_kind(cls, value: object) -> object:
        """An object-store URI stays a (canonical) string; anything else is a local path."""
        if isinstance(value, Path) and _MANGLED_URI.match(str(value)):
            raise ValueError("a URI given as a path lost its '//': pass it as a string")
        if not isinstance(value, str):
            return value
        if value.startswith("file:"):
            return Path(unquote(urlparse(value).path))
        if "://" not in value:
            return Path(value)
        from proxy.catalog.locations import ObjectStoreRoot  # only when one is configured

        return ObjectStoreRoot.of(value).uri

    @model_validator(mode="after")
    def _object_store_warehouse_has_a_database(self) -> Settings:
        if self.embedded and self.object_store_warehouse and not self.catalog_db_uri:
            raise ValueError(NO_DATABASE_FOR_OBJECT_STORE)
        return self

    @model_validator(mode="after")
    def _audit_key_strong(self) -> Settings:
        """The audit HMAC key icegov seals with: as strong as every other key (``verify``
        takes any key, so that old streams stay checkable)."""
        if self.audit.hmac_key is not None:
            audit_key = self.audit.hmac_key.get_secret_value()
            check_key(audit_key, "audit hmac_key")
            others = (self.identity.signing_key, self.planning.task_key)
            if any(o is not None and o.get_secret_value() == audit_key for o in others):
                raise ValueError("audit hmac_key must differ from the signing and plan-task "
                                 "keys (whoever verifies the audit holds it)")
        return self

    @model_validator(mode="after")
    def _one_backing_credential(self) -> Settings:
        if self.catalog_token is not None and self.catalog_credential is not None:
            raise ValueError("set catalog_token or catalog_credential, not both")
        credential = self.catalog_credential
        if credential is not None and ":" not in credential.get_secret_value():
            raise ValueError("catalog_credential must be 'client_id:client_secret'")
        return self

    @property
    def embedded(self) -> bool:
        """True when icegov serves its own catalog instead of forwarding to a remote one."""
        return self.catalog_uri is None

    @property
    def object_store_warehouse(self) -> str | None:
        """The warehouse's object-store URI (``s3://bucket/prefix``), or None when the warehouse
        is a local directory."""
        return self.warehouse if isinstance(self.warehouse, str) else None

    def embedded_db_uri(self) -> str:
        """The embedded catalog's SQLAlchemy URI: ``catalog_db_uri``, else SQLite in a local
        warehouse (an object-store warehouse has no default: SettingsError)."""
        if self.catalog_db_uri:
            return self.catalog_db_uri
        if isinstance(self.warehouse, str):
            raise SettingsError(NO_DATABASE_FOR_OBJECT_STORE)
        return f"sqlite:///{self.warehouse.resolve() / 'catalog.db'}"


class SettingsError(ValueError):
    """Settings that cannot work, described in one line (the variable and what is wrong)."""


def load_settings(**overrides: Any) -> Settings:
    """Settings from the environment with ``overrides`` (flags) on top; ``SettingsError`` if bad."""
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        raise SettingsError(describe_settings_error(exc)) from None


def describe_settings_error(exc: ValidationError) -> str:
    """Pydantic's errors as one line: ``ICEGOV__PORT: Input should be a valid integer; ...``."""
    parts = []
    for error in exc.errors(include_url=False, include_input=False):
        location = [str(part) for part in error["loc"]]
        where = "ICEGOV__" + "__".join(location).upper() if location else "settings"
        message = error["msg"].removeprefix("Value error, ")
        parts.append(f"{where}: {message}")
    return "; ".join(parts)
