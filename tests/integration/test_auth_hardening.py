"""Bearers at the edges: a hanging JWKS, ids the storage cannot hold, empty bearers, org admins."""

import json
from pathlib import Path

import httpx
import httpx2
import pytest
import trio
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from executor_mcp.auth.tokens import JWKS_TTL, JwksKeys
from tests.auth_support import SECRET, JwksServer, SigningKey, bearer, mint
from tests.conftest import ServerUnderTest, start_server
from tests.mcp_http import envelope, headers, initialize_body
from tests.process import run_cli

UNAVAILABLE = (503, -32001, "Authentication temporarily unavailable - please retry")
FOREIGN = (403, -32003, "MCP session does not belong to the current bearer")
PING = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
ADMIN_CLAIM = ("org_role", "admin")
FORBIDDEN = "Only an organization admin can create, change or remove org rules"
CREATE_ORG_RULE = (
    'return await tools.executor.coreTools.policies.create({ owner: "org", pattern: "github.*", action: "block" });'
)


@pytest.fixture
def secret_file(tmp_path: Path) -> Path:
    path = tmp_path / "hs256.key"
    path.write_bytes(SECRET)
    return path


async def post(http: httpx.AsyncClient, url: str, body: dict, token: str, session_id: str | None = None):
    return await http.post(url, content=json.dumps(body), headers={**headers(session_id), **bearer(token)})


# -- one JWKS fetch at a time -----------------------------------------------------------------------


async def test_concurrent_requests_share_one_fetch_of_a_hanging_jwks(nursery: trio.Nursery, data_dir: Path) -> None:
    key = SigningKey.rsa("rsa-1")
    jwks = JwksServer(keys=[key], delay=3600)
    await jwks.start(nursery)
    server = await start_server(nursery, data_dir, auth="jwt", jwks_url=jwks.url)
    answers: list[httpx.Response] = []

    async def initialize(http: httpx.AsyncClient) -> None:
        answers.append(await post(http, server.url, initialize_body(), key.mint()))

    started = trio.current_time()
    async with httpx.AsyncClient(timeout=60) as http:
        with trio.fail_after(30):  # one at a time, ten requests would take ten 5 s fetch timeouts
            async with trio.open_nursery() as requests:
                for _ in range(10):
                    requests.start_soon(initialize, http)
        elapsed = trio.current_time() - started
        assert [envelope(answer) for answer in answers] == [UNAVAILABLE] * 10
        assert jwks.fetches == 1
        assert elapsed < 15, elapsed  # about one 5 s fetch timeout

        # A failure is not remembered: once the endpoint answers, the next request fetches and passes.
        jwks.delay = 0
        assert (await post(http, server.url, initialize_body(), key.mint())).status_code == 200
        assert jwks.fetches == 2


async def test_a_stale_jwks_is_refetched_once_for_concurrent_requests(nursery: trio.Nursery) -> None:
    key = SigningKey.ec("ec-1")
    jwks = JwksServer(keys=[key])
    await jwks.start(nursery)
    now = 0.0
    async with httpx.AsyncClient() as http:
        keys = JwksKeys(jwks.url, http, clock=lambda: now)
        await keys.key("ec-1")
        now += JWKS_TTL + 1
        jwks.delay = 0.5
        found: list[str | None] = []

        async def verify() -> None:
            found.append((await keys.key("ec-1")).key_id)

        with trio.fail_after(10):
            async with trio.open_nursery() as requests:
                for _ in range(10):
                    requests.start_soon(verify)
        assert found == ["ec-1"] * 10
        assert jwks.fetches == 2


# -- ids the storage cannot hold --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sub", "org"),
    [("a" * 512, "acme"), ("alice", "o" * 600), ("al\ud800ice", "acme"), ("alice", "ac\udc00me"), ("a\x00b", "acme")],
    ids=["long-sub", "long-org", "surrogate-sub", "surrogate-org", "nul-sub"],
)
async def test_ids_the_storage_cannot_hold_are_invalid_tokens(
    nursery: trio.Nursery, data_dir: Path, secret_file: Path, sub: str, org: str
) -> None:
    server = await start_server(nursery, data_dir, auth="jwt", jwt_secret_file=secret_file)
    async with httpx.AsyncClient(timeout=10) as http:
        for _ in range(2):  # and the same again: never a lasting 503
            response = await post(http, server.url, initialize_body(), mint(sub, org))
            assert envelope(response) == (401, -32001, "Unauthorized")
            assert 'error="invalid_token"' in response.headers["www-authenticate"]
        fine = await post(http, server.url, initialize_body(), mint("alice", "acme"))
        assert fine.status_code == 200


