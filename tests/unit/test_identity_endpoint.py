"""The token endpoint, driven through its handler with what the Iceberg Java client sends."""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import jwt
import pytest
import yaml
from pydantic import SecretStr
from starlette.responses import Response

from proxy.governance import Principal
from proxy.identity.endpoint import TOKEN_EXCHANGE, TokenEndpoint
from proxy.identity.principals import PrincipalsFileError, new_entry
from proxy.identity.settings import IdentitySettings
from proxy.identity.setup import build_identity
from proxy.identity.store import PrincipalStore
from proxy.identity.tokens import ACCESS_TOKEN_TYPE, IcegovTokens
from proxy.inbound import InboundRequest
from proxy.routes import RouteTable

KEY = b"test-signing-key-of-at-least-32-bytes!!"
SETTINGS_KEY = SecretStr(KEY.decode())
FORM = "application/x-www-form-urlencoded"


@pytest.fixture(scope="module")
def principals_text() -> str:
    entries = [new_entry("writer", ["writer"], "writer-secret"),
               new_entry("analyst", ["analyst"], "analyst-secret")]
    return yaml.safe_dump({"principals": [e.model_dump() for e in entries]})


@pytest.fixture
def principals_file(tmp_path: Path, principals_text: str) -> Path:
    path = tmp_path / "principals.yaml"
    path.write_text(principals_text)
    return path


def make_tokens(clock: float | None = None) -> IcegovTokens:
    kwargs: dict[str, Any] = {} if clock is None else {"clock": lambda: clock}
    return IcegovTokens(KEY, issuer="icegov", audience="icegov", lifetime_seconds=600, **kwargs)


@pytest.fixture
def endpoint(principals_file: Path) -> TokenEndpoint:
    return TokenEndpoint(make_tokens(), PrincipalStore(principals_file))


def post(endpoint: TokenEndpoint, form: dict[str, str] | str, *, content_type: str = FORM,
         authorization: str | None = None) -> tuple[int, dict[str, Any], Response]:
    body = (form if isinstance(form, str) else urlencode(form)).encode()
    headers = [(b"content-type", content_type.encode())]
    if authorization is not None:
        headers.append((b"authorization", authorization.encode()))
    route = RouteTable().match("POST", "/v1/oauth/tokens")
    assert route is not None and route.endpoint.name == "oauth_tokens"
    request = InboundRequest("POST", b"/v1/oauth/tokens", b"", tuple(headers), body, route)
    response = asyncio.run(endpoint(request))
    return response.status_code, json.loads(bytes(response.body)), response


def basic(credential: str) -> str:
    return "Basic " + base64.b64encode(credential.encode()).decode()


def client_credentials(client_id: str, secret: str) -> dict[str, str]:
    """What OAuth2Util sends for Spark's credential=<id>:<secret>."""
    return {"grant_type": "client_credentials", "client_id": client_id, "client_secret": secret,
            "scope": "catalog"}


def exchange(subject: str) -> dict[str, str]:
    """What OAuth2Util sends to refresh its token."""
    return {"grant_type": TOKEN_EXCHANGE, "scope": "catalog", "subject_token": subject,
            "subject_token_type": ACCESS_TOKEN_TYPE}


def assert_oauth_error(result: tuple[int, dict[str, Any], Response], status: int,
                       error: str) -> str:
    code, body, response = result
    assert (code, body["error"]) == (status, error), body
    assert set(body) == {"error", "error_description"} and body["error_description"]
    assert response.headers["cache-control"] == "no-store"
    return str(body["error_description"])


def claims_of(token: str) -> dict[str, Any]:
    return jwt.decode(token, KEY, algorithms=["HS256"], audience="icegov", issuer="icegov")


# --- client credentials ----------------------------------------------------------------------

def test_client_credentials_in_the_form(endpoint: TokenEndpoint) -> None:
    status, body, response = post(endpoint, client_credentials("writer", "writer-secret"))
    assert status == 200, body
    assert body["token_type"] == "bearer" and body["expires_in"] == 600
    assert body["issued_token_type"] == ACCESS_TOKEN_TYPE
    assert response.headers["cache-control"] == "no-store"
    claims = claims_of(body["access_token"])
    assert claims["sub"] == "writer" and claims["roles"] == ["writer"]
    assert claims["exp"] - claims["iat"] == 600 and claims["jti"]


def test_client_credentials_with_basic_auth(endpoint: TokenEndpoint) -> None:
    status, body, _ = post(endpoint, {"grant_type": "client_credentials", "scope": "catalog"},
                           authorization=basic("analyst:analyst-secret"))
    assert status == 200, body
    assert claims_of(body["access_token"])["sub"] == "analyst"


def test_each_token_is_distinct(endpoint: TokenEndpoint) -> None:
    first = post(endpoint, client_credentials("writer", "writer-secret"))[1]["access_token"]
    second = post(endpoint, client_credentials("writer", "writer-secret"))[1]["access_token"]
    assert first != second


