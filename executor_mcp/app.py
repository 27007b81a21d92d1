"""The server process: one root nursery owning the session manager and hypercorn.

Shutdown is a sequence, not a cancellation: the trigger first lets the session manager drain (new
work refused with the restart envelope, work in flight given the grace period, the rest answered with
the restart envelope), and only then lets hypercorn stop, so every request gets its answer written
before connections close.
"""

import ctypes
import logging
import os
import resource
import signal
import socket
import sys
import time
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path

import attrs
import httpx
import hypercorn.trio
import trio
from hypercorn.config import Config

from executor_mcp import traces
from executor_mcp.audit.model import AuditRecord, integration_of
from executor_mcp.audit.trail import AuditTrail
from executor_mcp.auth.principal import BearerAuth, EndpointAuthenticator, NoAuth
from executor_mcp.auth.tokens import JwksKeys, TokenVerifier
from executor_mcp.background import forever, once
from executor_mcp.config import (
    DEFAULT_EXECUTIONS_PER_ACCOUNT,
    ConfigError,
    Settings,
    check_shared_database,
    data_dir_facts,
)
from executor_mcp.execution.admission import MEND_SECONDS, Admission
from executor_mcp.execution.engine import Engine
from executor_mcp.execution.limits import Limits
from executor_mcp.execution.runs import PendingApprovals
from executor_mcp.integrations.assembly import open_integrations
from executor_mcp.integrations.handoff import CONNECT_PATH, HandoffBook, Handoffs
from executor_mcp.integrations.oauth_signins import OAUTH_CALLBACK_PATH
from executor_mcp.integrations.service import Integrations
from executor_mcp.observability.health import Health
from executor_mcp.observability.metrics import Metrics
from executor_mcp.observability.tracing import Exporter
from executor_mcp.policies.service import Policies
from executor_mcp.policies.toolkit_service import Toolkits
from executor_mcp.routes import create_app
from executor_mcp.sandbox.pool import WorkerPool
from executor_mcp.sessions.instance_lease import InstanceLease, holder_name
from executor_mcp.sessions.lifecycle import IdlePolicy
from executor_mcp.sessions.manager import SessionManager
from executor_mcp.storage import ownership
from executor_mcp.storage.control import ControlPlane, open_control_plane
from executor_mcp.storage.ownership import DataDirInUse
from executor_mcp.storage.postgres.database import Database
from executor_mcp.storage.records import UsageLimits
from executor_mcp.tools.core import build_catalog
from executor_mcp.tools.rates import Rates
from executor_mcp.toolserver.executor_tools import ExecutorTools
from executor_mcp.toolserver.registry import ToolFactory
from executor_mcp.toolserver.stateless import StatelessCalls
from executor_mcp.transport import connections
from executor_mcp.transport.asgi import AsgiApp
from executor_mcp.transport.browser import BrowserGuard
from executor_mcp.transport.discovery import PublicUrl
from executor_mcp.transport.observed import NotedAuthenticator, Observed, Operations
from executor_mcp.transport.stdio import Pipe, StdioBridge
from executor_mcp.web.console import LINK_PATH, Console
from executor_mcp.web.sso import SingleSignOn, SsoSettings

log = logging.getLogger(__name__)

# Running work or an open stream keeps an idle runtime this much longer than the session timeout.
RUNNING_LEASE = 1800.0
# Connections still open after the sessions drained (idle keep-alives) get this long before they close.
HTTP_GRACE_SECONDS = 2.0
# What a shutdown gives the audit log's writer to put down the records still queued.
AUDIT_DRAIN_SECONDS = 5.0


class UnsafeBind(Exception):
    """Serving without authentication anywhere but loopback would hand the tools to the network."""


@attrs.frozen
class Running:
    """What a started server tells its starter: where it listens and how to stop it."""

    url: str
    data_dir: Path
    stop: trio.Event

    @property
    def mcp_url(self) -> str:
        return self.url + "/mcp"


