"""The configuration reference is rendered from the option table, and README.md holds exactly that rendering."""

import argparse
import re
from pathlib import Path

import attrs

from executor_mcp.cli import _parser
from executor_mcp.config import OPTIONS, Settings
from executor_mcp.config_reference import END_MARKER, START_MARKER, default_text, option_help, render_markdown

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_holds_the_rendered_reference_between_its_markers() -> None:
    text = README.read_text(encoding="utf-8")
    assert text.count(START_MARKER) == 1
    assert text.count(END_MARKER) == 1
    block = text[text.index(START_MARKER) : text.index(END_MARKER) + len(END_MARKER)] + "\n"
    assert block == render_markdown(), "README.md is stale: paste the output of `executor-mcp config-reference`"


def test_every_option_has_a_row_with_its_three_spellings_and_default() -> None:
    rows = render_markdown().splitlines()
    for option in OPTIONS:
        (row,) = [row for row in rows if row.startswith((f"| `{option.flag} ", f"| `{option.flag}`"))]
        assert f"`{option.env}`" in row
        assert f"`{option.toml_key}`" in row
        assert default_text(option) in row


def test_defaults_come_from_settings_and_help_does_not_repeat_them() -> None:
    """One place for a default: `Settings`. A help text saying "(default 300)" would be a second one."""
    fields = attrs.fields_dict(Settings)
    for option in OPTIONS:
        assert option.name in fields
        assert "default" not in option.help.lower(), option.name
    by_name = {option.name: option for option in OPTIONS}
    assert default_text(by_name["port"]) == "4788"
    assert default_text(by_name["session_timeout"]) == "300"
    assert default_text(by_name["session_retention"]) == "2592000 (30 days)"
    assert default_text(by_name["integration_max_response_bytes"]) == "10485760 (10 MiB)"
    assert default_text(by_name["allow_local_network"]) == "off"
    assert default_text(by_name["authorization_server"]) == "none"
    assert option_help(by_name["session_timeout"]).endswith("(default: 300) [EXECUTOR_MCP_SESSION_TIMEOUT]")


def _parsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    found = [parser]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                found.extend(_parsers(child))
    return found


def test_every_command_has_a_description_and_no_generic_metavar() -> None:
    parsers = _parsers(_parser())
    assert len(parsers) > 25
    for parser in parsers:
        assert parser.description, parser.prog
        assert not re.search(r"(?<![=\w])VALUE\b", parser.format_help()), parser.prog
    names = {parser.prog for parser in parsers}
    assert "executor-mcp sandbox-worker" not in names
    assert "executor-mcp sandbox-zygote" not in names
