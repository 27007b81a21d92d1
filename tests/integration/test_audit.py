"""The audit log against the real server: every tool call of sandboxed code has exactly one record, with the
decision its policies made and how its approval was answered, and none holds an argument value; a pause that
spans a restart is still one record; `/api/audit` shows only the caller's org (and, to a member who is not an
org admin, only its own calls); `executor-mcp audit list` reads the same records from the data dir."""

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from mcp import Client

from executor_mcp.storage.control import CONTROL_FILE
from tests.auth_support import bearer, mint
from tests.conftest import ServerUnderTest, jwt_server, start_server
from tests.process import run_cli
from tests.sdk import connect, execution_id, text_of

SECRET = "sk-audit-7f3e9c1d5b"  # an argument value that must appear in no record
GATED = "executor.coreTools.policies.list"
BLOCKED = "executor.coreTools.policies.remove"
CREATE = "executor.coreTools.policies.create"  # gated by its own annotation
CALLS = f"""
const listed = await tools.executor.coreTools.integrations.list({{ query: "{SECRET}" }});
const blocked = await tools.{BLOCKED}({{ id: "{SECRET}", owner: "org" }});
const missing = await tools.nowhere.at.all({{ token: "{SECRET}" }});
const gated = await tools.{GATED}({{ note: "{SECRET}" }});
return [listed.ok, blocked.error.code, missing.error.code, gated.ok];
"""
WAIT = 15


async def add_policy(http: httpx.AsyncClient, server: ServerUnderTest, pattern: str, action: str, **auth: Any) -> str:
    body = {"owner": "org", "pattern": pattern, "action": action}
    added = await http.post(server.running.url + "/api/policies", json=body, headers=auth.get("headers"))
    assert added.status_code == 200, added.text
    return added.json()["id"]


async def audited(
    http: httpx.AsyncClient, server: ServerUnderTest, count: int, headers: Any = None, **params: str
) -> list[dict[str, Any]]:
    """The caller's audit records once there are `count` (the writer batches them in the background)."""
    with trio.fail_after(WAIT):
        while True:
            answer = await http.get(server.running.url + "/api/audit", params=params, headers=headers)
            assert answer.status_code == 200, answer.text
            items = answer.json()["items"]
            if len(items) >= count:
                return items
            await trio.sleep(0.05)


@pytest.fixture
async def executor(nursery: trio.Nursery, data_dir: Path) -> ServerUnderTest:
    return await start_server(nursery, data_dir)


@pytest.fixture
async def client(executor: ServerUnderTest) -> Any:
    async with connect(executor.url, mode="legacy") as (connected, _):
        yield connected


async def test_every_call_has_one_record_with_its_decision_and_no_argument(
    executor: ServerUnderTest, client: Client, http: httpx.AsyncClient, data_dir: Path
) -> None:
    gate = await add_policy(http, executor, GATED, "require_approval")
    block = await add_policy(http, executor, BLOCKED, "block")
    paused = await client.call_tool("execute", {"code": CALLS})
    execution = execution_id(paused)
    done = await client.call_tool("resume", {"executionId": execution, "action": "accept"})
    assert done.structured_content["result"] == [True, "tool_blocked", "tool_not_found", True]
    declined = await client.call_tool(
        "execute", {"code": f'return await tools.{CREATE}({{ owner: "org", pattern: "x.*", action: "block" }});'}
    )
    refused = await client.call_tool("resume", {"executionId": execution_id(declined), "action": "decline"})
    assert "declined by the user" in text_of(refused)

    records = await audited(http, executor, 5)
    assert len(records) == 5  # one per call, no more
    by_tool = {record["tool"]: record for record in records}
    assert set(by_tool) == {"executor.coreTools.integrations.list", BLOCKED, "nowhere.at.all", GATED, CREATE}
    assert [record["tool"] for record in records][:2] == [CREATE, GATED]  # newest first
    allowed, blocked, missing = (
        by_tool["executor.coreTools.integrations.list"],
        by_tool[BLOCKED],
        by_tool["nowhere.at.all"],
    )
    assert (allowed["decision"], allowed["rule"], allowed["outcome"]) == ("approve", {"source": "annotation"}, "ok")
    assert (blocked["decision"], blocked["rule"]["id"], blocked["outcome"]) == ("block", block, "tool_blocked")
    assert (missing["decision"], missing["rule"], missing["outcome"]) == (None, None, "tool_not_found")
    gated = by_tool[GATED]
    assert (gated["decision"], gated["rule"]["id"], gated["rule"]["pattern"]) == ("require_approval", gate, GATED)
    assert (gated["approval"], gated["answeredBy"], gated["executionId"], gated["outcome"]) == (
        "accepted",
        "agent",
        execution,
        "ok",
    )
    created = by_tool[CREATE]
    assert (created["decision"], created["rule"], created["approval"], created["outcome"]) == (
        "require_approval",
        {"source": "annotation"},
        "declined",
        "declined",  # the refusal throws in the sandbox, but the call ended by being declined, not by failing
    )
    for record in records:
        assert (record["account"], record["org"]) == ("local", "local")
        assert record["sessionId"]
        assert record["durationMs"] >= 0
    assert SECRET not in json.dumps(records)

    listed = await run_cli("audit", "list", "--json", "--data-dir", str(data_dir))
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout) == records
    text = await run_cli("audit", "list", "--tool", "executor.coreTools.policies.*", "--data-dir", str(data_dir))
    header, *lines = text.stdout.decode().splitlines()
    assert header.split()[:4] == ["TIME", "ACCOUNT", "SESSION", "TOOL"]
    assert [line.split()[3] for line in lines] == [CREATE, GATED, BLOCKED]
    await executor.stop()
    assert SECRET.encode() not in (data_dir / CONTROL_FILE).read_bytes()


