"""Durable paused executions against the real server: a pause holds no sandbox worker, survives SIGTERM and
SIGKILL, and resumes by replaying its journal, calling no tool a second time."""

import json
import signal
from pathlib import Path
from typing import Any

import httpx
import lmdb
import pytest
import trio
from mcp import Client

from executor_mcp.sessions.manager import SESSIONS_DIR
from tests.auth_support import bearer, mint
from tests.conftest import start_server
from tests.console_support import console_server, visitor
from tests.process import ServerProcess, server_process
from tests.sdk import connect, execution_id, text_of
from tests.upstream import Answer, Received, Upstream, start_upstream

ALICE = mint("alice", "acme")
BOB = mint("bob", "acme")
READ = "tools.ledger.org.public.notes.readNote"
WRITE = "tools.ledger.org.public.entries.addEntry"
# Reads the clock and the random source, passes what it read out through an ungated call (the upstream
# records it), then pauses on a write.
OBSERVING = f"""
const t0 = Date.now();
const r0 = Math.random();
const d0 = new Date().toISOString();
const p0 = performance.now();
const noted = await {READ}({{ text: `${{t0}}|${{r0}}|${{d0}}|${{p0}}` }});
const entry = await {WRITE}({{ body: {{ amount: 5 }} }});
return {{ t0, r0, d0, p0, noted: noted.data, entry: entry.data, after: typeof Math.random() }};
"""


def ledger_spec(server_url: str) -> str:
    return json.dumps(
        {
            "openapi": "3.0.3",
            "info": {"title": "Ledger", "version": "1"},
            "servers": [{"url": server_url}],
            "paths": {
                "/notes": {
                    "get": {
                        "operationId": "readNote",
                        "tags": ["notes"],
                        "parameters": [{"name": "text", "in": "query", "schema": {"type": "string"}}],
                        "responses": {"200": {"description": "ok", "content": {"application/json": {}}}},
                    }
                },
                "/slow": {
                    "get": {
                        "operationId": "slowRead",
                        "tags": ["notes"],
                        "responses": {"200": {"description": "ok", "content": {"application/json": {}}}},
                    }
                },
                "/big": {
                    "get": {
                        "operationId": "bigRead",
                        "tags": ["notes"],
                        "responses": {"200": {"description": "ok", "content": {"application/json": {}}}},
                    }
                },
                "/entries": {
                    "post": {
                        "operationId": "addEntry",
                        "tags": ["entries"],
                        "requestBody": {
                            "content": {
                                "application/json": {
                                    "schema": {"type": "object", "properties": {"amount": {"type": "number"}}}
                                }
                            }
                        },
                        "responses": {"201": {"description": "created", "content": {"application/json": {}}}},
                    }
                },
            },
        }
    )


BIG = 3 * 1024 * 1024


async def ledger(request: Received) -> Answer:
    if request.path == "/slow":
        await trio.sleep(3600)  # answered never: the server is stopped with this call in flight
    if request.path == "/big":
        return Answer(body=json.dumps({"blob": "x" * BIG}).encode())
    if request.path == "/notes":
        return Answer(body=json.dumps({"query": request.query}).encode())
    if request.path == "/entries":
        return Answer(status=201, body=json.dumps({"created": json.loads(request.body or b"{}")}).encode())
    return Answer(status=404, body=b"{}")


@pytest.fixture
async def upstream(nursery: trio.Nursery) -> Upstream:
    return await start_upstream(nursery, ledger)


async def add_ledger(url: str, upstream: Upstream) -> None:
    """The ledger integration and a no-auth org connection to it, through the HTTP API."""
    base = url.removesuffix("/mcp")
    async with httpx.AsyncClient(timeout=30) as http:
        added = await http.post(
            f"{base}/api/openapi/specs",
            json={"spec": {"kind": "blob", "value": ledger_spec(upstream.url)}, "slug": "ledger"},
        )
        assert added.status_code == 200, added.text
        connected = await http.post(
            f"{base}/api/connections",
            json={"owner": "org", "name": "public", "integration": "ledger", "template": "none"},
        )
        assert connected.status_code == 200, connected.text


