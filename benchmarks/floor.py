"""The floor under the throughput figures: what the same hypercorn (its trio worker, as `executor-mcp serve` runs
it) serves on this machine for a trivial JSON-RPC route, measured by the same client in the same run.

    python -m benchmarks.floor        (announces `MCP: http://127.0.0.1:<port>/mcp` on stderr, as the server does)

The app answers every POST at once with a JSON-RPC result: `{}` (an `initialize` also gets a session id), a
notification 202, and builds nothing, stores nothing and runs no code. So a phase against it costs what the HTTP
stack and the client cost per call, and nothing of ours: `benchmarks.mcp_bench --phases floor` reads the
execute throughput as a share of it.
"""

import json
import secrets
import sys
from typing import Any

import trio
from hypercorn.config import Config
from hypercorn.trio import serve

_JSON = [(b"content-type", b"application/json")]


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    body = b""
    while True:
        event = await receive()
        body += event.get("body", b"")
        if not event.get("more_body"):
            break
    message = json.loads(body or b"{}")
    if "id" not in message:
        await send({"type": "http.response.start", "status": 202, "headers": []})
        await send({"type": "http.response.body", "body": b""})
        return
    headers = list(_JSON)
    if message.get("method") == "initialize":
        headers.append((b"mcp-session-id", secrets.token_hex(32).encode()))
    answer = json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": {}}).encode()
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": answer})


async def main() -> None:
    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.accesslog = None

    async def announced(task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED) -> None:
        await serve(app, config, task_status=task_status)  # type: ignore[arg-type]

    async with trio.open_nursery() as nursery:
        binds = await nursery.start(announced)
        sys.stderr.write(f"MCP: {binds[0]}/mcp\n")
        sys.stderr.flush()


if __name__ == "__main__":
    trio.run(main)
