"""Property-based fuzzing of `/mcp` and `/api/policies` with malformed requests (issue 9).

Whatever arrives — bodies, headers, methods, batch shapes, ids, unicode — the answer is never a 5xx
other than the contract's 503s, always a JSON-RPC envelope on `/mcp` (or `{"error": ...}` on `/api`),
never a traceback, and the server still serves afterwards.

The server runs in its own thread and trio loop, once per test, and Hypothesis drives a synchronous
client at it: examples stay cheap (no server start each) and the whole run is bounded.
"""

import json
import queue
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import ServerUnderTest, start_server
from tests.mcp_http import BOTH, initialize_body

STARTUP_BOUND = 30
EXAMPLES = 300
RETRY_STATUSES = {503}
ERROR_CODES = range(-32768, -31999)

JSON_LEAF = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20)
JSON_VALUE = st.recursive(
    JSON_LEAF,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)
IDS = st.one_of(
    st.integers(), st.text(max_size=12), st.just("\ud800"), st.none(), st.booleans(), st.floats(), st.lists(JSON_LEAF)
)
METHODS = st.sampled_from(
    ["initialize", "ping", "tools/list", "tools/call", "server/discover", "notifications/initialized", "resources/list"]
) | st.text(max_size=16)
TOOL_CALL_PARAMS = st.fixed_dictionaries(
    {"name": st.sampled_from(["skills", "resume", "nope", "\ud800", ""]) | st.text(max_size=8)},
    optional={"arguments": JSON_VALUE, "_meta": JSON_VALUE},
)


@st.composite
def messages(draw: st.DrawFn) -> Any:
    message: dict[str, Any] = {"jsonrpc": draw(st.sampled_from(["2.0", "2.0", "1.0", 2]))}
    if draw(st.booleans()):
        message["id"] = draw(IDS)
    if draw(st.integers(0, 4)):
        message["method"] = draw(METHODS)
        if draw(st.booleans()):
            message["params"] = draw(TOOL_CALL_PARAMS if message["method"] == "tools/call" else JSON_VALUE)
    else:
        message[draw(st.sampled_from(["result", "error"]))] = draw(JSON_VALUE)
    return message


POLICY_FIELDS = {
    "owner": st.sampled_from(["org", "user", "nobody"]) | JSON_LEAF,
    "pattern": st.sampled_from(["*", "executor.coreTools.*", "tools..x", ""]) | JSON_LEAF,
    "action": st.sampled_from(["approve", "require_approval", "block", "maybe"]) | JSON_LEAF,
    "position": JSON_VALUE,
}
POLICY_BODIES = st.fixed_dictionaries({}, optional=POLICY_FIELDS)


@st.composite
def bodies(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from(["message"] * 4 + ["batch"] * 2 + ["policy", "json", "bytes", "deep", "empty"]))
    if kind == "bytes":
        return draw(st.binary(max_size=64))
    if kind == "empty":
        return b""
    if kind == "deep":
        depth = draw(st.integers(100, 3000))
        return (b"[" * depth) + (b"]" * depth)
    value = {
        "message": messages(),
        "batch": st.lists(messages(), max_size=5),
        "policy": POLICY_BODIES,
        "json": JSON_VALUE,
    }[kind]
    text = json.dumps(draw(value), ensure_ascii=draw(st.booleans()))
    return text.encode("utf-8", "surrogatepass")


PATH_CHARACTERS = st.characters(min_codepoint=0x21, max_codepoint=0x7E, exclude_characters="/?#%")
HEADER_TEXT = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=40)


