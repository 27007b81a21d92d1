"""Debian's HAProxy (`scripts/install-scale-out`) in front of test instances: the configuration `executor-mcp
proxy-config haproxy` prints, run in the foreground (`-db`) as a child of the test and ended with it."""

import os
import shutil
import subprocess
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import trio

HAPROXY = "/usr/sbin/haproxy"
START_BOUND = 20


class HaproxyMissing(Exception):
    pass


def require_haproxy() -> None:
    if not os.path.exists(HAPROXY):
        raise HaproxyMissing(f"{HAPROXY} is missing: run scripts/install-scale-out")


def check_config(generated: str) -> subprocess.CompletedProcess[str]:
    """`haproxy -c` on the generated configuration: what HAProxy itself says of it."""
    require_haproxy()
    with tempfile.TemporaryDirectory(prefix="executor-mcp-haproxy-") as scratch:
        path = Path(scratch) / "haproxy.cfg"
        path.write_text(generated)
        return subprocess.run(
            [HAPROXY, "-c", "-f", str(path)], capture_output=True, text=True, timeout=START_BOUND, check=False
        )


@asynccontextmanager
async def haproxy(generated: str, port: int) -> AsyncIterator[str]:
    """HAProxy serving `generated` (which listens on 127.0.0.1:`port`); its base URL."""
    require_haproxy()
    scratch = Path(tempfile.mkdtemp(prefix="executor-mcp-haproxy-"))
    (scratch / "haproxy.cfg").write_text(generated)
    process = await trio.lowlevel.open_process(
        [HAPROXY, "-db", "-f", str(scratch / "haproxy.cfg")], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        with trio.fail_after(START_BOUND):
            while True:
                try:
                    stream = await trio.open_tcp_stream("127.0.0.1", port)
                except OSError:
                    if process.returncode is not None:
                        raise AssertionError(f"haproxy exited with {process.returncode}") from None
                    await trio.sleep(0.05)
                    continue
                await stream.aclose()
                break
        yield f"http://127.0.0.1:{port}"
    finally:
        if process.returncode is None:
            process.terminate()
            with trio.CancelScope(shield=True), trio.move_on_after(5):
                await process.wait()
            if process.returncode is None:
                process.kill()
                with trio.CancelScope(shield=True):
                    await process.wait()
        shutil.rmtree(scratch, ignore_errors=True)
