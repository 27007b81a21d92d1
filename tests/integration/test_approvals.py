"""Policies, approval pauses and resumes, through the official MCP client and the HTTP API."""

from pathlib import Path

import httpx
import httpx2
import pytest
import trio
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import ElicitResult

from tests.auth_support import bearer, mint
from tests.conftest import ServerUnderTest, start_server
from tests.process import run_cli
from tests.sdk import connect, execution_id, text_of

CREATE = (
    'return await tools.executor.coreTools.policies.create({ owner: "org", pattern: "github.*", action: "block" });'
)
LIST = "return (await tools.executor.coreTools.policies.list({})).data.policies;"
DECLINED = 'Tool "executor.coreTools.policies.create" requires approval but the request was declined by the user.'
RECOVERY = "run the execute tool again"


@pytest.fixture
async def executor(nursery: trio.Nursery, data_dir: Path) -> ServerUnderTest:
    return await start_server(nursery, data_dir)


async def execute(client: Client, code: str):
    return await client.call_tool("execute", {"code": code})


async def resume(client: Client, execution: str, action: str = "accept", content: str | None = None):
    arguments = {"executionId": execution, "action": action}
    if content is not None:
        arguments["content"] = content
    return await client.call_tool("resume", arguments)


async def test_a_gated_core_tool_pauses_with_no_policy_and_a_decline_writes_nothing(client: Client) -> None:
    paused = await execute(client, CREATE)
    assert not paused.is_error
    text = text_of(paused)
    assert text.startswith("Execution paused: Approve executor.coreTools.policies.create?\n\nArguments:\n{\n")
    assert '"pattern": "github.*"' in text
    # A yes-or-no question says so, and says which rule or default asked it, not "a response matching {}".
    assert (
        '\n}\n\nWhy: tool "executor.coreTools.policies.create" is annotated as requiring approval by default, and no '
        "policy overrides that.\n\nThis is a model-side confirmation gate; no browser form is waiting. Ask the user "
        'whether to approve, then call the resume tool with action "accept", "decline", or "cancel".\n\nexecutionId: '
    ) in text
    assert "requested schema" not in text.lower()
    assert "(4 minutes approval window)" in text
    structured = paused.structured_content
    execution = execution_id(paused)
    assert execution.startswith("exec_")
    assert structured["status"] == "waiting_for_interaction"
    assert structured["executionId"] == execution
    assert structured["ttlMs"] == 240000
    assert structured["interaction"]["kind"] == "form"
    assert structured["interaction"]["address"] == "executor.coreTools.policies.create"
    assert structured["interaction"]["args"] == {"owner": "org", "pattern": "github.*", "action": "block"}
    assert structured["interaction"]["requestedSchema"] == {"type": "object", "properties": {}}
    assert structured["interaction"]["reason"].startswith('Why: tool "executor.coreTools.policies.create" is annotated')
    assert structured["interaction"]["instructions"].startswith(
        "This is a model-side confirmation gate; there is no browser form to open. Ask the user whether to approve "
        f'the paused tool call. If the user approves, call the resume tool with executionId "{execution}" and action '
        '"accept". If the user declines, call resume with action "decline" or "cancel". Resume before '
    )

    declined = await resume(client, execution, "decline")
    assert declined.is_error
    assert text_of(declined).startswith(f"Error: {DECLINED}")
    assert (await execute(client, LIST)).structured_content["result"] == []


async def test_accept_continues_and_writes_the_policy(client: Client) -> None:
    execution = execution_id(await execute(client, CREATE))
    accepted = await resume(client, execution, "accept")
    assert not accepted.is_error
    created = accepted.structured_content["result"]
    assert created["ok"] is True
    assert created["data"]["pattern"] == "github.*"
    assert created["data"]["id"].startswith("pol_")
    listed = (await execute(client, LIST)).structured_content["result"]
    assert [(p["owner"], p["pattern"], p["action"]) for p in listed] == [("org", "github.*", "block")]


async def test_cancel_throws_inside_the_sandbox(client: Client) -> None:
    code = "try { " + CREATE.removeprefix("return ") + " } catch (e) { return 'caught: ' + e.message; }"
    execution = execution_id(await execute(client, code))
    cancelled = await resume(client, execution, "cancel")
    assert cancelled.structured_content["result"] == (
        'caught: Tool "executor.coreTools.policies.create" requires approval but the request was cancelled by the user.'
    )


async def test_duplicate_resumes_replay_and_concurrent_ones_join(client: Client, executor: ServerUnderTest) -> None:
    execution = execution_id(await execute(client, CREATE))
    results = []

    async def answer() -> None:
        async with connect(executor.url, mode="legacy") as (other, _):
            results.append(await resume(other, execution))

    async with trio.open_nursery() as both:
        both.start_soon(answer)
        both.start_soon(answer)
    again = await resume(client, execution)
    texts = {text_of(result) for result in [*results, again]}
    assert len(texts) == 1
    assert not again.is_error
    assert len((await execute(client, LIST)).structured_content["result"]) == 1  # the gated tool ran once


