"""Accounts cannot read, stall or starve each other's executions."""

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest
import trio
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.auth_support import SECRET, bearer, mint
from tests.conftest import ServerUnderTest, start_server
from tests.sdk import text_of

CREATE = 'return await tools.executor.coreTools.policies.create({ owner: "user", pattern: "a.b", action: "block" });'


def execution_id(result) -> str:
    match = re.search(r"\bexecutionId:\s*(\S+)", text_of(result))
    assert match, text_of(result)
    return match.group(1)


async def execute(client: Client, code: str):
    return await client.call_tool("execute", {"code": code})


async def resume(client: Client, execution: str, action: str = "accept"):
    return await client.call_tool("resume", {"executionId": execution, "action": action})


async def jwt_server(nursery: trio.Nursery, data_dir: Path, tmp_path: Path, **settings: Any) -> ServerUnderTest:
    secret = tmp_path / "key"
    secret.write_bytes(SECRET)
    return await start_server(nursery, data_dir, auth="jwt", jwt_secret_file=secret, **settings)


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

        async def refused_to_strangers(execution: str) -> None:
            for stranger in (bob, namesake):
                for action in ("accept", "decline"):
                    answer = await resume(stranger, execution, action)
                    assert answer.is_error
                    assert answer.structured_content == {"status": "execution_forbidden", "executionId": execution}
                    assert "a.b" not in text_of(answer)

        settled = execution_id(await execute(alice, CREATE))
        await refused_to_strangers(settled)  # live
        accepted = await resume(alice, settled)
        assert accepted.structured_content["result"]["ok"] is True
        await refused_to_strangers(settled)  # settled, its result kept for replays
        assert (await resume(alice, settled)).structured_content == accepted.structured_content

        expiring = execution_id(await execute(alice, CREATE))
        await trio.sleep(2.5)
        await refused_to_strangers(expiring)  # expired
        assert (await resume(alice, expiring)).structured_content["status"] == "execution_expired"

        unknown = "exec_00000000-0000-0000-0000-000000000000"
        assert (await resume(bob, unknown)).structured_content["status"] == "execution_not_found"
