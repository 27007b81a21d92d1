"""GitHub's REST description, the largest real spec we know (13 MB, 1,223 operations), compiles fast into
unique, upstream-named tools whose every input and output renders to TypeScript.

`scripts/fetch-fixtures` (run by `scripts/test`) puts the pinned description in tests/fixtures/.cache/.
"""

import time
from pathlib import Path

import httpx
import pytest
import trio

from executor_mcp.codec import converter, deeper_than
from executor_mcp.integrations.openapi.binding import Binding
from executor_mcp.integrations.openapi.compile import CompiledSpec, compile_spec, decode_compiled, encode_compiled
from executor_mcp.tools.typescript import MAX_TEXT, describe_types
from tests.conftest import start_server
from tests.sdk import connect

SOURCE = Path(__file__).parent.parent / "fixtures" / ".cache" / "api.github.com.json"

pytestmark = pytest.mark.skipif(not SOURCE.exists(), reason="run scripts/fetch-fixtures")


@pytest.fixture(scope="module")
def github() -> tuple[CompiledSpec, float]:
    started = time.perf_counter()
    spec = compile_spec(SOURCE.read_bytes())
    return spec, time.perf_counter() - started


def test_compiles_to_1223_unique_tools(github: tuple[CompiledSpec, float]) -> None:
    spec, _ = github  # how fast is measured by benchmarks/openapi_import.py and benchmarks/integrations.py
    names = [tool.name for tool in spec.catalog.tools]
    assert len(names) == 1223 == len(set(names))
    assert names == sorted(names)
    assert (spec.title, spec.server_urls) == (
        "GitHub's official OpenAPI spec + Octokit extension",
        ("https://api.github.com",),
    )


def test_names_follow_the_algorithm(github: tuple[CompiledSpec, float]) -> None:
    spec, _ = github
    by_name = {tool.name: tool for tool in spec.catalog.tools}
    # tag `repos`, operationId `repos/get`: the tag is the group, the rest the leaf.
    repo = by_name["repos.get"]
    assert converter.structure(repo.binding, Binding).path_template == "/repos/{owner}/{repo}"
    assert repo.input_schema is not None
    assert repo.input_schema["required"] == ["owner", "repo"]
    assert repo.output_schema == {"$ref": "#/$defs/full-repository"}
    assert "issues.create" in by_name
    assert by_name["issues.create"].requires_approval
    assert by_name["issues.create"].approval_description == "POST /repos/{owner}/{repo}/issues"
    assert "meta.root" in by_name
    assert "pulls.list" in by_name


def test_every_tool_renders_to_typescript(github: tuple[CompiledSpec, float]) -> None:
    spec, _ = github
    for tool in spec.catalog.tools:
        described = describe_types(tool.input_schema, tool.output_schema, spec.catalog.defs)
        assert described["outputTypeScript"].startswith("{ ok: true; data: ")
        assert described.get("inputTypeScript", "") != "unknown"
        assert all(len(body) < MAX_TEXT for body in described["typeScriptDefinitions"].values())
        assert not deeper_than(tool.input_schema)
        assert not deeper_than(tool.output_schema)
    repo = describe_types(None, {"$ref": "#/$defs/full-repository"}, spec.catalog.defs)
    assert (
        repo["outputTypeScript"]
        == "{ ok: true; data: FullRepository; http?: ToolHttpMeta } | { ok: false; error: ToolError }"
    )
    assert "SimpleUser" in repo["typeScriptDefinitions"]


def test_round_trips_through_storage(github: tuple[CompiledSpec, float]) -> None:
    spec, _ = github
    assert decode_compiled(encode_compiled(spec)) == spec


@pytest.mark.slow
async def test_an_agent_imports_searches_describes_and_counts_githubs_tools(
    nursery: trio.Nursery, data_dir: Path, http: httpx.AsyncClient
) -> None:
    server = await start_server(nursery, data_dir)
    base = server.running.url
    added = await http.post(
        base + "/api/openapi/specs",
        json={"spec": {"kind": "blob", "value": SOURCE.read_text()}, "slug": "github"},
        timeout=60,
    )
    assert added.json() == {"slug": "github", "toolCount": 1223}
    connected = await http.post(
        base + "/api/connections", json={"owner": "org", "name": "main", "integration": "github", "template": "none"}
    )
    assert connected.status_code == 200, connected.text
    async with connect(server.url, mode="legacy") as (client, _):
        result = await client.call_tool(
            "execute",
            {
                "code": """
                const found = await tools.search({ query: "create an issue" });
                const described = await tools.describe.tool({ path: "github.org.main.issues.create" });
                const listed = await tools.executor.integrations.list({ query: "github" });
                const all = await tools.search({ namespace: "github", query: "", limit: 1 });
                return { top: found.items.slice(0, 5).map((item) => item.path), described, listed, total: all.total };
                """
            },
        )
    value = result.structured_content["result"]
    assert "github.org.main.issues.create" in value["top"]
    described_input = value["described"]["inputTypeScript"]
    assert described_input.startswith("{ owner: string; repo: string; body: { title: string | number;")
    assert "ToolHttpMeta" in value["described"]["outputTypeScript"]
    assert value["listed"]["items"][0]["toolCount"] == 1223 == value["total"]
