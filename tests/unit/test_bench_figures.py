"""The benchmark's pure parts: mcp-bench's statistics, /proc parsing, the JSON document, the MCP answers."""

import json
import os

import pytest

from benchmarks.figures import (
    DisposalReadings,
    MemoryReadings,
    ProcessReading,
    ProcessTree,
    Timing,
    descendants,
    disposal_phase,
    document,
    latency_stats,
    memory_lines,
    memory_phase,
    parse_pss_kib,
    parse_rss_kib,
    parse_stat,
    sequential_phase,
    throughput_phase,
)
from benchmarks.mcp_bench import read_tree
from benchmarks.mcp_client import ProtocolError, find_answer, parse_head


def tree(*rss_kib: int, cpu_s: float = 1.0, pss_kib: int | None = None) -> ProcessTree:
    return ProcessTree(tuple(ProcessReading(100 + i, rss, cpu_s, pss_kib) for i, rss in enumerate(rss_kib)))


def test_stats_of_nothing_count_nothing():
    assert latency_stats([]) == {"n": 0}


def test_percentiles_are_nearest_rank_as_in_mcp_bench():
    stats = latency_stats([float(x) for x in range(100, 0, -1)])
    assert stats == {"n": 100, "min": 1.0, "p50": 50.0, "p95": 95.0, "p99": 99.0, "max": 100.0, "mean": 50.5}


def test_a_small_sample_reports_its_largest_as_p95():
    stats = latency_stats([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0])
    assert (stats["p50"], stats["p95"], stats["p99"]) == (5.0, 10.0, 10.0)


def test_stats_round_to_microseconds():
    assert latency_stats([1.23456])["p50"] == 1.235


def test_stat_fields_are_counted_after_the_last_parenthesis():
    text = "4242 (py (worker) x) S 17 4242 4242 0 -1 4194560 500 0 0 0 250 75 0 0 20 0 1 0 99 1000 300\n"
    stat = parse_stat(text)
    assert (stat.ppid, stat.cpu_ticks) == (17, 325)


def test_rss_and_pss_come_from_their_lines():
    assert parse_rss_kib("Name:\tpython\nVmHWM:\t  9000 kB\nVmRSS:\t  8123 kB\n") == 8123
    assert parse_rss_kib("Name:\tkthreadd\n") is None
    assert parse_pss_kib("55d0-7ffe ---p 00000000 00:00 0 [rollup]\nRss: 9000 kB\nPss:   4321 kB\n") == 4321
    assert parse_pss_kib("") is None


def test_descendants_are_the_whole_subtree_and_nothing_else():
    parents = {1: 0, 10: 1, 11: 10, 12: 10, 13: 12, 20: 1, 21: 20}
    assert descendants(10, parents) == [10, 11, 12, 13]
    assert descendants(13, parents) == [13]
    assert descendants(99, parents) == [99]


def test_a_parent_cycle_ends_the_walk():
    assert descendants(5, {5: 6, 6: 5}) == [5, 6]


def test_the_snapshot_sums_the_tree_like_mcp_bench():
    assert tree(60 * 1024, 10 * 1024, 10 * 1024 + 512, cpu_s=0.5).snapshot() == {
        "pids": 3,
        "rssMiB": 80.5,
        "cpuS": 1.5,
    }


def test_workers_are_the_descendants_apart_from_the_server_process():
    workers = tree(60 * 1024, 10 * 1024, 20 * 1024, pss_kib=6 * 1024).workers()
    assert workers == {
        "serverProcessRssMiB": 60.0,
        "zygoteRssMiB": None,
        "workers": 2,
        "workerRssMiBMean": 15.0,
        "workerRssMiBTotal": 30.0,
        "workerPssMiBMean": 6.0,
    }


def test_the_zygote_is_reported_apart_from_the_workers():
    readings = (ProcessReading(1, 60 * 1024, 0.0), ProcessReading(2, 18 * 1024, 0.0, zygote=True))
    readings += (ProcessReading(3, 10 * 1024, 0.0), ProcessReading(4, 20 * 1024, 0.0))
    workers = ProcessTree(readings).workers()
    assert workers["zygoteRssMiB"] == 18.0
    assert workers["workers"] == 2
    assert workers["workerRssMiBTotal"] == 30.0


