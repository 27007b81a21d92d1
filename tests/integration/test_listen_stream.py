"""The GET listen stream: opens at once, is superseded by a newer one, and ends with its session."""

import httpx
import pytest
import trio

from executor_mcp.transport import streaming
from tests.conftest import ServerUnderTest
from tests.mcp_http import open_session

LISTEN = {"accept": "text/event-stream"}


async def _read_until_closed(response: httpx.Response) -> str:
    chunks = [chunk async for chunk in response.aiter_text()]
    return "".join(chunks)


async def test_a_newer_listen_stream_supersedes_the_older(server: ServerUnderTest, http: httpx.AsyncClient) -> None:
    session_id = await open_session(http, server.url)
    listen = {**LISTEN, "mcp-session-id": session_id}
    async with http.stream("GET", server.url, headers=listen) as first:
        assert first.status_code == 200
        assert first.headers["content-type"].startswith("text/event-stream")
        async with http.stream("GET", server.url, headers=listen) as second:
            assert second.status_code == 200
            with trio.fail_after(5):
                ended = await _read_until_closed(first)
            assert ended == ": superseded by a newer stream\n\n"


async def test_delete_ends_the_listen_stream(server: ServerUnderTest, http: httpx.AsyncClient) -> None:
    session_id = await open_session(http, server.url)
    async with http.stream("GET", server.url, headers={**LISTEN, "mcp-session-id": session_id}) as stream:
        assert stream.status_code == 200
        async with httpx.AsyncClient() as other:
            deleted = await other.delete(server.url, headers={"mcp-session-id": session_id})
        assert deleted.status_code == 200
        with trio.fail_after(5):
            assert await _read_until_closed(stream) == ""


async def test_shutdown_ends_the_listen_stream(server: ServerUnderTest, http: httpx.AsyncClient) -> None:
    session_id = await open_session(http, server.url)
    async with http.stream("GET", server.url, headers={**LISTEN, "mcp-session-id": session_id}) as stream:
        with trio.fail_after(5):
            server.running.stop.set()
            assert await _read_until_closed(stream) == ""
            await server.done.wait()


async def test_keepalives_then_rotation_at_the_maximum_age(
    server: ServerUnderTest, http: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(streaming, "KEEPALIVE_SECONDS", 0.2)
    monkeypatch.setattr(streaming, "LISTEN_MAX_AGE", 0.7)
    session_id = await open_session(http, server.url)
    async with http.stream("GET", server.url, headers={**LISTEN, "mcp-session-id": session_id}) as stream:
        with trio.fail_after(5):
            body = await _read_until_closed(stream)
    assert body.startswith(": keepalive\n\n: keepalive\n\n")
    assert body.endswith(": max-age rotation, reconnect\n\n")
