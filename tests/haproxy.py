"""Debian's HAProxy (`scripts/install-scale-out`) in front of test instances: the configuration `executor-mcp
proxy-config haproxy` prints, run in the foreground (`-db`) as a child of the test and ended with it."""

import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from tests.listening import listening

HAPROXY = "/usr/sbin/haproxy"
CHECK_BOUND = 20


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
            [HAPROXY, "-c", "-f", str(path)], capture_output=True, text=True, timeout=CHECK_BOUND, check=False
        )


@asynccontextmanager
async def haproxy(generated: str, port: int) -> AsyncIterator[str]:
    """HAProxy serving `generated` (which listens on 127.0.0.1:`port`); its base URL."""
    require_haproxy()
    scratch = Path(tempfile.mkdtemp(prefix="executor-mcp-haproxy-"))
    (scratch / "haproxy.cfg").write_text(generated)
    argv = [HAPROXY, "-db", "-f", str(scratch / "haproxy.cfg")]
    try:
        async with listening(argv, port, signal.SIGTERM, lambda: "haproxy exited before listening") as base:
            yield base
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