def test_a_server_without_workers_has_no_mean_worker():
    assert tree(60 * 1024).workers()["workerRssMiBMean"] is None


def test_the_pss_mean_needs_every_workers_pss():
    readings = (ProcessReading(1, 100, 0.0), ProcessReading(2, 100, 0.0, 50), ProcessReading(3, 100, 0.0, None))
    assert ProcessTree(readings).workers()["workerPssMiBMean"] is None


def test_a_sequential_phase_has_mcp_bench_keys_and_the_client_cpu():
    timing = Timing((1.0, 2.0, 3.0), ("boom", "boom", "bang", "x", "y"), 0.123, 0.01)
    phase = sequential_phase(timing, 10, tree(1024, cpu_s=1.0), tree(1024, cpu_s=1.25))
    assert phase["latencyMs"]["n"] == 3
    assert phase["errors"] == 5
    assert phase["firstErrors"] == ["boom", "bang", "x"]
    assert phase["wallS"] == 0.12
    assert phase["truncatedByMaxPhase"] is True
    assert phase["serverCpuS"] == 0.25
    assert phase["clientCpuS"] == 0.01


def test_a_phase_without_proc_readings_has_no_server_cpu():
    assert "serverCpuS" not in sequential_phase(Timing((1.0,), (), 1.0, 0.0), 1, None, None)


def test_throughput_counts_calls_per_second_of_wall_time():
    timing = Timing(tuple([10.0] * 50), ("late",), 2.0, 0.1)
    phase = throughput_phase(8, timing, tree(1024, cpu_s=1.0), tree(2048, cpu_s=3.0))
    assert list(phase)[:12] == [
        "concurrency",
        "wallS",
        "ok",
        "errors",
        "firstErrors",
        "callsPerS",
        "latencyMs",
        "serverCpuS",
        "serverProcessCpuMsPerCall",
        "workersCpuMsPerCall",
        "serverRssMiBAfter",
        "clientCpuS",
    ]
    assert (phase["ok"], phase["callsPerS"], phase["serverCpuS"], phase["serverRssMiBAfter"]) == (50, 25.0, 2.0, 2.0)
    assert phase["clientCpuMsPerCall"] == 2.0
    assert (phase["serverProcessCpuMsPerCall"], phase["workersCpuMsPerCall"]) == (40.0, 0.0)


def test_cpu_per_call_splits_the_server_process_from_its_workers_and_counts_new_workers_whole():
    before = ProcessTree((ProcessReading(1, 0, 2.0, None), ProcessReading(2, 0, 1.0, None)))
    after = ProcessTree(
        (ProcessReading(1, 0, 3.0, None), ProcessReading(2, 0, 1.5, None), ProcessReading(3, 0, 0.25, None))
    )
    phase = throughput_phase(32, Timing(tuple([1.0] * 100), (), 1.0, 0.0), before, after)
    assert (phase["serverProcessCpuMsPerCall"], phase["workersCpuMsPerCall"]) == (10.0, 7.5)


def test_memory_per_session_is_the_growth_over_the_sessions_opened():
    readings = MemoryReadings(
        opened=100,
        errors=(),
        open_wall_s=1.5,
        closed=100,
        before_open=tree(100 * 1024),
        with_sessions_open=tree(100 * 1024 + 5200),
        after_delete=tree(100 * 1024 + 2600),
    )
    phase = memory_phase(readings)
    assert phase["rssMiB"] == {"beforeOpen": 100.0, "withSessionsOpen": 105.1, "afterDelete": 102.5}
    assert (phase["rssPerSessionKiB"], phase["rssPerDeletedSessionKiB"]) == (52.0, 26.0)
    assert (phase["sessionsOpened"], phase["sessionsClosed"], phase["openErrors"]) == (100, 100, 0)