def raise_descriptor_limit() -> None:
    """Each open session holds LMDB descriptors; take the hard limit rather than fail at ~1000."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 128 * 1024


def pin_malloc_mmap_threshold() -> None:
    """Keep glibc from raising its mmap threshold as LMDB environments open and close.

    Without this, after enough session churn each environment's 2 MiB of bookkeeping lands on the heap
    and stays resident: measured 3.2 GB RSS after 10,000 sessions, against 0.11 GB with it
    (`benchmarks/scale.py`). Setting the threshold explicitly turns glibc's dynamic adjustment off.
    """
    try:
        libc = ctypes.CDLL(None)
        libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)
    except (OSError, AttributeError):
        log.debug("mallopt is not available; LMDB churn may inflate resident memory")


def _hypercorn_config(settings: Settings) -> Config:
    config = Config()
    host = f"[{settings.host}]" if ":" in settings.host and not settings.host.startswith("[") else settings.host
    config.bind = [f"{host}:{settings.port}"]
    config.graceful_timeout = HTTP_GRACE_SECONDS
    config.accesslog = None
    # Room for large bearer tokens in headers, so an oversized one reaches auth and gets a 401 envelope.
    config.h11_max_incomplete_size = 64 * 1024
    config.errorlog = logging.getLogger("hypercorn.error")
    return config


# What carries requests to the app until the shutdown trigger returns; it reports the URLs it serves on.
Front = Callable[..., Awaitable[None]]


async def _hypercorn_front(
    settings: Settings, app: AsgiApp, shutdown_trigger: Callable[[], Awaitable[None]], *, task_status
) -> None:
    connections.install()
    await hypercorn.trio.serve(
        app, _hypercorn_config(settings), shutdown_trigger=shutdown_trigger, task_status=task_status
    )


def ensure_safe_bind(settings: Settings) -> None:
    if settings.auth == "none" and not settings.loopback:
        raise UnsafeBind(
            f"refusing to bind {settings.host} without authentication: "
            "bind a loopback address (127.0.0.1, ::1) or enable --auth"
        )


def executions_per_account(settings: Settings, pool: WorkerPool) -> int:
    """The per-account limit protects accounts from each other: with bearers it defaults to
    `DEFAULT_EXECUTIONS_PER_ACCOUNT`. With `--auth none` there is one principal and nobody to protect it
    from, so it defaults to what the pool lets one account hold: one more is refused in words rather than
    left waiting for a worker the pool keeps for others."""
    if settings.max_executions_per_account is not None:
        return settings.max_executions_per_account
    return DEFAULT_EXECUTIONS_PER_ACCOUNT if settings.auth != "none" else pool.most_one_account_holds


async def read_secret(path: Path, option: str = "--jwt-secret-file") -> bytes:
    """The HS256 key (or another secret file's): the file's bytes, surrounding whitespace trimmed (PRODUCT
    decision 2)."""
    try:
        secret = (await trio.Path(path).read_bytes()).strip()
    except OSError as exc:
        raise ConfigError(f"cannot read {option} {path}: {exc.strerror}") from None
    if not secret:
        raise ConfigError(f"{option} {path} is empty")
    return secret


async def build_authenticator(
    settings: Settings, control: ControlPlane, http: httpx.AsyncClient, public: PublicUrl
) -> EndpointAuthenticator:
    if settings.auth == "none":
        return NoAuth()
    if settings.jwt_secret_file is not None:
        verifier = TokenVerifier(
            secret=await read_secret(settings.jwt_secret_file),
            issuer=settings.jwt_issuer,
            audience=settings.jwt_audience,
        )
    else:
        assert settings.jwks_url is not None
        verifier = TokenVerifier(
            jwks=JwksKeys(settings.jwks_url, http), issuer=settings.jwt_issuer, audience=settings.jwt_audience
        )
    return BearerAuth(verifier, control, public.metadata_url_for, time.time, settings.org_admin_claim)


async def single_sign_on(
    settings: Settings,
    console: Console,
    key: bytes,
    bearer: BearerAuth,
    public: PublicUrl,
    http: httpx.AsyncClient,
) -> SingleSignOn:
    """The console's OpenID Connect sign-in, with its client secret read from its file now."""
    assert settings.oidc_issuer is not None
    assert settings.oidc_client_id is not None
    assert settings.oidc_client_secret_file is not None
    secret = await read_secret(settings.oidc_client_secret_file, "--oidc-client-secret-file")
    configured = SsoSettings(
        issuer=settings.oidc_issuer,
        client_id=settings.oidc_client_id,
        client_secret=secret.decode(),
        allowed_domains=frozenset(settings.oidc_allowed_domain),
        account_claim=settings.oidc_account_claim,
        org_claim=settings.oidc_org_claim,
        admin_claim=settings.org_admin_claim,
    )
    return SingleSignOn(configured, console, key, bearer, public, http)


def idle_policy(settings: Settings) -> IdlePolicy:
    """How long an unused session runtime stays up: work in flight holds it `RUNNING_LEASE` past the timeout."""
    return IdlePolicy(
        session_timeout=settings.session_timeout,
        paused_idle=settings.paused_session_idle_timeout,
        running_idle=settings.session_timeout + RUNNING_LEASE,
    )


async def serve(
    settings: Settings,
    *,
    tools: ToolFactory | None = None,
    handoffs: HandoffBook | None = None,
    front: Front | None = None,
    task_status: trio.TaskStatus[Running] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve until `Running.stop` is set. `handoffs` is the book of connect links (tests pass one with their
    own clock; the server's is in memory, so a restart voids pending links). `front` is what carries requests
    to the app: hypercorn on `--host`/`--port` unless another is given (`executor-mcp stdio`'s)."""
    ensure_safe_bind(settings)
    check_shared_database(settings, os.environ, serving=True)
    raise_descriptor_limit()
    pin_malloc_mmap_threshold()
    try:
        held = ownership.acquire(settings.data_dir)
    except DataDirInUse as exc:
        raise ConfigError(str(exc)) from None
    try:
        control = await open_control_plane(settings)
        try:
            # What this server lets the data dir's records do, for the admin commands on it to do the same.
            await control.facts.record_data_dir_facts(data_dir_facts(settings))
            public = PublicUrl(settings.public_url or "")  # set from the bound address when no --public-url
            async with (
                httpx.AsyncClient() as http_client,
                open_integrations(settings, control, lambda: public.value) as integrations,
            ):
                book = HandoffBook() if handoffs is None else handoffs
                front = front or partial(_hypercorn_front, settings)
                await _serve(settings, control, http_client, integrations, tools, book, front, public, task_status)
        finally:
            with trio.CancelScope(shield=True):
                await control.close()
    finally:
        held.release()


async def _serve(
    settings: Settings,
    control: ControlPlane,
    http_client: httpx.AsyncClient,
    integrations: Integrations,
    tools: ToolFactory | None,
    handoffs: HandoffBook,
    front: Front,
    public: PublicUrl,
    task_status: trio.TaskStatus[Running],
) -> None:
    exporter = None
    if settings.otlp_endpoint is not None:
        exporter = Exporter(settings.otlp_endpoint, settings.instance_id or socket.gethostname(), http_client)
    traces.install(exporter.tracer if exporter is not None else None)  # for every task this one starts
    pool = WorkerPool(max_workers=settings.sandbox_workers)
    metrics = Metrics()
    limits = Limits.of(settings)
    policies = Policies(control.policies)
    toolkits = Toolkits(control.toolkits)
    audit = AuditTrail(control.audit, settings.audit_retention)

    async def audited(record: AuditRecord) -> None:
        metrics.count_tool_call(integration_of(record.tool), record.outcome)
        await audit.record(record)

    links = Handoffs(handoffs, lambda: public.value)  # the core tool and the API issue connect links alike
    operator_limits = UsageLimits(
        org=settings.tool_calls_per_minute_per_org,
        account=settings.tool_calls_per_minute_per_account,
        connection=settings.tool_calls_per_minute_per_connection,
        executions_org=settings.max_executions_per_org,
        executions_account=settings.max_executions_per_account,
    )
    rates = Rates(control.rates, control.orgs, operator_limits)
    catalog = build_catalog(integrations, links, rates)
    # The pauses waiting for an approval: the MCP tools open and resume them, the console's approvals pages
    # answer them.
    approvals = PendingApprovals(approval_window=settings.approval_window)
    # Before anything of the instance's sessions is recovered or served: another process may still serve them.
    lease = InstanceLease(control.leases, settings.instance_id or "", holder_name(settings.data_dir))
    await lease.acquire()
    admission = Admission(
        control.in_flight, rates.effective, settings.instance_id or "", guard=executions_per_account(settings, pool)
    )
    await admission.clear()
    catalog_tools = ExecutorTools(
        Engine(pool, limits, metrics.observe_execution),
        catalog,
        policies,
        approvals,
        admission,
        lambda: public.value,
        audited,
        toolkits,
        control.executions,
    )
    manager = SessionManager(
        control,
        settings.data_dir,
        tools or catalog_tools,
        idle=idle_policy(settings),
        max_sessions_per_user=settings.max_sessions_per_user,
        retention=settings.session_retention,
        instance=settings.instance_id or "",
        lease=lease,
    )
    authenticator = await build_authenticator(settings, control, http_client, public)
    browser = BrowserGuard(
        enabled=settings.auth == "none",
        loopback=settings.loopback,
        allowed_origins=settings.allowed_origin,
        allowed_hosts=settings.allowed_host,
    )
    console_key = await control.signing_keys.console_key()
    console = Console(
        control.sign_ins, console_key, authenticator if isinstance(authenticator, BearerAuth) else None, browser, public
    )
    sso = None
    if settings.oidc_issuer is not None and isinstance(authenticator, BearerAuth):
        sso = await single_sign_on(settings, console, console_key, authenticator, public, http_client)
    metrics_token = None
    if settings.metrics_token_file is not None:
        metrics_token = await read_secret(settings.metrics_token_file, "--metrics-token-file")
    operations = Operations(
        Health(
            settings.data_dir,
            control.sessions,
            manager,
            approvals,
            pool,
            database=control.backend if isinstance(control.backend, Database) else None,
        ),
        metrics,
        metrics_open=settings.auth == "none",
        metrics_token=metrics_token,
    )
    edge = create_app(
        manager,
        NotedAuthenticator(authenticator),
        public,
        policies,
        toolkits,
        settings.authorization_server,
        browser,
        integrations=integrations,
        handoffs=links,
        console=console,
        catalog=catalog,
        approvals=approvals,
        stateless_calls=StatelessCalls(
            approvals, await control.signing_keys.request_state_key(), adopt=catalog_tools.adopt
        ),
        operations=operations,
        audit=audit,
        sso=sso,
        rates=rates,
    )
    app = Observed(edge, metrics, secret_paths=(CONNECT_PATH, LINK_PATH, OAUTH_CALLBACK_PATH))
    stop = trio.Event()

    async def shutdown_trigger() -> None:
        await stop.wait()
        approvals.keep_for_restart()
        await manager.shutdown(settings.shutdown_grace)

    try:
        async with trio.open_nursery() as root:

            async def keep_lease() -> None:
                await lease.keep()
                stop.set()  # another process serves this instance now: this one stops, as on SIGTERM

            root.start_soon(keep_lease)  # first: a slow start-up must not let the lease lapse
            if exporter is not None:
                root.start_soon(exporter.run)
            await root.start(pool.run)
            await root.start(audit.run)
            await root.start(manager.run)
            root.start_soon(integrations.discoveries.refresh_stale)
            root.start_soon(forever, "forgetting expired rate-limit counts", control.rates.forget_expired, 60.0)
            root.start_soon(forever, "mending the places of executions in flight", admission.mend, MEND_SECONDS)
            if integrations.oauth is not None:
                root.start_soon(integrations.oauth.sweep_expired)

            async def http(task_status: trio.TaskStatus[list[str]]) -> None:
                await front(app, shutdown_trigger, task_status=task_status)
                # The records of what the drain answered, before the store closes.
                await audit.drained(AUDIT_DRAIN_SECONDS)
                root.cancel_scope.cancel()

            binds = await root.start(http)
            public.value = public.value or binds[0]
            browser.listening(public.value, binds[0])
            task_status.started(Running(url=binds[0], data_dir=settings.data_dir, stop=stop))
    finally:
        with trio.CancelScope(shield=True):
            await once("releasing the instance's lease", lease.release)
    if lease.lost_to is not None:
        raise ConfigError(
            f"--instance-id {settings.instance_id} is now served by another process ({lease.lost_to}); this one stopped"
        )


async def serve_until_signalled(settings: Settings) -> None:
    """Run until SIGTERM or SIGINT. Once listening, announce the endpoint and the console on stderr (each on its
    own line: scripts wait for the `MCP:` line), and the URL in the data dir's lock file, for `doctor`."""
    async with trio.open_nursery() as nursery:

        async def served(task_status: trio.TaskStatus[Running]) -> None:
            await serve(settings, task_status=task_status)
            nursery.cancel_scope.cancel()  # it may stop on its own (it lost its instance): stop waiting for signals

        running: Running = await nursery.start(served)
        ownership.announce(settings.data_dir, running.url)
        print(f"MCP: {running.mcp_url}\nConsole: {running.url}/", file=sys.stderr, flush=True)
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for signum in signals:
                log.info("received %s, shutting down", signal.Signals(signum).name)
                running.stop.set()
                break


async def serve_stdio(settings: Settings, query: bytes, path: str) -> None:
    """`executor-mcp stdio`: one client on standard input and output (`transport/stdio.py`) at the endpoint `path`
    (`/mcp`, or a toolkit's), until its input ends or a signal comes; then the same shutdown as `serve`'s. Nothing
    listens, and the principal is the local one: whoever can start the process already holds its data dir."""
    bridge = StdioBridge(Pipe(), query, path)
    local = attrs.evolve(settings, auth="none", host="127.0.0.1", allowed_origin=(), allowed_host=())
    async with trio.open_nursery() as nursery:
        running: Running = await nursery.start(partial(serve, local, front=bridge.front))
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async with trio.open_nursery() as watching:

                async def input_ended() -> None:
                    await bridge.ended.wait()
                    watching.cancel_scope.cancel()

                async def signalled() -> None:
                    async for signum in signals:
                        log.info("received %s, shutting down", signal.Signals(signum).name)
                        watching.cancel_scope.cancel()

                watching.start_soon(input_ended)
                watching.start_soon(signalled)
        running.stop.set()
