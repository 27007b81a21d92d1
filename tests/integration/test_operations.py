"""Operations on a real server: `/healthz`, `/readyz` (and its 503 on a read-only data dir), `/metrics` after
real MCP traffic (parsed with prometheus-client's own parser), the JSON log, and `X-Request-Id`.

The read-only data dir: tests run as root here and in CI, and root writes through any mode bits (its
`CAP_DAC_OVERRIDE`). So the server runs as a child process whose capability bounding set lacks the
permission overrides (`prctl(PR_CAPBSET_DROP)` before it executes: still uid 0, still able to read the
checkout, but held to the mode bits like anyone), and the test makes its data dir `0555`. As another user,
nothing needs dropping.
"""

import ctypes
import json
import os
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest
import trio
from prometheus_client.parser import text_string_to_metric_families

from executor_mcp.observability.metrics import CONTENT_TYPE
from executor_mcp.sessions.manager import SESSIONS_DIR
from tests.auth_support import mint
from tests.conftest import ServerUnderTest, jwt_server
from tests.process import ServerProcess, server_process
from tests.sdk import connect, execute, execution_id, text_of

READY_POLLS = 200  # x 0.05 s: the pool's first warm worker, generously
SECRET = "sk-live-7f3a9c-DO-NOT-LOG"
# Gated by its own approval annotation while no policy says otherwise: the execution pauses.
GATED = 'await tools.executor.coreTools.policies.create({ owner: "user", pattern: "ops.*", action: "block" });'
HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "ops", "version": "0"}},
}


def base(url: str) -> str:
    return url.removesuffix("/mcp")


async def wait_ready(http: httpx.AsyncClient, url: str) -> httpx.Response:
    for _ in range(READY_POLLS):
        response = await http.get(base(url) + "/readyz")
        if response.status_code == 200:
            return response
        await trio.sleep(0.05)
    raise AssertionError(f"never ready: {response.status_code} {response.text}")


def families(text: str) -> dict[str, list]:
    return {family.name: family.samples for family in text_string_to_metric_families(text)}


def value(samples: list, name: str, **labels: str) -> float:
    return sum(s.value for s in samples if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()))


async def test_healthz_and_readyz_need_no_credential(server: ServerUnderTest, http: httpx.AsyncClient) -> None:
    healthz = await http.get(base(server.url) + "/healthz")
    assert (healthz.status_code, healthz.json()) == (200, {"status": "ok"})
    ready = await wait_ready(http, server.url)
    assert ready.json() == {"status": "ready", "checks": {"storage": "ok", "sandbox": "ok", "server": "ok"}}
    assert not [p for p in server.running.data_dir.rglob(".write-probe-*")]


async def test_metrics_move_with_real_mcp_traffic(server: ServerUnderTest, http: httpx.AsyncClient) -> None:
    async with connect(server.url, mode="legacy") as (client, recorder):
        assert [tool.name for tool in (await client.list_tools()).tools]
        result = await execute(client, "return 6*7")
        assert "42" in text_of(result)
        scrape = await http.get(base(server.url) + "/metrics")
    assert scrape.status_code == 200
    assert scrape.headers["content-type"] == CONTENT_TYPE
    assert recorder.session_id is not None
    assert recorder.session_id not in scrape.text
    samples = families(scrape.text)
    requests = samples["executor_mcp_http_requests"]
    total = "executor_mcp_http_requests_total"
    assert value(requests, total, method="POST", rpc_method="initialize", status="200") == 1
    assert value(requests, total, method="POST", rpc_method="tools/list", status="200") >= 1
    assert value(requests, total, method="POST", rpc_method="tools/call", status="200") == 1
    executions = samples["executor_mcp_execution_duration_seconds"]
    assert value(executions, "executor_mcp_execution_duration_seconds_count", outcome="ok") == 1
    assert value(samples["executor_mcp_sessions"], "executor_mcp_sessions", state="live") == 1
    workers = samples["executor_mcp_sandbox_workers"]
    assert value(workers, "executor_mcp_sandbox_workers", state="idle") >= 1
    assert value(samples["executor_mcp_paused_executions"], "executor_mcp_paused_executions") == 0
    assert value(samples["executor_mcp_control_plane_bytes"], "executor_mcp_control_plane_bytes") > 0
    assert value(samples["executor_mcp_session_files"], "executor_mcp_session_files") == 1
    assert value(samples["executor_mcp_session_files_bytes"], "executor_mcp_session_files_bytes") > 0
    # The scrape itself is counted once it is answered: the next one shows it.
    again = families((await http.get(base(server.url) + "/metrics")).text)["executor_mcp_http_requests"]
    assert value(again, total, method="GET", rpc_method="none", status="200") >= 1


