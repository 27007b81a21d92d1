"""The server's Prometheus metrics, on a registry of its own (not the process-global one), so that several
servers in one process (the tests') each count their own.

Counters and the execution histogram are updated where things happen (a few microseconds each). What the
server holds at a moment (sessions by state, paused executions, sandbox workers, storage sizes, the PostgreSQL
pool's connections) is not mirrored into gauges as it changes: the scrape hands a `Snapshot`, read from the
owners of that state just before, to a collector that turns it into families (`render`).

Labels have few values, whatever clients send: an HTTP method, a JSON-RPC method or a status outside the
known sets counts as `other`, and an integration slug past the first `MAX_INTEGRATIONS` seen as `other`.
No label ever holds a session id, account, organization, tool path or argument.
"""

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import attrs
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.process_collector import ProcessCollector

CONTENT_TYPE = CONTENT_TYPE_LATEST
PREFIX = "executor_mcp"
OTHER = "other"
MAX_INTEGRATIONS = 50
MAX_OUTCOMES = 16

HTTP_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
# What a request's `rpc_method` label may say besides these methods: not an MCP request at all, a batch, and
# a client's answer to one of our requests (it has no method).
NO_RPC = "none"
BATCH = "batch"
RESPONSE = "response"
RPC_METHODS = frozenset(
    {
        "initialize",
        "ping",
        "tools/list",
        "tools/call",
        "resources/list",
        "resources/read",
        "resources/templates/list",
        "prompts/list",
        "prompts/get",
        "completion/complete",
        "logging/setLevel",
        "server/discover",
        "notifications/initialized",
        "notifications/cancelled",
        "notifications/progress",
        "notifications/roots/list_changed",
    }
)
# Seconds: from a cached-worker `return 1` (milliseconds) to the default execution timeout and beyond (an
# execution's time includes its waits for approval).
EXECUTION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)


def http_method_label(method: str) -> str:
    return method if method in HTTP_METHODS else OTHER


def rpc_method_label(method: str | None) -> str:
    if method is None:
        return NO_RPC
    return method if method in RPC_METHODS or method in (BATCH, RESPONSE) else OTHER


def rpc_method_of(messages: Sequence[object], batch: bool) -> str:
    """The `rpc_method` of a parsed POST body: its one message's method, `batch`, or `response`."""
    if batch:
        return BATCH
    method = getattr(messages[0], "method", None) if messages else None
    return RESPONSE if method is None else rpc_method_label(method)


def status_label(status: int) -> str:
    return str(status) if 100 <= status <= 599 else OTHER


class BoundedLabel:
    """A label whose values are the first `limit` distinct ones seen (each at most 64 characters); every later
    one is `other`, so a flood of names cannot grow the series without bound."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._seen: set[str] = set()

    def __call__(self, value: str) -> str:
        if value in self._seen:
            return value
        if len(self._seen) >= self._limit or not value or len(value) > 64 or not value.isprintable():
            return OTHER
        self._seen.add(value)
        return value


@attrs.frozen
class Snapshot:
    """What the server holds at the moment of a scrape."""

    sessions: Mapping[str, int]  # by lifecycle state
    paused_executions: int
    workers: Mapping[str, int]  # busy, idle, starting
    control_plane_bytes: int
    session_files_bytes: int
    session_files: int
    database_connections: Mapping[str, int] | None = None  # the PostgreSQL pool: idle, in_use, waiting


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self._requests = Counter(
            f"{PREFIX}_http_requests",
            "HTTP requests answered, by HTTP method, JSON-RPC method (MCP requests) and status",
            ("method", "rpc_method", "status"),
            registry=self.registry,
        )
        self._tool_calls = Counter(
            f"{PREFIX}_tool_calls",
            "Tool calls made by sandboxed code, by integration and outcome",
            ("integration", "outcome"),
            registry=self.registry,
        )
        self._executions = Histogram(
            f"{PREFIX}_execution_duration_seconds",
            "Executions from start to end (waits for approval included), by outcome",
            ("outcome",),
            buckets=EXECUTION_BUCKETS,
            registry=self.registry,
        )
        # Every request counts: its counter found by the raw values, without re-deriving and locking each time.
        self._request_children: dict[tuple[str, str | None, int], Any] = {}
        self._integrations = BoundedLabel(MAX_INTEGRATIONS)
        self._outcomes = BoundedLabel(MAX_OUTCOMES)
        self._snapshot: Snapshot | None = None
        self.registry.register(_HeldState(self))
        ProcessCollector(namespace=PREFIX, registry=self.registry)

    def count_request(self, http_method: str, rpc_method: str | None, status: int) -> None:
        key = (http_method, rpc_method, status)
        child = self._request_children.get(key)
        if child is None:
            labels = (http_method_label(http_method), rpc_method_label(rpc_method), status_label(status))
            child = self._requests.labels(*labels)
            if OTHER not in labels:  # only known values are kept, so the cache is as bounded as the labels
                self._request_children[key] = child
        child.inc()

    def count_tool_call(self, integration: str, outcome: str) -> None:
        """One tool call of sandboxed code: `integration` is its slug (`executor` for the built-in tools),
        `outcome` a short code such as `ok`, `error` or `denied`."""
        self._tool_calls.labels(self._integrations(integration), self._outcomes(outcome)).inc()

    def observe_execution(self, seconds: float, ok: bool) -> None:
        self._executions.labels("ok" if ok else "error").observe(seconds)

    def render(self, snapshot: Snapshot) -> bytes:
        """The text of a scrape, with `snapshot` as the held state."""
        self._snapshot = snapshot
        try:
            return generate_latest(self.registry)
        finally:
            self._snapshot = None


class _HeldState:
    """The gauges of what the server holds, from the scrape's snapshot (none outside a scrape)."""

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[Metric]:
        snapshot = self._metrics._snapshot
        if snapshot is None:
            return
        yield _by_state(f"{PREFIX}_sessions", "Sessions by lifecycle state", snapshot.sessions)
        yield GaugeMetricFamily(
            f"{PREFIX}_paused_executions", "Executions paused for an approval", value=snapshot.paused_executions
        )
        yield _by_state(f"{PREFIX}_sandbox_workers", "Sandbox worker processes by state", snapshot.workers)
        yield GaugeMetricFamily(
            f"{PREFIX}_control_plane_bytes", "Size of the control plane's LMDB file", value=snapshot.control_plane_bytes
        )
        yield GaugeMetricFamily(
            f"{PREFIX}_session_files_bytes",
            "Total size of the session LMDB files (measured at most once a minute)",
            value=snapshot.session_files_bytes,
        )
        yield GaugeMetricFamily(
            f"{PREFIX}_session_files", "Session LMDB files counted for that total", value=snapshot.session_files
        )
        if snapshot.database_connections is not None:
            yield _by_state(
                f"{PREFIX}_database_connections",
                "The PostgreSQL pool (--database-url): connections idle and in use, and transactions waiting for one",
                snapshot.database_connections,
            )


def _by_state(name: str, documentation: str, counts: Mapping[str, int]) -> GaugeMetricFamily:
    """A gauge with one sample per state, in a stable order."""
    family = GaugeMetricFamily(name, documentation, labels=("state",))
    for state, count in sorted(counts.items()):
        family.add_metric((state,), count)
    return family
