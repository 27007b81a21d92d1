"""Idle Streamable HTTP sessions, at most one per identity, so a connection's calls skip the handshake.

Sans-I/O bookkeeping: it hands sessions out and takes them back, and answers the sessions that must now be
closed (expired, replaced, or past the bound); the caller closes them. A session is out of the pool while
a call holds it, so each call has it exclusively. The key is a digest of everything that decides whom the
session speaks for (endpoint, transport, headers, query, template, resolved credential values): it never
appears in a log, and two connections with the same credential share a session exactly when upstream's
would.
"""

import hashlib
from collections import OrderedDict
from collections.abc import Callable, Mapping

from executor_mcp.codec import dumps
from executor_mcp.integrations.mcp.transports import StreamableSession

IDLE_TTL = 5 * 60.0
MAX_IDLE = 256


def identity_key(
    *,
    endpoint: str,
    transport: str,
    headers: Mapping[str, str],
    query: Mapping[str, str],
    template: str,
    credentials: Mapping[str, str | None],
) -> str:
    material = [endpoint, transport, sorted(headers.items()), sorted(query.items()), template]
    material.append(sorted((name, value or "") for name, value in credentials.items()))
    return hashlib.sha256(dumps(material)).hexdigest()


class SessionPool:
    def __init__(self, clock: Callable[[], float], *, idle_ttl: float = IDLE_TTL, max_idle: int = MAX_IDLE) -> None:
        self._clock = clock
        self._idle_ttl = idle_ttl
        self._max_idle = max_idle
        # key → (session, when it went idle), oldest first.
        self._idle: OrderedDict[str, tuple[StreamableSession, float]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._idle)

    def _expired(self) -> list[StreamableSession]:
        now = self._clock()
        dropped = []
        while self._idle:
            key, (session, since) = next(iter(self._idle.items()))
            if now - since < self._idle_ttl:
                break
            del self._idle[key]
            dropped.append(session)
        return dropped

    def take(self, key: str) -> tuple[StreamableSession | None, list[StreamableSession]]:
        """The idle session for `key`, if a fresh one waits, and the expired ones to close."""
        dropped = self._expired()
        held = self._idle.pop(key, None)
        return (held[0] if held is not None else None), dropped

    def give(self, key: str, session: StreamableSession) -> list[StreamableSession]:
        """Keep `session` idle for `key`; answers what to close (an idle one already there, the oldest past
        the bound, the expired)."""
        dropped = self._expired()
        previous = self._idle.pop(key, None)
        if previous is not None:
            dropped.append(previous[0])
        self._idle[key] = (session, self._clock())
        while len(self._idle) > self._max_idle:
            dropped.append(self._idle.popitem(last=False)[1][0])
        return dropped

    def drain(self) -> list[StreamableSession]:
        sessions = [session for session, _ in self._idle.values()]
        self._idle.clear()
        return sessions