@pytest.mark.parametrize(
    ("user", "org", "problem"),
    [("u" * 300, "acme", "--user is longer than 256 bytes"), ("bot", "ac\udcffme", "--org is not valid Unicode")],
    ids=["long-user", "undecodable-org"],
)
async def test_api_keys_are_not_created_for_ids_the_storage_cannot_hold(
    data_dir: Path, user: str, org: str, problem: str
) -> None:
    created = await run_cli("keys", "create", "--user", user, "--org", org, "--data-dir", str(data_dir))
    assert created.returncode == 2
    assert problem.encode() in created.stderr
    assert created.stdout == b""


# -- empty bearers ----------------------------------------------------------------------------------


async def raw_get(url: str, path: str, authorization: bytes) -> bytes:
    """A GET's status line and headers, written byte for byte: HTTP clients refuse trailing whitespace."""
    host, port = httpx.URL(url).host, httpx.URL(url).port
    assert port is not None
    stream = await trio.open_tcp_stream(host, port)
    async with stream:
        request = b"GET " + path.encode() + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
        await stream.send_all(request + b"Authorization: " + authorization + b"\r\n\r\n")
        answer = b""
        with trio.fail_after(10):
            while b"\r\n\r\n" not in answer and (chunk := await stream.receive_some()):
                answer += chunk
    return answer


@pytest.mark.parametrize("authorization", [b"Bearer ", b"Bearer", b"bearer   "], ids=["space", "bare", "lowercase"])
async def test_an_empty_bearer_is_an_invalid_token(
    nursery: trio.Nursery, data_dir: Path, secret_file: Path, authorization: bytes
) -> None:
    server = await start_server(nursery, data_dir, auth="jwt", jwt_secret_file=secret_file)
    for path in ("/mcp", "/api/policies"):
        answer = await raw_get(server.running.url, path, authorization)
        assert answer.startswith(b"HTTP/1.1 401 "), answer
        assert b'error="invalid_token"' in answer, answer


# -- org admins -------------------------------------------------------------------------------------


@pytest.fixture
async def admin_claim_server(nursery: trio.Nursery, data_dir: Path, secret_file: Path) -> ServerUnderTest:
    return await start_server(nursery, data_dir, auth="jwt", jwt_secret_file=secret_file, org_admin_claim=ADMIN_CLAIM)


async def test_only_org_admins_change_org_rules_over_the_api(
    admin_claim_server: ServerUnderTest, http: httpx.AsyncClient
) -> None:
    api = admin_claim_server.running.url + "/api/policies"
    admin = bearer(mint("root", "acme", org_role="admin"))
    listed_admin = bearer(mint("carol", "acme", org_role=["viewer", "admin"]))
    member = bearer(mint("bob", "acme"))
    wrong_value = bearer(mint("mallory", "acme", org_role="administrator"))
    org_rule = {"owner": "org", "pattern": "github.*", "action": "block"}

    for who in (member, wrong_value):
        refused = await http.post(api, json=org_rule, headers=who)
        assert refused.status_code == 403
        assert refused.json() == {"error": FORBIDDEN}
    created = await http.post(api, json=org_rule, headers=admin)
    assert created.status_code == 200, created.text
    rule_id = created.json()["id"]
    own = await http.post(api, json={"owner": "user", "pattern": "x.*", "action": "approve"}, headers=member)
    assert own.status_code == 200

    weaken = await http.patch(f"{api}/{rule_id}", json={"owner": "org", "action": "approve"}, headers=member)
    assert (weaken.status_code, weaken.json()) == (403, {"error": FORBIDDEN})
    removal = await http.request("DELETE", f"{api}/{rule_id}", json={"owner": "org"}, headers=member)
    assert (removal.status_code, removal.json()) == (403, {"error": FORBIDDEN})
    # The member still sees the org rule, unchanged, and manages its own rules.
    seen = {p["id"]: p["action"] for p in (await http.get(api, headers=member)).json()}
    assert seen == {own.json()["id"]: "approve", rule_id: "block"}
    own_removed = await http.request("DELETE", f"{api}/{own.json()['id']}", json={"owner": "user"}, headers=member)
    assert own_removed.status_code == 200

    patched = await http.patch(f"{api}/{rule_id}", json={"owner": "org", "action": "approve"}, headers=listed_admin)
    assert patched.json()["action"] == "approve"
    removed = await http.request("DELETE", f"{api}/{rule_id}", json={"owner": "org"}, headers=admin)
    assert removed.json() == {"removed": True}