async def test_a_refused_approval_is_audited_as_refused_and_a_tools_own_throw_as_threw(
    executor: ServerUnderTest, client: Client, http: httpx.AsyncClient
) -> None:
    """An operator counting refusals (or alerting on `threw`, a tool that broke) must not see a person's `cancel`
    as a tool that failed: the gate's refusal is a throw in the sandbox, yet the call ended by being refused."""
    await add_policy(http, executor, GATED, "require_approval")
    cancelled = await client.call_tool("execute", {"code": f"return await tools.{GATED}({{}});"})
    refused = await client.call_tool("resume", {"executionId": execution_id(cancelled), "action": "cancel"})
    assert "cancelled by the user" in text_of(refused)
    code = "try { await tools.search({ query: 7 }); } catch (e) { return e.message; }"
    broken = await client.call_tool("execute", {"code": code})
    assert "query must be a string" in broken.structured_content["result"]
    thrown, gated = await audited(http, executor, 2)
    assert (gated["tool"], gated["approval"], gated["outcome"]) == (GATED, "cancelled", "cancelled")
    assert (thrown["approval"], thrown["outcome"]) == (None, "threw")


async def test_a_pause_across_a_restart_is_one_record(
    nursery: trio.Nursery, data_dir: Path, http: httpx.AsyncClient
) -> None:
    first = await start_server(nursery, data_dir)
    await add_policy(http, first, GATED, "require_approval")
    async with connect(first.url, mode="legacy") as (client, _):
        execution = execution_id(await client.call_tool("execute", {"code": f"return await tools.{GATED}({{}});"}))
        await first.stop()  # before the client's goodbye, which would end its session (and the pause with it)
    second = await start_server(nursery, data_dir)
    async with connect(second.url, mode="legacy") as (client, _):
        done = await client.call_tool("resume", {"executionId": execution, "action": "accept"})
    assert done.structured_content["status"] == "completed"
    (record,) = await audited(http, second, 1)
    assert (record["tool"], record["approval"], record["executionId"]) == (GATED, "accepted", execution)
    await trio.sleep(0.3)  # a second record, were one coming, would be written by now
    assert len(await audited(http, second, 1)) == 1