async def execute(client: Client, code: str) -> Any:
    return await client.call_tool("execute", {"code": code})


async def resume(client: Client, execution: str, action: str = "accept") -> Any:
    return await client.call_tool("resume", {"executionId": execution, "action": action})


async def stop(server: ServerProcess, how: signal.Signals) -> None:
    server.process.send_signal(how)
    await server.wait()


SERVE = ("--allow-local-network",)


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
async def test_a_pause_survives_a_restart_and_resumes_without_calling_a_tool_twice(
    tmp_path: Path, upstream: Upstream, how: signal.Signals
) -> None:
    data_dir = tmp_path / "data"
    async with server_process(data_dir, *SERVE) as first:
        await add_ledger(first.url, upstream)
        async with connect(first.url, mode="legacy") as (client, _):
            paused = await execute(client, OBSERVING)
            assert "executionId:" in text_of(paused), text_of(paused)
            await stop(first, how)  # with the client still there: closing it would end its session
    (noted,) = upstream.calls("/notes")
    assert upstream.calls("/entries") == []

    async with server_process(data_dir, *SERVE) as second:
        async with connect(second.url, mode="legacy") as (client, _):
            resumed = await resume(client, execution_id(paused))
        assert not resumed.is_error, text_of(resumed)
        result = resumed.structured_content["result"]
        await stop(second, signal.SIGTERM)
    assert len(upstream.calls("/notes")) == 1  # the replay answered the read from the journal
    (written,) = upstream.calls("/entries")
    assert json.loads(written.body) == {"amount": 5}
    # What the code read before its pause is what it reads after the replay: the values it sent out then.
    assert result["noted"] == {"query": noted.query}
    t0, r0, d0, p0 = httpx.QueryParams(noted.query)["text"].split("|")
    assert (int(t0), float(r0), d0, float(p0)) == (result["t0"], result["r0"], result["d0"], result["p0"])
    assert result["entry"] == {"created": {"amount": 5}}
    assert result["after"] == "number"


async def test_two_pauses_in_one_execution_across_two_restarts(tmp_path: Path, upstream: Upstream) -> None:
    data_dir = tmp_path / "data"
    code = f"""
    const first = await {WRITE}({{ body: {{ amount: 1 }} }});
    const stamp = Date.now();
    const second = await {WRITE}({{ body: {{ amount: 2 }} }});
    return {{ first: first.data, second: second.data, stamp }};
    """
    async with server_process(data_dir, *SERVE) as server:
        await add_ledger(server.url, upstream)
        async with connect(server.url, mode="legacy") as (client, _):
            paused = await execute(client, code)
            await stop(server, signal.SIGKILL)
    async with server_process(data_dir, *SERVE) as server, connect(server.url, mode="legacy") as (client, _):
        again = await resume(client, execution_id(paused))
        assert "executionId:" in text_of(again), text_of(again)
        assert execution_id(again) != execution_id(paused)
        await stop(server, signal.SIGTERM)
    assert [json.loads(r.body) for r in upstream.calls("/entries")] == [{"amount": 1}]
    async with server_process(data_dir, *SERVE) as server:
        async with connect(server.url, mode="legacy") as (client, _):
            done = await resume(client, execution_id(again))
            stale = await resume(client, execution_id(paused))
        await stop(server, signal.SIGTERM)
    assert not done.is_error, text_of(done)
    result = done.structured_content["result"]
    assert result["first"] == {"created": {"amount": 1}}
    assert result["second"] == {"created": {"amount": 2}}
    assert [json.loads(r.body) for r in upstream.calls("/entries")] == [{"amount": 1}, {"amount": 2}]
    assert stale.is_error  # the first pause was answered long ago; its id is no longer resumable
    assert stale.structured_content["status"] in {"execution_not_found", "execution_already_settled"}


