"""Identity: who is calling icegov.

- ``settings``: ``IdentitySettings`` (nested as ``identity`` in the main settings).
- ``principals`` / ``hashing``: the principals file, secrets stored as salted scrypt hashes.
- ``store``: the principals file in force, re-read when it changes; every icegov token is judged
  by it (a removed principal gets 401, changed roles apply at once).
- ``tokens``: icegov's own short-lived HS256 access tokens.
- ``endpoint``: ``POST /v1/oauth/tokens`` (client credentials, RFC 8693 token exchange).
- ``authenticator``: bearer token on every other request → ``Principal`` (or 401).
- ``jwks`` / ``oidc``: tokens from an external OIDC issuer.
- ``setup``: ``build_identity`` composes all of it from settings.
- ``cli``: the ``principal`` click group.

The names below load on first use, so ``proxy.settings`` can import ``proxy.identity.settings``
without pulling in (or cycling through) the token and HTTP machinery.

Room: it may import policy, reads, audit, catalog, backing, planning, commits, ops, defaults and
the shared vocabulary, nothing above (the gate authenticates through it).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from proxy.identity.authenticator import Authenticator
    from proxy.identity.endpoint import TokenEndpoint
    from proxy.identity.principals import PrincipalsFileError
    from proxy.identity.settings import IdentityConfigError, IdentitySettings
    from proxy.identity.setup import Identity, build_identity

_HOMES = {
    "Authenticator": "authenticator", "TokenEndpoint": "endpoint",
    "PrincipalsFileError": "principals", "IdentityConfigError": "settings",
    "IdentitySettings": "settings", "Identity": "setup", "build_identity": "setup",
}

__all__ = [
    "Authenticator",
    "Identity",
    "IdentityConfigError",
    "IdentitySettings",
    "PrincipalsFileError",
    "TokenEndpoint",
    "build_identity",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'proxy.identity' has no attribute {name!r}")
    return getattr(importlib.import_module(f"proxy.identity.{home}"), name)
