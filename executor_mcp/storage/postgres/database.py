"""PostgreSQL driven from trio: psycopg 3's blocking connections, each transaction whole in one worker thread.

A transaction runs begin-to-commit inside one `trio.to_thread.run_sync` call, as LMDB's do
(`storage/environment.py`): it never crosses threads and the trio loop never waits on the network. The pool is
trio's own (a semaphore over idle connections), so waiting for a connection happens in trio, not in threads, and
no thread outlives a call. The calls are uncancellable on purpose: a commit that has started is waited for, and
`statement_timeout` bounds how long that can be.

A connection that fails (the server restarted, the network dropped it) is closed and never reused; the failure
is `StoreUnavailable`, which the edges answer with the transient 503 envelope. Whether the transaction
committed is then unknown to the caller, as with any database: writes that may be retried are idempotent. One
failure is not raised: an idle connection whose BEGIN fails (the server restarted since it was pooled) is
replaced by a new one at once, as nothing of the transaction ran. `StoreUnavailable` is a `ConnectionError`
(an `OSError`): background loops log it as one line, not a traceback per retry.

The pool's state is read, not counted: idle connections are the idle list, connections in use the slots
taken, and waiting the tasks queued on the semaphore (`PoolStats`, for `/metrics`). Readiness asks a fresh
connection for `SELECT 1` within a bound (`ping`), so a pool busy serving requests never reads as a down database.
"""

import contextlib
import math
from collections.abc import Callable
from typing import TypeVar

import attrs
import psycopg
import trio

from executor_mcp.storage.interfaces import StoreUnavailable

T = TypeVar("T")

# How long one statement may run before PostgreSQL cancels it (milliseconds): a stuck query ends as an error,
# never as a request that hangs while holding one of the pool's connections.
STATEMENT_TIMEOUT_MS = 30_000
CONNECT_TIMEOUT_S = 10
# A silent peer is given up after about 15 s: idle probes after 5 s, every 2 s, 5 unanswered; sent data
# unacknowledged for 15 s.
KEEPALIVE_IDLE_S = 5
KEEPALIVE_INTERVAL_S = 2
KEEPALIVE_COUNT = 5
TCP_USER_TIMEOUT_MS = 15_000


@attrs.frozen
class PoolStats:
    idle: int  # open connections waiting for work
    in_use: int  # transactions running (a slot taken)
    waiting: int  # transactions waiting for a slot


class Database:
    def __init__(self, url: str, size: int) -> None:
        self._url = url
        self._size = size
        self._slots = trio.Semaphore(size)
        self._idle: list[psycopg.Connection] = []
        self._closed = False

    @classmethod
    async def open(cls, url: str, *, size: int) -> "Database":
        """The pool, with one connection made now so that a wrong URL or a down server fails at start."""
        database = cls(url, size)
        await database.transact(lambda connection: connection.execute("SELECT 1"))
        return database

    async def transact(self, work: Callable[[psycopg.Connection], T]) -> T:
        """`work` inside one transaction on a pooled connection, committed when it returns."""
        return await self._run(work, transaction=True)

    async def statement(self, work: Callable[[psycopg.Connection], T]) -> T:
        """`work` on a pooled connection, each of its statements its own transaction: one round trip for one
        statement, and whatever it locks is released inside the server as it ends, never held while the answer
        travels back to a thread that may be slow to wake. `work` must be idempotent: on a pooled connection the
        server dropped, it runs once more on a new one."""
        return await self._run(work, transaction=False)

    async def _run(self, work: Callable[[psycopg.Connection], T], *, transaction: bool) -> T:
        async with self._slots:
            if self._closed:
                raise StoreUnavailable("the database pool is closed")
            held = _Held(self._idle.pop() if self._idle else None)
            try:
                return await trio.to_thread.run_sync(held.run, self._url, work, transaction)
            finally:
                if held.connection is not None and not held.connection.closed and not held.connection.broken:
                    self._idle.append(held.connection)

    def stats(self) -> PoolStats:
        return PoolStats(
            idle=len(self._idle),
            in_use=self._size - self._slots.value,
            waiting=self._slots.statistics().tasks_waiting,
        )

    async def ping(self, bound: float) -> str:
        """Readiness: "ok" when a new connection answers `SELECT 1` within `bound` seconds, else why not (never
        the URL). The thread is abandoned at the bound; its own connect and statement timeouts end it soon after."""
        with trio.move_on_after(bound):
            try:
                await trio.to_thread.run_sync(_ping, self._url, bound, abandon_on_cancel=True)
            except StoreUnavailable as exc:
                return str(exc)
            return "ok"
        return f"the database did not answer within {bound:g} s"

    async def close(self) -> None:
        self._closed = True
        idle, self._idle = self._idle, []
        await trio.to_thread.run_sync(_close_all, idle)


