"""The sans-I/O parts of observability: log formats and context, request ids, label bounds, the readiness and
size helpers."""

import io
import json
import logging
import os
from collections import Counter
from pathlib import Path

import pytest
import trio
from prometheus_client.parser import text_string_to_metric_families

from executor_mcp import logs
from executor_mcp.logs import (
    JsonFormatter,
    RequestLog,
    TextFormatter,
    loggable_path,
    note,
    outside_request,
    request_id,
    safe_id,
)
from executor_mcp.observability.health import (
    PROBE_PREFIX,
    pool_verdict,
    session_file_sizes,
    session_states,
    storage_verdict,
    write_probe,
)
from executor_mcp.observability.metrics import (
    MAX_INTEGRATIONS,
    OTHER,
    BoundedLabel,
    Metrics,
    Snapshot,
    http_method_label,
    rpc_method_label,
    rpc_method_of,
    status_label,
)
from executor_mcp.protocol.jsonrpc import Notification, Request, Response
from executor_mcp.sandbox.pool import PoolStats
from executor_mcp.sessions.lifecycle import State

ENTRY = dict(request_id="req-1", http_method="POST", path="/mcp")


def _record(message: str, level: int = logging.WARNING, **extra: object) -> logging.LogRecord:
    record = logging.LogRecord("executor_mcp.test", level, __file__, 1, message, None, None)
    record.__dict__.update(extra)
    return record


def _in_request(entry: RequestLog, work):
    token = logs.begin(entry)
    try:
        return work()
    finally:
        logs.end(token)


def test_a_json_line_parses_and_carries_the_request_context() -> None:
    entry = RequestLog(**ENTRY, session_id="s1", account="alice", org="acme", jsonrpc_method="tools/call")

    def note_and_format() -> str:
        note(execution_id="exec_1")
        return JsonFormatter().format(_record("it broke"))

    line = json.loads(_in_request(entry, note_and_format))
    assert line["level"] == "warning"
    assert line["message"] == "it broke"
    assert line["logger"] == "executor_mcp.test"
    assert line["time"].endswith("Z")
    assert line["time"][10] == "T"
    for name, value in {
        "request_id": "req-1",
        "session_id": "s1",
        "account": "alice",
        "org": "acme",
        "jsonrpc_method": "tools/call",
        "execution_id": "exec_1",
    }.items():
        assert line[name] == value


def test_a_json_line_outside_a_request_has_no_context_and_keeps_a_traceback() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        record = _record("failed")
        record.exc_info = __import__("sys").exc_info()
    line = json.loads(JsonFormatter().format(record))
    assert "request_id" not in line
    assert "session_id" not in line
    assert "ValueError: boom" in line["exception"]


def test_the_text_format_appends_the_context_before_any_traceback() -> None:
    entry = RequestLog(**ENTRY, account="alice")
    text = _in_request(entry, lambda: TextFormatter().format(_record("slow")))
    assert text.endswith("executor_mcp.test: slow [request_id=req-1 account=alice]")


def test_the_access_line_carries_the_exchange_and_its_context() -> None:
    stream = io.StringIO()
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    logs.configure_logging("info", "json", stream=stream)
    try:
        entry = RequestLog(**ENTRY, session_id="s1", jsonrpc_method="initialize")
        logs.log_access(entry, 200, 1.234)
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
    line = json.loads(stream.getvalue().strip())
    assert line["logger"] == logs.ACCESS_LOGGER
    assert line["message"] == "POST /mcp 200 1.2ms"
    assert (line["http_method"], line["path"], line["status"], line["duration_ms"]) == ("POST", "/mcp", 200, 1.23)
    assert (line["session_id"], line["jsonrpc_method"], line["request_id"]) == ("s1", "initialize", "req-1")


def test_note_outside_a_request_is_harmless() -> None:
    note(account="nobody")
    assert logs.current() is None


