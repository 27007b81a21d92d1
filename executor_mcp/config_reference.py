"""The configuration reference, rendered from `config.OPTIONS` and `Settings`' defaults.

One source of truth: `--help` and the README's option table are both made here, so an option, its spelling in
the three sources and its default cannot drift apart. `scripts/config-reference` (`executor-mcp
config-reference`) prints the table; a test holds README.md to it between the markers below.
"""

import attrs

from executor_mcp.config import CONFIG_ENV, OPTIONS, Option, Settings

START_MARKER = "<!-- config-reference:start -->"
END_MARKER = "<!-- config-reference:end -->"
_DAY = 24 * 3600
_MIB = 1024 * 1024


def default_text(option: Option) -> str:
    """The default in words: the option's own wording if it has one, else `Settings`' value."""
    if option.default is not None:
        return option.default
    value = attrs.fields_dict(Settings)[option.name].default
    if value is None or value == ():
        return "none"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    text = str(value)
    if isinstance(value, int) and option.placeholder == "SECONDS" and value >= _DAY and value % _DAY == 0:
        return f"{text} ({value // _DAY} days)"
    if isinstance(value, int) and option.placeholder == "BYTES" and value >= _MIB and value % _MIB == 0:
        return f"{text} ({value // _MIB} MiB)"
    return text


def option_help(option: Option) -> str:
    """What `--help` says of an option: what it does, its default and its environment variable."""
    return f"{option.help} (default: {default_text(option)}) [{option.env}]"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _row(option: Option) -> str:
    flag = option.flag if option.switch else f"{option.flag} {option.placeholder}"
    env, key = f"`{option.env}`", f"`{option.toml_key}`"
    if option.repeatable:
        env, key = env + " (comma-separated)", key + " (list)"
    elif option.switch:
        env, key = env + " (true/false)", key + " (true/false)"
    cells = (f"`{flag}`", env, key, _cell(default_text(option)), _cell(option.help))
    return "| " + " | ".join(cells) + " |"


def render_markdown() -> str:
    """The option table, between its markers, as the README holds it."""
    lines = [
        START_MARKER,
        "| flag | environment | TOML key | default | description |",
        "|---|---|---|---|---|",
        *(_row(option) for option in OPTIONS),
        f"| `--config FILE` | `{CONFIG_ENV}` | — | none | the TOML file the other options are read from |",
        END_MARKER,
    ]
    return "\n".join(lines) + "\n"
