"""The single executable: build it with PyInstaller from the repo's spec, then use it as a user would."""

import json
import re
import signal
import subprocess
from pathlib import Path

import httpx
import pytest
import trio

from tests.mcp_http import headers, initialize_body

REPO = Path(__file__).resolve().parents[2]
BUILD_BOUND = 300
TINY_SPEC = {
    "openapi": "3.0.3",
    "info": {"title": "Tiny", "version": "1"},
    "paths": {"/ping": {"get": {"operationId": "ping", "responses": {"200": {"description": "ok"}}}}},
}


@pytest.mark.slow
async def test_the_built_binary_serves_and_stops_cleanly(tmp_path: Path) -> None:
    with trio.fail_after(BUILD_BOUND):
        build = await trio.run_process(
            [
                str(REPO / ".venv" / "bin" / "pyinstaller"),
                "--noconfirm",
                "--log-level",
                "WARN",
                "--distpath",
                str(tmp_path / "dist"),
                "--workpath",
                str(tmp_path / "work"),
                str(REPO / "pyinstaller.spec"),
            ],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    assert build.returncode == 0, build.stderr.decode(errors="replace")[-3000:]
    binary = tmp_path / "dist" / "executor-mcp"

    process = await trio.lowlevel.open_process(
        [str(binary), "serve", "--port", "0", "--data-dir", str(tmp_path / "data")], stderr=subprocess.PIPE
    )
    assert process.stderr is not None
    try:
        announced = b""
        with trio.fail_after(30):
            while (match := re.search(rb"MCP: (\S+)\n", announced)) is None:
                chunk = await process.stderr.receive_some()
                assert chunk, announced.decode(errors="replace")
                announced += chunk
        async with httpx.AsyncClient(timeout=10) as http:
            response = await http.post(
                match.group(1).decode(), content=json.dumps(initialize_body()), headers=headers()
            )
            base = match.group(1).decode().removesuffix("/mcp")
            assert (await http.get(base + "/readyz")).status_code == 200
            # A document is compiled by the binary re-executed as its OpenAPI compiler.
            imported = await http.post(base + "/api/openapi/specs", json={"spec": json.dumps(TINY_SPEC)})
            assert imported.status_code == 200, imported.text
            assert imported.json() == {"slug": "tiny", "toolCount": 1}
        assert response.status_code == 200
        assert response.json()["result"]["serverInfo"]["name"] == "executor"
        assert len(response.headers["mcp-session-id"]) == 64
        process.send_signal(signal.SIGTERM)
        with trio.fail_after(30):
            assert await process.wait() == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()

    # The same binary as a desktop client starts it: one session on its pipes, code run in its sandbox.
    call = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"name": "execute", "arguments": {"code": "return 2 + 2"}},
    }
    lines = [json.dumps(initialize_body()), json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"})]
    with trio.fail_after(60):
        stdio = await trio.run_process(
            [str(binary), "stdio", "--data-dir", str(tmp_path / "data")],
            stdin=("\n".join([*lines, json.dumps(call)]) + "\n").encode(),
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    assert stdio.returncode == 0, stdio.stderr.decode(errors="replace")[-3000:]
    answers = {answer["id"]: answer for answer in map(json.loads, stdio.stdout.splitlines())}
    assert answers[2]["result"]["structuredContent"] == {"status": "completed", "result": 4, "logs": []}
