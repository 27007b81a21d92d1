"""MCP 2026-07-28 with the official Python client in its default mode, next to the 2025 era on the same `/mcp`:
execute, skills, approvals asked as `input_required` (answered by the client, by a person on the console, or
by a model's `resume`), model-mode pauses resumed across eras and across a restart, and passthrough."""

from pathlib import Path

import httpx
import pytest
import trio
from mcp import MCPError
from mcp.types import ElicitResult

from tests.auth_support import bearer, mint
from tests.conftest import ServerUnderTest, jwt_server, start_server
from tests.integration.test_approvals import CREATE, DECLINED, LIST
from tests.integration.test_passthrough import GET_ORDER, add_policy, invoked
from tests.integration.test_passthrough import orders as orders
from tests.integration.test_passthrough import upstream as upstream
from tests.sdk import PRODUCT_TOOLS, connect, execute, execution_id, text_of
from tests.upstream import Upstream

MODERN = "2026-07-28"
NATIVE = "?elicitation_mode=native"
# The gated call, with its outcome as the code's result (a decline throws inside the sandbox).
CREATE_OR_WHY = "try { return await " + CREATE.removeprefix("return await ") + " } catch (e) { return e.message; }"


@pytest.fixture
async def executor(nursery: trio.Nursery, data_dir: Path) -> ServerUnderTest:
    return await start_server(nursery, data_dir, allow_local_network=True)


async def policies(client) -> list:
    return (await execute(client, LIST)).structured_content["result"]


async def test_the_default_client_speaks_2026_with_no_session(executor: ServerUnderTest) -> None:
    async with connect(executor.url) as (client, recorder):
        assert client.protocol_version == MODERN
        assert [tool.name for tool in (await client.list_tools()).tools] == PRODUCT_TOOLS
        assert (await execute(client, "return 6*7")).structured_content["result"] == 42
        skills = await client.call_tool("skills", {})
        assert "Available skills" in text_of(skills)
        assert recorder.session_id is None


async def test_the_legacy_client_still_opens_a_2025_session(executor: ServerUnderTest) -> None:
    async with connect(executor.url, mode="legacy") as (client, recorder):
        assert client.protocol_version == "2025-11-25"
        assert (await execute(client, "return 6*7")).structured_content["result"] == 42
        assert recorder.session_id is not None


@pytest.mark.parametrize(("action", "written"), [("accept", 1), ("decline", 0)])
async def test_native_approval_is_asked_as_input_required(executor: ServerUnderTest, action: str, written: int) -> None:
    asked: list[str] = []

    async def answer(context, params) -> ElicitResult:
        asked.append(params.message)
        return ElicitResult(action=action, content={} if action == "accept" else None)

    async with connect(executor.url + NATIVE, elicitation_callback=answer) as (client, _):
        assert client.protocol_version == MODERN
        # 2026 keeps `resume` listed in native mode: the pause is a durable one, answerable from anywhere.
        assert [tool.name for tool in (await client.list_tools()).tools] == PRODUCT_TOOLS
        result = await execute(client, CREATE_OR_WHY)
        (message,) = asked
        assert message.startswith("Approve executor.coreTools.policies.create?")
        if action == "accept":
            assert result.structured_content["result"]["ok"] is True
        else:
            assert result.structured_content["result"] == DECLINED
        assert len(await policies(client)) == written


async def test_native_mode_without_the_capability_is_refused_before_any_code_runs(executor: ServerUnderTest) -> None:
    async with connect(executor.url + NATIVE) as (client, _):
        with pytest.raises(MCPError) as refused:
            await execute(client, CREATE)
        assert refused.value.error.code == -32021
        assert refused.value.error.data == {"requiredCapabilities": {"elicitation": {"form": {}}}}
        # Tools that run no code need no capability.
        assert "Available skills" in text_of(await client.call_tool("skills", {}))
    async with connect(executor.url) as (client, _):
        assert await policies(client) == []


async def test_two_gates_are_two_rounds(executor: ServerUnderTest) -> None:
    asked: list[str] = []

    async def answer(context, params) -> ElicitResult:
        asked.append(params.message)
        return ElicitResult(action="accept", content={})

    code = CREATE.removeprefix("return ") + "; " + CREATE.replace("github.*", "gitlab.*")
    async with connect(executor.url + NATIVE, elicitation_callback=answer) as (client, _):
        result = await execute(client, code)
        assert result.structured_content["result"]["ok"] is True
        assert len(asked) == 2
        assert sorted(p["pattern"] for p in await policies(client)) == ["github.*", "gitlab.*"]