class _Held:
    """The connection one call holds, set in the worker thread (a new one when there was none idle), so the
    trio side can return it to the pool or drop it whatever `work` raised."""

    def __init__(self, connection: psycopg.Connection | None) -> None:
        self.connection = connection

    def run(self, url: str, work: Callable[[psycopg.Connection], T], transaction: bool) -> T:
        try:
            if self.connection is not None and not transaction:
                try:
                    return work(self.connection)
                except psycopg.OperationalError:
                    if not self.connection.broken:
                        raise  # the server answered (a statement timeout): not a dropped connection
                    self.connection.close()  # dropped, as below: the idempotent work runs on a new one
            elif self.connection is not None:
                with contextlib.ExitStack() as block:
                    try:
                        block.enter_context(self.connection.transaction())
                    except psycopg.OperationalError:
                        # An idle connection the server dropped (it restarted): its BEGIN failed, nothing ran, so
                        # a new connection may do the work; without this every pooled connection would cost one
                        # request a 503 after the database came back.
                        self.connection.close()
                    else:
                        return work(self.connection)
            self.connection = connect(url)
            with self.connection.transaction() if transaction else contextlib.nullcontext():
                return work(self.connection)
        except psycopg.OperationalError as exc:
            if self.connection is not None:
                self.connection.close()
            raise StoreUnavailable(_reason(exc)) from None


def connect(
    url: str, timeout: float = CONNECT_TIMEOUT_S, statement_ms: int = STATEMENT_TIMEOUT_MS
) -> psycopg.Connection:
    """A connection in autocommit mode (transactions are explicit blocks) with the statement timeout set, and TCP
    keepalives and a user timeout: the server enforces the statement timeout, but only the socket can tell that
    the server is gone, and a place given back on a result's way out must not wait on a dead peer for good."""
    return psycopg.connect(
        url,
        autocommit=True,
        connect_timeout=max(1, math.ceil(timeout)),  # libpq takes whole seconds, and 0 means none
        options=f"-c statement_timeout={statement_ms}",
        keepalives=1,
        keepalives_idle=KEEPALIVE_IDLE_S,
        keepalives_interval=KEEPALIVE_INTERVAL_S,
        keepalives_count=KEEPALIVE_COUNT,
        tcp_user_timeout=TCP_USER_TIMEOUT_MS,
    )


def _ping(url: str, bound: float) -> None:
    try:
        with connect(url, bound, max(1, int(bound * 1000))) as connection:
            connection.execute("SELECT 1")
    except psycopg.OperationalError as exc:
        raise StoreUnavailable(_reason(exc)) from None


def _close_all(connections: list[psycopg.Connection]) -> None:
    for connection in connections:
        connection.close()


def _reason(exc: psycopg.OperationalError) -> str:
    """What went wrong, without the connection string (which can hold a password): psycopg's message names the
    host and the server's words, never the URL."""
    return f"the database is unavailable ({type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc) else ''})"


def storable(*parts: str) -> bool:
    """Whether PostgreSQL `text` can hold each part: no NUL, nothing that is not UTF-8 (a lone surrogate). An
    identifier that cannot be stored names no record: a read finds nothing, a write is refused."""
    for part in parts:
        if "\x00" in part:
            return False
        try:
            part.encode()
        except UnicodeEncodeError:
            return False
    return True