def test_disposal_reports_the_tree_and_the_server_process_apart():
    readings = DisposalReadings(
        session_timeout_s=1.0,
        opened=10,
        disposed=10,
        wait_s=2.5,
        before_open=tree(1000, 500),
        after_disposal=tree(1100, 600),
    )
    phase = disposal_phase(readings)
    assert (phase["rssPerDisposedSessionKiB"], phase["serverProcessRssPerDisposedSessionKiB"]) == (20.0, 10.0)
    assert phase["runtimesDisposed"] == 10


def test_the_document_has_mcp_bench_top_level_keys_in_order():
    doc = document(
        url="http://127.0.0.1:1/mcp",
        started_at="a",
        finished_at="b",
        config={"n": 1},
        host={"cpus": 2},
        server={"idle": {"rssMiB": 1.0}},
        phases={},
    )
    assert list(doc) == [
        "tool",
        "url",
        "auth",
        "startedAt",
        "config",
        "host",
        "server",
        "phases",
        "phaseOrder",
        "finishedAt",
    ]
    json.dumps(doc)


def test_memory_lines_show_what_the_document_has():
    workers = tree(60 * 1024, 10 * 1024, pss_kib=5 * 1024).workers()
    doc = {
        "server": {"idle": {"rssMiB": 70.0}},
        "phases": {
            "memory": {
                "rssPerSessionKiB": 52.2,
                "rssPerDeletedSessionKiB": 20.0,
                "disposed": {"rssPerDisposedSessionKiB": 30.1},
                "warmWorkers": {"idle": workers},
            }
        },
    }
    lines = memory_lines(doc)
    assert lines[0].split() == ["RSS", "per", "live", "session", "52.2", "KiB"]
    assert any(line.startswith("RSS per disposed session") and "30.1" in line for line in lines)
    assert any(line.startswith("idle: warm workers") and line.endswith(" 1") for line in lines)
    assert not any(line.startswith("final:") for line in lines)


def test_memory_lines_of_an_empty_document_are_none():
    assert memory_lines({}) == []


def test_a_json_answer_is_found_by_id():
    body = json.dumps([{"jsonrpc": "2.0", "id": 1, "result": {}}, {"jsonrpc": "2.0", "id": 2, "result": {"x": 1}}])
    assert find_answer("application/json", body.encode(), 2) == {"jsonrpc": "2.0", "id": 2, "result": {"x": 1}}


def test_an_sse_answer_skips_the_priming_event_and_other_messages():
    body = (
        b"id: s:1\r\ndata: \r\n\r\n"
        b'event: message\ndata: {"jsonrpc":"2.0","method":"notifications/progress"}\n\n'
        b'event: message\nid: s:2\ndata: {"jsonrpc":"2.0","id":7,\ndata: "result":{"ok":true}}\n\n'
    )
    assert find_answer("text/event-stream", body, 7)["result"] == {"ok": True}


def test_an_sse_stream_without_the_answer_is_an_error():
    with pytest.raises(ProtocolError, match="id 3"):
        find_answer("text/event-stream", b'data: {"jsonrpc":"2.0","id":2,"result":{}}\n\n', 3)


def test_an_empty_json_body_is_an_error():
    with pytest.raises(ProtocolError):
        find_answer("application/json", b"", 1)


def test_a_response_head_gives_the_status_and_lowercased_headers():
    status, headers = parse_head(b"HTTP/1.1 200 \r\nMcp-Session-Id: abc\r\nTransfer-Encoding: chunked")
    assert status == 200
    assert headers == {"mcp-session-id": "abc", "transfer-encoding": "chunked"}


def test_a_head_that_is_not_http_is_refused():
    with pytest.raises(ProtocolError):
        parse_head(b"SSH-2.0-OpenSSH_9.6")


def test_this_process_reads_as_a_tree_rooted_at_itself():
    readings = read_tree(os.getpid()).readings
    assert readings[0].pid == os.getpid()
    assert readings[0].rss_kib > 0
    assert readings[0].cpu_s > 0