async def test_a_person_on_the_console_answers_first(executor: ServerUnderTest, http: httpx.AsyncClient) -> None:
    """The client's question and the console's list show the same pause; the first answer counts."""
    approvals = executor.running.url + "/api/approvals"
    decided = trio.Event()

    async def answer(context, params) -> ElicitResult:
        # The pause was opened (and listed) before the client was asked.
        pending = (await http.get(approvals)).json()
        (pause,) = pending
        approved = await http.post(f"{approvals}/{pause['executionId']}", json={"action": "accept"})
        assert approved.status_code == 200, approved.text
        decided.set()
        return ElicitResult(action="decline")  # too late: the person's approval came first

    async with connect(executor.url + NATIVE, elicitation_callback=answer) as (client, _):
        result = await execute(client, CREATE_OR_WHY)
        assert decided.is_set()
        assert result.structured_content["result"]["ok"] is True
        assert len(await policies(client)) == 1


async def test_a_2026_pause_is_resumed_from_a_2025_session_and_back(executor: ServerUnderTest) -> None:
    async with connect(executor.url) as (modern, _), connect(executor.url, mode="legacy") as (legacy, _):
        paused = await execute(modern, CREATE)
        assert paused.structured_content["status"] == "waiting_for_interaction"
        resumed = await legacy.call_tool("resume", {"executionId": execution_id(paused), "action": "accept"})
        assert resumed.structured_content["result"]["ok"] is True

        paused = await execute(legacy, CREATE.replace("github.*", "gitlab.*"))
        resumed = await modern.call_tool("resume", {"executionId": execution_id(paused), "action": "accept"})
        assert resumed.structured_content["result"]["ok"] is True
        assert len(await policies(modern)) == 2


async def test_a_2026_pause_survives_a_restart(nursery: trio.Nursery, data_dir: Path) -> None:
    first = await start_server(nursery, data_dir)
    async with connect(first.url) as (client, _):
        paused = await execute(client, CREATE)
    await first.stop()
    second = await start_server(nursery, data_dir)
    async with connect(second.url) as (client, _):
        resumed = await client.call_tool("resume", {"executionId": execution_id(paused), "action": "accept"})
        assert resumed.structured_content["result"]["ok"] is True, text_of(resumed)
        assert len(await policies(client)) == 1


async def test_another_account_cannot_resume_a_2026_pause(nursery: trio.Nursery, data_dir: Path, tmp_path) -> None:
    server = await jwt_server(nursery, data_dir, tmp_path)
    async with (
        connect(server.url, headers=bearer(mint("alice", "acme"))) as (alice, _),
        connect(server.url, headers=bearer(mint("bob", "acme"))) as (bob, _),
    ):
        paused = await execute(alice, CREATE)
        refused = await bob.call_tool("resume", {"executionId": execution_id(paused), "action": "accept"})
        assert refused.is_error
        assert refused.structured_content["status"] == "execution_forbidden"
        assert await policies(alice) == []


async def test_passthrough_on_2026(
    orders: None, executor: ServerUnderTest, upstream: Upstream, http: httpx.AsyncClient
) -> None:
    await add_policy(http, executor, GET_ORDER, "require_approval")
    asked: list[str] = []

    async def answer(context, params) -> ElicitResult:
        asked.append(params.message)
        return ElicitResult(action="accept", content={})

    async with connect(executor.url + "?mode=passthrough" + NATIVE.replace("?", "&"), elicitation_callback=answer) as (
        client,
        _,
    ):
        assert client.protocol_version == MODERN
        assert [tool.name for tool in (await client.list_tools()).tools] == ["search", "invoke", "resume"]
        found = await client.call_tool("search", {"query": "order"})
        assert GET_ORDER in text_of(found)
        called = await invoked(client, GET_ORDER, {"orderId": "9"})
    assert called["data"] == {"id": "9", "status": "shipped"}
    (message,) = asked
    assert message.startswith(f"Approve {GET_ORDER}?")
    assert len(upstream.calls("/orders")) == 1
