"""The session lifecycle: every state, every transition, and what a request gets in each. No I/O.

Theory of operation
-------------------
A session id is durable; its *runtime* (an open LMDB file, a tool server, a trio nursery whose cancel
scope is the session's lifetime) exists only while the process is serving it. So a session handle in
this process is always in exactly one of these states:

    DISPOSED    stored on disk, no runtime here. A request restores it.
    RESTORING   the single in-flight restore (or first start) is building the runtime; callers wait.
    LIVE        the runtime is up; requests are served.
    CLOSING     this handle's file is open only until it closes: its runtime is ending (idle past
                `--session-timeout` and its leases, see `idle_verdict`; or failed), or a listing opened it to
                read its meta. The stored session is intact: a request waits for the handle to stop, then
                restores the session with a new one, so this process never has a session's file open twice.
    CONDEMNED   DELETE (and later eviction, revocation) wrote the durable condemned marker and
                cancelled the runtime; the file is about to be wiped. The id is dead: requests get
                404 "Session timed out, please reconnect".
    WIPED       the file and directory entry are gone: 404 "Session not found". Terminal.
    RESTARTING  this process is shutting down; the session persists for the next process: requests
                get 503 "MCP session is restarting, please retry". Terminal for this process.

The same table answers two questions, which is what keeps the protocol vocabulary consistent:
a request *arriving* in a state, and a request *in flight* when the runtime's scope exits in that
state, get the same refusal. Everything else in the code asks this module rather than comparing
states itself: what an event does in the current state, whether a request is served, whether the
runtime's end wipes the file or keeps its answers. An event that the table does not list for a state
is a bug and raises.

Work runs concurrently with the events that end it, so news can arrive late: a restore that finishes
after a shutdown or a condemnation began, a runtime that ends after being told to. The table lists
those pairs too, as no-ops (the first verdict stands), so a shutdown during a restore is an ordinary
entry rather than an error.

    DISPOSED  --restore-->        RESTORING
    DISPOSED  --peek-->           CLOSING         (a listing reads the stored meta)
    RESTORING --restored-->       LIVE
    RESTORING --vanished-->       WIPED           (no directory entry or file: never existed here)
    LIVE      --idle-->           CLOSING         (idle past its leases; the stored session is intact)
    RESTORING | LIVE --exited-->  CLOSING         (the restore failed, or the runtime died: retry later)
    DISPOSED | RESTORING | LIVE --condemn-->  CONDEMNED
    CONDEMNED --wiped-->          WIPED
    DISPOSED | RESTORING | LIVE | CLOSING --shutdown--> RESTARTING

    late news, no change: restored, vanished, condemn, idle, exited and shutdown in CONDEMNED and
    RESTARTING; exited in CLOSING (after idle) and WIPED (after vanished); shutdown in WIPED.

The process itself has a lifecycle above its sessions' (`Drain`): it serves until a shutdown begins, then
drains, and from then on no request opens, restores or reads a session: 503, retry (the next process serves it).
"""

import enum

import attrs

from executor_mcp.protocol.errors import Refusal


class State(enum.Enum):
    DISPOSED = "disposed"
    RESTORING = "restoring"
    LIVE = "live"
    CLOSING = "closing"
    CONDEMNED = "condemned"
    WIPED = "wiped"
    RESTARTING = "restarting"


class Event(enum.Enum):
    RESTORE = "restore"
    RESTORED = "restored"
    VANISHED = "vanished"
    IDLE = "idle"
    EXITED = "exited"  # the runtime's scope has exited, whatever ended it
    CONDEMN = "condemn"
    WIPED = "wiped"
    SHUTDOWN = "shutdown"
    PEEK = "peek"  # a listing opens the stored file to read its meta


_RUNNABLE = (State.DISPOSED, State.RESTORING, State.LIVE)
# Ended for this process whatever else happens: later news changes nothing (the wipe or the next
# process finishes what the verdict began).
_SETTLED = (State.CONDEMNED, State.RESTARTING)
_LATE_NEWS = (Event.RESTORED, Event.VANISHED, Event.CONDEMN, Event.IDLE, Event.EXITED, Event.SHUTDOWN)

