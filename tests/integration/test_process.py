"""The `executor-mcp` command as users run it: announce line, signals, restarts, refusals."""

import contextlib
from pathlib import Path

import httpx
import lmdb
import pytest
import trio

from tests.mcp_http import envelope, open_session, post
from tests.process import run_cli, server_process
from tests.sdk import PRODUCT_TOOLS, connect, resume

PING = {"jsonrpc": "2.0", "id": 1, "method": "ping"}


async def test_sigterm_exits_cleanly_and_the_next_process_serves_the_same_session(
    tmp_path: Path, http: httpx.AsyncClient
) -> None:
    data_dir = tmp_path / "data"
    async with server_process(data_dir) as first:
        assert first.url.startswith("http://127.0.0.1:")
        async with connect(first.url, mode="legacy") as (client, recorder):
            initialized = client.session.initialize_result
            session_id = recorder.session_id
            assert session_id is not None
            assert initialized is not None
            first.terminate()
            assert await first.wait() == 0

            async with server_process(data_dir) as second:
                async with resume(second.url, session_id, initialized) as resumed:
                    assert [tool.name for tool in (await resumed.list_tools()).tools] == PRODUCT_TOOLS
                deleted = await http.delete(second.url, headers={"mcp-session-id": session_id})
                assert deleted.status_code == 200
                gone = await post(http, second.url, PING, session_id)
                assert envelope(gone)[0] == 404
                second.terminate()
                assert await second.wait() == 0


async def test_sessions_survive_sigkill(tmp_path: Path, http: httpx.AsyncClient) -> None:
    data_dir = tmp_path / "data"
    async with server_process(data_dir) as doomed:
        session_ids = [await open_session(http, doomed.url) for _ in range(5)]
        doomed.kill()
        await doomed.wait()
    async with server_process(data_dir) as revived:
        for session_id in session_ids:
            answer = await post(http, revived.url, PING, session_id)
            assert answer.json() == {"jsonrpc": "2.0", "id": 1, "result": {}}
        revived.terminate()
        assert await revived.wait() == 0


async def test_non_loopback_bind_without_auth_is_refused(tmp_path: Path) -> None:
    result = await run_cli("serve", "--host", "0.0.0.0", "--port", "0", "--data-dir", str(tmp_path))
    assert result.returncode == 2
    assert b"refusing to bind 0.0.0.0 without authentication" in result.stderr
    assert b"Traceback" not in result.stderr


async def test_bad_option_values_are_clear_errors(tmp_path: Path) -> None:
    result = await run_cli("serve", "--port", "http", "--data-dir", str(tmp_path))
    assert result.returncode == 2
    assert b"--port: invalid int value 'http'" in result.stderr
    assert b"Traceback" not in result.stderr


async def test_port_in_use_is_a_clear_error(tmp_path: Path) -> None:
    async with server_process(tmp_path / "first") as running:
        port = running.url.rsplit(":", 1)[1].removesuffix("/mcp")
        result = await run_cli("serve", "--port", port, "--data-dir", str(tmp_path / "second"))
        assert result.returncode == 1
        assert f"cannot serve on 127.0.0.1:{port}".encode() in result.stderr
        assert b"Traceback" not in result.stderr
        running.terminate()
        assert await running.wait() == 0


@pytest.mark.slow
async def test_sigkill_during_writes_loses_nothing_acknowledged(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    created: list[str] = []
    deleted: list[str] = []
    unanswered: set[str] = set()  # a DELETE cut off by the kill: it may or may not have taken effect
    async with server_process(data_dir) as doomed, httpx.AsyncClient(timeout=10) as http:

        async def open_sessions() -> None:
            with contextlib.suppress(httpx.HTTPError):
                while True:
                    created.append(await open_session(http, doomed.url))

        async def delete_sessions() -> None:
            with contextlib.suppress(httpx.HTTPError):
                while True:
                    if len(created) > len(deleted) * 2 + 1:
                        victim = created[len(deleted) * 2]
                        unanswered.add(victim)
                        if (await http.delete(doomed.url, headers={"mcp-session-id": victim})).status_code == 200:
                            deleted.append(victim)
                        unanswered.discard(victim)
                    await trio.sleep(0.005)

        async with trio.open_nursery() as writers:
            writers.start_soon(open_sessions)
            writers.start_soon(delete_sessions)
            await trio.sleep(1.0)
            doomed.kill()
            await doomed.wait()
            writers.cancel_scope.cancel()
    assert len(created) > 10

    for path in (data_dir / "sessions").glob("*.mdb"):
        environment = lmdb.open(str(path), subdir=False, readonly=True, lock=False)
        with environment.begin() as txn:
            assert txn.get(b"meta") is not None
        environment.close()

    async with server_process(data_dir) as revived, httpx.AsyncClient(timeout=10) as http:
        for session_id in created:
            answer = await post(http, revived.url, PING, session_id)
            if session_id in deleted:
                assert envelope(answer)[:2] == (404, -32001)
            elif session_id in unanswered and answer.status_code == 404:
                assert envelope(answer) == (404, -32001, "Session not found")
            else:
                assert answer.json() == {"jsonrpc": "2.0", "id": 1, "result": {}}, session_id
        revived.terminate()
        assert await revived.wait() == 0
