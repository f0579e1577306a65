"""The authenticator: icegov tokens, OIDC tokens against a real JWKS, anonymous callers."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

from proxy.errors import NotAuthorized
from proxy.governance import Principal
from proxy.identity.authenticator import Authenticator, VerifiedTokenCache
from proxy.identity.jwks import JwksKeys
from proxy.identity.oidc import OidcTokens
from proxy.identity.principals import entry_yaml, new_entry
from proxy.identity.settings import IdentityConfigError, IdentitySettings
from proxy.identity.setup import build_identity
from proxy.identity.tokens import IcegovTokens

KEY = b"test-signing-key-of-at-least-32-bytes!!"
IDP = "https://idp.example.test/realms/data"
WRITER = Principal("writer", ("writer", "etl"))


def icegov_tokens(key: bytes = KEY, **overrides: Any) -> IcegovTokens:
    options: dict[str, Any] = {"issuer": "icegov", "audience": "icegov", "lifetime_seconds": 600}
    return IcegovTokens(key, **(options | overrides))


def bearer(token: str) -> tuple[tuple[bytes, bytes], ...]:
    return ((b"host", b"proxy"), (b"authorization", f"Bearer {token}".encode()))


def refused(authenticator: Authenticator, headers: tuple[tuple[bytes, bytes], ...]) -> str:
    with pytest.raises(NotAuthorized) as info:
        authenticator.authenticate(headers)
    assert info.value.status == 401
    assert info.value.to_model()["error"]["type"] == "NotAuthorizedException"
    return info.value.message


# --- icegov tokens ---------------------------------------------------------------------------

def test_valid_icegov_token() -> None:
    token = icegov_tokens().issue(WRITER).token
    principal = Authenticator(icegov_tokens()).authenticate(bearer(token))
    assert principal == Principal("writer", ("writer", "etl"), source="token")


def test_bearer_scheme_is_case_insensitive() -> None:
    token = icegov_tokens().issue(WRITER).token
    headers = ((b"Authorization", f"bearer {token}".encode()),)
    assert Authenticator(icegov_tokens()).authenticate(headers).name == "writer"


def test_missing_token_is_refused() -> None:
    assert "Bearer" in refused(Authenticator(icegov_tokens()), ((b"host", b"proxy"),))


@pytest.mark.parametrize("value", [
    b"Basic d3JpdGVyOndyaXRlci1zZWNyZXQ=", b"Bearer", b"Bearer ", b"Bearer a b", b"token",
])
def test_malformed_authorization_is_refused(value: bytes) -> None:
    refused(Authenticator(icegov_tokens()), ((b"authorization", value),))


def test_two_authorization_headers_are_refused() -> None:
    token = icegov_tokens().issue(WRITER).token
    headers = (*bearer(token), (b"authorization", f"Bearer {token}".encode()))
    refused(Authenticator(icegov_tokens()), headers)


@pytest.mark.parametrize("token", ["not-a-jwt", "a.b.c", "eyJhbGciOiJIUzI1NiJ9.e30"])
def test_malformed_token_is_refused(token: str) -> None:
    message = refused(Authenticator(icegov_tokens()), bearer(token))
    assert "malformed" in message and token not in message


def test_expired_token_is_refused() -> None:
    token = icegov_tokens(clock=lambda: time.time() - 3600).issue(WRITER).token
    message = refused(Authenticator(icegov_tokens()), bearer(token))
    assert message == "bearer token has expired"


def test_wrong_signature_is_refused() -> None:
    token = icegov_tokens(b"some-other-key-which-is-32-bytes-long").issue(WRITER).token
    message = refused(Authenticator(icegov_tokens()), bearer(token))
    assert "signature" in message and token not in message


def test_wrong_audience_is_refused() -> None:
    token = icegov_tokens(audience="another-service").issue(WRITER).token
    assert "audience" in refused(Authenticator(icegov_tokens()), bearer(token))


def test_wrong_issuer_is_refused() -> None:
    token = icegov_tokens(issuer="someone-else").issue(WRITER).token
    assert "issuer" in refused(Authenticator(icegov_tokens()), bearer(token))


@pytest.mark.parametrize("missing", ["exp", "sub", "aud", "iss", "iat"])
def test_token_without_a_required_claim_is_refused(missing: str) -> None:
    now = int(time.time())
    claims = {"sub": "writer", "roles": [], "iss": "icegov", "aud": "icegov", "iat": now,
              "exp": now + 60}
    del claims[missing]
    token = jwt.encode(claims, KEY, algorithm="HS256")
    assert missing in refused(Authenticator(icegov_tokens()), bearer(token))


def test_unsigned_token_is_refused() -> None:
    token = jwt.encode({"sub": "admin", "iss": "icegov", "aud": "icegov"}, "", algorithm="none")
    assert "algorithm" in refused(Authenticator(icegov_tokens()), bearer(token))


def test_verified_tokens_are_cached_until_they_expire() -> None:
    now = [1_000.0]
    cache = VerifiedTokenCache(2, clock=lambda: now[0])
    cache.put("t1", WRITER, valid_until=1_010)
    assert cache.get("t1") == WRITER
    now[0] = 1_010
    assert cache.get("t1") is None and len(cache) == 0


def test_verified_token_cache_is_bounded() -> None:
    cache = VerifiedTokenCache(2)
    for name in ("a", "b", "c"):
        cache.put(name, Principal(name), valid_until=time.time() + 60)
    assert len(cache) == 2 and cache.get("a") is None and cache.get("c") is not None


def test_cached_token_is_still_refused_after_expiry() -> None:
    """On one injected clock for the token and the cache: valid (and cached) until its last
    second, refused the second it expires."""
    now = [time.time()]
    tokens = icegov_tokens(lifetime_seconds=60, clock=lambda: now[0])
    token = tokens.issue(WRITER).token
    authenticator = Authenticator(tokens, clock=lambda: now[0])
    assert authenticator.authenticate(bearer(token)).name == "writer"
    exp = jwt.decode(token, options={"verify_signature": False})["exp"]
    now[0] = exp - 0.5
    assert authenticator.authenticate(bearer(token)).name == "writer"
    now[0] = exp
    assert "expired" in refused(authenticator, bearer(token))


def test_cache_answers_repeat_tokens_without_verifying_again() -> None:
    token = icegov_tokens().issue(WRITER).token
    authenticator = Authenticator(icegov_tokens())
    authenticator.authenticate(bearer(token))
    authenticator._tokens = icegov_tokens(b"a-different-key-now-32-bytes-long!!!")
    assert authenticator.authenticate(bearer(token)).name == "writer"


# --- anonymous -------------------------------------------------------------------------------

def test_anonymous_principal_when_configured() -> None:
    anonymous = Principal("guest", ("reader",), source="anonymous")
    authenticator = Authenticator(icegov_tokens(), anonymous=anonymous)
    assert authenticator.authenticate(((b"host", b"proxy"),)) == anonymous


def test_anonymous_does_not_excuse_a_bad_token() -> None:
    authenticator = Authenticator(icegov_tokens(), anonymous=Principal("guest"))
    refused(authenticator, bearer("not-a-jwt"))


def test_no_anonymous_principal_means_401() -> None:
    refused(Authenticator(icegov_tokens(), anonymous=None), ())


# --- OIDC ------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def rsa_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.fixture(scope="module")
def ec_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def jwks_document(rsa_key: rsa.RSAPrivateKey, ec_key: ec.EllipticCurvePrivateKey | None = None,
                  ) -> dict[str, Any]:
    keys = [RSAAlgorithm.to_jwk(rsa_key.public_key(), as_dict=True)
            | {"kid": "rsa-1", "use": "sig", "alg": "RS256"}]
    if ec_key is not None:
        keys.append(ECAlgorithm.to_jwk(ec_key.public_key(), as_dict=True) | {"kid": "ec-1"})
    return {"keys": keys}


@pytest.fixture
def jwks_file(tmp_path: Path, rsa_key: rsa.RSAPrivateKey,
              ec_key: ec.EllipticCurvePrivateKey) -> Path:
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps(jwks_document(rsa_key, ec_key)))
    return path


def idp_token(private_key: Any, *, kid: str = "rsa-1", algorithm: str = "RS256",
              **overrides: Any) -> str:
    now = int(time.time())
    claims = {"sub": "alice", "iss": IDP, "aud": "icegov", "iat": now, "exp": now + 300,
              "groups": ["analyst", "bi"], "preferred_username": "alice@example.test"}
    claims.update(overrides)
    claims = {k: v for k, v in claims.items() if v is not None}
    return jwt.encode(claims, private_key, algorithm=algorithm, headers={"kid": kid})


def oidc_authenticator(jwks_file: Path, **settings: Any) -> Authenticator:
    options: dict[str, Any] = {
        "signing_key": KEY.decode(), "oidc_issuer": IDP, "oidc_audience": "icegov",
        "oidc_jwks_file": jwks_file, "principals_file": None,
    }
    identity = build_identity(IdentitySettings(**(options | settings)), embedded_catalog=False)
    return identity.authenticator


def test_oidc_token_is_accepted(jwks_file: Path, rsa_key: rsa.RSAPrivateKey) -> None:
    principal = oidc_authenticator(jwks_file).authenticate(bearer(idp_token(rsa_key)))
    assert principal == Principal("alice", ("analyst", "bi"), source="oidc")


def test_oidc_es256_token_is_accepted(jwks_file: Path, ec_key: ec.EllipticCurvePrivateKey) -> None:
    token = idp_token(ec_key, kid="ec-1", algorithm="ES256")
    assert oidc_authenticator(jwks_file).authenticate(bearer(token)).name == "alice"


def test_oidc_name_and_groups_claims_are_configurable(
        jwks_file: Path, rsa_key: rsa.RSAPrivateKey) -> None:
    token = idp_token(rsa_key, realm_access={"roles": ["writer"]})
    authenticator = oidc_authenticator(jwks_file, oidc_name_claim="preferred_username",
                                       oidc_groups_claim="realm_access.roles")
    assert authenticator.authenticate(bearer(token)) == Principal(
        "alice@example.test", ("writer",), source="oidc")


def test_oidc_name_longer_than_a_store_keeps_is_refused(
        jwks_file: Path, rsa_key: rsa.RSAPrivateKey) -> None:
    """Stores keep principal names in bounded columns (the idempotency store's is 512): a
    longer name is a 401 here, never a store failure later."""
    authenticator = oidc_authenticator(jwks_file)
    assert authenticator.authenticate(bearer(idp_token(rsa_key, sub="a" * 256))).name == "a" * 256
    with pytest.raises(NotAuthorized, match="longer than 256"):
        authenticator.authenticate(bearer(idp_token(rsa_key, sub="a" * 257)))


def test_oidc_space_separated_groups(jwks_file: Path, rsa_key: rsa.RSAPrivateKey) -> None:
    token = idp_token(rsa_key, scope="catalog analyst")
    principal = oidc_authenticator(jwks_file, oidc_groups_claim="scope").authenticate(
        bearer(token))
    assert principal.roles == ("catalog", "analyst")


def test_oidc_token_without_groups_has_no_roles(
        jwks_file: Path, rsa_key: rsa.RSAPrivateKey) -> None:
    token = idp_token(rsa_key, groups=None)
    assert oidc_authenticator(jwks_file).authenticate(bearer(token)).roles == ()


@pytest.mark.parametrize(("overrides", "reason"), [
    ({"aud": "another-service"}, "audience"),
    ({"iss": "https://evil.example.test"}, "issuer"),
    ({"exp": 1_000}, "expired"),
    ({"exp": None}, "'exp'"),
    ({"sub": None}, "'sub'"),
    ({"groups": [1, 2]}, "groups"),
    ({"kid": "unknown-kid"}, "key"),
])
def test_bad_oidc_tokens_are_refused(jwks_file: Path, rsa_key: rsa.RSAPrivateKey,
                                     overrides: dict[str, Any], reason: str) -> None:
    kid = overrides.pop("kid", "rsa-1")
    message = refused(oidc_authenticator(jwks_file), bearer(idp_token(rsa_key, kid=kid,
                                                                      **overrides)))
    assert reason in message


def test_oidc_token_signed_by_another_key_is_refused(jwks_file: Path) -> None:
    intruder = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    assert "signature" in refused(oidc_authenticator(jwks_file), bearer(idp_token(intruder)))


def test_oidc_token_with_an_algorithm_not_allowed_is_refused(
        jwks_file: Path, rsa_key: rsa.RSAPrivateKey) -> None:
    token = idp_token(rsa_key, algorithm="RS512")
    assert "algorithm" in refused(oidc_authenticator(jwks_file), bearer(token))


def test_algorithm_confusion_with_the_public_key_is_refused(
        jwks_file: Path, rsa_key: rsa.RSAPrivateKey) -> None:
    """An HS256 token keyed with the IdP's public key must not pass as an OIDC token."""
    public = rsa_key.public_key().public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo)
    for secret in (public, json.dumps(jwks_document(rsa_key)["keys"][0]).encode()):
        token = hs256_by_hand({"sub": "admin", "iss": IDP, "aud": "icegov", "exp": 2**31},
                              secret, kid="rsa-1")
        refused(oidc_authenticator(jwks_file), bearer(token))


