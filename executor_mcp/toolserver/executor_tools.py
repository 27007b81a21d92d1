"""The product's MCP tools: `execute` (run code against the catalog) and `skills` (the how-to).

Argument problems are tool results with `isError`, in the MCP SDK's wording, not JSON-RPC errors: a
model reads them and corrects its call.
"""

import json
from typing import Any

from executor_mcp.codec import JsonObject
from executor_mcp.execution.engine import Engine
from executor_mcp.execution.results import render
from executor_mcp.execution.texts import EXECUTE_DESCRIPTION, SKILLS, SKILLS_DESCRIPTION, SKILLS_INDEX
from executor_mcp.protocol.mcp import Tool
from executor_mcp.storage.records import SessionMeta
from executor_mcp.tools.catalog import Catalog
from executor_mcp.toolserver.registry import RegisteredTool, ToolContext, ToolFactory, ToolRegistry

SCHEMA_DIALECT = "http://json-schema.org/draft-07/schema#"

EXECUTE = Tool(
    name="execute",
    description=EXECUTE_DESCRIPTION,
    input_schema={
        "type": "object",
        "properties": {"code": {"type": "string", "minLength": 1}},
        "required": ["code"],
        "$schema": SCHEMA_DIALECT,
    },
)
SKILLS_TOOL = Tool(
    name="skills",
    description=SKILLS_DESCRIPTION,
    input_schema={
        "type": "object",
        "properties": {
            "name": {
                "type": "string",
                "description": 'The skill to fetch, e.g. "execute". Omit to list available skills.',
            }
        },
        "$schema": SCHEMA_DIALECT,
    },
)


def executor_tools(engine: Engine, catalog: Catalog) -> ToolFactory:
    async def execute(arguments: JsonObject, context: ToolContext) -> JsonObject:
        code = arguments.get("code")
        issues = _code_issues(code)
        if issues:
            return _invalid("execute", issues)
        assert isinstance(code, str)
        return render(await engine.run(code.strip(), catalog.invoke))

    async def skills(arguments: JsonObject, context: ToolContext) -> JsonObject:
        name = arguments.get("name")
        if name is not None and not isinstance(name, str):
            issue = {"code": "invalid_type", "expected": "string", "received": _zod_type(name), "path": ["name"]}
            return _invalid("skills", [{**issue, "message": f"Expected string, received {issue['received']}"}])
        if not name:
            return {"content": [{"type": "text", "text": SKILLS_INDEX}]}
        skill = SKILLS.get(name)
        if skill is None:
            return {
                "content": [{"type": "text", "text": f'No skill named "{name}".\n\n{SKILLS_INDEX}'}],
                "isError": True,
            }
        return {"content": [{"type": "text", "text": skill[1]}]}

    registry = ToolRegistry([RegisteredTool(EXECUTE, execute), RegisteredTool(SKILLS_TOOL, skills)])

    def factory(_: SessionMeta) -> ToolRegistry:
        return registry

    return factory


def _code_issues(code: Any) -> list[JsonObject]:
    if not isinstance(code, str):
        received = _zod_type(code)
        message = "Required" if code is None else f"Expected string, received {received}"
        return [
            {"code": "invalid_type", "expected": "string", "received": received, "path": ["code"], "message": message}
        ]
    if not code.strip():
        return [
            {
                "code": "too_small",
                "minimum": 1,
                "type": "string",
                "inclusive": True,
                "exact": False,
                "message": "String must contain at least 1 character(s)",
                "path": ["code"],
            }
        ]
    return []


def _zod_type(value: Any) -> str:
    if value is None:
        return "undefined"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, list):
        return "array"
    return "object" if isinstance(value, dict) else type(value).__name__


def _invalid(tool: str, issues: list[JsonObject]) -> JsonObject:
    text = (
        f"MCP error -32602: Input validation error: Invalid arguments for tool {tool}: {json.dumps(issues, indent=2)}"
    )
    return {"content": [{"type": "text", "text": text}], "isError": True}