async def test_each_org_reads_its_own_and_a_member_only_its_calls(
    nursery: trio.Nursery, data_dir: Path, tmp_path: Path, http: httpx.AsyncClient
) -> None:
    server = await jwt_server(nursery, data_dir, tmp_path, org_admin_claim=("role", "admin"))
    admin = bearer(mint("ada", "acme", role="admin"))
    member, elsewhere = bearer(mint("bob", "acme")), bearer(mint("cy", "globex"))
    for headers in (admin, member, elsewhere):
        async with connect(server.url, headers=headers, mode="legacy") as (client, _):
            listed = await client.call_tool("execute", {"code": "return (await tools.search({})).total >= 0;"})
            assert listed.structured_content["result"] is True
    acme = await audited(http, server, 2, headers=admin)
    assert sorted(record["account"] for record in acme) == ["ada", "bob"]
    assert {record["org"] for record in acme} == {"acme"}
    assert [record["account"] for record in await audited(http, server, 1, headers=member)] == ["bob"]
    assert [record["account"] for record in await audited(http, server, 1, headers=elsewhere)] == ["cy"]
    anonymous = await http.get(server.running.url + "/api/audit")
    assert anonymous.status_code == 401


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"since": "yesterday"}, "Invalid audit query: since must be a duration"),
        ({"limit": "0"}, "Invalid audit query: limit must be between 1 and 1000"),
        ({"limit": "many"}, "Invalid audit query"),
        ({"before": "not-hex"}, "Invalid audit query"),
        ({"tool": "x" * 600}, "A query parameter is too long"),
    ],
)
async def test_a_bad_query_is_a_clear_400(
    executor: ServerUnderTest, http: httpx.AsyncClient, params: dict[str, str], message: str
) -> None:
    answer = await http.get(executor.running.url + "/api/audit", params=params)
    assert answer.status_code == 400
    assert answer.json()["error"].startswith(message)


async def test_pages_follow_one_another(executor: ServerUnderTest, client: Client, http: httpx.AsyncClient) -> None:
    calls = "for (let i = 0; i < 5; i++) await tools.search({}); return 1;"
    assert (await client.call_tool("execute", {"code": calls})).structured_content["result"] == 1
    everything = await audited(http, executor, 5)
    seen, cursor = [], None
    for _ in range(5):
        params = {"limit": "2", **({"before": cursor} if cursor else {})}
        page = (await http.get(executor.running.url + "/api/audit", params=params)).json()
        seen += page["items"]
        cursor = page["next"]
        if cursor is None:
            break
    assert seen == everything


async def test_an_unanswered_approval_is_recorded_when_its_window_closes(
    nursery: trio.Nursery, data_dir: Path, http: httpx.AsyncClient
) -> None:
    server = await start_server(nursery, data_dir, approval_window=0.5)
    await add_policy(http, server, GATED, "require_approval")
    async with connect(server.url, mode="legacy") as (client, _):
        paused = await client.call_tool("execute", {"code": f"return await tools.{GATED}({{}});"})
        (record,) = await audited(http, server, 1)  # written once the window closed and cut the call off
    assert (record["decision"], record["approval"], record["outcome"]) == ("require_approval", "unanswered", "cut_off")
    assert record["executionId"] is None  # no answer, so none carried the pause's id
    assert execution_id(paused).startswith("exec_")


async def test_an_approval_that_expired_while_the_server_was_down_is_recorded_at_its_revival(
    nursery: trio.Nursery, data_dir: Path, http: httpx.AsyncClient
) -> None:
    first = await start_server(nursery, data_dir, approval_window=1.0)
    await add_policy(http, first, GATED, "require_approval")
    async with connect(first.url, mode="legacy") as (client, _):
        execution = execution_id(await client.call_tool("execute", {"code": f"return await tools.{GATED}({{}});"}))
        await first.stop()
    await trio.sleep(1.5)  # the window closes while nothing runs
    second = await start_server(nursery, data_dir, approval_window=1.0)
    (record,) = await audited(http, second, 1)
    assert (record["tool"], record["approval"], record["outcome"]) == (GATED, "unanswered", "cut_off")
    assert (record["executionId"], record["rule"]["pattern"]) == (execution, GATED)


@pytest.mark.parametrize("since", ["9" * 60, "99999999999999999d", "9999-12-31T23:59:59"])
async def test_a_since_past_any_key_is_an_empty_page_not_a_500(
    executor: ServerUnderTest, client: Client, http: httpx.AsyncClient, since: str
) -> None:
    assert (await client.call_tool("execute", {"code": "await tools.search({}); return 1;"})).structured_content
    answer = await http.get(executor.running.url + "/api/audit", params={"since": since})
    assert answer.status_code == 200, answer.text
    if not since.endswith("d"):  # (a duration that long reaches back before every record)
        assert answer.json()["items"] == []