def hs256_by_hand(claims: dict[str, Any], secret: bytes, kid: str) -> str:
    """PyJWT refuses to sign with a public key as HMAC secret, so an attacker's way."""
    def part(value: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()

    signing_input = f"{part({'alg': 'HS256', 'typ': 'JWT', 'kid': kid})}.{part(claims)}"
    signature = hmac.new(secret, signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{base64.urlsafe_b64encode(signature).rstrip(b'=').decode()}"


def test_icegov_tokens_still_work_with_oidc_enabled(jwks_file: Path, tmp_path: Path) -> None:
    principals = tmp_path / "principals.yaml"
    principals.write_text(entry_yaml(new_entry("writer", ["writer"], "s")).join(
        ["principals:\n", ""]))
    token = icegov_tokens().issue(WRITER).token
    authenticator = oidc_authenticator(jwks_file, principals_file=principals)
    assert authenticator.authenticate(bearer(token)) == Principal("writer", ("writer",))


def test_an_issuer_user_named_like_a_local_principal_is_refused(
        jwks_file: Path, tmp_path: Path, rsa_key: rsa.RSAPrivateKey) -> None:
    """An issuer whose users pick their names (``preferred_username``) cannot mint ``admin``."""
    principals = tmp_path / "principals.yaml"
    principals.write_text(entry_yaml(new_entry("admin", ["admin"], "s")).join(
        ["principals:\n", ""]))
    authenticator = oidc_authenticator(jwks_file, principals_file=principals,
                                       oidc_name_claim="preferred_username")
    posing = bearer(idp_token(rsa_key, preferred_username="admin"))
    assert "icegov's own" in refused(authenticator, posing)
    assert "icegov's own" in refused(authenticator, posing)  # cached tokens too
    assert authenticator.authenticate(bearer(idp_token(rsa_key))).name == "alice@example.test"


def test_icegov_tokens_name_no_one_without_a_principals_file(jwks_file: Path) -> None:
    token = icegov_tokens().issue(WRITER).token
    assert "no longer exists" in refused(oidc_authenticator(jwks_file), bearer(token))


def test_oidc_tokens_are_refused_when_oidc_is_off(rsa_key: rsa.RSAPrivateKey) -> None:
    assert "algorithm" in refused(Authenticator(icegov_tokens()), bearer(idp_token(rsa_key)))


def test_unusable_jwks_file_stops_start_up(tmp_path: Path) -> None:
    path = tmp_path / "jwks.json"
    path.write_text('{"keys": []}')
    with pytest.raises(IdentityConfigError, match="not a usable JWKS"):
        oidc_authenticator(path)
    with pytest.raises(IdentityConfigError, match="cannot be read"):
        oidc_authenticator(tmp_path / "absent.json")


# --- JWKS from a URL -------------------------------------------------------------------------

class FakeIdp:
    """Serves a JWKS document to JwksKeys' fetch hook and counts the fetches."""

    def __init__(self, document: dict[str, Any]) -> None:
        self.document = document
        self.fetches = 0

    def __call__(self, url: str, timeout: float) -> bytes:
        self.fetches += 1
        return json.dumps(self.document).encode()


def url_authenticator(idp: FakeIdp, now: list[float]) -> Authenticator:
    keys = JwksKeys(url="https://idp.example.test/jwks", fetch=idp, clock=lambda: now[0])
    oidc = OidcTokens(keys, issuer=IDP, audience="icegov", algorithms=["RS256"])
    return Authenticator(icegov_tokens(), oidc)


def test_jwks_url_is_fetched_once_and_cached(rsa_key: rsa.RSAPrivateKey) -> None:
    idp, now = FakeIdp(jwks_document(rsa_key)), [0.0]
    authenticator = url_authenticator(idp, now)
    for _ in range(3):
        authenticator.authenticate(bearer(idp_token(rsa_key, jti=str(_))))
    assert idp.fetches == 1


def test_rotated_key_is_picked_up_but_unknown_kids_do_not_hammer_the_idp(
        rsa_key: rsa.RSAPrivateKey) -> None:
    idp, now = FakeIdp(jwks_document(rsa_key)), [0.0]
    authenticator = url_authenticator(idp, now)
    authenticator.authenticate(bearer(idp_token(rsa_key)))
    new_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    rotated = jwks_document(new_key)
    rotated["keys"][0]["kid"] = "rsa-2"
    idp.document = rotated
    token = idp_token(new_key, kid="rsa-2")
    refused(authenticator, bearer(token))  # too soon after the last fetch
    refused(authenticator, bearer(idp_token(new_key, kid="made-up")))
    assert idp.fetches == 1
    now[0] += 31
    assert authenticator.authenticate(bearer(token)).name == "alice"
    assert idp.fetches == 2


def test_failed_jwks_fetch_keeps_the_known_keys(rsa_key: rsa.RSAPrivateKey) -> None:
    idp, now = FakeIdp(jwks_document(rsa_key)), [0.0]
    authenticator = url_authenticator(idp, now)
    authenticator.authenticate(bearer(idp_token(rsa_key, jti="1")))
    idp.document = {"keys": "broken"}
    now[0] += 301
    assert authenticator.authenticate(bearer(idp_token(rsa_key, jti="2"))).name == "alice"


class SlowIdp(FakeIdp):
    """An issuer whose JWKS answer comes only once ``answer`` is set (or never)."""

    def __init__(self, document: dict[str, Any]) -> None:
        super().__init__(document)
        self.answer = threading.Event()

    def __call__(self, url: str, timeout: float) -> bytes:
        if not self.answer.wait(timeout=10):
            raise httpx.ConnectTimeout("the issuer did not answer")
        return super().__call__(url, timeout)


def test_a_key_fetch_never_stalls_the_event_loop(rsa_key: rsa.RSAPrivateKey) -> None:
    """While the issuer is slow to answer, other requests go on: the loop lets the answer in."""
    idp, now = SlowIdp(jwks_document(rsa_key)), [0.0]
    authenticator = url_authenticator(idp, now)

    async def meanwhile() -> str:
        await asyncio.sleep(0)  # the authentication below has started and is waiting
        idp.answer.set()  # runs only if the loop is free while the keys are fetched
        return "ran"

    async def both() -> list[Any]:
        return list(await asyncio.gather(
            authenticator.authenticate_async(bearer(idp_token(rsa_key))), meanwhile()))

    principal, other = asyncio.run(both())
    assert principal.name == "alice" and other == "ran" and idp.fetches == 1


def test_concurrent_stale_authentications_fetch_the_keys_once(
        rsa_key: rsa.RSAPrivateKey) -> None:
    idp, now = FakeIdp(jwks_document(rsa_key)), [0.0]
    authenticator = url_authenticator(idp, now)

    async def many() -> list[Principal]:
        return list(await asyncio.gather(*(
            authenticator.authenticate_async(bearer(idp_token(rsa_key, jti=str(n))))
            for n in range(8))))

    assert {p.name for p in asyncio.run(many())} == {"alice"}
    assert idp.fetches == 1