@pytest.mark.parametrize(("client_id", "secret"), [
    ("writer", "not-the-secret"), ("writer", "analyst-secret"), ("nobody", "writer-secret"),
    ("writer", ""),
])
def test_wrong_credentials_are_invalid_client(
        endpoint: TokenEndpoint, client_id: str, secret: str) -> None:
    result = post(endpoint, client_credentials(client_id, secret))
    description = assert_oauth_error(result, 401, "invalid_client")
    assert not secret or secret not in description
    assert result[2].headers["www-authenticate"].startswith("Basic")


def test_wrong_basic_secret_is_invalid_client(endpoint: TokenEndpoint) -> None:
    result = post(endpoint, {"grant_type": "client_credentials"},
                  authorization=basic("writer:nope"))
    assert_oauth_error(result, 401, "invalid_client")


def test_malformed_basic_is_invalid_client(endpoint: TokenEndpoint) -> None:
    result = post(endpoint, {"grant_type": "client_credentials"}, authorization="Basic !!!")
    assert_oauth_error(result, 401, "invalid_client")


def test_secret_without_client_id_is_invalid_client(endpoint: TokenEndpoint) -> None:
    """Spark's credential=<secret> (no id) sends no client_id."""
    result = post(endpoint, {"grant_type": "client_credentials", "client_secret": "x"})
    assert "client_id" in assert_oauth_error(result, 401, "invalid_client")


def test_no_credentials_is_invalid_client(endpoint: TokenEndpoint) -> None:
    assert_oauth_error(post(endpoint, {"grant_type": "client_credentials"}), 401,
                       "invalid_client")


def test_conflicting_basic_and_form_credentials(endpoint: TokenEndpoint) -> None:
    result = post(endpoint, client_credentials("writer", "writer-secret"),
                  authorization=basic("analyst:analyst-secret"))
    assert_oauth_error(result, 400, "invalid_request")


# --- request shape ---------------------------------------------------------------------------

def test_unknown_grant_is_unsupported(endpoint: TokenEndpoint) -> None:
    result = post(endpoint, {"grant_type": "password", "username": "a", "password": "b"})
    assert_oauth_error(result, 400, "unsupported_grant_type")


def test_missing_grant_is_invalid_request(endpoint: TokenEndpoint) -> None:
    assert_oauth_error(post(endpoint, {"client_id": "writer"}), 400, "invalid_request")


def test_json_body_is_invalid_request(endpoint: TokenEndpoint) -> None:
    result = post(endpoint, json.dumps(client_credentials("writer", "writer-secret")),
                  content_type="application/json")
    assert_oauth_error(result, 400, "invalid_request")


def test_form_with_charset_is_accepted(endpoint: TokenEndpoint) -> None:
    status, _, _ = post(endpoint, client_credentials("writer", "writer-secret"),
                        content_type=FORM + "; charset=UTF-8")
    assert status == 200


def test_repeated_parameter_is_invalid_request(endpoint: TokenEndpoint) -> None:
    form = urlencode(client_credentials("writer", "writer-secret")) + "&client_id=analyst"
    assert_oauth_error(post(endpoint, form), 400, "invalid_request")


# --- token exchange --------------------------------------------------------------------------

def issue(endpoint: TokenEndpoint, client_id: str = "writer",
          secret: str = "writer-secret") -> str:
    status, body, _ = post(endpoint, client_credentials(client_id, secret))
    assert status == 200, body
    return str(body["access_token"])


def test_exchange_refreshes_a_valid_token(endpoint: TokenEndpoint) -> None:
    old = issue(endpoint)
    status, body, _ = post(endpoint, exchange(old), authorization=f"Bearer {old}")
    assert status == 200, body
    assert body["issued_token_type"] == ACCESS_TOKEN_TYPE
    assert body["access_token"] != old
    claims = claims_of(body["access_token"])
    assert (claims["sub"], claims["roles"]) == ("writer", ["writer"])


def test_exchange_takes_roles_from_the_current_principals_file(
        endpoint: TokenEndpoint, principals_file: Path) -> None:
    old = make_tokens().issue(Principal("writer", ("admin",))).token
    status, body, _ = post(endpoint, exchange(old))
    assert status == 200
    assert claims_of(body["access_token"])["roles"] == ["writer"]


def test_exchange_for_a_removed_principal_is_refused(principals_file: Path) -> None:
    endpoint = TokenEndpoint(make_tokens(), PrincipalStore(None))
    old = make_tokens().issue(Principal("writer", ("writer",))).token
    assert_oauth_error(post(endpoint, exchange(old)), 401, "invalid_grant")


