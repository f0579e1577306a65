"""Identity settings: who may call icegov and how their tokens are checked.

Nested in the main settings as ``identity`` (environment ``ICEGOV__IDENTITY__<FIELD>``; tuples as
JSON, e.g. ``ICEGOV__IDENTITY__ANONYMOUS_ROLES='["reader"]'``).
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator

from proxy import defaults
from proxy.keys import MIN_KEY_BYTES, check_key, process_key

MIN_SIGNING_KEY_BYTES = MIN_KEY_BYTES  # HS256: at least as long as its digest (RFC 7518 3.2)
ASYMMETRIC_ALGORITHMS = frozenset({
    "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA",
})


class IdentityConfigError(ValueError):
    """The identity configuration cannot work; raised at start-up, never per request."""


class IdentitySettings(BaseModel):
    """How callers authenticate: icegov's own tokens, an external OIDC issuer, or anonymously."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    principals_file: Path | None = Field(
        default_factory=lambda: defaults.default_path(defaults.PRINCIPALS),
        description="Principals allowed the client_credentials grant, and the authority on "
                    "every icegov token's principal and roles (re-read when it changes); None "
                    "disables the grant. Default: ./policies/principals.yaml when ./policies "
                    "exists, else the packaged demo principals.")
    principals_check_seconds: float = Field(
        default=1.0, ge=0, le=60,
        description="At most this often the principals file is checked for changes (stat).")
    signing_key: SecretStr | None = Field(
        default=None, description="HS256 key for icegov-issued tokens (at least 32 bytes).")
    issuer: str = "icegov"
    audience: str = "icegov"
    token_lifetime_seconds: int = Field(default=3600, gt=0, le=7 * 24 * 3600)
    leeway_seconds: int = Field(default=30, ge=0, le=300,
                                description="Clock skew tolerated on exp/iat/nbf.")
    verified_token_cache_size: int = Field(default=4096, ge=0)

    oidc_issuer: str | None = None
    oidc_audience: str | None = None
    oidc_jwks_file: Path | None = None
    oidc_jwks_url: str | None = None
    oidc_name_claim: str = "sub"
    oidc_groups_claim: str = Field(
        default="groups", description="Claim holding the roles; dots walk nested objects.")
    oidc_algorithms: tuple[str, ...] = ("RS256", "ES256")
    oidc_jwks_cache_seconds: int = Field(default=300, gt=0)
    oidc_jwks_timeout_seconds: float = Field(default=5.0, gt=0)

    anonymous_principal: str | None = None
    anonymous_roles: tuple[str, ...] = ()
    pass_through_caller_token: bool = False

    @model_validator(mode="after")
    def _consistent(self) -> IdentitySettings:
        self._check_signing_key()
        self._check_oidc()
        if self.anonymous_roles and self.anonymous_principal is None:
            raise ValueError("anonymous_roles needs anonymous_principal")
        return self

    def _check_signing_key(self) -> None:
        if self.signing_key is None:
            return
        check_key(self.signing_key.get_secret_value(), "signing_key")

    def _check_oidc(self) -> None:
        if not self.oidc_enabled and not (self.oidc_audience or self.oidc_jwks_file
                                          or self.oidc_jwks_url):
            return
        if not self.oidc_issuer or not self.oidc_audience:
            raise ValueError("OIDC needs both oidc_issuer and oidc_audience")
        if (self.oidc_jwks_file is None) == (self.oidc_jwks_url is None):
            raise ValueError("OIDC needs exactly one of oidc_jwks_file and oidc_jwks_url")
        unsafe = set(self.oidc_algorithms) - ASYMMETRIC_ALGORITHMS
        if unsafe or not self.oidc_algorithms:
            raise ValueError(f"oidc_algorithms must be asymmetric JWS algorithms, not {unsafe}")

    @property
    def oidc_enabled(self) -> bool:
        """True when bearer tokens from an external OIDC issuer are accepted."""
        return self.oidc_issuer is not None

    def token_signing_key(self, *, embedded_catalog: bool) -> bytes:
        """The key icegov signs its tokens with.

        The configured key if there is one. Without one, a process that serves the embedded demo
        catalog gets a random key for its lifetime (tokens die with the process, and replicas
        cannot verify each other's); a proxy in front of a real catalog refuses to start.
        """
        if self.signing_key is not None:
            return self.signing_key.get_secret_value().encode()
        if embedded_catalog:
            return process_key("token-signing")
        raise IdentityConfigError(
            "no token signing key: set ICEGOV__IDENTITY__SIGNING_KEY (at least "
            f"{MIN_SIGNING_KEY_BYTES} random bytes, e.g. `openssl rand -base64 48`) when icegov "
            "fronts a remote catalog")
