"""Issue 9 item 15: with `--auth none` a web page cannot drive the server (PRODUCT "Browser safety")."""

import json
from pathlib import Path

import httpx
import pytest
import trio

from tests.conftest import ServerUnderTest, jwt_server, start_server
from tests.mcp_http import envelope, headers, initialize_body

EVIL = "http://evil.example"
RULE = {"owner": "org", "pattern": "*", "action": "approve"}


def port_of(server: ServerUnderTest) -> int:
    return int(server.running.url.rsplit(":", 1)[1])


async def policies(http: httpx.AsyncClient, server: ServerUnderTest) -> list[dict]:
    response = await http.get(server.running.url + "/api/policies")
    assert response.status_code == 200
    return response.json()


async def test_a_foreign_origin_cannot_initialize(server: ServerUnderTest, http: httpx.AsyncClient) -> None:
    response = await http.post(server.url, content=json.dumps(initialize_body()), headers=headers(origin=EVIL))
    assert envelope(response) == (403, -32000, "Forbidden: Origin not allowed")
    assert "mcp-session-id" not in response.headers
    assert "access-control-allow-origin" not in response.headers


@pytest.mark.parametrize("origin", [EVIL, "null", "http://127.0.0.1.evil.example", "https://127.0.0.1"])
async def test_a_simple_cross_site_post_cannot_write_a_policy(
    server: ServerUnderTest, http: httpx.AsyncClient, origin: str
) -> None:
    """A `text/plain` POST needs no preflight: the page's request arrives, and must be refused."""
    url = server.running.url + "/api/policies"
    response = await http.post(url, content=json.dumps(RULE), headers={"content-type": "text/plain", "origin": origin})
    assert response.status_code == 403
    assert response.json() == {"error": "Forbidden: Origin not allowed"}
    assert "access-control-allow-origin" not in response.headers
    assert await policies(http, server) == []


@pytest.mark.parametrize("path", ["/mcp", "/api/policies", "/.well-known/oauth-protected-resource", "/nowhere"])
async def test_a_foreign_host_is_refused_everywhere(
    server: ServerUnderTest, http: httpx.AsyncClient, path: str
) -> None:
    """DNS rebinding: the page's origin looks like ours, but the Host names the attacker's domain."""
    port = port_of(server)
    response = await http.get(server.running.url + path, headers={"host": f"evil.example:{port}"})
    assert response.status_code == 403
    expected = "Forbidden: Host not allowed"
    if path.startswith("/api/"):
        assert response.json() == {"error": expected}
    else:
        assert envelope(response) == (403, -32000, expected)


async def test_loopback_names_and_origins_are_allowed(server: ServerUnderTest, http: httpx.AsyncClient) -> None:
    port = port_of(server)
    for name in ("127.0.0.1", "localhost", "[::1]"):
        origin = f"http://{name}:{port}"
        response = await http.post(
            server.url, content=json.dumps(initialize_body()), headers=headers(host=f"{name}:{port}", origin=origin)
        )
        assert response.status_code == 200, response.text
        assert response.headers["access-control-allow-origin"] == origin
        assert "origin" in response.headers["vary"].lower()
        preflight = await http.options(server.url, headers={"origin": origin})
        assert preflight.status_code == 204
        assert preflight.headers["access-control-allow-origin"] == origin
    # Without Origin (every non-browser client) nothing is refused and no CORS headers go out.
    plain = await http.post(server.url, content=json.dumps(initialize_body()), headers=headers())
    assert plain.status_code == 200
    assert not [name for name in plain.headers if name.lower().startswith("access-control-")]


async def test_a_preflight_from_a_foreign_origin_is_refused(server: ServerUnderTest, http: httpx.AsyncClient) -> None:
    for path in ("/mcp", "/api/policies"):
        response = await http.options(server.running.url + path, headers={"origin": EVIL})
        assert response.status_code == 403
        assert "access-control-allow-origin" not in response.headers


async def test_configured_origins_and_hosts_are_allowed(
    nursery: trio.Nursery, data_dir: Path, http: httpx.AsyncClient
) -> None:
    console = "https://console.example:8443"
    server = await start_server(nursery, data_dir, allowed_origin=(console,), allowed_host=("mcp.box",))
    body = json.dumps(initialize_body())
    allowed = await http.post(server.url, content=body, headers=headers(origin=console, host="mcp.box"))
    assert allowed.status_code == 200, allowed.text
    assert allowed.headers["access-control-allow-origin"] == console
    refused = await http.post(server.url, content=body, headers=headers(origin="https://console.example"))
    assert envelope(refused) == (403, -32000, "Forbidden: Origin not allowed")


async def test_with_bearer_auth_cors_stays_open(nursery: trio.Nursery, data_dir: Path, tmp_path: Path) -> None:
    server = await jwt_server(nursery, data_dir, tmp_path)
    async with httpx.AsyncClient(timeout=10) as http:
        response = await http.post(server.url, content=json.dumps(initialize_body()), headers=headers(origin=EVIL))
    assert response.status_code == 401  # the bearer decides, not the Origin
    assert response.headers["access-control-allow-origin"] == "*"
