"""Running the SDK downstream servers of `tests/mcp_downstream.py` and `tests/mcp_stdio_server.py`."""

import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import httpx
import trio

from executor_mcp.records.integrations import MCP, AuthMethod, ConnectionRecord, IntegrationRecord
from tests.conftest import ServerUnderTest

HERE = Path(__file__).resolve().parent
DOWNSTREAM = HERE / "mcp_downstream.py"
STDIO_SERVER = HERE / "mcp_stdio_server.py"
START_TIMEOUT = 20.0


def mcp_integration(slug: str, config: dict[str, Any]) -> IntegrationRecord:
    """An org's MCP integration with no auth, for driving `McpKind` directly."""
    return IntegrationRecord(
        org_id="o",
        slug=slug,
        kind=MCP,
        name=slug,
        description="",
        source_hash="",
        config=config,
        auth_methods=(AuthMethod("none", "none"),),
        created_at=0.0,
        updated_at=0.0,
    )


def mcp_connection(slug: str) -> ConnectionRecord:
    """The org's no-auth connection `main` to `slug`."""
    return ConnectionRecord(
        org_id="o",
        owner="org",
        account_id="",
        integration=slug,
        name="main",
        template="none",
        provider=None,
        item_ids={},
        created_at=0.0,
        updated_at=0.0,
    )


@attrs.define
class Downstream:
    port: int
    process: trio.Process
    transport: str

    @property
    def url(self) -> str:
        path = "/mcp" if self.transport == "streamable" else "/sse"
        return f"http://127.0.0.1:{self.port}{path}"


@asynccontextmanager
async def downstream(
    state: Path,
    *,
    transport: str = "streamable",
    port: int = 0,
    token: str | None = None,
    extra: bool = False,
    oauth_issuer: str | None = None,
) -> AsyncIterator[Downstream]:
    """A downstream server for the block; it is terminated (and reaped) when the block ends. With
    `oauth_issuer`, it takes only that authorization server's tokens (the MCP authorization spec)."""
    await trio.Path(state).mkdir(parents=True, exist_ok=True)
    command = [sys.executable, str(DOWNSTREAM), "--transport", transport, "--port", str(port), "--state", str(state)]
    if token:
        command += ["--token", token]
    if extra:
        command.append("--extra")
    if oauth_issuer:
        command += ["--oauth-issuer", oauth_issuer]
    process = await trio.lowlevel.open_process(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        assert process.stdout is not None
        seen = b""
        with trio.fail_after(START_TIMEOUT):
            while b"\n" not in seen:
                chunk = await process.stdout.receive_some(1024)
                assert chunk, "the downstream server exited before listening"
                seen += chunk
        line = seen.split(b"\n", 1)[0].decode()
        assert line.startswith("PORT "), line
        yield Downstream(int(line.split()[1]), process, transport)
    finally:
        process.terminate()
        with trio.CancelScope(shield=True):
            await process.wait()
            await process.stdout.aclose()  # type: ignore[union-attr]


async def api(http: httpx.AsyncClient, server: ServerUnderTest, method: str, path: str, body: Any = None) -> Any:
    response = await http.request(method, server.running.url + path, json=body)
    assert response.status_code < 300, (response.status_code, response.text)
    return response.json() if response.content else None