async def test_gates_in_one_execution_pause_one_after_another(client: Client) -> None:
    code = """
    const first = await tools.executor.coreTools.policies.create({ owner: "org", pattern: "a.*", action: "block" });
    const second = await tools.executor.coreTools.policies.create({ owner: "user", pattern: "b.c", action: "approve" });
    return [first.data.pattern, second.data.pattern];
    """
    first = await execute(client, code)
    second = await resume(client, execution_id(first))
    assert execution_id(second) != execution_id(first)
    assert "b.c" in text_of(second)
    done = await resume(client, execution_id(second))
    assert done.structured_content["result"] == ["a.*", "b.c"]


async def test_arguments_are_validated_before_anyone_is_asked(client: Client) -> None:
    code = 'return await tools.executor.coreTools.policies.create({ owner: "org", pattern: "me*", action: "block" });'
    result = await execute(client, code)
    assert result.structured_content["status"] == "completed"
    assert result.structured_content["result"] == {
        "ok": False,
        "error": {"code": "invalid_tool_arguments", "message": "Invalid tool policy pattern: me*"},
    }


async def test_unknown_and_malformed_resumes(client: Client) -> None:
    unknown = await resume(client, "exec_00000000-0000-0000-0000-000000000000")
    assert unknown.is_error
    assert RECOVERY in text_of(unknown)
    assert unknown.structured_content["status"] == "execution_not_found"
    assert (await resume(client, "not-an-id")).structured_content["status"] == "execution_not_found"
    bad_action = await client.call_tool("resume", {"executionId": "exec_x", "action": "maybe"})
    assert bad_action.is_error
    assert text_of(bad_action).startswith("MCP error -32602: Input validation error: Invalid arguments for tool resume")


@pytest.mark.parametrize("content", ["{}", "[1]", "7", "not json", '{"note": "ok"}'])
async def test_content_that_is_not_an_object_is_ignored(client: Client, content: str) -> None:
    execution = execution_id(await execute(client, CREATE))
    accepted = await resume(client, execution, "accept", content)
    assert not accepted.is_error
    assert accepted.structured_content["result"]["ok"] is True


async def test_resume_from_another_session_of_the_same_principal(client: Client, executor: ServerUnderTest) -> None:
    execution = execution_id(await execute(client, CREATE))
    async with connect(executor.url, mode="legacy") as (other, _):
        accepted = await resume(other, execution)
    assert accepted.structured_content["result"]["ok"] is True


@pytest.mark.slow
async def test_an_unanswered_pause_expires(nursery: trio.Nursery, data_dir: Path) -> None:
    server = await start_server(nursery, data_dir, approval_window=1.0)
    async with connect(server.url, mode="legacy") as (client, _):
        paused = await execute(client, CREATE)
        assert "(1 second approval window)" in text_of(paused)
        await trio.sleep(1.5)
        late = await resume(client, execution_id(paused))
        assert late.is_error
        assert late.structured_content["status"] == "execution_expired"
        assert RECOVERY in text_of(late)
        fresh = await execute(client, CREATE)
        assert execution_id(fresh) != execution_id(paused)
        assert (await resume(client, execution_id(fresh))).structured_content["result"]["ok"] is True
        assert len((await execute(client, LIST)).structured_content["result"]) == 1


# -- policies decide ------------------------------------------------------------------------------


async def test_a_block_policy_blocks_and_an_org_block_beats_a_user_approve(
    executor: ServerUnderTest, http: httpx.AsyncClient, client: Client
) -> None:
    api = executor.running.url + "/api/policies"
    for body in (
        {"owner": "user", "pattern": "executor.coreTools.integrations.list", "action": "approve"},
        {"owner": "org", "pattern": "executor.coreTools.*", "action": "block"},
    ):
        assert (await http.post(api, json=body)).status_code == 200
    result = await execute(client, "return await tools.executor.coreTools.integrations.list({});")
    assert result.structured_content["result"] == {
        "ok": False,
        "error": {"code": "tool_blocked", "message": "Tool blocked by policy: executor.coreTools.integrations.list"},
    }


async def test_an_explicit_approve_lifts_the_annotation_gate(
    executor: ServerUnderTest, http: httpx.AsyncClient, client: Client
) -> None:
    api = executor.running.url + "/api/policies"
    body = {"owner": "user", "pattern": "executor.coreTools.policies.create", "action": "approve"}
    assert (await http.post(api, json=body)).status_code == 200
    result = await execute(client, CREATE)
    assert result.structured_content["status"] == "completed"
    assert result.structured_content["result"]["ok"] is True