TRANSITIONS: dict[tuple[State, Event], State] = {
    (State.DISPOSED, Event.RESTORE): State.RESTORING,
    (State.DISPOSED, Event.PEEK): State.CLOSING,
    (State.RESTORING, Event.RESTORED): State.LIVE,
    (State.RESTORING, Event.VANISHED): State.WIPED,
    (State.LIVE, Event.IDLE): State.CLOSING,
    (State.RESTORING, Event.EXITED): State.CLOSING,
    (State.LIVE, Event.EXITED): State.CLOSING,
    (State.CLOSING, Event.EXITED): State.CLOSING,
    **{(state, Event.CONDEMN): State.CONDEMNED for state in _RUNNABLE},
    (State.CONDEMNED, Event.WIPED): State.WIPED,
    **{(state, Event.SHUTDOWN): State.RESTARTING for state in (*_RUNNABLE, State.CLOSING)},
    **{(state, event): state for state in _SETTLED for event in _LATE_NEWS},
    (State.WIPED, Event.EXITED): State.WIPED,
    (State.WIPED, Event.SHUTDOWN): State.WIPED,
}

# What a request gets in each state where it cannot be served; None means "serve, or restore first". In
# CLOSING it is what a request still in flight hears as the runtime ends (retry: the next request restores the
# session); one arriving waits for the handle to stop instead (`waits_for_stop`).
REFUSALS: dict[State, Refusal | None] = {
    State.DISPOSED: None,
    State.RESTORING: None,
    State.LIVE: None,
    State.CLOSING: Refusal.RESTARTING,
    State.CONDEMNED: Refusal.SESSION_TERMINATED,
    State.WIPED: Refusal.SESSION_NOT_FOUND,
    State.RESTARTING: Refusal.RESTARTING,
}

# States whose stored session outlives the runtime's end: its undelivered answers are written down.
_STORED_AFTER_EXIT = frozenset({State.DISPOSED, State.CLOSING, State.RESTARTING})
# States in which the session is over for this process (or gone): a request hears so whatever it waited for.
_OVER = frozenset({State.CONDEMNED, State.WIPED, State.RESTARTING})


class IllegalTransition(RuntimeError):
    pass


class Lifecycle:
    """The state of one session handle in this process."""

    def __init__(self, state: State = State.DISPOSED) -> None:
        self.state = state

    def fire(self, event: Event) -> State:
        try:
            self.state = TRANSITIONS[self.state, event]
        except KeyError:
            raise IllegalTransition(f"{event.value} is not allowed in state {self.state.value}") from None
        return self.state

    def can(self, event: Event) -> bool:
        return (self.state, event) in TRANSITIONS

    def changes_on(self, event: Event) -> bool:
        """`event` is news here: it moves the handle to another state (not late news, nor illegal)."""
        return TRANSITIONS.get((self.state, event), self.state) is not self.state

    @property
    def serving(self) -> bool:
        """Requests are served by the runtime now."""
        return self.state is State.LIVE

    @property
    def needs_restore(self) -> bool:
        """A request must restore the runtime before it can be served."""
        return self.can(Event.RESTORE)

    @property
    def waits_for_stop(self) -> bool:
        """A request arriving now waits for this handle to stop, then restores the session with a new one."""
        return self.state is State.CLOSING

    @property
    def wipes_on_exit(self) -> bool:
        """The runtime's end removes the session's file and directory entry."""
        return self.state is State.CONDEMNED

    @property
    def keeps_answers_on_exit(self) -> bool:
        """The runtime's end leaves the session stored: answers not yet delivered go to its file."""
        return self.state in _STORED_AFTER_EXIT

    @property
    def keeps_executions_on_exit(self) -> bool:
        """The runtime's end leaves its durable executions (paused ones, and those that went on after a pause)
        for the next process to revive. Only a restart does: a disposal ends them with their pauses (upstream
        §2.4), a condemnation wipes them with the file."""
        return self.state is State.RESTARTING

    @property
    def outlives_runtime(self) -> bool:
        """The handle stays after the runtime ended, answering for the rest of this process."""
        return self.state is State.RESTARTING

    @property
    def refusal(self) -> Refusal | None:
        """The refusal for a request arriving now, or None when it can be served (after a restore)."""
        return REFUSALS[self.state]

    @property
    def service_refusal(self) -> Refusal | None:
        """What a request gets that is to be served now, with no more waiting (it waited for a restore, or is
        being started on the runtime): None when the runtime serves it; the session's end when it is over
        here; else the runtime is not up (its restore failed, which is logged, or it is closing): internal
        error, and the next request tries again."""
        if self.serving:
            return None
        return REFUSALS[self.state] if self.state in _OVER else Refusal.INTERNAL

    @property
    def in_flight_refusal(self) -> Refusal:
        """The refusal for a request still in flight when the runtime's scope has exited in this state.

        A runtime that ended while the session itself lives on (CLOSING: disposed past its running lease,
        or died of a fault) tells the client to retry the same session: the next request restores it, as a
        DISPOSED one would. A runtime that exits while still nominally restoring or live failed to come up:
        internal error.
        """
        if self.state is State.DISPOSED:
            return Refusal.RESTARTING
        return REFUSALS[self.state] or Refusal.INTERNAL


