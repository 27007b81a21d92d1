"""Session lifecycle and storage under hostile conditions: bad records, lost answers, revoked orgs, crashes."""

import json
import re
import shutil
from pathlib import Path

import httpx
import lmdb
import pytest
import trio

from executor_mcp.sessions.ids import new_session_id
from tests.auth_support import bearer, mint
from tests.conftest import start_server
from tests.mcp_http import envelope, headers, initialize_body, open_session, post, sse_messages
from tests.process import ServerProcess, run_cli, server_process
from tests.tools import Probe, call_body, probe_tools

PING = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
PONG = {"jsonrpc": "2.0", "id": 1, "result": {}}
RESTARTING = "MCP session is restarting, please retry"
TERMINATED = "Session timed out, please reconnect"
NO_ORG = "No organization in session — log in via the web app first"


def _write_control(data_dir: Path, writes: list[tuple[bytes, bytes, bytes]]) -> None:
    """Write raw (database, key, value) entries into the control plane, as another process could.
    Only from a process that does not hold the environment open itself."""
    environment = lmdb.open(str(data_dir / "control.mdb"), subdir=False, max_dbs=16)
    try:
        with environment.begin(write=True) as txn:
            for name, key, value in writes:
                txn.put(key, value, db=environment.open_db(name, txn=txn))
    finally:
        environment.close()


def _unreadable_records() -> list[tuple[bytes, bytes, bytes]]:
    return [
        (b"sessions", b"f" * 64, b"{not json"),
        (b"sessions", b"e" * 64, json.dumps({"session_id": 5, "owner": "nobody"}).encode()),
        (b"termination-requests", b"\xff\xfe not utf-8", b"1"),
        (b"revocation-requests", b"\xff\xfe", b"1"),
    ]


async def _until_not_found(http: httpx.AsyncClient, url: str, session_id: str, bound: float = 3.0) -> None:
    with trio.fail_after(bound):
        while True:
            answer = await post(http, url, PING, session_id)
            if answer.status_code == 404 and answer.json()["error"]["message"] == "Session not found":
                return
            await trio.sleep(0.1)


def _still_serving(process: ServerProcess) -> None:
    assert process.process.returncode is None, process.stderr.decode(errors="replace")


# -- item 7: background loops survive bad records -----------------------------------------------------


