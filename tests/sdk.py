"""The official `mcp` Python SDK client, wired so tests can see and reuse session ids."""

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx2
from mcp import Client, ClientSession, types
from mcp.client.streamable_http import streamable_http_client

# What `tools/list` shows on a server with the product's catalog, in registration order.
PRODUCT_TOOLS = ["execute", "skills", "resume"]


class SessionIdRecorder:
    """An httpx2 response hook that remembers the session id the server minted."""

    def __init__(self) -> None:
        self.session_id: str | None = None

    async def __call__(self, response: httpx2.Response) -> None:
        minted = response.headers.get("mcp-session-id")
        if minted:
            self.session_id = minted


@asynccontextmanager
async def connect(
    url: str, *, headers: dict[str, str] | None = None, **client_options
) -> AsyncIterator[tuple[Client, SessionIdRecorder]]:
    """A fresh SDK client session (initialize handshake included), and the id it was given."""
    recorder = SessionIdRecorder()
    async with httpx2.AsyncClient(headers=headers, event_hooks={"response": [recorder]}) as http:
        transport = streamable_http_client(url, http_client=http)
        async with Client(transport, **client_options) as client:
            yield client, recorder


@asynccontextmanager
async def resume(url: str, session_id: str, initialized: types.InitializeResult) -> AsyncIterator[ClientSession]:
    """An SDK session that reuses an existing id, as the SDK allows: a default header plus `adopt`."""
    async with (
        httpx2.AsyncClient(headers={"mcp-session-id": session_id}) as http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        session.adopt(initialized)
        yield session


async def execute(client: Client, code: str):
    return await client.call_tool("execute", {"code": code})


def text_of(result) -> str:
    """All text blocks of a tool result, joined by newlines."""
    return "\n".join(block.text for block in result.content)


def execution_id(result) -> str:
    """The `executionId` a paused execution's text gives."""
    match = re.search(r"\bexecutionId:\s*(\S+)", text_of(result))
    assert match, text_of(result)
    return match.group(1)