async def test_require_approval_gates_a_harmless_tool(
    executor: ServerUnderTest, http: httpx.AsyncClient, client: Client
) -> None:
    api = executor.running.url + "/api/policies"
    body = {"owner": "org", "pattern": "executor.coreTools.policies.list", "action": "require_approval"}
    added = await http.post(api, json=body)
    assert added.status_code == 200
    paused = await execute(client, LIST)
    assert text_of(paused).startswith(
        "Execution paused: Approve executor.coreTools.policies.list? (matched policy: executor.coreTools.policies.list)"
    )
    # The model is told which rule asked, with its owner and id, so the user can be told where to change it.
    assert (
        f'\n\nWhy: the org policy "executor.coreTools.policies.list" ({added.json()["id"]}) requires approval for '
        'tool "executor.coreTools.policies.list".\n\nThis is a model-side confirmation gate;'
    ) in text_of(paused)


# -- the HTTP API and the CLI -----------------------------------------------------------------------


async def test_policies_api(executor: ServerUnderTest, http: httpx.AsyncClient) -> None:
    api = executor.running.url + "/api/policies"
    wide = (await http.post(api, json={"owner": "org", "pattern": "*", "action": "require_approval"})).json()
    narrow = (await http.post(api, json={"owner": "org", "pattern": "a.b.c", "action": "block"})).json()
    mine = (await http.post(api, json={"owner": "user", "pattern": "a.*", "action": "approve"})).json()
    listed = (await http.get(api)).json()
    # User rules first; within an owner the more specific rule was placed above the wider one.
    assert [policy["id"] for policy in listed] == [mine["id"], narrow["id"], wide["id"]]
    assert set(listed[0]) == {"id", "owner", "pattern", "action", "position", "createdAt", "updatedAt"}

    patched = await http.patch(f"{api}/{narrow['id']}", json={"owner": "org", "action": "approve"})
    assert patched.json()["action"] == "approve"
    removed = await http.request("DELETE", f"{api}/{wide['id']}", json={"owner": "org"})
    assert removed.json() == {"removed": True}
    assert [policy["id"] for policy in (await http.get(api)).json()] == [mine["id"], narrow["id"]]


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "message"),
    [
        ("POST", "", {"owner": "org", "pattern": "me*", "action": "block"}, 400, "Invalid tool policy pattern: me*"),
        ("POST", "", {"owner": "org", "pattern": ".a", "action": "block"}, 400, "Invalid tool policy pattern: .a"),
        ("POST", "", {"owner": "org", "pattern": "a", "action": "allow"}, 400, "action must be one of"),
        ("POST", "", {"owner": "team", "pattern": "a", "action": "block"}, 400, 'owner must be "org" or "user"'),
        ("POST", "", [1, 2], 400, "The request body must be a JSON object"),
        ("PATCH", "/pol_missing", {"owner": "org", "action": "block"}, 404, "Policy not found: pol_missing"),
        ("DELETE", "/pol_missing", {"owner": "org"}, 404, "Policy not found: pol_missing"),
        ("DELETE", "/pol_missing", {}, 400, 'owner must be "org" or "user"'),
    ],
)
async def test_policies_api_refusals_write_nothing(
    executor: ServerUnderTest, http: httpx.AsyncClient, method: str, path: str, body, status: int, message: str
) -> None:
    api = executor.running.url + "/api/policies"
    response = await http.request(method, api + path, json=body)
    assert response.status_code == status
    assert response.json()["error"].startswith(message)
    assert (await http.get(api)).json() == []


async def test_policies_api_is_authenticated_and_scoped(nursery: trio.Nursery, data_dir: Path, tmp_path: Path) -> None:
    secret = tmp_path / "key"
    secret.write_bytes(b"test-secret-that-is-long-enough-for-hs256")
    server = await start_server(nursery, data_dir, auth="jwt", jwt_secret_file=secret)
    api = server.running.url + "/api/policies"
    async with httpx.AsyncClient() as http:
        unauthenticated = await http.get(api)
        assert unauthenticated.status_code == 401
        assert unauthenticated.json() == {"error": "Unauthorized"}
        assert unauthenticated.headers["www-authenticate"].startswith("Bearer resource_metadata=")

        alice, bob, stranger = bearer(mint("alice", "acme")), bearer(mint("bob", "acme")), bearer(mint("eve", "evil"))
        org_rule = (
            await http.post(api, json={"owner": "org", "pattern": "x", "action": "block"}, headers=alice)
        ).json()
        own_rule = (
            await http.post(api, json={"owner": "user", "pattern": "y", "action": "block"}, headers=alice)
        ).json()
        assert [p["id"] for p in (await http.get(api, headers=alice)).json()] == [own_rule["id"], org_rule["id"]]
        assert [p["id"] for p in (await http.get(api, headers=bob)).json()] == [org_rule["id"]]
        assert (await http.get(api, headers=stranger)).json() == []
        removal = {"owner": "user"}
        assert (await http.request("DELETE", f"{api}/{own_rule['id']}", json=removal, headers=bob)).status_code == 404


