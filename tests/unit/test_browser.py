"""The `--auth none` Origin/Host rules as plain functions of the configuration and the bound address."""

import pytest

from executor_mcp.protocol.errors import Refusal
from executor_mcp.transport.browser import BrowserGuard, normalized_origin


def loopback(**options) -> BrowserGuard:
    guard = BrowserGuard(enabled=True, loopback=True, **options)
    guard.listening("http://127.0.0.1:5000", "http://127.0.0.1:5000")
    return guard


@pytest.mark.parametrize("host", ["127.0.0.1:5000", "localhost:5000", "[::1]:5000", "LOCALHOST:5000", "localhost"])
def test_loopback_hosts_pass(host: str) -> None:
    assert loopback().refusal({"host": host}) is None


@pytest.mark.parametrize("host", ["evil.example:5000", "127.0.0.1:6000", "", "a b", "user@localhost:5000"])
def test_other_hosts_are_refused(host: str) -> None:
    assert loopback().refusal({"host": host}) is Refusal.FORBIDDEN_HOST


@pytest.mark.parametrize(
    ("origin", "allowed"),
    [
        ("http://localhost:5000", True),
        ("http://[::1]:5000", True),
        ("HTTP://127.0.0.1:5000", True),
        ("http://127.0.0.1:5001", False),
        ("https://127.0.0.1:5000", False),
        ("null", False),
        ("http://evil.example", False),
        ("http://localhost:5000.evil.example", False),
        ("http://localhost:5000/path", False),
    ],
)
def test_origins(origin: str, allowed: bool) -> None:
    guard = loopback()
    assert (guard.refusal({"host": "localhost:5000", "origin": origin}) is None) is allowed
    assert guard.cors_origin({"origin": origin}) == (origin if allowed else None)


def test_no_origin_passes_and_gets_no_cors() -> None:
    assert loopback().refusal({"host": "localhost:5000"}) is None
    assert loopback().cors_origin({}) is None


def test_configured_names() -> None:
    guard = loopback(allowed_origins=("https://console.example",), allowed_hosts=("box.lan", "other.lan:81"))
    assert guard.refusal({"host": "box.lan:5000", "origin": "https://console.example:443"}) is None
    assert guard.refusal({"host": "other.lan:81"}) is None
    assert guard.refusal({"host": "other.lan:82"}) is Refusal.FORBIDDEN_HOST


def test_the_public_url_host_passes_without_a_port() -> None:
    guard = BrowserGuard(enabled=True)
    guard.listening("https://mcp.example.com", "http://127.0.0.1:5000")
    assert guard.refusal({"host": "mcp.example.com", "origin": "https://mcp.example.com"}) is None
    assert guard.refusal({"host": "mcp.example.com:8443"}) is Refusal.FORBIDDEN_HOST


def test_disabled_with_bearer_auth() -> None:
    guard = BrowserGuard(enabled=False)
    assert guard.refusal({"host": "evil.example", "origin": "http://evil.example"}) is None
    assert guard.cors_origin({"origin": "http://evil.example"}) == "*"


def test_normalized_origin() -> None:
    assert normalized_origin("http://Example.COM:80") == "http://example.com"
    assert normalized_origin("https://[::1]:8443") == "https://[::1]:8443"
    assert normalized_origin("ftp://example.com") is None
    assert normalized_origin("http://example.com:99999") is None
