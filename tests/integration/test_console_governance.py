"""The policies and sessions pages' API over raw httpx against a real `--auth jwt` server with an org-admin claim:
what a tool path would get and why, moving rules, the admin rule for org rules, and sessions that only their
owner (the account within its org) can see or terminate."""

from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from tests.auth_support import mint
from tests.conftest import ServerUnderTest
from tests.console_support import Visitor, console_server, visitor
from tests.mcp_http import envelope, initialize_body, post

ADMIN_CLAIM = ("role", "admin")
PING = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
SESSION_GONE = {"Session timed out, please reconnect", "Session not found"}


@pytest.fixture
async def executor(nursery: trio.Nursery, data_dir: Path, tmp_path: Path) -> ServerUnderTest:
    return await console_server(nursery, data_dir, tmp_path, org_admin_claim=ADMIN_CLAIM)


def admin(sub: str = "alice", org: str = "acme") -> str:
    return mint(sub, org, role="admin")


async def call(http: httpx.AsyncClient, who: Visitor, method: str, path: str, body: Any = None) -> httpx.Response:
    return await http.request(method, f"{who.base_url}{path}", json=body, headers=who.headers())


async def evaluate(http: httpx.AsyncClient, who: Visitor, path: str) -> dict[str, Any]:
    answer = await http.get(f"{who.base_url}/api/policies/evaluate", params={"path": path}, headers=who.headers())
    assert answer.status_code == 200, answer.text
    return answer.json()


async def test_what_a_tool_path_would_get_and_why(executor: ServerUnderTest, http: httpx.AsyncClient) -> None:
    base = executor.running.url
    alice = await visitor(http, base, admin())
    gated = await evaluate(http, alice, "executor.coreTools.policies.create")
    assert gated["action"] == "require_approval"
    assert gated["rule"] is None
    assert "the tool's own approval annotation decides" in gated["reason"]
    plain = await evaluate(http, alice, "tools.executor.coreTools.policies.list")
    assert plain["path"] == "executor.coreTools.policies.list"
    assert (plain["action"], plain["rule"]) == ("approve", None)
    assert "does not ask for approval by default" in plain["reason"]
    unknown = await evaluate(http, alice, "github.org.main.getRepo")
    assert unknown["action"] == "approve"
    assert "no tool you can reach has this path" in unknown["reason"]

    body = {"owner": "user", "pattern": "executor.coreTools.policies.*", "action": "approve"}
    mine = (await call(http, alice, "POST", "/api/policies", body)).json()
    approved = await evaluate(http, alice, "executor.coreTools.policies.create")
    assert approved["action"] == "approve"
    assert approved["rule"] == {"id": mine["id"], "owner": "user", "pattern": mine["pattern"], "action": "approve"}
    assert "turns the tool's own approval annotation off" in approved["reason"]

    body = {"owner": "org", "pattern": "executor.*", "action": "block"}
    org = (await call(http, alice, "POST", "/api/policies", body)).json()
    blocked = await evaluate(http, alice, "executor.coreTools.policies.create")
    assert blocked["action"] == "block"
    assert blocked["rule"]["id"] == org["id"]
    assert "It outranks the first matching user rule" in blocked["reason"]

    bob = await visitor(http, base, mint("bob", "acme"))
    for_bob = await evaluate(http, bob, "executor.coreTools.policies.list")
    assert for_bob["rule"]["id"] == org["id"]
    assert "No user rule matches" in for_bob["reason"]  # alice's own rule is not bob's
    stranger = await visitor(http, base, admin("eve", "globex"))
    assert (await evaluate(http, stranger, "executor.coreTools.policies.list"))["rule"] is None


async def test_an_evaluation_needs_a_path_and_a_caller(executor: ServerUnderTest, http: httpx.AsyncClient) -> None:
    base = executor.running.url
    alice = await visitor(http, base, admin())
    for query in ({}, {"path": ""}, {"path": "x" * 600}):
        refused = await http.get(f"{base}/api/policies/evaluate", params=query, headers=alice.headers())
        assert refused.status_code == 400
        assert "path" in refused.json()["error"]
    assert (await call(http, alice, "POST", "/api/policies/evaluate", {})).status_code == 405
    anonymous = await http.get(f"{base}/api/policies/evaluate", params={"path": "a"})
    assert anonymous.status_code == 401
    by_bearer = await http.get(
        f"{base}/api/policies/evaluate", params={"path": "a.b"}, headers={"authorization": f"Bearer {admin()}"}
    )
    assert by_bearer.json()["action"] == "approve"


async def test_moving_a_rule_moves_it_one_place_within_its_owner(
    executor: ServerUnderTest, http: httpx.AsyncClient
) -> None:
    alice = await visitor(http, executor.running.url, admin())
    created = []
    for pattern in ("a.*", "b.*", "c.*"):
        body = {"owner": "user", "pattern": pattern, "action": "block"}
        created.append((await call(http, alice, "POST", "/api/policies", body)).json())
    org = await call(http, alice, "POST", "/api/policies", {"owner": "org", "pattern": "*", "action": "approve"})

    async def order() -> list[str]:
        listed = (await call(http, alice, "GET", "/api/policies")).json()
        return [policy["pattern"] for policy in listed if policy["owner"] == "user"]

    moved = await call(http, alice, "PATCH", f"/api/policies/{created[2]['id']}", {"owner": "user", "move": "up"})
    assert moved.status_code == 200
    assert await order() == ["a.*", "c.*", "b.*"]
    await call(http, alice, "PATCH", f"/api/policies/{created[0]['id']}", {"owner": "user", "move": "down"})
    assert await order() == ["c.*", "a.*", "b.*"]
    top = await call(http, alice, "PATCH", f"/api/policies/{created[2]['id']}", {"owner": "user", "move": "up"})
    assert top.status_code == 200
    assert await order() == ["c.*", "a.*", "b.*"]
    mixed = await call(
        http, alice, "PATCH", f"/api/policies/{created[0]['id']}", {"owner": "user", "move": "up", "position": "1"}
    )
    assert mixed.status_code == 400
    wrong_owner = await call(http, alice, "PATCH", f"/api/policies/{org.json()['id']}", {"owner": "user", "move": "up"})
    assert wrong_owner.status_code == 404