async def test_tasks_a_request_starts_share_its_context_and_outside_request_clears_it() -> None:
    entry = RequestLog(**ENTRY)
    seen: list[RequestLog | None] = []

    async def child() -> None:
        note(execution_id="exec_2")

    async def detached() -> None:
        seen.append(logs.current())

    token = logs.begin(entry)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(child)
            outside_request(nursery.start_soon, detached)
    finally:
        logs.end(token)
    assert entry.execution_id == "exec_2"  # the child's note reached the request's own entry
    assert seen == [None]


@pytest.mark.parametrize("incoming", ["abc", "A.b_c-9", "x" * 64])
def test_a_safe_request_id_is_kept(incoming: str) -> None:
    assert request_id(incoming) == incoming


@pytest.mark.parametrize("incoming", [None, "", "x" * 65, "has space", "new\nline", "semi;colon", "é"])
def test_an_unsafe_or_missing_request_id_is_replaced(incoming: str | None) -> None:
    generated = request_id(incoming)
    assert generated != incoming
    assert safe_id(generated) == generated
    assert len(generated) == 16


def test_paths_with_secrets_are_redacted_and_odd_ones_cleaned() -> None:
    secret_paths = ("/connect/", "/signin/link/")
    assert loggable_path("/connect/tok_very_secret", secret_paths) == "/connect/<redacted>"
    assert loggable_path("/signin/link/abc", secret_paths) == "/signin/link/<redacted>"
    assert loggable_path("/connect/", secret_paths) == "/connect/"
    assert loggable_path("/a\nb", secret_paths) == "/a?b"
    assert len(loggable_path("/" + "x" * 1000, secret_paths)) == 200


def test_bounded_label_keeps_the_first_values_then_says_other() -> None:
    label = BoundedLabel(2)
    assert [label("a"), label("b"), label("c"), label("a"), label("b")] == ["a", "b", OTHER, "a", "b"]
    assert BoundedLabel(5)("x" * 65) == OTHER
    assert BoundedLabel(5)("") == OTHER


def test_request_labels_are_bounded() -> None:
    assert http_method_label("POST") == "POST"
    assert http_method_label("BREW") == OTHER
    assert rpc_method_label("tools/call") == "tools/call"
    assert rpc_method_label("tools/call/../secret") == OTHER
    assert rpc_method_label(None) == "none"
    assert status_label(503) == "503"
    assert status_label(999) == OTHER
    assert rpc_method_of([Request(id=1, method="ping")], batch=False) == "ping"
    assert rpc_method_of([Notification(method="notifications/initialized")], batch=False) == (
        "notifications/initialized"
    )
    assert rpc_method_of([Response(id=1, result={})], batch=False) == "response"
    assert rpc_method_of([Request(id=1, method="ping"), Request(id=2, method="ping")], batch=True) == "batch"


def _families(text: bytes) -> dict[str, object]:
    return {family.name: family for family in text_string_to_metric_families(text.decode())}


SNAPSHOT = Snapshot(
    sessions={"live": 2, "disposed": 5},
    paused_executions=1,
    workers={"busy": 1, "idle": 3, "starting": 0},
    control_plane_bytes=4096,
    session_files_bytes=8192,
    session_files=2,
)


def test_tool_calls_past_the_integration_bound_count_as_other() -> None:
    metrics = Metrics()
    for index in range(MAX_INTEGRATIONS + 10):
        metrics.count_tool_call(f"slug{index}", "ok")
    families = _families(metrics.render(SNAPSHOT))
    samples = [s for s in families["executor_mcp_tool_calls"].samples if s.name.endswith("_total")]
    by_integration = {s.labels["integration"]: s.value for s in samples}
    assert len(by_integration) == MAX_INTEGRATIONS + 1
    assert by_integration[OTHER] == 10