def _tamper_with_the_read(data_dir: Path) -> None:
    """Change what the journal says the ungated read returned, as a value the journal cannot reproduce."""
    (path,) = [p for p in (data_dir / SESSIONS_DIR).glob("*.mdb")]
    env = lmdb.open(str(path), subdir=False)
    try:
        with env.begin(write=True) as txn:
            changed = 0
            for key, value in list(txn.cursor()):
                if key.startswith(b"journal:") and b'"op":"settle"' in value and b"query" in value:
                    txn.put(key, value.replace(b"query", b"quarry"))
                    changed += 1
            assert changed == 1
    finally:
        env.close()


async def test_a_replay_that_diverges_fails_clearly_and_calls_nothing(tmp_path: Path, upstream: Upstream) -> None:
    data_dir = tmp_path / "data"
    code = f"""
    const noted = await {READ}({{ text: "x" }});
    if (noted.data.query === undefined) return await {READ}({{ text: "a branch the journal never saw" }});
    return (await {WRITE}({{ body: {{ amount: 1 }} }})).data;
    """
    async with server_process(data_dir, *SERVE) as server:
        await add_ledger(server.url, upstream)
        async with connect(server.url, mode="legacy") as (client, _):
            paused = await execute(client, code)
            await stop(server, signal.SIGKILL)
    _tamper_with_the_read(data_dir)
    async with server_process(data_dir, *SERVE) as server:
        async with connect(server.url, mode="legacy") as (client, _):
            failed = await resume(client, execution_id(paused))
        await stop(server, signal.SIGTERM)
    assert failed.is_error
    text = text_of(failed)
    assert "Execution could not be resumed" in text, text
    assert "Run the execute tool again" in text
    assert len(upstream.calls("/notes")) == 1
    assert upstream.calls("/entries") == []


async def test_a_call_in_flight_when_the_server_died_is_not_called_again(tmp_path: Path, upstream: Upstream) -> None:
    data_dir = tmp_path / "data"
    slow = READ.replace("readNote", "slowRead")
    code = f"return await Promise.all([{slow}({{}}), {WRITE}({{ body: {{ amount: 1 }} }})]);"
    async with server_process(data_dir, *SERVE) as server:
        await add_ledger(server.url, upstream)
        async with connect(server.url, mode="legacy") as (client, _):
            paused = await execute(client, code)
            with trio.fail_after(30):
                while not upstream.calls("/slow"):  # noqa: ASYNC110
                    await trio.sleep(0.02)
            await stop(server, signal.SIGKILL)
    async with server_process(data_dir, *SERVE) as server:
        async with connect(server.url, mode="legacy") as (client, _):
            failed = await resume(client, execution_id(paused))
            again = await resume(client, execution_id(paused), "decline")
        await stop(server, signal.SIGTERM)
    assert failed.is_error
    text = text_of(failed)
    assert "tools.ledger.org.public.notes.slowRead was running when the server stopped" in text, text
    assert text_of(again) == text  # known at the restart: nobody's answer was asked for, or used
    assert len(upstream.calls("/slow")) == 1
    assert upstream.calls("/entries") == []


async def test_a_window_that_closed_while_the_server_was_down_is_expired(tmp_path: Path, upstream: Upstream) -> None:
    data_dir = tmp_path / "data"
    window = ("--approval-window", "1")
    async with server_process(data_dir, *SERVE, *window) as server:
        await add_ledger(server.url, upstream)
        async with connect(server.url, mode="legacy") as (client, _):
            paused = await execute(client, f"return await {WRITE}({{ body: {{ amount: 1 }} }});")
            await stop(server, signal.SIGKILL)
    await trio.sleep(1.2)
    async with server_process(data_dir, *SERVE, *window) as server:
        async with connect(server.url, mode="legacy") as (client, _):
            expired = await resume(client, execution_id(paused))
        await stop(server, signal.SIGTERM)
    assert expired.is_error
    assert expired.structured_content["status"] == "execution_expired"
    assert "run the execute tool again" in text_of(expired)
    assert upstream.calls("/entries") == []
    assert kept_records(data_dir) == []  # its journal and pause record are gone with it


