"""A principal's 2026 workspace is a session no client names: its id is a MAC under a key the server keeps, so
nobody can compute another principal's, and a 2025 request that names one (an admin listing shows them) hears it
does not exist, whoever sends it, before any word of whose it is."""

import re
from pathlib import Path

import httpx
import trio

from executor_mcp.codec import json_digest
from tests.auth_support import bearer, mint
from tests.conftest import jwt_server
from tests.integration.test_stateless_wire import body, result_of, routing
from tests.mcp_http import envelope
from tests.process import run_cli


async def test_a_workspace_id_tells_nobody_whose_it_is(
    nursery: trio.Nursery, data_dir: Path, tmp_path: Path, http: httpx.AsyncClient
) -> None:
    executor = await jwt_server(nursery, data_dir, tmp_path)
    alice, bob = mint("alice", "acme"), mint("bob", "acme")  # minted now: tokens expire
    listing = body(1, "tools/list")
    answered = await http.post(executor.url, json=listing, headers={**routing(listing), **bearer(alice)})
    assert result_of(answered, 1)["resultType"] == "complete"

    listed = await run_cli("sessions", "list", "--data-dir", str(data_dir))
    (workspace,) = re.findall(r"^[0-9a-f]{64}", listed.stdout.decode(), flags=re.M)
    # Not the digest anyone could compute from the principal and the modes.
    assert workspace != json_digest(["workspace", "alice", "acme", False, "/mcp", "model", "execute"])

    ping = {"jsonrpc": "2.0", "id": 5, "method": "ping"}
    session = {"accept": "application/json, text/event-stream", "mcp-session-id": workspace}
    for token in (bob, alice):
        named = await http.post(executor.url, json=ping, headers={**session, **bearer(token)})
        assert envelope(named) == (404, -32001, "Session not found")
    # The workspace itself is untouched: alice's next 2026 request is served by it.
    again = await http.post(executor.url, json=body(2, "tools/list"), headers={**routing(listing), **bearer(alice)})
    assert result_of(again, 2)["resultType"] == "complete"
    relisted = await run_cli("sessions", "list", "--data-dir", str(data_dir))
    assert re.findall(r"^[0-9a-f]{64}", relisted.stdout.decode(), flags=re.M) == [workspace]