async def test_a_paused_execution_shows_in_the_metrics(server: ServerUnderTest, http: httpx.AsyncClient) -> None:
    async with connect(server.url, mode="legacy") as (client, _):
        paused = await execute(client, GATED + " return 1;")
        assert "executionId" in text_of(paused)
        samples = families((await http.get(base(server.url) + "/metrics")).text)
        assert value(samples["executor_mcp_paused_executions"], "executor_mcp_paused_executions") == 1
        await client.call_tool("resume", {"executionId": execution_id(paused), "action": "decline"})
        samples = families((await http.get(base(server.url) + "/metrics")).text)
        assert value(samples["executor_mcp_paused_executions"], "executor_mcp_paused_executions") == 0
    # The declined call is counted by its integration and how it ended (the audit record's outcome): declined,
    # not `threw`, which would count a person's refusal as a tool that failed.
    calls = samples["executor_mcp_tool_calls"]
    assert value(calls, "executor_mcp_tool_calls_total", integration="executor", outcome="declined") == 1


async def test_request_ids_are_echoed_generated_or_replaced(server: ServerUnderTest, http: httpx.AsyncClient) -> None:
    root = base(server.url)
    echoed = await http.get(root + "/healthz", headers={"x-request-id": "lb-42.a_b"})
    assert echoed.headers["x-request-id"] == "lb-42.a_b"
    first, second = (await http.get(root + "/healthz")), (await http.get(root + "/healthz"))
    generated = [first.headers["x-request-id"], second.headers["x-request-id"]]
    assert all(re.fullmatch(r"[0-9a-f]{16}", g) for g in generated)
    assert generated[0] != generated[1]
    for unsafe in ("has space", "x" * 65, "a;b=c"):
        replaced = await http.get(root + "/healthz", headers={"x-request-id": unsafe})
        assert re.fullmatch(r"[0-9a-f]{16}", replaced.headers["x-request-id"])
    # Errors, unknown routes and event streams carry it too.
    broken = await http.post(server.url, content=b"{not json", headers={**HEADERS, "x-request-id": "err-1"})
    assert (broken.status_code, broken.headers["x-request-id"]) == (400, "err-1")
    missing = await http.get(root + "/nowhere", headers={"x-request-id": "nf-1"})
    assert (missing.status_code, missing.headers["x-request-id"]) == (404, "nf-1")
    opened = await http.post(server.url, json=INITIALIZE, headers=HEADERS)
    call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "execute", "arguments": {}}}
    session = {"mcp-session-id": opened.headers["mcp-session-id"], "mcp-protocol-version": "2025-06-18"}
    streamed = await http.post(server.url, json=call, headers={**HEADERS, **session, "x-request-id": "sse-1"})
    assert streamed.headers["content-type"].startswith("text/event-stream")
    assert streamed.headers["x-request-id"] == "sse-1"


async def test_metrics_with_bearer_auth_need_the_metrics_token(
    nursery: trio.Nursery, data_dir: Path, tmp_path: Path, http: httpx.AsyncClient
) -> None:
    token_file = tmp_path / "metrics.token"
    token_file.write_text("scrape-me-please\n")
    guarded = await jwt_server(nursery, data_dir, tmp_path, metrics_token_file=token_file)
    url = base(guarded.url) + "/metrics"
    assert (await http.get(url)).status_code == 401
    tenant = await http.get(url, headers={"authorization": f"Bearer {mint()}"})
    assert tenant.status_code == 401  # a tenant's valid bearer is not the scrape token
    scraped = await http.get(url, headers={"authorization": "Bearer scrape-me-please"})
    assert scraped.status_code == 200
    assert "executor_mcp_sessions" in scraped.text
    assert (await http.get(base(guarded.url) + "/healthz")).status_code == 200
    await wait_ready(http, guarded.url)