@st.composite
def requests(draw: st.DrawFn, session_id: str) -> tuple[str, str, dict[str, str], bytes]:
    method = draw(st.sampled_from(["POST"] * 6 + ["GET", "DELETE", "PUT", "PATCH", "OPTIONS", "HEAD"]))
    path = draw(st.sampled_from(["/mcp"] * 3 + ["/api/policies", "/api/policies/"]))
    if path.endswith("/"):
        path += draw(
            st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E, exclude_characters="/?#%"), max_size=8)
        )
    headers: dict[str, str] = {}
    # Mostly what a real client sends, so most examples get past the header checks and reach JSON-RPC
    # parsing and the session; now and then a header is missing or wrong. (name, how often present, usual
    # value, the odd ones)
    for name, present, usual, odd in (
        ("accept", 9, BOTH, st.sampled_from(["application/json", "text/event-stream", "*/*", "application/json;q=0"])),
        ("content-type", 9, "application/json", st.sampled_from(["text/plain", "application/json; charset=utf-8"])),
        ("mcp-session-id", 8, session_id, st.just("0" * 64) | HEADER_TEXT),
        ("mcp-protocol-version", 8, "2025-06-18", st.just("2026-07-28") | HEADER_TEXT),
        ("last-event-id", 2, "", HEADER_TEXT),
        ("authorization", 2, "", st.sampled_from(["Bearer", "Bearer x.y.z", "Basic Zm9v"])),
    ):
        if draw(st.integers(0, 9)) < present:
            value = usual if usual and draw(st.integers(0, 9)) else draw(odd)
            headers[name] = value.strip()  # h11 refuses to send surrounding whitespace
    return method, path, headers, draw(bodies())


def check(response: httpx.Response, method: str, path: str) -> None:
    status = response.status_code
    content_type = response.headers.get("content-type", "")
    assert status < 500 or status in RETRY_STATUSES, (status, content_type)
    if content_type.startswith("text/event-stream"):  # a listen stream or tool calls: not read to the end
        assert status == 200
        return
    assert "Traceback" not in response.text
    if method == "HEAD" or status in {202, 204} or (status == 200 and not response.content):
        return
    assert content_type.startswith("application/json"), (status, content_type, response.content)
    body = response.json()
    if path.startswith("/api/"):
        if status >= 400:
            assert isinstance(body.get("error"), str), body
        return
    if status >= 400:
        assert body["jsonrpc"] == "2.0", body
        assert "id" in body, body
        assert body["error"]["code"] in ERROR_CODES, body
        assert isinstance(body["error"]["message"], str), body
        return
    for answer in body if isinstance(body, list) else [body]:
        assert answer["jsonrpc"] == "2.0", answer
        assert "id" in answer, answer
        assert ("result" in answer) != ("error" in answer), answer


@pytest.fixture
def threaded_server(tmp_path: Path) -> Iterator[str]:
    """A real server in its own thread and trio loop; its base URL."""
    started: queue.Queue[tuple[ServerUnderTest, trio.lowlevel.TrioToken]] = queue.Queue()

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            server = await start_server(nursery, tmp_path / "data", shutdown_grace=0.0)
            started.put((server, trio.lowlevel.current_trio_token()))
            await server.done.wait()

    thread = threading.Thread(target=trio.run, args=(main,), daemon=True)
    thread.start()
    server, token = started.get(timeout=STARTUP_BOUND)
    try:
        yield server.running.url
    finally:
        trio.from_thread.run_sync(server.running.stop.set, trio_token=token)
        thread.join(timeout=STARTUP_BOUND)


def _session(client: httpx.Client, base: str) -> str:
    response = client.post(
        base + "/mcp",
        content=json.dumps(initialize_body()),
        headers={"accept": BOTH, "content-type": "application/json"},
    )
    assert response.status_code == 200, response.text
    return response.headers["mcp-session-id"]


@pytest.mark.slow
def test_malformed_requests_never_break_the_server(threaded_server: str) -> None:
    base = threaded_server
    with httpx.Client(timeout=httpx.Timeout(10.0, read=2.0)) as client:
        session_id = _session(client, base)

        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        )
        @given(requests(session_id))
        def one(request: tuple[str, str, dict[str, str], bytes]) -> None:
            method, path, headers, body = request
            with client.stream(method, base + path, headers=headers, content=body) as response:
                if not response.headers.get("content-type", "").startswith("text/event-stream"):
                    response.read()
                check(response, method, path)

        one()
        # Still serving: a fresh session answers a ping.
        fresh = _session(client, base)
        ping = client.post(
            base + "/mcp",
            content=json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"}),
            headers={"accept": BOTH, "content-type": "application/json", "mcp-session-id": fresh},
        )
        assert ping.json() == {"jsonrpc": "2.0", "id": 1, "result": {}}