async def test_admin_api_keys_and_the_operator_cli(
    admin_claim_server: ServerUnderTest, http: httpx.AsyncClient
) -> None:
    api = admin_claim_server.running.url + "/api/policies"
    data_dir = str(admin_claim_server.running.data_dir)
    keys = {}
    for role in ("member", "admin"):
        extra = ("--admin",) if role == "admin" else ()
        created = await run_cli(
            "keys", "create", "--user", f"{role}-bot", "--org", "acme", *extra, "--data-dir", data_dir
        )
        assert created.returncode == 0, created.stderr
        keys[role] = created.stdout.decode().strip()
    listed = [
        line.split()[1:4]
        for line in (await run_cli("keys", "list", "--data-dir", data_dir)).stdout.decode().splitlines()
    ]
    assert ["active", "admin", "admin-bot"] in listed
    assert ["active", "member", "member-bot"] in listed

    org_rule = {"owner": "org", "pattern": "a.b", "action": "block"}
    refused = await http.post(api, json=org_rule, headers=bearer(keys["member"]))
    assert (refused.status_code, refused.json()) == (403, {"error": FORBIDDEN})
    assert (await http.post(api, json=org_rule, headers=bearer(keys["admin"]))).status_code == 200

    # The operator on the data dir administers the org.
    added = await run_cli(
        "policies", "add", "--org", "acme", "--pattern", "c.*", "--action", "block", "--data-dir", data_dir
    )
    assert added.returncode == 0, added.stderr
    patterns = [p["pattern"] for p in (await http.get(api, headers=bearer(keys["member"]))).json()]
    assert sorted(patterns) == ["a.b", "c.*"]


async def test_without_the_option_every_member_administers_the_org(
    nursery: trio.Nursery, data_dir: Path, secret_file: Path, http: httpx.AsyncClient
) -> None:
    server = await start_server(nursery, data_dir, auth="jwt", jwt_secret_file=secret_file)
    api = server.running.url + "/api/policies"
    rule = {"owner": "org", "pattern": "a.b", "action": "block"}
    assert (await http.post(api, json=rule, headers=bearer(mint("bob", "acme")))).status_code == 200


def sdk_client(server: ServerUnderTest, token: str) -> tuple[httpx2.AsyncClient, Client]:
    http = httpx2.AsyncClient(headers=bearer(token))
    return http, Client(streamable_http_client(server.url, http_client=http), mode="legacy")


async def test_only_org_admins_change_org_rules_from_the_sandbox(admin_claim_server: ServerUnderTest) -> None:
    member_http, member = sdk_client(admin_claim_server, mint("bob", "acme"))
    admin_http, admin = sdk_client(admin_claim_server, mint("root", "acme", org_role="admin"))
    async with member_http, admin_http, member, admin:
        # Refused before any approval is asked: a doomed call costs no human.
        refused = await member.call_tool("execute", {"code": CREATE_ORG_RULE})
        assert refused.structured_content["status"] == "completed"
        assert refused.structured_content["result"] == {
            "ok": False,
            "error": {"code": "policy_forbidden", "message": FORBIDDEN},
        }
        own = 'return await tools.executor.coreTools.policies.create({ owner: "user", pattern: "x", action: "block" });'
        paused = await member.call_tool("execute", {"code": own})
        assert paused.structured_content["status"] == "waiting_for_interaction"

        paused = await admin.call_tool("execute", {"code": CREATE_ORG_RULE})
        assert paused.structured_content["status"] == "waiting_for_interaction"
        execution = paused.structured_content["executionId"]
        done = await admin.call_tool("resume", {"executionId": execution, "action": "accept"})
        assert done.structured_content["result"]["ok"] is True
        listed = await member.call_tool(
            "execute", {"code": "return (await tools.executor.coreTools.policies.list({})).data.policies;"}
        )
        assert [p["pattern"] for p in listed.structured_content["result"]] == ["github.*"]


async def test_a_session_opened_as_admin_refuses_the_same_account_without_the_claim(
    admin_claim_server: ServerUnderTest, http: httpx.AsyncClient
) -> None:
    admin, demoted = mint("root", "acme", org_role="admin"), mint("root", "acme")
    opened = await post(http, admin_claim_server.url, initialize_body(), admin)
    session_id = opened.headers["mcp-session-id"]
    assert envelope(await post(http, admin_claim_server.url, PING, demoted, session_id)) == FOREIGN
    assert (await post(http, admin_claim_server.url, PING, admin, session_id)).json()["result"] == {}
    # The other way round is no escalation: a session opened without the claim serves an admin bearer.
    plain = (await post(http, admin_claim_server.url, initialize_body(), demoted)).headers["mcp-session-id"]
    assert (await post(http, admin_claim_server.url, PING, admin, plain)).json()["result"] == {}


async def test_an_admins_paused_execution_is_not_resumed_without_the_claim(admin_claim_server: ServerUnderTest) -> None:
    """The paused call acts as an org admin: the same account's member bearer must not be the one to let it go on."""
    admin_http, admin = sdk_client(admin_claim_server, mint("root", "acme", org_role="admin"))
    demoted_http, demoted = sdk_client(admin_claim_server, mint("root", "acme"))
    async with admin_http, demoted_http, admin, demoted:
        paused = await admin.call_tool("execute", {"code": CREATE_ORG_RULE})
        execution = paused.structured_content["executionId"]
        refused = await demoted.call_tool("resume", {"executionId": execution, "action": "accept"})
        assert refused.structured_content["status"] == "execution_forbidden"
        done = await admin.call_tool("resume", {"executionId": execution, "action": "accept"})
        assert done.structured_content["result"]["ok"] is True
