"""MCP-source benchmark: what one call of an MCP server's tool through the catalog adds over calling that
server directly over one reused session.

In-process and real, as `benchmarks.integrations` is: the integrations service over a real control plane in a
temporary data dir, the catalog the sandbox calls into (policies, credential lookup, the session pool, the
guarded outbound client, result mapping), and a minimal raw MCP server (Streamable HTTP, JSON answers) on
hypercorn. The direct side is a plain httpx client POSTing `tools/call` with the session's id, which is the
least a client can do. The sandbox is left out: `scripts/bench` measures what `execute` costs. Every loop is
bounded in count and time.

    .venv/bin/python -m benchmarks.mcp_source [--repeat 300]
"""

import argparse
import json
import tempfile
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import hypercorn.trio
import trio
from hypercorn.config import Config

from benchmarks.common import HEADERS, line, no_gate, overhead_line, timed
from executor_mcp.auth.principal import LOCAL_PRINCIPAL
from executor_mcp.config import Settings
from executor_mcp.integrations.assembly import open_integrations
from executor_mcp.policies.service import Policies
from executor_mcp.records.integrations import MCP
from executor_mcp.storage.control import ControlPlane
from executor_mcp.tools.context import CallContext
from executor_mcp.tools.core import build_catalog

TOOLS = [{"name": "echo", "description": "Echo.", "inputSchema": {"type": "object", "properties": {"text": {}}}}]


def _answer(message: dict[str, Any]) -> dict[str, Any] | None:
    method = message.get("method")
    if "id" not in message:
        return None
    if method == "initialize":
        result: Any = {
            "protocolVersion": message["params"]["protocolVersion"],
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "raw", "version": "1"},
        }
    elif method == "tools/list":
        result = {"tools": TOOLS}
    elif method == "tools/call":
        result = {"content": [{"type": "text", "text": str(message["params"]["arguments"].get("text"))}]}
    else:
        return {"jsonrpc": "2.0", "id": message["id"], "error": {"code": -32601, "message": "Method not found"}}
    return {"jsonrpc": "2.0", "id": message["id"], "result": result}


async def raw_mcp(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """The smallest Streamable HTTP server: one session id for all, JSON answers, 202 for notifications."""
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
    answer = _answer(json.loads(body)) if scope["method"] == "POST" and body else None
    headers = [(b"mcp-session-id", b"bench-session")]
    if answer is None:
        await send({"type": "http.response.start", "status": 202, "headers": headers})
        await send({"type": "http.response.body", "body": b""})
        return
    await send(
        {"type": "http.response.start", "status": 200, "headers": [*headers, (b"content-type", b"application/json")]}
    )
    await send({"type": "http.response.body", "body": json.dumps(answer).encode()})


async def main(repeat: int) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        settings = Settings(data_dir=Path(scratch), allow_local_network=True)
        control = await ControlPlane.open(settings.data_dir)
        config = Config()
        config.bind = ["127.0.0.1:0"]
        config.accesslog = config.errorlog = None
        try:
            async with open_integrations(settings, control) as integrations, trio.open_nursery() as nursery:
                endpoint = (await nursery.start(partial(hypercorn.trio.serve, raw_mcp, config)))[0] + "/mcp"
                catalog = build_catalog(integrations)
                context = CallContext(principal=LOCAL_PRINCIPAL, policies=Policies(control.policies), gate=no_gate)
                await integrations.add(
                    LOCAL_PRINCIPAL, MCP, {"name": "raw", "endpoint": endpoint, "remoteTransport": "streamable-http"}
                )
                await integrations.connections.create(
                    LOCAL_PRINCIPAL,
                    {"owner": "org", "name": "main", "integration": "raw", "template": "none"},
                    pasted=True,
                )
                tool = partial(catalog.invoke, "raw.org.main.echo", {"text": "hi"}, context)
                first = await tool()
                assert first["ok"] is True, first
                call = json.dumps(
                    {
                        "jsonrpc": "2.0",
                        "id": 2,
                        "method": "tools/call",
                        "params": {"name": "echo", "arguments": {"text": "hi"}},
                    }
                )
                session = {**HEADERS, "mcp-session-id": "bench-session", "mcp-protocol-version": "2025-11-25"}
                async with httpx.AsyncClient() as direct:
                    await direct.post(endpoint, content=call, headers=session)  # warm the connection

                    async def direct_call() -> None:
                        (await direct.post(endpoint, content=call, headers=session)).raise_for_status()

                    direct_samples: list[float] = []
                    tool_samples: list[float] = []
                    # Interleaved rounds, so drift on a shared machine lands on both sides alike.
                    for _ in range(10):
                        direct_samples += await timed(direct_call, repeat // 10)
                        tool_samples += await timed(tool, repeat // 10)
                print(line("direct tools/call (one session)", direct_samples))
                print(line("MCP-source tool call", tool_samples))
                print(overhead_line(direct_samples, tool_samples) + " (target <= 3 ms)")
                nursery.cancel_scope.cancel()
        finally:
            await control.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=300, help="calls per side (at most 60 s each)")
    options = parser.parse_args()
    trio.run(main, options.repeat)