def test_a_render_shows_the_snapshot_and_the_counts() -> None:
    metrics = Metrics()
    metrics.count_request("POST", "tools/call", 200)
    metrics.observe_execution(0.02, ok=True)
    families = _families(metrics.render(SNAPSHOT))
    sessions = {s.labels["state"]: s.value for s in families["executor_mcp_sessions"].samples}
    assert sessions == {"live": 2, "disposed": 5}
    assert families["executor_mcp_paused_executions"].samples[0].value == 1
    workers = {s.labels["state"]: s.value for s in families["executor_mcp_sandbox_workers"].samples}
    assert workers == {"busy": 1, "idle": 3, "starting": 0}
    assert families["executor_mcp_control_plane_bytes"].samples[0].value == 4096
    requests = [s for s in families["executor_mcp_http_requests"].samples if s.name.endswith("_total")]
    assert [(s.labels, s.value) for s in requests] == [
        ({"method": "POST", "rpc_method": "tools/call", "status": "200"}, 1)
    ]
    count = next(s for s in families["executor_mcp_execution_duration_seconds"].samples if s.name.endswith("_count"))
    assert (count.labels, count.value) == ({"outcome": "ok"}, 1)


def test_two_servers_metrics_do_not_collide() -> None:
    first, second = Metrics(), Metrics()
    first.count_request("GET", None, 200)
    requests = _families(second.render(SNAPSHOT))["executor_mcp_http_requests"]
    assert [s for s in requests.samples if s.name.endswith("_total")] == []


def test_disposed_sessions_are_the_stored_ones_without_a_handle() -> None:
    handles = Counter({State.LIVE: 2, State.CONDEMNED: 1, State.DISPOSED: 4})
    states = session_states(handles, stored=10)
    assert states == {"restoring": 0, "live": 2, "condemned": 1, "restarting": 0, "disposed": 7}
    assert session_states(Counter({State.LIVE: 3}), stored=1)["disposed"] == 0


def test_the_write_probe_leaves_nothing_and_names_what_fails(tmp_path: Path) -> None:
    assert write_probe(tmp_path) == "ok"
    assert list(tmp_path.iterdir()) == []
    missing = tmp_path / "gone"
    assert write_probe(missing).startswith(f"cannot create a file in {missing}: ")
    (tmp_path / "sessions").mkdir()
    assert storage_verdict(tmp_path) == "ok"
    assert not any(p.name.startswith(PROBE_PREFIX) for p in tmp_path.rglob("*"))


def test_session_file_sizes_count_session_files_only_and_stop_at_the_bound(tmp_path: Path) -> None:
    for index in range(5):
        (tmp_path / f"s{index}.mdb").write_bytes(b"x" * 100)
        (tmp_path / f"s{index}.mdb-lock").write_bytes(b"y" * 7)
    assert session_file_sizes(tmp_path) == (500, 5)
    total, files = session_file_sizes(tmp_path, limit=4)
    assert files <= 4
    assert total == files * 100
    assert session_file_sizes(tmp_path / "none") == (0, 0)
    assert len(os.listdir(tmp_path)) == 10


def test_the_pool_is_ready_with_a_worker_or_a_zygote() -> None:
    stats = PoolStats(started=0, forked=0, idle=0, in_use=0, starting=1, zygote_ready=False)
    assert pool_verdict(stats) != "ok"
    assert pool_verdict(PoolStats(started=1, forked=0, idle=1, in_use=0, starting=0, zygote_ready=False)) == "ok"
    assert pool_verdict(PoolStats(started=0, forked=0, idle=0, in_use=0, starting=0, zygote_ready=True)) == "ok"


def test_unknown_request_values_count_as_other_and_are_not_cached() -> None:
    metrics = Metrics()
    for index in range(100):
        metrics.count_request(f"M{index}", "tools/call", 200)
    metrics.count_request("POST", "tools/call", 200)
    metrics.count_request("POST", "tools/call", 200)
    assert len(metrics._request_children) == 1
    requests = _families(metrics.render(SNAPSHOT))["executor_mcp_http_requests"]
    totals = {s.labels["method"]: s.value for s in requests.samples if s.name.endswith("_total")}
    assert totals == {OTHER: 100, "POST": 2}
