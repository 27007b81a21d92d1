"""Durable pauses under concurrency, against the real server: several gated calls of one execution at once,
across a restart."""

import json
import signal
from pathlib import Path

import httpx
import pytest
import trio

from tests.conftest import start_server
from tests.integration.test_durable_pauses import SERVE, WRITE, add_ledger, execute, ledger, resume, stop
from tests.process import server_process
from tests.sdk import connect, execution_id, text_of
from tests.upstream import Upstream, start_upstream

EXECUTIONS = 6


@pytest.fixture
async def upstream(nursery: trio.Nursery) -> Upstream:
    return await start_upstream(nursery, ledger)


async def test_two_gated_calls_at_once_are_each_asked_once_after_a_restart(tmp_path: Path, upstream: Upstream) -> None:
    """Two gated calls wait at once; the first one's pause survives a restart and is approved there. The
    approval counts: the second call is asked next, and the first is not asked again (the revived calls race
    to their gate, so several executions make the losing order show up)."""
    data_dir = tmp_path / "data"
    code = "return (await Promise.all([{0}({{ body: {{ amount: {1} }} }}), {0}({{ body: {{ amount: {2} }} }})]))"
    async with server_process(data_dir, *SERVE) as server:
        await add_ledger(server.url, upstream)
        async with connect(server.url, mode="legacy") as (client, _):
            paused = []
            for number in range(EXECUTIONS):
                first = await execute(client, code.format(WRITE, 2 * number, 2 * number + 1) + ".length;")
                assert "executionId:" in text_of(first), text_of(first)
                paused.append(execution_id(first))
            await stop(server, signal.SIGKILL)
    async with server_process(data_dir, *SERVE) as server:
        async with connect(server.url, mode="legacy") as (client, _):
            results = []
            for execution in paused:
                second = await resume(client, execution)
                assert "executionId:" in text_of(second), text_of(second)
                done = await resume(client, execution_id(second))
                results.append(done)
        await stop(server, signal.SIGTERM)
    for done in results:
        assert not done.is_error, text_of(done)
        assert done.structured_content.get("result") == 2, text_of(done)
    amounts = sorted(json.loads(r.body)["amount"] for r in upstream.calls("/entries"))
    assert amounts == list(range(2 * EXECUTIONS))


async def test_two_gated_calls_waiting_at_once_hold_no_sandbox_worker(
    nursery: trio.Nursery, data_dir: Path, upstream: Upstream
) -> None:
    """One gated call is asked, the other waits its turn at the gate: both wait for a human, so the
    execution gives its worker back (with one worker, another execution could not run otherwise)."""
    server = await start_server(
        nursery, data_dir, allow_local_network=True, sandbox_workers=1, max_executions_per_account=4
    )
    await add_ledger(server.url, upstream)
    both = f"return (await Promise.all([1, 2].map((amount) => {WRITE}({{ body: {{ amount }} }})))).length;"
    async with connect(server.url, mode="legacy") as (client, _):
        first = await execute(client, both)
        assert "executionId:" in text_of(first), text_of(first)
        with trio.fail_after(30):  # a bound on a deadlock, not a timing: the one worker is free or never is
            free = await execute(client, "return 6 * 7;")
        assert free.structured_content.get("result") == 42, text_of(free)
        second = await resume(client, execution_id(first))
        assert "executionId:" in text_of(second), text_of(second)
        done = await resume(client, execution_id(second))
    assert done.structured_content.get("result") == 2, text_of(done)
    assert sorted(json.loads(r.body)["amount"] for r in upstream.calls("/entries")) == [1, 2]


async def test_a_revived_pause_that_is_declined_does_not_run_its_tool_when_the_policy_changed_meanwhile(
    tmp_path: Path, upstream: Upstream
) -> None:
    """The person declines the pause they were asked. That the tool would not be gated any more (a rule that
    approves it, added while the execution was paused) does not turn their decline into a run."""
    data_dir = tmp_path / "data"
    async with server_process(data_dir, *SERVE) as server:
        await add_ledger(server.url, upstream)
        async with connect(server.url, mode="legacy") as (client, _):
            paused = await execute(client, f"return await {WRITE}({{ body: {{ amount: 1 }} }});")
            assert "executionId:" in text_of(paused), text_of(paused)
            async with httpx.AsyncClient(timeout=30) as http:
                rule = {"owner": "user", "pattern": WRITE.removeprefix("tools."), "action": "approve"}
                added = await http.post(server.url.removesuffix("/mcp") + "/api/policies", json=rule)
                assert added.status_code == 200, added.text
            await stop(server, signal.SIGKILL)
    async with server_process(data_dir, *SERVE) as server:
        async with connect(server.url, mode="legacy") as (client, _):
            declined = await resume(client, execution_id(paused), "decline")
        await stop(server, signal.SIGTERM)
    assert "was declined by the user" in text_of(declined), text_of(declined)
    assert upstream.calls("/entries") == []
