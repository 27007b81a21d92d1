"""Debian's nginx (`scripts/install-scale-out`) in front of test instances: the configuration `executor-mcp
proxy-config nginx` prints, wrapped in a minimal main file in a temporary prefix, run in the foreground as a
child of the test and ended with it. Under root the workers run as root too (nginx's default `nobody` could not
write the prefix's temporary files)."""

import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from tests.listening import listening

NGINX = "/usr/sbin/nginx"
CHECK_BOUND = 20


class NginxMissing(Exception):
    pass


def require_nginx() -> None:
    if not os.path.exists(NGINX):
        raise NginxMissing(f"{NGINX} is missing: run scripts/install-scale-out")


def main_config(prefix: Path, generated: str) -> str:
    user = "user root;\n" if os.geteuid() == 0 else ""
    temporary = "\n".join(
        f"    {kind}_temp_path {prefix / kind};" for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    return f"""{user}worker_processes 1;
pid {prefix / "nginx.pid"};
error_log {prefix / "error.log"} warn;
events {{ worker_connections 512; }}
http {{
    access_log off;
{temporary}
{generated}
}}
"""


def check_config(generated: str) -> subprocess.CompletedProcess[str]:
    """`nginx -t` on the generated configuration: what nginx itself says of it."""
    require_nginx()
    with tempfile.TemporaryDirectory(prefix="executor-mcp-nginx-") as scratch:
        prefix = Path(scratch)
        (prefix / "nginx.conf").write_text(main_config(prefix, generated))
        return subprocess.run(
            [NGINX, "-t", "-p", str(prefix), "-c", str(prefix / "nginx.conf")],
            capture_output=True,
            text=True,
            timeout=CHECK_BOUND,
            check=False,
        )


@asynccontextmanager
async def nginx(generated: str, port: int) -> AsyncIterator[str]:
    """nginx serving `generated` (which listens on 127.0.0.1:`port`); its base URL."""
    require_nginx()
    prefix = Path(tempfile.mkdtemp(prefix="executor-mcp-nginx-"))
    (prefix / "nginx.conf").write_text(main_config(prefix, generated))
    argv = [NGINX, "-p", str(prefix), "-c", str(prefix / "nginx.conf"), "-g", "daemon off;"]
    try:
        # SIGQUIT: graceful, workers finish and exit with the master.
        async with listening(argv, port, signal.SIGQUIT, (prefix / "error.log").read_text) as base:
            yield base
    finally:
        shutil.rmtree(prefix, ignore_errors=True)