async def test_a_member_who_is_not_an_admin_cannot_change_org_rules(
    executor: ServerUnderTest, http: httpx.AsyncClient
) -> None:
    base = executor.running.url
    alice = await visitor(http, base, admin())
    rule = (
        await call(http, alice, "POST", "/api/policies", {"owner": "org", "pattern": "*", "action": "block"})
    ).json()
    bob = await visitor(http, base, mint("bob", "acme"))
    page = await http.get(f"{base}/policies", headers=bob.headers())
    assert page.status_code == 200
    assert 'data-org-admin="false"' in page.text
    assert 'value="org"' not in page.text
    assert "read-only for you" in page.text
    attempts = (
        ("POST", "/api/policies", {"owner": "org", "pattern": "a.*", "action": "approve"}),
        ("PATCH", f"/api/policies/{rule['id']}", {"owner": "org", "move": "down"}),
        ("PATCH", f"/api/policies/{rule['id']}", {"owner": "org", "action": "approve"}),
        ("DELETE", f"/api/policies/{rule['id']}", {"owner": "org"}),
    )
    for method, path, body in attempts:
        refused = await call(http, bob, method, path, body)
        assert refused.status_code == 403, (method, path)
        assert refused.json() == {"error": "Only an organization admin can create, change or remove org rules"}
    assert [policy["id"] for policy in (await call(http, bob, "GET", "/api/policies")).json()] == [rule["id"]]
    own = await call(http, bob, "POST", "/api/policies", {"owner": "user", "pattern": "a.*", "action": "approve"})
    assert own.status_code == 200
    admin_page = await http.get(f"{base}/policies", headers=alice.headers())
    assert 'data-org-admin="true"' in admin_page.text
    assert 'value="org"' in admin_page.text


async def open_session(http: httpx.AsyncClient, url: str, token: str) -> str:
    opened = await post(http, url, initialize_body(), authorization=f"Bearer {token}")
    assert opened.status_code == 200, opened.text
    return opened.headers["mcp-session-id"]


async def test_sessions_are_listed_and_terminated_only_by_their_owner(
    executor: ServerUnderTest, http: httpx.AsyncClient
) -> None:
    base = executor.running.url
    token = mint("alice", "acme")
    session_id = await open_session(http, executor.url, token)
    alice = await visitor(http, base, token)
    bob = await visitor(http, base, mint("bob", "acme"))
    elsewhere = await visitor(http, base, mint("alice", "globex"))

    (listed,) = (await call(http, alice, "GET", "/api/sessions")).json()
    assert listed["id"] == session_id
    assert listed["state"] == "live"
    assert listed["client"] == {"name": "tests", "version": "0"}
    assert (listed["protocolVersion"], listed["elicitationMode"]) == ("2025-06-18", "model")
    assert listed["createdAt"] <= listed["lastActivityAt"]
    for stranger in (bob, elsewhere):
        assert (await call(http, stranger, "GET", "/api/sessions")).json() == []
        refused = await call(http, stranger, "DELETE", f"/api/sessions/{session_id}")
        assert refused.status_code == 404
        assert refused.json() == {"error": "Session not found"}
    assert (await call(http, alice, "DELETE", "/api/sessions/" + "0" * 64)).status_code == 404
    assert (await call(http, alice, "DELETE", "/api/sessions/nope")).status_code == 404
    no_csrf = await http.delete(f"{base}/api/sessions/{session_id}", headers=alice.headers(csrf=False))
    assert no_csrf.status_code == 403
    alive = await post(http, executor.url, PING, session_id, authorization=f"Bearer {token}")
    assert alive.status_code == 200  # nobody but alice could end it

    ended = await call(http, alice, "DELETE", f"/api/sessions/{session_id}")
    assert ended.status_code == 200
    assert ended.json() == {"terminated": True}
    gone = await post(http, executor.url, PING, session_id, authorization=f"Bearer {token}")
    status, code, message = envelope(gone)
    assert (status, code) == (404, -32001)
    assert message in SESSION_GONE
    after = (await call(http, alice, "GET", "/api/sessions")).json()
    assert [entry["state"] for entry in after] in ([], ["condemned"])


async def test_a_bearer_lists_its_sessions_and_pages_need_a_sign_in(
    executor: ServerUnderTest, http: httpx.AsyncClient
) -> None:
    base = executor.running.url
    token = mint("carol", "acme")
    session_id = await open_session(http, executor.url, token)
    listed = await http.get(f"{base}/api/sessions", headers={"authorization": f"Bearer {token}"})
    assert [entry["id"] for entry in listed.json()] == [session_id]
    assert (await http.get(f"{base}/api/sessions")).status_code == 401
    assert (await http.post(f"{base}/api/sessions", headers={"authorization": f"Bearer {token}"})).status_code == 405
    for page in ("/policies", "/sessions"):
        assert (await http.get(f"{base}{page}")).status_code == 303
    carol = await visitor(http, base, token)
    page = await http.get(f"{base}/sessions", headers=carol.headers())
    assert page.status_code == 200
    assert '<script src="/static/governance.js" defer></script>' in page.text
    assert "<code>carol</code>" in page.text
