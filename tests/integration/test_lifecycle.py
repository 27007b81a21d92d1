"""A session id under fire: idle disposal and restore, races, eviction, retention, teardown storms."""

import json
import os
import re
from pathlib import Path

import httpx
import pytest
import trio

from tests.conftest import ServerUnderTest, start_server
from tests.mcp_http import envelope, headers, open_session, post, sse_messages
from tests.process import run_cli
from tests.relay import SeveringRelay
from tests.sdk import connect, text_of
from tests.tools import call_body

LIST = {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}
CREATE = 'return await tools.executor.coreTools.policies.create({ owner: "org", pattern: "x.*", action: "block" });'


def session_file_open(data_dir: Path, session_id: str) -> bool:
    """Whether this process holds the session's LMDB file open (its runtime is up)."""
    target = str(data_dir / "sessions" / f"{session_id}.mdb")
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}") == target:
                return True
        except OSError:
            continue
    return False


@pytest.fixture
async def quick(nursery: trio.Nursery, data_dir: Path) -> ServerUnderTest:
    return await start_server(nursery, data_dir, session_timeout=0.3, paused_session_idle_timeout=1.0)


async def test_an_idle_runtime_is_disposed_and_restored_transparently(
    quick: ServerUnderTest, http: httpx.AsyncClient, data_dir: Path
) -> None:
    session_id = await open_session(http, quick.url)
    assert session_file_open(data_dir, session_id)
    with trio.fail_after(5):
        while session_file_open(data_dir, session_id):  # noqa: ASYNC110
            await trio.sleep(0.05)
    restored = await post(http, quick.url, LIST, session_id)
    assert restored.status_code == 200
    assert [tool["name"] for tool in restored.json()["result"]["tools"]] == ["execute", "skills", "resume"]
    assert session_file_open(data_dir, session_id)


async def test_concurrent_get_and_post_after_idle_disposal_restore_once(
    quick: ServerUnderTest, http: httpx.AsyncClient, data_dir: Path
) -> None:
    """Seed 002: the post-idle GET + POST race never bricks the session."""
    session_id = await open_session(http, quick.url)
    with trio.fail_after(5):
        while session_file_open(data_dir, session_id):  # noqa: ASYNC110
            await trio.sleep(0.05)
    statuses: dict[str, int] = {}

    async def listen() -> None:
        listen_headers = {"accept": "text/event-stream", "mcp-session-id": session_id}
        async with http.stream("GET", quick.url, headers=listen_headers) as stream:
            statuses["get"] = stream.status_code
            assert stream.headers["content-type"].startswith("text/event-stream")

    async def ask() -> None:
        statuses["post"] = (await post(http, quick.url, LIST, session_id)).status_code

    async with trio.open_nursery() as race:
        race.start_soon(listen)
        race.start_soon(ask)
    assert statuses == {"get": 200, "post": 200}
    for _ in range(2):
        follow_up = await post(http, quick.url, LIST, session_id)
        assert follow_up.status_code == 200
        assert follow_up.headers["content-type"].startswith("application/json")
        assert "result" in follow_up.json()


async def test_a_call_that_outlives_the_idle_timeout_completes(quick: ServerUnderTest, http: httpx.AsyncClient) -> None:
    session_id = await open_session(http, quick.url)
    code = "await new Promise((resolve) => setTimeout(resolve, 1000)); return 'done';"
    response = await post(http, quick.url, call_body(1, "execute", code=code), session_id)
    assert sse_messages(response.text)[0]["result"]["content"][0]["text"] == "done"


@pytest.mark.slow
async def test_a_pause_past_the_paused_idle_window_expires_with_guidance(quick: ServerUnderTest) -> None:
    async with connect(quick.url, mode="legacy") as (client, _):
        paused = await client.call_tool("execute", {"code": CREATE})
        execution = re.search(r"executionId: (\S+)", text_of(paused)).group(1)
        await trio.sleep(1.5)  # past the paused idle window: the runtime, and its pause, are gone
        late = await client.call_tool("resume", {"executionId": execution, "action": "accept"})
        assert late.is_error
        assert "run the execute tool again" in text_of(late)
        fresh = await client.call_tool("execute", {"code": CREATE})
        fresh_id = re.search(r"executionId: (\S+)", text_of(fresh)).group(1)
        assert fresh_id != execution
        done = await client.call_tool("resume", {"executionId": fresh_id, "action": "accept"})
        assert done.structured_content["result"]["ok"] is True


