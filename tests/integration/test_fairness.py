"""Accounts cannot read, stall or starve each other's executions: ownership of pauses, the per-account
limit on executions in progress, the fair share of sandbox workers, and the approval window of native
elicitation."""

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
import trio
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.auth_support import bearer, mint
from tests.conftest import ServerUnderTest, jwt_server, start_server
from tests.mcp_http import headers, initialize_body, post, sse_messages
from tests.sdk import execution_id, text_of

CREATE = 'return await tools.executor.coreTools.policies.create({ owner: "user", pattern: "a.b", action: "block" });'
LOOP = "while (true) {}"


async def execute(client: Client, code: str):
    return await client.call_tool("execute", {"code": code})


async def resume(client: Client, execution: str, action: str = "accept"):
    return await client.call_tool("resume", {"executionId": execution, "action": action})


@asynccontextmanager
async def as_account(server: ServerUnderTest, account: str, org: str) -> AsyncIterator[Client]:
    async with (
        httpx2.AsyncClient(headers=bearer(mint(account, org))) as http,
        Client(streamable_http_client(server.url, http_client=http), mode="legacy") as client,
    ):
        yield client


# -- 1. a pause belongs to its account and org, before, after and beyond its life ------------------------


@pytest.mark.slow
async def test_a_stranger_never_learns_what_became_of_a_pause(
    nursery: trio.Nursery, data_dir: Path, tmp_path: Path
) -> None:
    server = await jwt_server(nursery, data_dir, tmp_path, approval_window=1.5)
    async with (
        as_account(server, "alice", "acme") as alice,
        as_account(server, "bob", "other") as bob,
        as_account(server, "alice", "evil") as namesake,
    ):

        async def refused_to_strangers(execution: str, status: str) -> None:
            for stranger in (bob, namesake):
                for action in ("accept", "decline"):
                    answer = await resume(stranger, execution, action)
                    assert answer.is_error
                    assert answer.structured_content["status"] == status
                    assert answer.structured_content["executionId"] == execution
                    assert "a.b" not in text_of(answer)

        settled = execution_id(await execute(alice, CREATE))
        await refused_to_strangers(settled, "execution_forbidden")  # live
        accepted = await resume(alice, settled)
        assert accepted.structured_content["result"]["ok"] is True
        # Settled, its result kept for replays: strangers are told of nothing (it is not in their memory).
        await refused_to_strangers(settled, "execution_not_found")
        assert (await resume(alice, settled)).structured_content == accepted.structured_content

        expiring = execution_id(await execute(alice, CREATE))
        await trio.sleep(2.5)
        await refused_to_strangers(expiring, "execution_not_found")  # expired
        assert (await resume(alice, expiring)).structured_content["status"] == "execution_expired"

        unknown = "exec_00000000-0000-0000-0000-000000000000"
        assert (await resume(bob, unknown)).structured_content["status"] == "execution_not_found"


# -- 2. one account cannot hold the workers everyone shares ---------------------------------------------


@pytest.mark.slow
async def test_one_account_at_its_limit_is_refused_and_others_are_served(
    nursery: trio.Nursery, data_dir: Path, tmp_path: Path
) -> None:
    server = await jwt_server(
        nursery, data_dir, tmp_path, sandbox_workers=4, max_executions_per_account=2, execution_cpu_limit=30.0
    )
    looped: list[Any] = []
    async with as_account(server, "alice", "acme") as alice, as_account(server, "bob", "other") as bob:
        paused = execution_id(await execute(alice, CREATE))

        async def loop() -> None:
            async with as_account(server, "alice", "acme") as second_session:
                looped.append(await execute(second_session, LOOP))

        async with trio.open_nursery() as background:
            background.start_soon(loop)
            with trio.fail_after(30):  # until the loop is admitted, a quick execute still runs
                for _ in range(150):
                    if (await execute(alice, "return 0")).is_error:
                        break
                    await trio.sleep(0.2)
            for _ in range(3):  # as many more as there are free workers: every one is refused at once
                with trio.fail_after(10):
                    refused = await execute(alice, CREATE)
                assert refused.is_error
                text = text_of(refused)
                assert text.startswith(
                    "Execution refused: this account already has 2 executions in progress (1 running, 1 paused "
                    "waiting for approval), the most one account may have at once (2). Nothing was run."
                )
                assert f'"decline" or "cancel" to end it): {paused}.' in text
                assert "Running executions free their place when they finish." in text
                assert refused.structured_content == {
                    "status": "execution_limit_reached",
                    "scope": "account",
                    "limit": 2,
                    "running": 1,
                    "paused": 1,
                    "pausedExecutionIds": [paused],
                }

            for _ in range(3):  # another account is served at once, again and again
                with trio.fail_after(10):
                    assert text_of(await execute(bob, "return 1")) == "1"

            declined = await resume(alice, paused, "decline")  # answering a pause frees its place
            assert declined.is_error
            with trio.fail_after(10):
                assert text_of(await execute(alice, "return 2")) == "2"
            background.cancel_scope.cancel()
    assert not looped  # the loop was still running: the limit counted it


