"""The MCP conformance suite (@modelcontextprotocol/conformance 0.2.0-alpha.12) against the real server, for the
2026-07-28 scenarios of the stateless wire (`server-stateless`, SEP-2575) and its routing headers
(`http-header-validation`, SEP-2243). Every check must pass, except the suite's own skips (features the server
does not advertise) and the checks it reports untestable because they need the suite's diagnostic tools
(`test_missing_capability`, ...) in tools/list: the product lists only its own tools (PRODUCT.md)."""

import json
from pathlib import Path

import pytest
import trio

from tests.conftest import ServerUnderTest, start_server
from tests.node_tools import CONFORMANCE, require, run_node

# Untestable here, by the suite's own verdict: each needs a diagnostic tool of the suite's reference server.
NEEDS_DIAGNOSTIC_TOOLS = {
    "server-stateless": {
        "sep-2575-server-rejects-undeclared-capability",
        "sep-2575-missing-capability-http-400",
        "sep-2575-http-server-no-independent-requests-on-stream",
        "sep-2575-server-no-log-without-loglevel",
    },
    "http-header-validation": set(),
}
# The suite's verdicts that are no failure: a pass, a feature the server does not advertise, a note.
NOT_FAILURES = ("SUCCESS", "SKIPPED", "INFO")


def read_checks(results: Path, scenario: str) -> list[dict]:
    """The checks of the scenario's one run, as the suite saved them (`-o`): the printed report is for people."""
    (checks,) = results.glob(f"server-{scenario}-*/checks.json")
    return json.loads(checks.read_text())


@pytest.fixture
async def executor(nursery: trio.Nursery, data_dir: Path) -> ServerUnderTest:
    return await start_server(nursery, data_dir)


@pytest.mark.slow
@pytest.mark.parametrize("scenario", sorted(NEEDS_DIAGNOSTIC_TOOLS))
async def test_the_conformance_scenario_passes(executor: ServerUnderTest, tmp_path: Path, scenario: str) -> None:
    suite = require(CONFORMANCE)
    run = await run_node(
        str(suite), "server", "--url", executor.url, "--scenario", scenario, "-o", str(tmp_path), cwd=tmp_path
    )
    printed = (run.stdout + run.stderr).decode(errors="replace")
    checks = read_checks(tmp_path, scenario)
    passed = {check["id"] for check in checks if check["status"] == "SUCCESS"}
    failed = [check for check in checks if check["status"] not in NOT_FAILURES]
    assert passed, printed[-3000:]
    # A warning (a SHOULD missed) is a failure; a check id can repeat (one per probe): each record is judged alone.
    assert [check for check in failed if not check.get("details", {}).get("untestable")] == [], printed[-3000:]
    untestable = {check["id"] for check in failed}
    assert untestable == NEEDS_DIAGNOSTIC_TOOLS[scenario], printed[-3000:]
    assert run.returncode == (1 if untestable else 0), printed[-3000:]
