"""Executions in progress per org and per account, end to end: a real server with the operator's org limit and an
org admin's own account limit (`/api/limits`); accounts of one org pausing executions until the org is full, the
refusal in the org's words, another org served, a place freed by answering a pause. Then two instances on one
PostgreSQL database: the org's limit holds across them, and a place is given back on the instance that held it."""

from pathlib import Path

import httpx
import pytest
import trio

from executor_mcp.config import SECRET_KEY_ENV
from tests.auth_support import bearer, mint
from tests.conftest import jwt_server
from tests.integration.test_fairness import CREATE, as_account, execute, resume
from tests.postgres import PostgresServer
from tests.sdk import execution_id, text_of


def refused_scope(result) -> str:
    assert result.is_error, text_of(result)
    assert result.structured_content["status"] == "execution_limit_reached"
    return result.structured_content["scope"]


async def test_an_orgs_accounts_share_its_limit_and_an_admin_narrows_each_accounts(
    nursery: trio.Nursery, data_dir: Path, tmp_path: Path, http: httpx.AsyncClient
) -> None:
    server = await jwt_server(nursery, data_dir, tmp_path, max_executions_per_org=2, org_admin_claim=("role", "admin"))
    async with (
        as_account(server, "alice", "acme") as alice,
        as_account(server, "bob", "acme") as bob,
        as_account(server, "carol", "acme") as carol,
        as_account(server, "dave", "other") as dave,
    ):
        alices = execution_id(await execute(alice, CREATE))  # paused on its approval: it keeps its place
        execution_id(await execute(bob, CREATE))
        refused = await execute(carol, "return 1")
        assert refused_scope(refused) == "org"
        assert text_of(refused).startswith(
            "Execution refused: this organization already has 2 executions in progress (0 running, 2 paused "
            "waiting for approval), the most one organization may have at once (2). Nothing was run."
        )
        assert alices not in text_of(refused)  # another account's pause is not named
        assert text_of(await execute(dave, "return 1")) == "1"  # another org's limit is its own
        assert (await resume(alice, alices, "decline")).is_error  # answering a pause frees its place
        assert text_of(await execute(carol, "return 2")) == "2"

        admin = bearer(mint("erin", "acme", role="admin"))
        changed = await http.put(
            server.running.url + "/api/limits", json={"executionsInFlight": {"account": 1}}, headers=admin
        )
        assert changed.json()["effective"]["executionsInFlight"] == {"org": 2, "account": 1}
        mine = execution_id(await execute(alice, CREATE))
        answer = await execute(alice, "return 3")  # the change reaches this instance at once
        assert refused_scope(answer) == "account"
        assert mine in text_of(answer)  # the account's own pause is named, to answer it


@pytest.mark.slow
async def test_two_instances_on_one_database_share_an_orgs_limit(
    nursery: trio.Nursery, tmp_path: Path, postgres: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(SECRET_KEY_ENV, "the shared key")
    url = postgres.new_database()
    a, b = [
        await jwt_server(
            nursery,
            tmp_path / f"instance-{name}",
            tmp_path,
            database_url=url,
            instance_id=name,
            max_executions_per_org=2,
        )
        for name in ("a", "b")
    ]
    async with (
        as_account(a, "alice", "acme") as alice_on_a,
        as_account(b, "bob", "acme") as bob_on_b,
        as_account(b, "carol", "acme") as carol_on_b,
        as_account(a, "carol", "acme") as carol_on_a,
    ):
        alices = execution_id(await execute(alice_on_a, CREATE))
        execution_id(await execute(bob_on_b, CREATE))
        assert refused_scope(await execute(carol_on_b, "return 1")) == "org"
        assert refused_scope(await execute(carol_on_a, "return 1")) == "org"
        assert (await resume(alice_on_a, alices, "decline")).is_error
        assert text_of(await execute(carol_on_b, "return 2")) == "2"  # a's place, given back on a, is free on b
        # Many at once through both instances: the org's one free place goes to exactly one of them.
        results: list[bool] = []

        async def one(client, code: str) -> None:
            results.append(not (await execute(client, code)).is_error)

        async with trio.open_nursery() as racing:
            for index in range(6):
                racing.start_soon(one, (carol_on_a, carol_on_b)[index % 2], CREATE)
        assert results.count(True) == 1