def kept_records(data_dir: Path) -> list[bytes]:
    """The keys of every journal and pause record in the (one) session file."""
    (session_file,) = (data_dir / SESSIONS_DIR).glob("*.mdb")
    env = lmdb.open(str(session_file), subdir=False, readonly=True, lock=False)
    try:
        with env.begin() as txn:
            return [bytes(key) for key, _ in txn.cursor() if key.startswith((b"journal:", b"pause:"))]
    finally:
        env.close()


async def test_a_pause_disposed_of_with_its_idle_runtime_is_not_revived(tmp_path: Path, upstream: Upstream) -> None:
    data_dir = tmp_path / "data"
    quick = ("--session-timeout", "0.3", "--paused-session-idle-timeout", "1")
    async with server_process(data_dir, *SERVE, *quick) as server:
        await add_ledger(server.url, upstream)
        async with connect(server.url, mode="legacy") as (client, _):
            paused = await execute(client, f"return await {WRITE}({{ body: {{ amount: 1 }} }});")
            assert kept_records(data_dir) != []
            with trio.fail_after(10):
                while kept_records(data_dir):  # noqa: ASYNC110 (the runtime goes past its paused idle window)
                    await trio.sleep(0.1)
            await stop(server, signal.SIGTERM)
    async with server_process(data_dir, *SERVE, *quick) as server:
        async with connect(server.url, mode="legacy") as (client, _):
            gone = await resume(client, execution_id(paused))
        await stop(server, signal.SIGTERM)
    assert gone.structured_content["status"] in {"execution_not_found", "execution_expired"}
    assert upstream.calls("/entries") == []


PAUSES = 200