async def test_the_session_cap_evicts_the_least_recently_active(
    nursery: trio.Nursery, data_dir: Path, http: httpx.AsyncClient
) -> None:
    server = await start_server(nursery, data_dir, max_sessions_per_user=2)
    oldest = await open_session(http, server.url)
    middle = await open_session(http, server.url)
    assert (await post(http, server.url, LIST, oldest)).status_code == 200  # now `middle` is the least recent
    newest = await open_session(http, server.url)
    evicted = await post(http, server.url, LIST, middle)
    status, code, message = envelope(evicted)
    assert (status, code) == (404, -32001)
    assert message in {"Session timed out, please reconnect", "Session not found"}
    for alive in (oldest, newest):
        assert (await post(http, server.url, LIST, alive)).status_code == 200


async def test_sessions_idle_past_retention_are_wiped(
    nursery: trio.Nursery, data_dir: Path, http: httpx.AsyncClient
) -> None:
    server = await start_server(nursery, data_dir, session_retention=0.4)
    session_id = await open_session(http, server.url)
    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    with trio.fail_after(5):
        while True:
            await trio.sleep(0.6)  # idle longer than the retention between checks
            answer = await post(http, server.url, ping, session_id)
            if answer.status_code != 200:
                break
    assert envelope(answer) == (404, -32001, "Session not found")
    assert not (data_dir / "sessions" / f"{session_id}.mdb").exists()


@pytest.mark.slow
async def test_in_flight_requests_survive_their_sessions_teardown_as_protocol_errors(
    server: ServerUnderTest,
) -> None:
    """Seed 000: 12 teardowns, each under 24 requests kept continuously in flight."""
    teardowns, concurrency = 12, 24
    probes: list[tuple[int, str, str | None]] = []
    wiped_per_session: list[bool] = []
    async with httpx.AsyncClient(timeout=10, limits=httpx.Limits(max_connections=concurrency + 4)) as http:
        for _ in range(teardowns):
            session_id = await open_session(http, server.url)
            seen: list[tuple[int, str, str | None]] = []
            stop_at = [trio.current_time() + 60]

            async def worker(session_id: str = session_id, seen: list = seen, stop_at: list = stop_at) -> None:
                while trio.current_time() < stop_at[0]:
                    response = await post(http, server.url, LIST, session_id)
                    seen.append((response.status_code, response.text, response.headers.get("retry-after")))
                    if response.status_code == 404 and response.json()["error"]["message"] == "Session not found":
                        stop_at[0] = min(stop_at[0], trio.current_time() + 0.15)

            async with trio.open_nursery() as load:
                for _ in range(concurrency):
                    load.start_soon(worker)
                await trio.sleep(0.25)
                terminated = await http.delete(server.url, headers={"mcp-session-id": session_id})
                assert terminated.status_code == 200
                stop_at[0] = min(stop_at[0], trio.current_time() + 3)
            probes.extend(seen)
            wiped_per_session.append(any(s == 404 and "Session not found" in body for s, body, _ in seen))

    assert len(probes) > teardowns * concurrency
    assert [status for status, _, _ in probes if status >= 500] == []
    for status, body, _ in probes:
        if status != 200:
            parsed = httpx.Response(status, content=body, headers={"content-type": "application/json"}).json()
            assert parsed["jsonrpc"] == "2.0"
            assert parsed["error"]["code"] == -32001
    assert all(wiped_per_session), wiped_per_session


