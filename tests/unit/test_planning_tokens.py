"""Signed plan ids and plan tasks (proxy.planning.tokens): what a token carries survives, and
anything icegov did not issue, or issued for something else, or too long ago, is a clear 4xx."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import hmac
import zlib
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyiceberg.expressions import AlwaysTrue

from proxy.errors import BadRequest, IcebergError, NoSuchPlanId, NoSuchPlanTask
from proxy.planning import tokens
from proxy.planning.request import parse_scan_request
from proxy.planning.tokens import TaskClaims, seal, unseal
from proxy.resources import Resource
from proxy.restrictions import Mask, MaskAction, ReadView, RowFilter

KEY = b"k" * 32
NOW = 1_800_000_000.0


def _claims(**changes: Any) -> TaskClaims:
    scan = parse_scan_request({"select": ["id"], "filter": {"type": "eq", "term": "id",
                                                             "value": 5},
                               "stats-fields": ["id"], "case-sensitive": False})
    base = TaskClaims(
        kind="task", principal="alice", roles=("analyst", "eu"), catalog="main",
        namespace=("sales", "eu"), table="orders", table_uuid="9d1c0c1e-5ad5-4bfb-9e2c-1c0f",
        snapshot_id=42, policy_generation=3, expires_at=NOW + 60, scan=scan.to_json(),
        shard=tuple(f"s3://bucket/warehouse/orders/metadata/{i:05d}-m0.avro"
                    for i in range(300)),
        view_key=(("ssn",), (("email", "sha-256", None),), "region = 'eu'"), nonce="n1")
    return dataclasses.replace(base, **changes)


def test_claims_round_trip_with_a_large_shard_kept_compact() -> None:
    claims = _claims()
    token = seal(claims, KEY)
    assert unseal(token, KEY, NOW) == claims
    assert len(token) < 4000  # 300 manifest paths compress well
    assert all(c.isalnum() or c in "-_." for c in token)  # URL-safe
    assert parse_scan_request(dict(unseal(token, KEY, NOW).scan)) == parse_scan_request(
        dict(claims.scan))


def test_view_key_compares_equal_to_the_views_own_key() -> None:
    view = ReadView(Resource("main", ("sales",), "orders"), denied=frozenset({"ssn"}),
                    masks={"email": Mask(MaskAction.SHA_256)},
                    row_filter=RowFilter(AlwaysTrue(), "region = 'eu'"))
    claims = _claims(view_key=view.cache_key())
    assert tuple(unseal(seal(claims, KEY), KEY, NOW).view_key) == tuple(view.cache_key())


def test_forged_or_foreign_tokens_are_400() -> None:
    token = seal(_claims(), KEY)
    version, body, mac = token.split(".")
    other_claims = seal(_claims(principal="mallory"), KEY).split(".")[1]
    forged = [
        seal(_claims(), b"another key"),
        f"{version}.{other_claims}.{mac}",  # someone else's claims under this MAC
        f"2.{body}.{mac}",
        f"{version}.{body}.{mac[:-2]}",
        f"{version}.{body}",
        token + "A",
        "", "....", "not a token", "1.!!!.???", token.replace(".", "", 1),
    ]
    for bad in forged:
        with pytest.raises(BadRequest, match="invalid plan task"):
            unseal(bad, KEY, NOW)


def test_every_flipped_character_is_refused() -> None:
    """Including the last character of each part, whose low bits base64 does not use: a token
    has exactly one spelling."""
    token = seal(_claims(shard=("m1",)), KEY)
    alphabet = "AQgw-_"
    ends = {token.index(".", 2) - 1, len(token) - 1}
    for i in sorted(set(range(0, len(token), 7)) | ends):
        if token[i] == ".":
            continue
        flipped = token[:i] + next(c for c in alphabet if c != token[i]) + token[i + 1:]
        with pytest.raises(BadRequest):
            unseal(flipped, KEY, NOW)


def test_expired_tokens_say_so_with_404_of_their_kind() -> None:
    task = seal(_claims(expires_at=NOW), KEY)
    with pytest.raises(NoSuchPlanTask, match="expired") as expired:
        unseal(task, KEY, NOW)
    assert expired.value.status == 404
    plan = seal(_claims(kind="plan", shard=(), expires_at=NOW - 1), KEY)
    with pytest.raises(NoSuchPlanId, match="expired"):
        unseal(plan, KEY, NOW, kind="plan")
    assert unseal(task, KEY, NOW - 1).expires_at == NOW


def test_a_plan_id_is_not_a_plan_task_nor_the_reverse() -> None:
    plan = seal(_claims(kind="plan", shard=()), KEY)
    with pytest.raises(BadRequest, match="invalid plan task"):
        unseal(plan, KEY, NOW, kind="task")
    with pytest.raises(BadRequest, match="invalid plan id"):
        unseal(seal(_claims(), KEY), KEY, NOW, kind="plan")
    assert unseal(plan, KEY, NOW, kind="plan").kind == "plan"


def _signed(payload: bytes) -> str:
    """A token whose MAC is right for ``payload`` (what only a key holder could make)."""
    mac = hmac.new(KEY, tokens._DOMAIN + payload, hashlib.sha256).digest()
    encode = base64.urlsafe_b64encode
    return f"1.{encode(payload).rstrip(b'=').decode()}.{encode(mac).rstrip(b'=').decode()}"


def test_inflation_is_bounded_even_for_a_signed_zip_bomb() -> None:
    bomb = zlib.compress(b"[" * (tokens.MAX_CLAIMS_BYTES * 4), 9)
    assert len(bomb) < 10_000
    with pytest.raises(BadRequest):
        unseal(_signed(bomb), KEY, NOW)
    with pytest.raises(BadRequest):
        unseal("1." + "A" * (tokens.MAX_TOKEN_CHARS + 1) + ".x", KEY, NOW)


@pytest.mark.parametrize("payload", [
    b"not zlib", zlib.compress(b"not json"), zlib.compress(b"[1, 2]"),
    zlib.compress(b'{"k": "task"}'),
    zlib.compress(b"[" * 100_000 + b"]" * 100_000),
])
def test_signed_but_malformed_claims_are_400(payload: bytes) -> None:
    with pytest.raises(BadRequest):
        unseal(_signed(payload), KEY, NOW)


def test_signed_claims_of_the_wrong_types_are_400() -> None:
    good = seal(_claims(), KEY).split(".")[1]
    raw = zlib.decompress(base64.urlsafe_b64decode(good + "=" * (-len(good) % 4)))
    for old, new in ((b'"g":3', b'"g":true'), (b'"s":42', b'"s":"42"'),
                     (b'"p":"alice"', b'"p":["alice"]'), (b'"k":"task"', b'"k":"other"')):
        assert old in raw
        with pytest.raises(BadRequest):
            unseal(_signed(zlib.compress(raw.replace(old, new))), KEY, NOW)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300) | st.binary(max_size=300).map(
    lambda b: "1." + base64.urlsafe_b64encode(b).decode() + ".AAAA"))
def test_arbitrary_input_is_only_ever_refused_with_400(token: str) -> None:
    with pytest.raises(IcebergError) as refused:
        unseal(token, KEY, NOW)
    assert refused.value.status == 400


def test_a_token_has_one_spelling() -> None:
    """The MAC's last base64 character carries two unused bits: changing them decodes to the
    same bytes, and is refused all the same."""
    token = seal(_claims(), KEY)
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    respelled = token[:-1] + alphabet[alphabet.index(token[-1]) ^ 1]
    mac = respelled.rsplit(".", 1)[1]
    assert base64.urlsafe_b64decode(mac + "=") == base64.urlsafe_b64decode(
        token.rsplit(".", 1)[1] + "=")
    with pytest.raises(BadRequest):
        unseal(respelled, KEY, NOW)
