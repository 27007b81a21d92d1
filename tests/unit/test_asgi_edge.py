"""The sans-I/O parts of the bare `/mcp` edge: request headers, and what every response's headers get."""

from executor_mcp.transport.asgi import ALLOW_ORIGIN, RequestHeaders, decide_finish
from executor_mcp.transport.browser import BrowserGuard
from executor_mcp.transport.headers import PREFLIGHT

BOUND = "http://127.0.0.1:8123"


def _guard(enabled: bool) -> BrowserGuard:
    guard = BrowserGuard(enabled=enabled, loopback=True, allowed_origins=("https://console.example",))
    guard.listening(BOUND, BOUND)
    return guard


def test_request_headers_are_case_insensitive_and_a_repeated_one_reads_as_its_first_value() -> None:
    headers = RequestHeaders([(b"Host", b"a"), (b"host", b"b"), (b"X-Thing", b"\xe9")])
    assert headers["HOST"] == "a"
    assert headers.get("x-thing") == "\xe9"
    assert "X-THING" in headers
    assert "missing" not in headers
    assert 3 not in headers
    assert headers.get("missing", "default") == "default"
    assert sorted(headers) == ["host", "x-thing"]
    assert len(headers) == 2


def test_with_bearer_auth_cors_is_star_and_a_response_keeps_its_own() -> None:
    finish = decide_finish(_guard(False), RequestHeaders([]), body_owed=False, console=False)
    headers = finish.apply([("Content-Type", "application/json"), ("access-control-expose-headers", "x")])
    assert ("Access-Control-Allow-Origin", "*") in headers
    assert [value for name, value in headers if name.lower() == "access-control-expose-headers"] == ["x"]
    assert not any(name == "Vary" for name, _ in headers)


def test_without_auth_an_allowed_origin_is_echoed_over_any_star_and_varies_on_origin() -> None:
    request = RequestHeaders([(b"origin", b"https://console.example")])
    headers = decide_finish(_guard(True), request, body_owed=False, console=False).apply(list(PREFLIGHT.items()))
    assert [value for name, value in headers if name == ALLOW_ORIGIN] == ["https://console.example"]
    assert ("Vary", "Origin") in headers
    assert ("Access-Control-Max-Age", PREFLIGHT["Access-Control-Max-Age"]) in headers


def test_without_auth_and_an_unknown_or_no_origin_no_cors_header_goes_out() -> None:
    for request in (RequestHeaders([(b"origin", b"https://evil.example")]), RequestHeaders([])):
        headers = decide_finish(_guard(True), request, body_owed=False, console=False).apply(list(PREFLIGHT.items()))
        assert not any(name.lower().startswith("access-control-") for name, _ in headers)


def test_console_pages_carry_no_cors_headers_even_with_auth() -> None:
    finish = decide_finish(_guard(False), RequestHeaders([]), body_owed=False, console=True)
    assert finish.apply([("Access-Control-Allow-Origin", "*"), ("Content-Type", "text/html")]) == [
        ("Content-Type", "text/html")
    ]


def test_a_body_still_owed_closes_the_connection_whatever_the_response_said() -> None:
    finish = decide_finish(_guard(False), RequestHeaders([]), body_owed=True, console=False)
    headers = finish.apply([("connection", "keep-alive")])
    assert [value for name, value in headers if name.lower() == "connection"] == ["close"]