async def test_unreadable_records_do_not_stop_the_admin_request_poller(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    async with server_process(data_dir) as running, httpx.AsyncClient(timeout=10) as http:
        _write_control(data_dir, _unreadable_records())
        await trio.sleep(2.5)  # the poller has looked at least twice
        _still_serving(running)
        session_id = await open_session(http, running.url)
        terminated = await run_cli("sessions", "terminate", session_id, "--data-dir", str(data_dir))
        assert terminated.returncode == 0, terminated.stderr
        await _until_not_found(http, running.url, session_id)
        listed = await run_cli("sessions", "list", "--data-dir", str(data_dir))
        assert listed.returncode == 0, listed.stderr
        _still_serving(running)
        assert b"skipping an unreadable" in running.stderr
        running.terminate()
        assert await running.wait() == 0
    # And the next start is not stopped by them either.
    async with server_process(data_dir) as revived, httpx.AsyncClient(timeout=10) as http:
        assert (await post(http, revived.url, PING, await open_session(http, revived.url))).json() == PONG
        revived.terminate()
        assert await revived.wait() == 0


async def test_unreadable_records_do_not_stop_the_retention_sweeper(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    async with (
        server_process(data_dir, "--session-retention", "1.0") as running,
        httpx.AsyncClient(timeout=10) as http,
    ):
        _write_control(data_dir, _unreadable_records()[:2])
        await trio.sleep(1.0)  # several sweeps over the bad records
        _still_serving(running)
        session_id = await open_session(http, running.url)
        await trio.sleep(1.5)  # idle past the retention
        await _until_not_found(http, running.url, session_id)
        assert not (data_dir / "sessions" / f"{session_id}.mdb").exists()
        _still_serving(running)
        running.terminate()
        assert await running.wait() == 0


# -- item 8: answers reach the session file before a runtime ends --------------------------------------


async def _post_until_primed(url: str, session_id: str, body: dict) -> str:
    """POST on a raw connection, read up to the priming event's id, then hang up: a client that left."""
    host, port = url.removeprefix("http://").split("/")[0].split(":")
    content = json.dumps(body).encode()
    lines = [
        "POST /mcp HTTP/1.1",
        f"host: {host}:{port}",
        *[f"{name}: {value}" for name, value in headers(session_id).items()],
        f"content-length: {len(content)}",
    ]
    request = ("\r\n".join(lines) + "\r\n\r\n").encode() + content
    received = b""
    with trio.fail_after(10):
        async with await trio.open_tcp_stream(host, int(port)) as connection:
            await connection.send_all(request)
            while (found := re.search(rb"id: ([0-9a-f]{32}:[0-9a-f]{16})\n", received)) is None:
                chunk = await connection.receive_some()
                assert chunk, received
                received += chunk
    return found.group(1).decode()


async def test_an_answer_added_at_shutdown_is_replayed_after_the_restart(
    nursery: trio.Nursery, data_dir: Path, http: httpx.AsyncClient
) -> None:
    """The client dropped a call's stream; the server restarted while the call ran. The restart
    envelope that answered the call is in the session file, so Last-Event-ID gets it."""
    probe = Probe()
    first = await start_server(nursery, data_dir, tools=probe_tools(probe), shutdown_grace=0.2)
    session_id = await open_session(http, first.url)
    last_event_id = await _post_until_primed(first.url, session_id, call_body("held", "wait"))
    await probe.started.wait()
    await trio.sleep(1.0)  # the server saw the reader leave and keeps the stream
    with trio.fail_after(10):
        await first.stop()
    assert probe.cancelled.is_set()

    second = await start_server(nursery, data_dir, tools=probe_tools(Probe()))
    listen = {"accept": "text/event-stream", "mcp-session-id": session_id, "last-event-id": last_event_id}
    with trio.fail_after(5):
        replay = await http.get(second.url, headers=listen)
    assert [m for m in sse_messages(replay.text) if "id" in m] == [
        {"jsonrpc": "2.0", "id": "held", "error": {"code": -32001, "message": RESTARTING}}
    ]
    assert replay.text.endswith(": replay-complete\n\n")


# -- item 12: revoking an organization ends its running work -----------------------------------------


@pytest.fixture
def secret_file(tmp_path: Path) -> Path:
    path = tmp_path / "hs256.key"
    path.write_bytes(b"test-secret-that-is-long-enough-for-hs256")
    return path


async def _bearer_session(http: httpx.AsyncClient, url: str, token: str) -> str:
    response = await http.post(url, content=json.dumps(initialize_body()), headers={**headers(), **bearer(token)})
    assert response.status_code == 200, response.text
    return response.headers["mcp-session-id"]


async def test_revoking_an_org_cancels_its_running_executions(
    nursery: trio.Nursery, data_dir: Path, secret_file: Path
) -> None:
    server = await start_server(nursery, data_dir, auth="jwt", jwt_secret_file=secret_file)
    acme, other = mint("alice", "acme"), mint("bob", "other")
    answers: dict[str, httpx.Response] = {}
    async with httpx.AsyncClient(timeout=90) as http:
        revoked_session = await _bearer_session(http, server.url, acme)
        other_session = await _bearer_session(http, server.url, other)

        async def execute(name: str, token: str, session_id: str, code: str) -> None:
            body = json.dumps(call_body(name, "execute", code=code))
            answers[name] = await http.post(server.url, content=body, headers={**headers(session_id), **bearer(token)})

        async with trio.open_nursery() as calls:
            calls.start_soon(execute, "acme", acme, revoked_session, "await new Promise(r => setTimeout(r, 60000));")
            calls.start_soon(
                execute, "other", other, other_session, "await new Promise(r => setTimeout(r, 4000)); return 'kept';"
            )
            await trio.sleep(1.0)  # both executions are running
            revoked = await run_cli("orgs", "revoke", "acme", "--data-dir", str(data_dir))
            assert revoked.returncode == 0, revoked.stderr
            with trio.fail_after(5):  # the 3 s teardown bound, with room for a loaded machine
                while "acme" not in answers:  # noqa: ASYNC110
                    await trio.sleep(0.05)
        assert sse_messages(answers["acme"].text) == [
            {"jsonrpc": "2.0", "id": "acme", "error": {"code": -32001, "message": TERMINATED}}
        ]
        assert sse_messages(answers["other"].text)[0]["result"]["content"][0]["text"] == "kept"

        ping = {"content": json.dumps(PING), "headers": {**headers(revoked_session), **bearer(acme)}}
        assert envelope(await http.post(server.url, **ping)) == (403, -32001, NO_ORG)
        assert (await run_cli("orgs", "restore", "acme", "--data-dir", str(data_dir))).returncode == 0
        gone = await http.post(server.url, **ping)
        assert envelope(gone) == (404, -32001, "Session not found")


# -- item 14: orphans and half-written files are collected at start-up --------------------------------


async def test_orphans_and_half_written_files_are_collected_at_start(
    nursery: trio.Nursery, data_dir: Path, http: httpx.AsyncClient
) -> None:
    first = await start_server(nursery, data_dir)
    kept, entry_only, meta_less, unreadable = [await open_session(http, first.url) for _ in range(4)]
    await first.stop()
    sessions = data_dir / "sessions"

    file_only = new_session_id("")  # a crash after the file was written, before its directory entry
    shutil.copyfile(sessions / f"{kept}.mdb", sessions / f"{file_only}.mdb")
    (sessions / f"{entry_only}.mdb").unlink()  # an entry whose file is gone
    (sessions / f"{entry_only}.mdb-lock").unlink()
    for suffix in (".mdb", ".mdb-lock"):  # a file without meta, as the old two-step creation could leave
        (sessions / f"{meta_less}{suffix}").unlink()
    lmdb.open(str(sessions / f"{meta_less}.mdb"), subdir=False).close()
    corrupt = lmdb.open(str(sessions / f"{unreadable}.mdb"), subdir=False)
    with corrupt.begin(write=True) as txn:
        txn.put(b"meta", b'{"session_id": 7}')  # fails strict decoding
    corrupt.close()
    leftovers = [sessions / f"{new_session_id('')}.mdb.partial", sessions / f"{new_session_id('')}.mdb-lock"]
    for leftover in leftovers:
        leftover.write_bytes(b"")
    foreign = sessions / "notes.txt"
    foreign.write_text("not ours")

    second = await start_server(nursery, data_dir)
    assert not (sessions / f"{file_only}.mdb").exists()
    assert not (sessions / f"{file_only}.mdb-lock").exists()
    assert not [leftover for leftover in leftovers if leftover.exists()]
    assert foreign.exists()
    listed = await run_cli("sessions", "list", "--data-dir", str(data_dir))
    assert entry_only.encode() not in listed.stdout
    assert kept.encode() in listed.stdout
    for lost in (entry_only, meta_less, unreadable):
        assert envelope(await post(http, second.url, PING, lost)) == (404, -32001, "Session not found")
    assert not (sessions / f"{meta_less}.mdb").exists()
    assert not (sessions / f"{unreadable}.mdb").exists()
    assert (await post(http, second.url, PING, kept)).json() == PONG
