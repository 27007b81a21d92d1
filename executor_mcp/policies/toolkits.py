"""Toolkits: what one toolkit endpoint, `/mcp/toolkits/<slug>`, shows and allows. No I/O.

A toolkit lists connection patterns (the policy patterns: `github.org.main.*`, `executor.coreTools.*`), each at a
level: `off` shows none of the matching tools, `read` only those without side effects (GET/HEAD operations,
GraphQL queries, MCP tools marked read-only, the built-in tools that only read), `full` all of them. A tool no
pattern matches is not shown: a toolkit is an allowlist. The first pattern that matches (by position, then id)
gives a tool its level, as the first matching rule gives a tool its policy.

A toolkit's own rules are policy rules of owner `toolkit`: `policies.model.decide` weighs them after the org's
and the user's, and they can only make a decision stricter. So what a toolkit endpoint allows is the default
endpoint's decision, projected: fewer tools shown, stricter words on the rest, never a looser one.
"""

import enum
import re

import attrs

from executor_mcp.policies.model import Rule, matches

SLUG = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$")


class Level(enum.StrEnum):
    OFF = "off"
    READ = "read"
    FULL = "full"


@attrs.frozen
class ConnectionLevel:
    id: str
    pattern: str
    level: Level
    position: str


@attrs.frozen
class ToolkitScope:
    """One toolkit as a call sees it: its connection patterns and its rules, each in evaluation order."""

    slug: str
    connections: tuple[ConnectionLevel, ...]
    rules: tuple[Rule, ...]

    def level(self, tool_id: str) -> Level:
        """The level of the first connection pattern that matches `tool_id`; `off` when none does."""
        for connection in self.connections:
            if matches(connection.pattern, tool_id):
                return connection.level
        return Level.OFF

    def shows(self, tool_id: str, read_only: bool) -> bool:
        level = self.level(tool_id)
        return level is Level.FULL or (level is Level.READ and read_only)


def in_order(connections: list[ConnectionLevel]) -> tuple[ConnectionLevel, ...]:
    return tuple(sorted(connections, key=lambda connection: (connection.position, connection.id)))


def slug_from(name: str) -> str:
    """The slug a toolkit named `name` gets when none is given: lowercase letters and digits, runs of anything
    else one `-`, at most 63 characters; "" when nothing is left (the caller asks for a slug then)."""
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:63].rstrip("-")
    return slug if SLUG.match(slug) else ""
