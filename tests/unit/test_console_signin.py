"""The console's sign-in cookie, CSRF token and one-time links, directly (no server)."""

import pytest

from executor_mcp.storage.records import Owner
from executor_mcp.web.signin import (
    COOKIE_NAME,
    SIGN_IN_SECONDS,
    VIA_BEARER,
    cookie_value,
    csrf_token,
    csrf_valid,
    new_sign_in,
    safe_next,
    seal,
    set_cookie,
    unseal,
)

KEY = b"k" * 32
ALICE = Owner(account_id="alice", org_id="acme", org_admin=True)


def test_a_sealed_sign_in_opens_with_its_key_until_it_expires() -> None:
    sign_in = new_sign_in(ALICE, VIA_BEARER, 1000.0)
    sealed = seal(KEY, sign_in)
    assert unseal(KEY, sealed, 1001.0) == sign_in
    assert sign_in.principal == ALICE
    assert sign_in.principal.org_admin is True
    assert unseal(KEY, sealed, 1000.0 + SIGN_IN_SECONDS) is None
    assert unseal(b"x" * 32, sealed, 1001.0) is None


def test_a_bearer_sign_in_ends_with_the_bearer() -> None:
    assert new_sign_in(ALICE, VIA_BEARER, 1000.0, until=1060.0).expires_at == 1060.0
    assert new_sign_in(ALICE, VIA_BEARER, 1000.0, until=1e12).expires_at == 1000.0 + SIGN_IN_SECONDS


@pytest.mark.parametrize(
    "tamper",
    [
        lambda sealed: sealed[:-2] + ("AA" if not sealed.endswith("AA") else "BB"),
        lambda sealed: ("f" if sealed[0] != "f" else "g") + sealed[1:],
        lambda sealed: sealed.replace(".", ".."),
        lambda sealed: sealed.split(".")[0],
        lambda sealed: sealed + "." + sealed,
        lambda sealed: "x" * 5000,
        lambda sealed: "",
        lambda sealed: "%%%.###",
    ],
)
def test_a_forged_or_damaged_cookie_opens_nothing(tamper) -> None:
    sealed = seal(KEY, new_sign_in(ALICE, VIA_BEARER, 1000.0))
    assert unseal(KEY, tamper(sealed), 1001.0) is None


def test_a_sign_in_issued_in_the_future_is_refused() -> None:
    assert unseal(KEY, seal(KEY, new_sign_in(ALICE, VIA_BEARER, 5000.0)), 1000.0) is None


def test_the_csrf_token_belongs_to_one_sign_in() -> None:
    first, second = new_sign_in(ALICE, VIA_BEARER, 1000.0), new_sign_in(ALICE, VIA_BEARER, 1000.0)
    token = csrf_token(KEY, first)
    assert csrf_valid(KEY, first, token)
    assert not csrf_valid(KEY, second, token)
    assert not csrf_valid(b"x" * 32, first, token)
    assert not csrf_valid(KEY, first, None)
    assert not csrf_valid(KEY, first, "")


def test_the_cookie_is_http_only_and_strict() -> None:
    header = set_cookie("v", 60.4, secure=True)
    assert header == f"{COOKIE_NAME}=v; Path=/; Max-Age=60; HttpOnly; SameSite=Strict; Secure"
    assert "Secure" not in set_cookie("v", 60, secure=False)
    assert cookie_value(f"a=1; {COOKIE_NAME}=abc.def; b=2") == "abc.def"
    assert cookie_value("a=1") is None
    assert cookie_value(None) is None


@pytest.mark.parametrize(
    ("wanted", "safe"),
    [
        ("/approvals/exec_1", "/approvals/exec_1"),
        ("/policies?x=1", "/policies?x=1"),
        (None, "/"),
        ("", "/"),
        ("//evil.example/", "/"),
        ("/\\evil.example/", "/"),
        ("https://evil.example/", "/"),
        ("javascript:alert(1)", "/"),
        ("/a b", "/"),
        ("/" + "a" * 3000, "/"),
    ],
)
def test_only_a_path_of_this_site_is_a_place_to_return_to(wanted: str | None, safe: str) -> None:
    assert safe_next(wanted) == safe