@pytest.mark.slow
async def test_an_account_never_holds_every_worker(nursery: trio.Nursery, data_dir: Path, tmp_path: Path) -> None:
    cpu_limit = 12.0
    server = await jwt_server(nursery, data_dir, tmp_path, sandbox_workers=2, execution_cpu_limit=cpu_limit)
    async with as_account(server, "bob", "other") as bob, trio.open_nursery() as background:

        async def loop() -> None:
            async with as_account(server, "alice", "acme") as alice:
                await execute(alice, LOOP)

        for _ in range(3):
            background.start_soon(loop)
        await trio.sleep(3)  # alice's loops are spinning or waiting for a worker
        started = trio.current_time()
        with trio.fail_after(cpu_limit):
            assert text_of(await execute(bob, "return 1")) == "1"
        assert trio.current_time() - started < cpu_limit / 2  # not after one of alice's loops ended
        background.cancel_scope.cancel()


# -- 11. native elicitation waits for the approval window, and not a moment longer ------------------------


def _tools_call(request_id: int, code: str) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": "execute", "arguments": {"code": code}},
    }


async def _native_session(http: httpx.AsyncClient, url: str) -> str:
    body = initialize_body()
    body["params"]["capabilities"] = {"elicitation": {}}
    response = await post(http, url + "?elicitation_mode=native", body)
    assert response.status_code == 200, response.text
    session_id = response.headers["mcp-session-id"]
    notified = await post(http, url, {"jsonrpc": "2.0", "method": "notifications/initialized"}, session_id)
    assert notified.status_code == 202
    return session_id


@pytest.mark.slow
async def test_an_unanswered_native_elicitation_ends_with_the_approval_window(
    nursery: trio.Nursery, data_dir: Path
) -> None:
    server = await start_server(nursery, data_dir, approval_window=2.0, sandbox_workers=1, max_executions_per_account=1)
    async with httpx.AsyncClient(timeout=30) as http:
        session_id = await _native_session(http, server.url)
        other_session = await _native_session(http, server.url)
        received: list[dict[str, Any]] = []
        with trio.fail_after(20):
            async with http.stream(
                "POST",
                server.url,
                content=json.dumps(_tools_call(2, CREATE)),
                headers=headers(session_id),
            ) as stream:
                buffered = ""
                async for chunk in stream.aiter_text():
                    buffered += chunk
                    complete = buffered.rsplit("\n\n", 1)[0] if "\n\n" in buffered else ""
                    fresh = sse_messages(complete)[len(received) :]
                    for message in fresh:
                        received.append(message)
                        if message.get("method") == "elicitation/create":
                            # While the question is open it counts against the account (same principal).
                            busy = await post(http, server.url, _tools_call(3, "return 1"), other_session)
                            [answer] = sse_messages(busy.text)
                            refusal = answer["result"]
                            assert refusal["isError"] is True
                            assert refusal["structuredContent"]["paused"] == 1
                            assert (
                                "answer or dismiss the approval requests your client is showing"
                                in (refusal["content"][0]["text"])
                            )
        assert [message.get("method") for message in received] == ["elicitation/create", None]
        result = received[-1]["result"]
        assert result["isError"] is True
        assert result["content"][0]["text"] == (
            'Error: Execution ended: the approval request for tool "executor.coreTools.policies.create" was not '
            "answered within the 2 seconds approval window, so the tool did not run. Ask the user, then run "
            "execute again to ask once more."
        )
        with trio.fail_after(10):  # the one worker and the account's one place are free again
            done = await post(http, server.url, _tools_call(4, "return 1"), other_session)
        [answer] = sse_messages(done.text)
        assert answer["result"]["content"][0]["text"] == "1"
