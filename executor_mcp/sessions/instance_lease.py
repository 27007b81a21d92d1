"""The lease that lets one process serve an instance's sessions: held in the shared database, renewed every
`RENEW` seconds, and given up at a clean shutdown.

Sessions live with their home instance, so two processes given one `--instance-id` (a restart while the old
process still runs, or a copy started on another machine) would each serve and sweep the same sessions. With
a shared database the lease says which one may: a process takes it before it recovers or serves anything
(waiting while another holds it, up to `TTL` and a little), and stops serving its sessions (the restart
envelope, as while it restarts) whenever it has not renewed it within `TTL` of its own clock, which ends before
the database's copy does, since the lease's time is counted from before each renewal was asked.

The holder names the host and the data dir. Only one process at a time holds a data dir (`server.lock`), so a
process that finds the lease held by its own host and data dir is the successor of one that is gone (killed
before it could release), and takes the lease at once: a restart after a crash is not kept waiting.
"""

import logging
import socket
from collections.abc import Callable
from pathlib import Path

import trio

from executor_mcp.config import ConfigError
from executor_mcp.storage.interfaces import Fence, InstanceLeases

log = logging.getLogger(__name__)

TTL = 10.0  # how long a lease lasts without renewal (seconds)
RENEW = 2.0  # how often its holder renews it
RELEASE_BOUND = 2.0  # how long a shutdown waits to give it up


def holder_name(data_dir: Path) -> str:
    """Who holds a lease: this host and data dir, which only one process at a time can have (`server.lock`)."""
    return f"{socket.gethostname()}:{data_dir.resolve()}"


class InstanceLease:
    """`held` is what the session manager asks before it serves a session; with no shared database there is
    no lease to hold (the data dir's lock is the only one), and it is always held."""

    def __init__(
        self,
        leases: InstanceLeases | None,
        instance: str,
        holder: str,
        clock: Callable[[], float] = trio.current_time,
    ) -> None:
        self._leases = leases
        self._instance = instance
        self._holder = holder
        self._clock = clock
        self._valid_until = 0.0
        self.lost_to: str | None = None  # who took the lease, once another process did

    @property
    def held(self) -> bool:
        return self._leases is None or self._clock() < self._valid_until

    @property
    def fence(self) -> Fence | None:
        """What shared writes check against (`SharedExecutions.of`); None without a shared database."""
        return None if self._leases is None else Fence(self._instance, self._holder)

    async def acquire(self) -> None:
        """Take the lease before serving, waiting out another holder's for at most `TTL` and one renewal;
        `ConfigError` naming the holder if it is still held then (another process serves this instance)."""
        if self._leases is None:
            return
        deadline = self._clock() + TTL + RENEW
        while True:
            holder = await self._renew()
            if holder is None:
                return
            if self._clock() >= deadline:
                raise ConfigError(
                    f"--instance-id {self._instance} is served by another process ({holder}); give each process its"
                    " own instance id, or stop that one first"
                )
            log.warning("instance %s is held by %s; waiting for its lease to end", self._instance, holder)
            await trio.sleep(RENEW / 2)

    async def keep(self) -> None:
        """Renew the lease for as long as the server runs; return only when it is lost for good (taken by
        another process), and the server then stops. A renewal that fails (the database is out of reach) is
        tried again at the next turn; once the lease has run out, sessions are refused until one succeeds."""
        if self._leases is None:
            await trio.sleep_forever()
        while True:
            await trio.sleep(RENEW)
            try:
                holder = await self._renew()
            except Exception as exc:
                log.warning("renewing the lease of instance %s failed: %s", self._instance, exc)
                continue
            if holder is not None:
                log.error("instance %s is now served by %s; this process stops serving it", self._instance, holder)
                self.lost_to = holder
                return

    async def release(self) -> None:
        """Give the lease up at a clean shutdown, so a successor elsewhere need not wait for it to expire;
        bounded, as a database out of reach must not hold the shutdown."""
        if self._leases is not None and self.held:
            self._valid_until = 0.0
            with trio.move_on_after(RELEASE_BOUND):
                await self._leases.release(self._instance, self._holder)

    async def _renew(self) -> str | None:
        assert self._leases is not None
        asked = self._clock()
        holder = await self._leases.acquire(self._instance, self._holder, TTL)
        if holder is None:
            self._valid_until = asked + TTL
        return holder
