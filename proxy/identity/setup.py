"""Building the identity pieces from settings, once, at start-up (config errors surface here)."""

from __future__ import annotations

from dataclasses import dataclass

from proxy.governance import Principal
from proxy.identity.authenticator import Authenticator
from proxy.identity.endpoint import TokenEndpoint
from proxy.identity.jwks import JwksKeys
from proxy.identity.oidc import OidcTokens
from proxy.identity.settings import IdentitySettings
from proxy.identity.store import PrincipalStore
from proxy.identity.tokens import IcegovTokens


@dataclass(frozen=True)
class Identity:
    """What the app needs: the authenticator for every request and the token endpoint handler."""

    authenticator: Authenticator
    token_endpoint: TokenEndpoint
    tokens: IcegovTokens
    principals: PrincipalStore


def build_identity(settings: IdentitySettings, *, embedded_catalog: bool) -> Identity:
    """The identity pieces for these settings, sharing one signing key.

    Raises ``IdentityConfigError`` (no signing key in forwarding mode, unusable JWKS file) or
    ``PrincipalsFileError`` (missing or bad principals file) — call it before serving.
    """
    tokens = IcegovTokens(
        settings.token_signing_key(embedded_catalog=embedded_catalog), issuer=settings.issuer,
        audience=settings.audience, lifetime_seconds=settings.token_lifetime_seconds,
        leeway_seconds=settings.leeway_seconds,
    )
    principals = PrincipalStore(settings.principals_file,
                                check_seconds=settings.principals_check_seconds)
    authenticator = Authenticator(
        tokens, _oidc(settings), anonymous=_anonymous(settings),
        cache_size=settings.verified_token_cache_size, leeway_seconds=settings.leeway_seconds,
        principals=principals,
    )
    return Identity(authenticator, TokenEndpoint(tokens, principals), tokens, principals)


def _oidc(settings: IdentitySettings) -> OidcTokens | None:
    if not settings.oidc_enabled:
        return None
    assert settings.oidc_issuer is not None and settings.oidc_audience is not None
    keys = JwksKeys(file=settings.oidc_jwks_file, url=settings.oidc_jwks_url,
                    cache_seconds=settings.oidc_jwks_cache_seconds,
                    timeout=settings.oidc_jwks_timeout_seconds)
    keys.prefetch()  # a URL's keys now rather than on the first request (failures are logged)
    return OidcTokens(
        keys, issuer=settings.oidc_issuer, audience=settings.oidc_audience,
        algorithms=settings.oidc_algorithms, name_claim=settings.oidc_name_claim,
        groups_claim=settings.oidc_groups_claim, leeway_seconds=settings.leeway_seconds,
    )


def _anonymous(settings: IdentitySettings) -> Principal | None:
    if settings.anonymous_principal is None:
        return None
    return Principal(settings.anonymous_principal, settings.anonymous_roles, source="anonymous")
