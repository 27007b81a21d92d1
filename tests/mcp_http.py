"""Raw Streamable HTTP helpers for tests that need to see statuses, headers and bodies exactly."""

import json
from typing import Any

import httpx

BOTH = "application/json, text/event-stream"
PROTOCOL_VERSION = "2025-06-18"


def initialize_body(request_id: int | str = 1, version: str = PROTOCOL_VERSION) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "initialize",
        "params": {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "tests", "version": "0"}},
    }


def headers(session_id: str | None = None, *, accept: str = BOTH, **extra: str) -> dict[str, str]:
    result = {"accept": accept, "content-type": "application/json", **extra}
    if session_id is not None:
        result["mcp-session-id"] = session_id
    return result


async def post(
    http: httpx.AsyncClient, url: str, body: Any, session_id: str | None = None, **extra: str
) -> httpx.Response:
    return await http.post(url, content=json.dumps(body), headers=headers(session_id, **extra))


async def open_session(http: httpx.AsyncClient, url: str) -> str:
    response = await post(http, url, initialize_body())
    assert response.status_code == 200, response.text
    session_id = response.headers["mcp-session-id"]
    notified = await post(http, url, {"jsonrpc": "2.0", "method": "notifications/initialized"}, session_id)
    assert notified.status_code == 202
    return session_id


def envelope(response: httpx.Response) -> tuple[int, int, str]:
    """(status, JSON-RPC code, message) of an error envelope; fails the test if it is not one."""
    assert response.headers["content-type"].startswith("application/json"), response.headers
    body = response.json()
    assert body["jsonrpc"] == "2.0"
    assert "result" not in body
    return response.status_code, body["error"]["code"], body["error"]["message"]


def sse_messages(text: str) -> list[dict[str, Any]]:
    """The JSON-RPC messages of an SSE body's `message` events."""
    messages = []
    for block in text.split("\n\n"):
        lines = block.split("\n")
        data = [line[len("data: ") :] for line in lines if line.startswith("data: ")]
        if data and "event: message" in lines:
            messages.append(json.loads("\n".join(data)))
    return messages