async def test_metrics_with_bearer_auth_and_no_token_are_refused(
    nursery: trio.Nursery, data_dir: Path, tmp_path: Path, http: httpx.AsyncClient
) -> None:
    guarded = await jwt_server(nursery, data_dir, tmp_path)
    refused = await http.get(base(guarded.url) + "/metrics", headers={"authorization": f"Bearer {mint()}"})
    assert refused.status_code == 403
    assert "--metrics-token-file" in refused.json()["error"]


PR_CAPBSET_DROP = 24
# CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER: what lets root ignore mode bits.
PERMISSION_OVERRIDES = (1, 2, 3)


def held_to_mode_bits() -> None:
    """In the child, before it executes the server: drop root's permission overrides from the bounding set,
    so that the executed server (uid 0, no inheritable capabilities) never holds them."""
    if os.getuid() != 0:
        return
    libc = ctypes.CDLL(None, use_errno=True)
    for capability in PERMISSION_OVERRIDES:
        if libc.prctl(PR_CAPBSET_DROP, capability, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), f"prctl(PR_CAPBSET_DROP, {capability})")


@asynccontextmanager
async def child_server(data_dir: Path, *extra: str) -> AsyncIterator[ServerProcess]:
    async with server_process(data_dir, *extra, preexec_fn=held_to_mode_bits) as child:
        yield child


@pytest.mark.slow
async def test_readyz_turns_503_when_the_data_dir_becomes_read_only(data_dir: Path, http: httpx.AsyncClient) -> None:
    async with child_server(data_dir) as child:
        await wait_ready(http, child.url)
        opened = await http.post(child.url, json=INITIALIZE, headers=HEADERS)  # makes the sessions dir
        assert opened.status_code == 200
        writable = [data_dir, data_dir / SESSIONS_DIR]
        try:
            for directory in writable:
                directory.chmod(0o555)
            refused = await http.get(base(child.url) + "/readyz")
        finally:
            for directory in writable:
                directory.chmod(0o755)
        assert refused.status_code == 503
        body = refused.json()
        assert body["status"] == "unavailable"
        assert body["checks"]["sandbox"] == "ok"
        assert body["checks"]["storage"] == f"cannot create a file in {data_dir}: Permission denied"
        assert (await http.get(base(child.url) + "/readyz")).status_code == 200  # and back, once writable
        child.terminate()
        assert await child.wait() == 0


def json_lines(stderr: bytes) -> list[dict]:
    """Every line the server logged: each must be one JSON object (the `MCP:` and `Console:` announcements are
    not log lines)."""
    announcements = ("MCP: ", "Console: ")
    lines = [line for line in stderr.decode().splitlines() if line and not line.startswith(announcements)]
    return [json.loads(line) for line in lines]


@pytest.mark.slow
async def test_the_json_log_carries_context_and_no_argument_value(data_dir: Path, http: httpx.AsyncClient) -> None:
    async with child_server(data_dir, "--log-format", "json") as child:
        async with connect(child.url, mode="legacy") as (client, recorder):
            result = await execute(client, f'const token = "{SECRET}"; return token.length;')
            assert str(len(SECRET)) in text_of(result)
            paused = await execute(client, f'const key = "{SECRET}"; {GATED} return 1;')
            paused_id = execution_id(paused)
            await client.call_tool("resume", {"executionId": paused_id, "action": "decline"})
        child.terminate()
        assert await child.wait() == 0
    assert SECRET.encode() not in child.stderr
    lines = json_lines(bytes(child.stderr))
    assert all({"time", "level", "logger", "message"} <= line.keys() for line in lines)
    access = [line for line in lines if line["logger"] == "executor_mcp.access"]
    calls = [line for line in access if line.get("jsonrpc_method") == "tools/call"]
    assert len(calls) == 3
    for line in calls:
        assert line["http_method"] == "POST"
        assert line["path"] == "/mcp"
        assert line["status"] == 200
        assert line["session_id"] == recorder.session_id
        assert (line["account"], line["org"]) == ("local", "local")
        assert re.fullmatch(r"[0-9a-f]{16}", line["request_id"])
        assert isinstance(line["duration_ms"], float)
    assert "execution_id" not in calls[0]
    assert calls[1]["execution_id"] == paused_id  # the call that paused
    assert calls[2]["execution_id"] == paused_id  # its resume
    initialize = next(line for line in access if line.get("jsonrpc_method") == "initialize")
    assert initialize["session_id"] == recorder.session_id  # learned from the answer's header
    assert len({line["request_id"] for line in access}) == len(access)