def test_exchange_of_an_expired_token_is_refused(endpoint: TokenEndpoint) -> None:
    expired = make_tokens(clock=1_000_000).issue(Principal("writer", ("writer",))).token
    result = post(endpoint, exchange(expired), authorization=f"Bearer {expired}")
    assert "expired" in assert_oauth_error(result, 401, "invalid_grant")


def test_exchange_of_a_forged_token_is_refused(endpoint: TokenEndpoint) -> None:
    forged = IcegovTokens(b"another-key-that-is-32-bytes-long!!!!", issuer="icegov",
                          audience="icegov", lifetime_seconds=600).issue(
        Principal("writer", ("admin",))).token
    result = post(endpoint, exchange(forged))
    description = assert_oauth_error(result, 401, "invalid_grant")
    assert forged not in description


def test_exchange_of_garbage_is_refused(endpoint: TokenEndpoint) -> None:
    assert_oauth_error(post(endpoint, exchange("not-a-jwt")), 401, "invalid_grant")


def test_expired_token_with_the_clients_basic_credential_is_refreshed(
        endpoint: TokenEndpoint) -> None:
    """OAuth2Util's refreshExpiredToken: the expired token plus Basic id:secret."""
    expired = make_tokens(clock=1_000_000).issue(Principal("writer", ("writer",))).token
    status, body, _ = post(endpoint, exchange(expired), authorization=basic("writer:writer-secret"))
    assert status == 200, body
    assert claims_of(body["access_token"])["sub"] == "writer"


def test_expired_token_of_another_client_is_not_refreshed(endpoint: TokenEndpoint) -> None:
    expired = make_tokens(clock=1_000_000).issue(Principal("writer", ("writer",))).token
    result = post(endpoint, exchange(expired), authorization=basic("analyst:analyst-secret"))
    assert_oauth_error(result, 401, "invalid_grant")


def test_expired_forged_token_with_credentials_is_refused(endpoint: TokenEndpoint) -> None:
    forged = jwt.encode({"sub": "writer", "iss": "icegov", "aud": "icegov", "iat": 1, "exp": 2},
                        b"x" * 32, algorithm="HS256")
    result = post(endpoint, exchange(forged), authorization=basic("writer:writer-secret"))
    assert_oauth_error(result, 401, "invalid_grant")


@pytest.mark.parametrize("change", [
    {"subject_token": ""},
    {"subject_token_type": "urn:ietf:params:oauth:token-type:saml2"},
    {"actor_token": "x", "actor_token_type": ACCESS_TOKEN_TYPE},
    {"requested_token_type": "urn:ietf:params:oauth:token-type:id_token"},
])
def test_malformed_exchange_is_invalid_request(
        endpoint: TokenEndpoint, change: dict[str, str]) -> None:
    form = exchange(issue(endpoint)) | change
    assert_oauth_error(post(endpoint, form), 400, "invalid_request")


# --- composed from settings ------------------------------------------------------------------

def test_a_token_from_the_endpoint_authenticates_later_requests(principals_file: Path) -> None:
    settings = IdentitySettings(principals_file=principals_file, signing_key=SETTINGS_KEY)
    identity = build_identity(settings, embedded_catalog=False)
    status, body, _ = post(identity.token_endpoint, client_credentials("writer", "writer-secret"))
    assert status == 200
    headers = ((b"authorization", f"Bearer {body['access_token']}".encode()),)
    assert identity.authenticator.authenticate(headers) == Principal("writer", ("writer",))


def test_demo_mode_endpoint_and_authenticator_share_the_random_key(principals_file: Path) -> None:
    identity = build_identity(IdentitySettings(principals_file=principals_file),
                              embedded_catalog=True)
    token = post(identity.token_endpoint, client_credentials("writer", "writer-secret"))[1]
    headers = ((b"authorization", f"Bearer {token['access_token']}".encode()),)
    assert identity.authenticator.authenticate(headers).name == "writer"


def test_bad_principals_file_stops_start_up(tmp_path: Path) -> None:
    path = tmp_path / "principals.yaml"
    path.write_text("principals: [")
    settings = IdentitySettings(principals_file=path, signing_key=SETTINGS_KEY)
    with pytest.raises(PrincipalsFileError, match="not valid YAML"):
        build_identity(settings, embedded_catalog=False)


def test_missing_principals_file_means_no_clients_until_it_appears(
        tmp_path: Path, principals_text: str) -> None:
    path = tmp_path / "principals.yaml"
    settings = IdentitySettings(principals_file=path, signing_key=SETTINGS_KEY,
                                principals_check_seconds=0)
    identity = build_identity(settings, embedded_catalog=False)
    result = post(identity.token_endpoint, client_credentials("writer", "writer-secret"))
    assert_oauth_error(result, 401, "invalid_client")
    path.write_text(principals_text)
    assert post(identity.token_endpoint, client_credentials("writer", "writer-secret"))[0] == 200
