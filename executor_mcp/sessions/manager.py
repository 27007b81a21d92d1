"""The session manager: owns every session's task, restores single-flight, condemns, shuts down.

Each session's runtime lives in one task of the manager's nursery (`_run`). That task is the only
place a runtime starts and ends: it builds the runtime (first start and every restore alike), sleeps
inside the session's cancel scope until condemnation or shutdown cancels it, then runs the exit
handling that answers every request still in flight, closes the session's file, and wipes it when the
session was condemned. Request handlers never build or tear down runtimes themselves; they `acquire`
a session, which either hands back a live one or raises the refusal the lifecycle table prescribes.
"""

import functools
import logging
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import attrs
import trio

from executor_mcp.background import forever, once
from executor_mcp.codec import JsonObject
from executor_mcp.logs import outside_request
from executor_mcp.protocol.errors import Refusal, Refused
from executor_mcp.protocol.mcp import InitializeParams
from executor_mcp.protocol.stateless import STATELESS_VERSION
from executor_mcp.sessions.ids import home_of, id_prefix, new_session_id, workspace_id
from executor_mcp.sessions.instance_lease import InstanceLease
from executor_mcp.sessions.lifecycle import CONTENDED, Drain, Event, IdlePolicy, State, idle_verdict, listed_state
from executor_mcp.sessions.session import Runtime, Session
from executor_mcp.storage.control import ControlPlane
from executor_mcp.storage.interfaces import ExecutionJournals, Fence
from executor_mcp.storage.records import EXECUTE_MODE, MODEL_ELICITATION, Owner, SessionMeta, SessionRecord
from executor_mcp.storage.session_file import MissingSessionFile, SessionFile
from executor_mcp.toolserver.registry import ToolFactory
from executor_mcp.toolserver.server import ToolServer

log = logging.getLogger(__name__)

SESSIONS_DIR = "sessions"
# In-memory activity is exact; the stored copy (for retention and cross-restart ordering) is coarser.
ACTIVITY_PERSIST_INTERVAL = 5.0
# How often admin requests (session terminations, org revocations) are looked for; teardown bound 3 s.
ADMIN_POLL = 1.0
# Bound on waiting for session tasks to finish their exit handling at shutdown.
EXIT_HANDLING_BOUND = 5.0
# Bound on writing a runtime's undelivered answers to its file as it ends.
WRITE_DOWN_BOUND = 2.0


# How often a request looks for (or makes) its workspace before asking its client to retry: each look waits
# for the handle it found to settle, so a second look only follows a workspace ending meanwhile.
WORKSPACE_ATTEMPTS = 4
# What a workspace's listing shows as its client: its requests come from any client of the principal.
WORKSPACE_CLIENT: JsonObject = {"name": "MCP 2026-07-28 requests", "version": STATELESS_VERSION}


@attrs.frozen
class Opened:
    """A session's storage, open and read: what a runtime is built from."""

    record: SessionRecord
    file: SessionFile
    meta: SessionMeta


@attrs.frozen
class Listed:
    """One stored session as its owner sees it listed: its directory entry, its state in this process, its
    latest activity, and its meta (None when it could not be read now: restoring, or winding down)."""

    record: SessionRecord
    state: State
    last_activity: float
    meta: SessionMeta | None


@attrs.define
class _NewSession:
    """A new session's two writes, its file and its directory entry, made at once rather than one after the
    other: neither needs the other, and a crash between them leaves what start-up recovery already removes
    (a file without an entry, or an entry without a file; the file itself appears only whole). Each write
    keeps its own failure, so the caller gets the error itself, not a group, and undoes what was made."""

    path: Path
    control: ControlPlane
    file: SessionFile | None = None
    entered: bool = False
    failure: Exception | None = None

    async def write(self, record: SessionRecord, meta: SessionMeta, first_request: bytes) -> SessionFile:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._make_file, meta, first_request)
            nursery.start_soon(self._enter, record)
        if self.failure is None:
            assert self.file is not None  # made, since its write did not fail
            return self.file
        if self.file is not None:
            await self.file.close()
            await trio.to_thread.run_sync(SessionFile.wipe, self.path)
        if self.entered:
            await self.control.sessions.delete_session(record.session_id)
        raise self.failure

    async def _make_file(self, meta: SessionMeta, first_request: bytes) -> None:
        try:
            self.file = await SessionFile.create(self.path, meta, first_request)
        except Exception as exc:
            self.failure = self.failure or exc

    async def _enter(self, record: SessionRecord) -> None:
        try:
            await self.control.sessions.put_session(record)
            self.entered = True
        except Exception as exc:
            self.failure = self.failure or exc