class Phase(enum.Enum):
    """The process's own phase, above its sessions' states."""

    SERVING = "serving"
    DRAINING = "draining"


PHASES: dict[tuple[Phase, Event], Phase] = {
    (Phase.SERVING, Event.SHUTDOWN): Phase.DRAINING,
    (Phase.DRAINING, Event.SHUTDOWN): Phase.DRAINING,
}
# What a request that would open, restore or read a session gets in each phase.
PHASE_REFUSALS: dict[Phase, Refusal | None] = {Phase.SERVING: None, Phase.DRAINING: Refusal.RESTARTING}
# A request that found its handle changing hands at every look (a workspace ending as each look finds it) is
# told to retry, as a restart tells it.
CONTENDED = Refusal.RESTARTING


class Drain:
    """The process's phase: serving, then draining from the moment a shutdown begins. A draining process
    refuses new work so that what is in flight can finish within the grace period."""

    def __init__(self) -> None:
        self.phase = Phase.SERVING

    def fire(self, event: Event) -> Phase:
        try:
            self.phase = PHASES[self.phase, event]
        except KeyError:
            raise IllegalTransition(f"{event.value} is not allowed in phase {self.phase.value}") from None
        return self.phase

    @property
    def draining(self) -> bool:
        return self.phase is Phase.DRAINING

    @property
    def refusal(self) -> Refusal | None:
        """The refusal for a request that would open, restore or read a session now; None while serving."""
        return PHASE_REFUSALS[self.phase]


def workspace_refusal(refusal: Refusal) -> Refusal:
    """A refusal as a workspace's request hears it: a 2026 client never named the session, and 404 is that
    era's `-32601`, so a session that is gone or ending says to retry (the next request makes it anew)."""
    return Refusal.WORKSPACE_ENDED if refusal.value.status == 404 else refusal


def listed_state(handle: State | None, condemned: bool) -> State:
    """The state a listing of stored sessions shows for one: the durable condemned marker first (an admin
    command or an interrupted wipe may have set it with no handle here), then this process's handle, and with
    no handle, or a handle only closing its file, the session is stored with no runtime: DISPOSED."""
    if condemned:
        return State.CONDEMNED
    return State.DISPOSED if handle is None or handle is State.CLOSING else handle


@attrs.frozen
class IdlePolicy:
    """How long an unused runtime stays up (upstream §2.4): `session_timeout` of no activity; up to
    `paused_idle` while an execution waits for approval; up to `running_idle` while work runs or a
    listen stream is open. The values come from `Settings`, which holds their defaults."""

    session_timeout: float
    paused_idle: float
    running_idle: float


def idle_verdict(policy: IdlePolicy, idle: float, paused: int, running: int) -> float | None:
    """Seconds until the runtime should be looked at again, or None to dispose of it now.

    Paused work is judged on the paused clock alone: the paused request itself leaves work "running".
    A lease is looked at again at least every `session_timeout`, since the work holding it may end.
    """
    if idle < policy.session_timeout:
        return policy.session_timeout - idle
    if paused:
        return min(policy.paused_idle - idle, policy.session_timeout) if idle < policy.paused_idle else None
    if running:
        return min(policy.running_idle - idle, policy.session_timeout) if idle < policy.running_idle else None
    return None