@pytest.mark.slow
async def test_many_paused_executions_hold_no_sandbox_worker(
    nursery: trio.Nursery, data_dir: Path, upstream: Upstream
) -> None:
    server = await start_server(
        nursery, data_dir, allow_local_network=True, sandbox_workers=2, max_executions_per_account=PAUSES + 10
    )
    await add_ledger(server.url, upstream)
    async with connect(server.url, mode="legacy") as (client, _):
        paused = []
        for number in range(PAUSES):
            result = await execute(client, f"const n = {number}; return await {WRITE}({{ body: {{ amount: n }} }});")
            paused.append(execution_id(result))
        with trio.fail_after(30):  # two workers, two hundred pauses: only a pause that holds none leaves room
            free = await execute(client, "return 6 * 7;")
        assert free.structured_content["result"] == 42
        for number in (0, PAUSES // 2, PAUSES - 1):
            done = await resume(client, paused[number])
            assert done.structured_content["result"] == {
                "ok": True,
                "data": {"created": {"amount": number}},
                "http": {"status": 201},
            } or done.structured_content["result"]["data"] == {"created": {"amount": number}}
    assert sorted(json.loads(r.body)["amount"] for r in upstream.calls("/entries")) == [0, PAUSES // 2, PAUSES - 1]


async def test_an_execution_that_observes_more_than_its_journal_keeps_stops_clearly(
    nursery: trio.Nursery, data_dir: Path, upstream: Upstream
) -> None:
    server = await start_server(nursery, data_dir, allow_local_network=True, execution_journal_limit=1)
    await add_ledger(server.url, upstream)
    big = READ.replace("readNote", "bigRead")
    async with connect(server.url, mode="legacy") as (client, _):
        stopped = await execute(client, f"const r = await {big}({{}}); await {READ}({{ text: 'more' }}); return 1;")
        small = await execute(client, f"return (await {READ}({{ text: 'ok' }})).ok;")
    assert stopped.is_error
    assert "more than 1 MiB from outside" in text_of(stopped)
    assert "--execution-journal-limit" in text_of(stopped)
    assert small.structured_content["result"] is True


async def test_a_browser_approval_survives_a_restart(
    nursery: trio.Nursery, data_dir: Path, tmp_path: Path, http: httpx.AsyncClient
) -> None:
    create = (
        'return await tools.executor.coreTools.policies.create({ owner: "user", pattern: "x.*", action: "block" });'
    )
    first = await console_server(nursery, data_dir, tmp_path)
    async with connect(first.url + "?elicitation_mode=browser", headers=bearer(ALICE), mode="legacy") as (client, _):
        paused = await execute(client, create)
        assert paused.structured_content["status"] == "user_approval_required"
        execution = paused.structured_content["executionId"]
        await first.stop()
    second = await console_server(nursery, data_dir, tmp_path)
    base = second.running.url
    alice = await visitor(http, base, ALICE)
    (listed,) = (await http.get(f"{base}/api/approvals", headers=alice.headers())).json()
    assert listed["executionId"] == execution
    async with connect(second.url, headers=bearer(BOB), mode="legacy") as (stranger, _):
        refused = await resume(stranger, execution)
    assert refused.structured_content["status"] == "execution_forbidden"
    async with connect(second.url + "?elicitation_mode=browser", headers=bearer(ALICE), mode="legacy") as (client, _):
        results: list[Any] = []

        async def wait_for_the_person() -> None:
            results.append(await client.call_tool("resume", {"executionId": execution}))

        async with trio.open_nursery() as waiting:
            waiting.start_soon(wait_for_the_person)
            decided = await http.post(
                f"{base}/api/approvals/{execution}", json={"action": "accept"}, headers=alice.headers()
            )
            assert decided.status_code == 200, decided.text
    (resumed,) = results
    assert resumed.structured_content["status"] == "completed", text_of(resumed)
    assert resumed.structured_content["result"]["data"]["pattern"] == "x.*"
    rules = (await http.get(f"{base}/api/policies", headers=bearer(ALICE))).json()
    assert [rule["pattern"] for rule in rules if rule["owner"] == "user"] == ["x.*"]


def _damage_the_journal_of(data_dir: Path, marker: bytes, damage: Any) -> None:
    """Replace a field of the first step of the journal whose code holds `marker` with `damage`: a record that
    still decodes as JSON, but not as any step the engine writes."""
    (path,) = [p for p in (data_dir / SESSIONS_DIR).glob("*.mdb")]
    env = lmdb.open(str(path), subdir=False)
    try:
        with env.begin(write=True) as txn:
            (head,) = [bytes(k) for k, v in txn.cursor() if k.startswith(b"journal:") and marker in v]
            first = head[:-16] + f"{1:016x}".encode()
            step = json.loads(txn.get(first))
            step.update(damage)
            txn.put(first, json.dumps(step).encode())
    finally:
        env.close()


@pytest.mark.parametrize(
    "damage",
    [{"out": [5]}, {"out": [["call"]]}, {"out": [["timer", 1, "soon"]]}, {"at": "noon"}, {"in": {"op": "settle"}}],
    ids=["item", "short-call", "timer-delay", "at", "input"],
)
async def test_a_damaged_journal_costs_only_its_own_execution(tmp_path: Path, upstream: Upstream, damage: Any) -> None:
    data_dir = tmp_path / "data"
    async with server_process(data_dir, *SERVE) as server:
        await add_ledger(server.url, upstream)
        async with connect(server.url, mode="legacy") as (client, _):
            healthy = await execute(client, f"return (await {WRITE}({{ body: {{ amount: 1 }} }})).data;")
            damaged = await execute(
                client, f"const damaged = 1; return (await {WRITE}({{ body: {{ amount: 2 }} }})).data;"
            )
            await stop(server, signal.SIGKILL)
    _damage_the_journal_of(data_dir, b"const damaged", damage)
    async with server_process(data_dir, *SERVE) as server:
        async with connect(server.url, mode="legacy") as (client, _):
            done = await resume(client, execution_id(healthy))
            gone = await resume(client, execution_id(damaged))
        await stop(server, signal.SIGTERM)
    assert not done.is_error, text_of(done)
    assert done.structured_content["result"] == {"created": {"amount": 1}}
    assert gone.is_error
    assert gone.structured_content["status"] == "execution_not_found"
    assert [json.loads(r.body) for r in upstream.calls("/entries")] == [{"amount": 1}]