async def test_cross_account_resume_is_forbidden(nursery: trio.Nursery, data_dir: Path, tmp_path: Path) -> None:
    secret = tmp_path / "key"
    secret.write_bytes(b"test-secret-that-is-long-enough-for-hs256")
    server = await start_server(nursery, data_dir, auth="jwt", jwt_secret_file=secret)

    async def client_for(account: str, org: str):
        http = httpx2.AsyncClient(headers=bearer(mint(account, org)))
        return http, Client(streamable_http_client(server.url, http_client=http), mode="legacy")

    alice_http, alice = await client_for("alice", "acme")
    mallory_http, mallory = await client_for("mallory", "acme")
    async with alice_http, mallory_http, alice, mallory:
        execution = execution_id(await execute(alice, CREATE))
        refused = await resume(mallory, execution)
        assert refused.is_error
        assert refused.structured_content == {"status": "execution_forbidden", "executionId": execution}
        assert (await resume(alice, execution)).structured_content["result"]["ok"] is True


async def test_policies_cli(executor: ServerUnderTest, http: httpx.AsyncClient) -> None:
    data_dir = str(executor.running.data_dir)
    added = await run_cli(
        "policies", "add", "--org", "local", "--pattern", "executor.*", "--action", "block", "--data-dir", data_dir
    )
    assert added.returncode == 0, added.stderr
    policy_id = added.stdout.decode().strip()
    listed = await run_cli("policies", "list", "--org", "local", "--data-dir", data_dir)
    assert f"{policy_id}\torg\texecutor.*\tblock".encode() in listed.stdout
    api = (await http.get(executor.running.url + "/api/policies")).json()
    assert [policy["id"] for policy in api] == [policy_id]
    bad = await run_cli(
        "policies", "add", "--org", "local", "--pattern", "*x", "--action", "block", "--data-dir", data_dir
    )
    assert bad.returncode == 2
    assert b"Invalid tool policy pattern: *x" in bad.stderr
    removed = await run_cli("policies", "remove", policy_id, "--org", "local", "--data-dir", data_dir)
    assert removed.returncode == 0
    assert (await http.get(executor.running.url + "/api/policies")).json() == []


# -- native elicitation -----------------------------------------------------------------------------


@pytest.mark.parametrize(("action", "written"), [("accept", 1), ("decline", 0)])
async def test_native_elicitation(executor: ServerUnderTest, action: str, written: int) -> None:
    asked: list[str] = []

    async def answer(context, params) -> ElicitResult:
        asked.append(params.message)
        return ElicitResult(action=action, content={} if action == "accept" else None)

    async with connect(executor.url + "?elicitation_mode=native", mode="legacy", elicitation_callback=answer) as (
        client,
        _,
    ):
        names = [tool.name for tool in (await client.list_tools()).tools]
        assert names == ["execute", "skills"]
        code = "try { return await " + CREATE.removeprefix("return await ") + " } catch (e) { return e.message; }"
        result = await execute(client, code)
        assert asked
        assert asked[0].startswith("Approve executor.coreTools.policies.create?")
        if action == "accept":
            assert result.structured_content["result"]["ok"] is True
        else:
            assert result.structured_content["result"] == DECLINED
        assert len((await execute(client, LIST)).structured_content["result"]) == written


async def test_native_mode_without_the_capability_cancels(executor: ServerUnderTest) -> None:
    async with connect(executor.url + "?elicitation_mode=native", mode="legacy") as (client, _):
        code = "try { return await " + CREATE.removeprefix("return await ") + " } catch (e) { return e.message; }"
        result = await execute(client, code)
        assert result.structured_content["result"] == DECLINED.replace("declined", "cancelled")


@pytest.mark.slow
async def test_a_pause_does_not_use_up_the_wall_clock(nursery: trio.Nursery, data_dir: Path) -> None:
    server = await start_server(nursery, data_dir, execution_timeout=1.0)
    async with connect(server.url, mode="legacy") as (client, _):
        paused = await execute(client, CREATE)
        await trio.sleep(1.5)  # longer than the whole wall-clock budget
        resumed = await resume(client, execution_id(paused))
        assert resumed.structured_content["status"] == "completed"
        assert resumed.structured_content["result"]["ok"] is True
