"""A throwaway PostgreSQL server for the tests: Debian's binaries (`scripts/install-scale-out`), a cluster made
by `initdb` in a temporary directory, listening on a free loopback port, stopped and removed at the end.

PostgreSQL refuses to run as root, so under root (CI, this machine) the cluster belongs to the `postgres` user
the Debian package creates, and its commands run through `runuser`. `fsync=off`: a test's data needs no
durability, and the suite runs on two cores. Each test gets a database of its own (`new_database`).
"""

import glob
import itertools
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg

START_TIMEOUT = 60


class PostgresMissing(Exception):
    pass


def _bindir() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if not found:
        raise PostgresMissing("PostgreSQL is not installed: run scripts/install-scale-out")
    return Path(found[-1]).parent


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class PostgresServer:
    def __init__(self, bindir: Path, root: Path, user: str | None) -> None:
        self._bindir = bindir
        self._root = root
        self._user = user  # whom the cluster's processes run as, when we are root
        self._port = _free_port()
        self._names = itertools.count(1)
        self.admin_url = f"postgresql://postgres@127.0.0.1:{self._port}/postgres"

    def _run(self, *command: str) -> None:
        argv = [str(self._bindir / command[0]), *command[1:]]
        if self._user is not None:
            argv = ["runuser", "-u", self._user, "--", *argv]
        subprocess.run(argv, check=True, capture_output=True, timeout=START_TIMEOUT)

    def start(self) -> None:
        """Start the server, its cluster made the first time: after `stop`, it starts again on the same data and
        port (an outage, as clients see one)."""
        data = self._root / "data"
        if not (data / "PG_VERSION").exists():
            self._run("initdb", "-D", str(data), "-U", "postgres", "-A", "trust", "--no-sync", "-E", "UTF8")
        options = (
            f"-c listen_addresses=127.0.0.1 -c port={self._port} -c unix_socket_directories={self._root}"
            " -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200"
        )
        self._run("pg_ctl", "-D", str(data), "-o", options, "-l", str(self._root / "log"), "-w", "-t", "60", "start")

    def stop(self, mode: str = "immediate") -> None:
        """`immediate` is a crash (with `synchronous_commit=off`, the last commits may be lost); `fast` ends every
        connection and flushes what was committed, as an operator's restart does."""
        self._run("pg_ctl", "-D", str(self._root / "data"), "-m", mode, "-w", "stop")

    def new_database(self) -> str:
        """A fresh, empty database; its URL."""
        name = f"t{next(self._names)}"
        with psycopg.connect(self.admin_url, autocommit=True) as connection:
            connection.execute(f'CREATE DATABASE "{name}"'.encode())
        return f"postgresql://postgres@127.0.0.1:{self._port}/{name}"


@contextmanager
def postgres_server() -> Iterator[PostgresServer]:
    bindir = _bindir()
    user = None
    if os.geteuid() == 0:
        user = "postgres"
    root = Path(tempfile.mkdtemp(prefix="executor-mcp-pg-"))
    try:
        if user is not None:
            shutil.chown(root, user)
        server = PostgresServer(bindir, root, user)
        server.start()
        try:
            yield server
        finally:
            server.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)