async def test_the_restart_envelope_then_a_retry_after_the_delay_succeeds(
    nursery: trio.Nursery, data_dir: Path, http: httpx.AsyncClient
) -> None:
    """Seed 003: during a restart the client is told to retry, and the retry works on the next process."""
    first = await start_server(nursery, data_dir, shutdown_grace=30)
    session_id = await open_session(http, first.url)
    answers: list[httpx.Response] = []

    async def hold_a_call() -> None:
        code = "await new Promise((resolve) => setTimeout(resolve, 500)); return 'finished';"
        answers.append(await post(http, first.url, call_body(1, "execute", code=code), session_id))

    async with trio.open_nursery() as calls:
        calls.start_soon(hold_a_call)
        await trio.sleep(0.2)
        first.running.stop.set()
        await trio.sleep(0.05)
        refused = await post(http, first.url, LIST, session_id)
        assert envelope(refused) == (503, -32001, "MCP session is restarting, please retry")
        assert int(refused.headers["retry-after"]) > 0
    assert sse_messages(answers[0].text)[0]["result"]["content"][0]["text"] == "finished"
    await first.done.wait()
    second = await start_server(nursery, data_dir)
    retried = await http.post(second.url, content=refused.request.content, headers=headers(session_id))
    assert retried.status_code == 200


@pytest.mark.slow
async def test_the_sdk_client_resumes_a_severed_call_and_gets_its_result(nursery, data_dir: Path) -> None:
    """The stream of a running execute is cut mid-call; the stock client reconnects with Last-Event-ID."""
    # The relay is another port on loopback, so its Host is allowed explicitly, as for any local proxy.
    server = await start_server(nursery, data_dir, allowed_host=("127.0.0.1",))
    relay = SeveringRelay(target_port=int(server.running.url.rsplit(":", 1)[1]))
    await relay.start(nursery)
    async with connect(relay.url, mode="legacy") as (client, _):
        code = "await new Promise((resolve) => setTimeout(resolve, 2000)); return 'survived the cut';"
        with trio.fail_after(20):
            result = await client.call_tool("execute", {"code": code})
    assert relay.severed.is_set()
    assert text_of(result) == "survived the cut"


async def test_an_undelivered_answer_survives_idle_disposal(
    quick: ServerUnderTest, http: httpx.AsyncClient, data_dir: Path
) -> None:
    """A dropped POST's answer is written to the session file, so a GET after a restore still gets it."""
    session_id = await open_session(http, quick.url)
    code = "await new Promise((resolve) => setTimeout(resolve, 400)); return 'kept on disk';"
    with trio.move_on_after(0.2):
        await post(http, quick.url, call_body("late", "execute", code=code), session_id)
    with trio.fail_after(5):
        while session_file_open(data_dir, session_id):  # noqa: ASYNC110
            await trio.sleep(0.05)
    listen = {"accept": "text/event-stream", "mcp-session-id": session_id}
    replay = await http.get(quick.url, headers=listen)
    answers = [message for message in sse_messages(replay.text) if message.get("id") == "late"]
    assert answers[0]["result"]["content"][0]["text"] == "kept on disk"
    assert replay.text.endswith(": replay-complete\n\n")


async def test_sessions_admin_commands_work_beside_a_running_server(
    server: ServerUnderTest, http: httpx.AsyncClient
) -> None:
    data_dir = str(server.running.data_dir)
    session_id = await open_session(http, server.url)
    listed = await run_cli("sessions", "list", "--data-dir", data_dir)
    assert [session_id, "stored", "local", "local", "/mcp"] in [
        line.split()[:5] for line in listed.stdout.decode().splitlines()
    ]
    shown = await run_cli("sessions", "show", session_id, "--json", "--data-dir", data_dir)
    details = json.loads(shown.stdout)
    assert details["session"]["id"] == session_id
    assert details["meta"]["clientInfo"] == {"name": "tests", "version": "0"}
    assert details["initializeRequest"]["method"] == "initialize"

    terminated = await run_cli("sessions", "terminate", session_id, "--data-dir", data_dir)
    assert terminated.returncode == 0, terminated.stderr
    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    with trio.fail_after(3):  # the teardown bound
        while True:
            answer = await post(http, server.url, ping, session_id)
            if answer.status_code == 404 and answer.json()["error"]["message"] == "Session not found":
                break
            await trio.sleep(0.1)
    missing = await run_cli("sessions", "terminate", session_id, "--data-dir", data_dir)
    assert missing.returncode == 1