class SessionManager:
    def __init__(
        self,
        control: ControlPlane,
        data_dir: Path,
        tools: ToolFactory,
        *,
        idle: IdlePolicy,
        max_sessions_per_user: int,
        retention: float,
        instance: str,
        lease: InstanceLease | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """`idle`, `max_sessions_per_user`, `retention` and `instance` are the `Settings`' (`--session-timeout`
        and `--paused-session-idle-timeout`, `--max-sessions-per-user`, `--session-retention`, `--instance-id`:
        the home this process's session ids name, "" for none); while `lease` is not held (several instances on
        one database) no session is served."""
        self._control = control
        self._instance = instance
        self._lease = lease
        self._idle = idle
        self._max_sessions = max_sessions_per_user
        self._retention = retention
        self._sessions_dir = data_dir / SESSIONS_DIR
        self._tools = tools
        self._clock = clock
        self._sessions: dict[str, Session] = {}
        self._nursery: trio.Nursery | None = None
        self._workspace_key = b""  # read from the control plane when the manager runs
        self._drain = Drain()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        self._workspace_key = await self._control.signing_keys.workspace_key()
        await self._recover()
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            nursery.start_soon(forever, "serving admin requests", self._serve_admin_requests, ADMIN_POLL)
            await self._revive_paused()
            task_status.started()
            await forever("sweeping sessions past retention", self._sweep, self._sweep_interval)

    # -- entry points -------------------------------------------------------------------------------

    async def create(
        self,
        owner: Owner,
        resource: str,
        params: InitializeParams,
        version: str,
        initialize_request: bytes,
        elicitation_mode: str = MODEL_ELICITATION,
        mode: str = EXECUTE_MODE,
    ) -> Session:
        self._refuse_if_draining()
        await self._make_room(owner)
        session_id = new_session_id(self._instance)
        meta = SessionMeta(
            session_id=session_id,
            owner=owner,
            resource=resource,
            protocol_version=version,
            client_info={"name": params.client_info.name, "version": params.client_info.version},
            client_capabilities=params.capabilities,
            created_at=self._clock(),
            elicitation_mode=elicitation_mode,
            mode=mode,
        )
        return await self._open_new(meta, initialize_request, workspace=False)

    async def workspace(self, owner: Owner, resource: str, elicitation_mode: str, mode: str) -> Session:
        """The principal's workspace for these modes, live: where its MCP 2026-07-28 requests run. It is an
        ordinary session inside (its own nursery and file, idle disposal, restore, durable pauses), made on
        first use. Made only where no handle of its id exists, checked and claimed with no checkpoint between,
        so that two first requests never make two and a restore never opens the file a creation holds: a
        request that finds a handle waits for it, as any request of a session does."""
        principal = [owner.account_id, owner.org_id, owner.org_admin]
        session_id = workspace_id(self._workspace_key, self._instance, principal, resource, elicitation_mode, mode)
        for _ in range(WORKSPACE_ATTEMPTS):
            found = await self._existing_workspace(session_id, owner, resource)
            if found is not None:
                return found
            if session_id not in self._sessions:
                meta = SessionMeta(
                    session_id=session_id,
                    owner=owner,
                    resource=resource,
                    protocol_version=STATELESS_VERSION,
                    client_info=dict(WORKSPACE_CLIENT),
                    client_capabilities={},
                    created_at=self._clock(),
                    elicitation_mode=elicitation_mode,
                    mode=mode,
                )
                return await self._open_new(meta, b"", workspace=True)
        raise Refused(CONTENDED)  # its handle kept changing hands: the client retries

    async def _existing_workspace(self, session_id: str, owner: Owner, resource: str) -> Session | None:
        try:
            return await self.acquire(session_id, owner, resource, workspace=True)
        except Refused as refused:
            if refused.refusal is Refusal.SESSION_NOT_FOUND:
                return None
            raise

    async def _open_new(self, meta: SessionMeta, first_request: bytes, *, workspace: bool) -> Session:
        self._refuse_if_draining()
        session_id, owner, resource, now = meta.session_id, meta.owner, meta.resource, meta.created_at
        # Known (restoring) before anything is written, so a shutdown meanwhile ends it like any other.
        session = self._sessions[session_id] = Session(session_id)
        session.lifecycle.fire(Event.RESTORE)
        # Shielded: a client that hangs up mid-initialize must not leave an environment open.
        record = SessionRecord(session_id, owner, resource, created_at=now, last_activity_at=now, workspace=workspace)
        with trio.CancelScope(shield=True):
            try:
                file = await _NewSession(self._path(session_id), self._control).write(record, meta, first_request)
            except BaseException:
                del self._sessions[session_id]
                session.stopped.set()
                raise
        # The new session starts from what was just written instead of reading it back.
        self._spawn(session, Opened(record, file, meta))
        return await self.acquire(session_id, owner, resource, workspace=workspace)

    async def acquire(
        self, session_id: str, principal: Owner, resource: str, *, activity: bool = True, workspace: bool = False
    ) -> Session:
        """The live session for a request, restoring it first if needed; or the refusal for its state. A
        workspace is found only as one (a 2025 request naming its id hears it does not exist)."""
        home = home_of(session_id)
        if home != self._instance:
            # Another instance's session (a proxy sent it here, or its home is down and the proxy fell back):
            # the client retries, as at a restart; never a new session. A bare or malformed id names none.
            raise Refused(Refusal.RESTARTING if home else Refusal.SESSION_NOT_FOUND)
        session = await self._live(session_id)
        record = session.record
        if record is not None and record.workspace != workspace:
            raise Refused(Refusal.SESSION_NOT_FOUND)  # before ownership: whose workspace it is is not told
        if record is None or not principal.may_act_on(record.owner) or record.resource != resource:
            raise Refused(Refusal.FOREIGN_SESSION)
        if activity:
            self._note_activity(session)
        return session

    async def terminate(self, session: Session) -> None:
        """Condemn a live session: its id is dead from this instant, and the durable marker, written
        before the runtime is cancelled, keeps it dead across a crash until the wipe is done."""
        session.lifecycle.fire(Event.CONDEMN)
        try:
            if session.lifecycle.wipes_on_exit:
                with trio.CancelScope(shield=True):
                    await self._control.sessions.update_session(session.id, condemned=True)
        finally:
            session.scope.cancel()

    async def evict(self, session_id: str, *, owned_by: Owner | None = None) -> None:
        """End a session through the condemnation path, whatever state it is in (cap, retention, admin,
        a revoked organization). With `owned_by`, only if that owner (account within its organization)
        has it: a caller refused for having no live organization must never destroy anyone else's
        session by sending its id. Anything else (unknown id, already dead, restarting) is left as it is."""
        if not self._is_mine(session_id):
            return
        try:
            session = await self._live(session_id)
        except Refused:
            return
        record = session.record
        if owned_by is None or (record is not None and record.owner == owned_by):
            await self.terminate(session)

    async def owner_listing(self, owner: Owner) -> list[Listed]:
        """`owner`'s stored sessions (an account within one org), most recently active first, at most the
        per-account cap of them. The meta comes from a live runtime, or else from the session's file, read
        one at a time (`_stored_meta`)."""
        records = sorted(await self._control.sessions.owner_sessions(owner), key=self._activity, reverse=True)
        listed = []
        for record in records[: self._max_sessions]:
            handle = self._sessions.get(record.session_id)
            state = listed_state(handle.state if handle is not None else None, record.condemned)
            if handle is not None:
                meta = handle.runtime.meta if handle.runtime is not None else None
            else:
                meta = None if record.condemned else await self._stored_meta(record.session_id)
            listed.append(Listed(record, state, self._activity(record), meta))
        return listed

    async def end_owned(self, session_id: str, owner: Owner) -> bool:
        """End one of `owner`'s sessions through the condemnation path (a person's Terminate in the
        console). False when `owner` has no session of that id, whoever else may: the caller says "not found"
        either way, so another's session is never confirmed."""
        self._refuse_if_draining()
        if not self._is_mine(session_id):
            return False
        record = await self._control.sessions.get_session(session_id)
        if record is None or record.owner != owner:
            return False
        await self.evict(session_id, owned_by=owner)
        return True

    async def shutdown(self, grace: float) -> None:
        """Refuse new work, give work in flight `grace` seconds, then end every runtime as restarting."""
        self._drain.fire(Event.SHUTDOWN)
        with trio.move_on_after(grace):
            for session in list(self._sessions.values()):
                await session.drained()
        ending = list(self._sessions.values())
        for session in ending:
            session.end(Event.SHUTDOWN)
        with trio.move_on_after(EXIT_HANDLING_BOUND):
            for session in ending:
                await session.stopped.wait()

    @property
    def draining(self) -> bool:
        """A shutdown has begun: new work is refused (the readiness check says so)."""
        return self._drain.draining

    def state_counts(self) -> Counter[State]:
        """How many session handles this process holds in each lifecycle state, for the metrics."""
        return Counter(session.state for session in self._sessions.values())

    # -- internals ----------------------------------------------------------------------------------

    def _refuse_if_draining(self) -> None:
        """Draining, or not holding the instance's lease (another process may serve its sessions): the
        restart envelope, so the client retries."""
        refusal = self._drain.refusal
        if refusal is not None:
            raise Refused(refusal)
        if self._lease is not None and not self._lease.held:
            raise Refused(Refusal.RESTARTING)

    async def _live(self, session_id: str) -> Session:
        while True:
            self._refuse_if_draining()
            session = self._sessions.get(session_id)
            if session is None:
                session = self._sessions[session_id] = Session(session_id)
            if not session.lifecycle.waits_for_stop:
                break
            await session.stopped.wait()  # restore only once the disposal closed the file
        lifecycle = session.lifecycle
        refusal = lifecycle.refusal
        if refusal is not None:
            raise Refused(refusal)
        if lifecycle.needs_restore:
            lifecycle.fire(Event.RESTORE)
            self._spawn(session)
        if not lifecycle.serving:
            await session.settled.wait()
        # Served, or refused as the state now says: a restore we waited on that failed (it is logged) is an
        # internal error, and the next request retries.
        refusal = lifecycle.service_refusal
        if refusal is not None:
            raise Refused(refusal)
        return session

    def _spawn(self, session: Session, opened: Opened | None = None) -> None:
        if self._nursery is None:
            raise RuntimeError("the session manager is not running")
        # The runtime outlives the request that starts it: its own log lines are not that request's.
        start = functools.partial(self._nursery.start_soon, name=f"session {session.id[:12]}")
        outside_request(start, self._run, session, opened)

    async def _run(self, session: Session, opened: Opened | None) -> None:
        """The session's runtime, from restore to exit. Never raises: a crash here would end the server."""
        restored = opened is None  # else it was just created, and its file keeps nothing to revive
        try:
            with session.scope:
                opened = opened or await self._restore(session)
                if opened is not None:
                    session.record = opened.record
                    session.persisted_activity = opened.record.last_activity_at
                    async with trio.open_nursery() as nursery:
                        lease = functools.partial(self._pause_lease, session)
                        kept = functools.partial(self._pause_kept, session)
                        tools = self._tools(opened.meta)
                        journals = self._journals(session.id, opened.file)
                        server = ToolServer(opened.meta, tools, nursery, lease, journals, kept)
                        session.runtime = Runtime(file=opened.file, meta=opened.meta, server=server, nursery=nursery)
                        session.last_activity = session.last_activity or self._clock()
                        if restored:
                            await once(
                                f"session {session.id[:12]}: reviving its paused executions",
                                functools.partial(self._revive, session, server),
                            )
                        session.lifecycle.fire(Event.RESTORED)
                        session.settled.set()
                        await self._watch_idle(session)
        except Exception:
            log.exception("session %s runtime failed", session.id)
        finally:
            with trio.CancelScope(shield=True):
                await self._exit(session, opened.file if opened else None)

    async def _restore(self, session: Session) -> Opened | None:
        """Open a stored session, checking the condemned marker before anything else."""
        record = await self._control.sessions.get_session(session.id)
        if record is None:
            session.lifecycle.fire(Event.VANISHED)
            return None
        session.record = record
        if record.condemned:
            session.lifecycle.fire(Event.CONDEMN)
            return None
        file = None
        try:
            file = await SessionFile.open(self._path(session.id))
            return Opened(record, file, await file.meta())
        except MissingSessionFile:
            log.warning("session %s is in the directory but has no complete file; removing it", session.id)
            with trio.CancelScope(shield=True):
                if file is not None:
                    await file.close()
                await self._wipe(session.id)
            session.lifecycle.fire(Event.VANISHED)
            return None
        except BaseException:
            if file is not None:
                with trio.CancelScope(shield=True):
                    await file.close()
            raise

    async def _exit(self, session: Session, file: SessionFile | None) -> None:
        """The one place a runtime ends: answer what is in flight, write down the answers nobody has
        collected yet, close, and wipe if condemned."""
        session.lifecycle.fire(Event.EXITED)
        session.runtime = None  # its nursery is closed: nothing may start there any more
        session.fail_in_flight()
        if file is not None and session.lifecycle.keeps_answers_on_exit:
            with trio.move_on_after(WRITE_DOWN_BOUND):
                await session.write_down_kept(file)
        lifecycle = session.lifecycle
        # Only a session that kept a pause has executions in its file (`_pause_kept` marks it): a disposal of any
        # other costs no write.
        kept = session.record is not None and session.record.paused_until
        if file is not None and kept and not lifecycle.keeps_executions_on_exit and not lifecycle.wipes_on_exit:
            with trio.move_on_after(WRITE_DOWN_BOUND):
                journals = self._journals(session.id, file)
                await once(f"session {session.id[:12]}: forgetting its executions", journals.forget_executions)
                await once(
                    f"session {session.id[:12]}: forgetting its pauses",
                    functools.partial(self._mark_paused, session, 0.0),
                )
        session.settled.set()
        try:
            if file is not None:
                await file.close()
            if session.lifecycle.wipes_on_exit:
                await self._wipe(session.id)
                session.lifecycle.fire(Event.WIPED)
        except Exception:
            log.exception("session %s exit handling failed", session.id)
        finally:
            if self._sessions.get(session.id) is session and not session.lifecycle.outlives_runtime:
                del self._sessions[session.id]
            session.stopped.set()

    async def _stored_meta(self, session_id: str) -> SessionMeta | None:
        """A stored session's meta, read from its file without restoring it; None if it cannot be now.

        The handle placed meanwhile is CLOSING, which a restore waits for like a disposal, and the read is
        shielded so that a cancelled listing still closes the file: this process never has a session's file
        open twice, which LMDB forbids."""
        if self._drain.draining or session_id in self._sessions:
            return None
        peek = self._sessions[session_id] = Session(session_id)
        peek.lifecycle.fire(Event.PEEK)
        try:
            with trio.CancelScope(shield=True):
                file = await SessionFile.open(self._path(session_id))
                try:
                    meta = await file.meta()
                finally:
                    await file.close()
            return meta
        except MissingSessionFile:
            return None
        except Exception:  # a damaged file hides its client; it must not hide the owner's other sessions
            log.exception("session %s: its meta could not be read for a listing", session_id)
            return None
        finally:
            if self._sessions.get(session_id) is peek and not peek.lifecycle.outlives_runtime:
                del self._sessions[session_id]
            peek.stopped.set()

    async def _wipe(self, session_id: str) -> None:
        """Everything of the session, its directory entry last (what start-up recovery finishes from)."""
        await self._forget_shared(session_id)
        await trio.to_thread.run_sync(SessionFile.wipe, self._path(session_id))
        await self._control.sessions.delete_session(session_id)

    async def _forget_shared(self, session_id: str) -> None:
        """The session's executions in the shared store: with its file they would go with it; in the database
        a pause left behind could still be adopted and run."""
        if self._control.executions is not None:
            await self._control.executions.of(session_id, self._fence).forget_executions()

    async def _recover(self) -> None:
        """Finish what a crash interrupted, before serving: wipes after the condemned marker, files that
        never got their directory entry, entries whose file is gone, and files half built."""
        for record in await self._control.sessions.sessions():
            if record.condemned and self._is_mine(record.session_id):
                await self._wipe(record.session_id)
        # Other instances' sessions share the directory (a shared database): theirs are not ours to reconcile.
        listed = {session_id for session_id in await self._control.sessions.session_ids() if self._is_mine(session_id)}
        stored, leftovers = await trio.to_thread.run_sync(SessionFile.scan, self._sessions_dir, self._is_mine)
        for session_id in sorted(stored - listed):
            log.warning("session file %s has no directory entry; removing it", session_id)
            await trio.to_thread.run_sync(SessionFile.wipe, self._path(session_id))
        for session_id in sorted(listed - stored):
            log.warning("session %s is in the directory but has no file; removing it", session_id)
            await self._forget_shared(session_id)
            await self._control.sessions.delete_session(session_id)
        for path in leftovers:
            log.info("removing %s, left over from an interrupted write", path.name)
            await trio.to_thread.run_sync(functools.partial(path.unlink, missing_ok=True))

    def _activity(self, record: SessionRecord) -> float:
        live = self._sessions.get(record.session_id)
        return live.last_activity if live is not None and live.last_activity else record.last_activity_at

    async def _make_room(self, owner: Owner) -> None:
        """Opening one more session than the cap allows evicts the owner's least recently active. Workspaces
        are not counted, nor evicted: there are a few per principal at most, and they hold its 2026 pauses."""
        if await self._control.sessions.owner_session_count(owner) < self._max_sessions:
            return
        mine = [
            record
            for record in await self._control.sessions.owner_sessions(owner)
            if not record.condemned and not record.workspace
        ]
        excess = len(mine) + 1 - self._max_sessions
        for record in sorted(mine, key=self._activity)[: max(excess, 0)]:
            log.info(
                "session %s evicted: account %s of org %s is at its session cap",
                record.session_id,
                owner.account_id,
                owner.org_id,
            )
            await self.evict(record.session_id)

    async def _serve_admin_requests(self) -> None:
        """Admin commands from another process take effect here: `sessions terminate` as a request that the
        session's home takes (each instance takes only its own sessions' requests), `orgs revoke` as the org's
        record, which every instance reads for the orgs of the sessions it holds live."""
        for session_id in await self._control.sessions.take_termination_requests(id_prefix(self._instance)):
            # Taken requests are gone: each is handled on its own, so one failure loses no other.
            log.info("session %s terminated by an admin command", session_id)
            await once(f"terminating session {session_id[:12]}", functools.partial(self.evict, session_id))
        live_orgs = {
            session.record.owner.org_id
            for session in self._sessions.values()
            if session.record is not None and session.record.owner.org_id is not None
        }
        for org_id in sorted(await self._control.orgs.revoked_among(live_orgs)):
            await once(f"ending revoked organization {org_id}", functools.partial(self._end_org, org_id))

    async def _end_org(self, org_id: str) -> None:
        """A revoked organization's live sessions are condemned, which cancels their executions. Stored
        sessions of the org are condemned when a request names them (it gets 403 first)."""
        for session in list(self._sessions.values()):
            record = session.record
            if record is not None and record.owner.org_id == org_id and session.lifecycle.changes_on(Event.CONDEMN):
                log.info("session %s condemned: organization %s was revoked", session.id, org_id)
                await once(f"condemning session {session.id[:12]}", functools.partial(self.terminate, session))

    @property
    def _sweep_interval(self) -> float:
        return min(self._retention / 4, 3600.0)

    async def _sweep(self) -> None:
        """Wipe stored sessions idle past the retention period."""
        now = self._clock()
        for record in await self._control.sessions.sessions():
            if (
                self._is_mine(record.session_id)
                and not record.condemned
                and now - self._activity(record) > self._retention
            ):
                log.info("session %s idle past retention: wiping it", record.session_id)
                await once(f"wiping session {record.session_id[:12]}", functools.partial(self.evict, record.session_id))

    async def _watch_idle(self, session: Session) -> None:
        """Dispose of the runtime once it is idle past its leases; the session stays valid."""
        while True:
            wait = self._idle_wait(session)
            if wait is None:
                break
            await trio.sleep(max(wait, 0.01))  # an alarm: activity since may push the verdict further out
        log.info("session %s idle: disposing of its runtime", session.id)
        session.end(Event.IDLE)

    def _idle_wait(self, session: Session) -> float | None:
        idle = self._clock() - session.last_activity
        return idle_verdict(self._idle, idle, session.paused, session.running)

    @contextmanager
    def _pause_lease(self, session: Session) -> Iterator[None]:
        """Held while an execution of `session` waits for approval: the runtime stays up (to a limit)."""
        session.paused += 1
        session.last_activity = self._clock()
        try:
            yield
        finally:
            session.paused -= 1

    async def _pause_kept(self, session: Session, until: float) -> None:
        """A pause of `session` is kept in its file until `until`: the directory entry says so, so that the
        next process revives the session at start-up (`_revive_paused`)."""
        record = session.record
        if record is not None and record.paused_until < until:
            await self._mark_paused(session, until)

    async def _mark_paused(self, session: Session, until: float) -> None:
        session.record = await self._control.paused.mark_paused(session.id, until) or session.record

    async def _revive(self, session: Session, server: ToolServer) -> None:
        """Bring back the pauses the session's file keeps; its directory entry then says until when the latest
        waits (0 once none does), so a session is revived at start-up only while it keeps one."""
        until = await server.revive()
        if session.record is not None and session.record.paused_until != until:
            await self._mark_paused(session, until)

    async def _revive_paused(self) -> None:
        """Bring up, before serving, every stored session that keeps a pause, so that its pauses are live
        (listed, answerable, expiring) as they were before the restart, and those whose window closed while
        the server was down are remembered as expired."""
        for record in await self._control.paused.paused_sessions():
            if not self._is_mine(record.session_id):
                continue
            await once(f"session {record.session_id[:12]}: reviving", functools.partial(self._live, record.session_id))

    def _note_activity(self, session: Session) -> None:
        now = self._clock()
        session.last_activity = now
        runtime = session.runtime
        if runtime is not None and now - session.persisted_activity >= ACTIVITY_PERSIST_INTERVAL:
            session.persisted_activity = now
            runtime.nursery.start_soon(self._persist_activity, session, runtime.file, now)

    async def _persist_activity(self, session: Session, file: SessionFile, at: float) -> None:
        """Write the coarse activity copy; a failure is logged and the next activity tries again."""

        async def persist() -> None:
            await file.touch(at)
            await self._control.sessions.update_session(session.id, last_activity_at=at)

        if not await once(f"session {session.id[:12]}: persisting activity", persist):
            session.persisted_activity = min(session.persisted_activity, at - ACTIVITY_PERSIST_INTERVAL)

    def _journals(self, session_id: str, file: SessionFile) -> ExecutionJournals:
        """Where the session keeps its durable executions: the shared store when there is one (so another
        instance can adopt a pause while this one is down), else its own file."""
        executions = self._control.executions
        return file if executions is None else executions.of(session_id, self._fence)

    @property
    def _fence(self) -> Fence | None:
        """What every write of a journal checks in the shared store: that this process still holds its lease."""
        return None if self._lease is None else self._lease.fence

    def _is_mine(self, session_id: str) -> bool:
        """Whether `session_id` is a minted id whose home is this instance."""
        return home_of(session_id) == self._instance

    def _path(self, session_id: str) -> Path:
        return SessionFile.path_for(self._sessions_dir, session_id)
