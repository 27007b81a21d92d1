"""Log lines that say which request, session, principal and execution they belong to, as text or JSON.

A request's context is one mutable `RequestLog` held in a context variable: the transport sets it when a
request arrives (`transport/observed.py`), and the layers that learn more (who authenticated, which JSON-RPC
method, which execution) `note` it. Trio copies context variables into the tasks a request starts, so those
tasks share the same `RequestLog` (a copy of the variable holds the same object): a tool call or execution
started by a request logs with that request's id, and what it notes shows in the request's access line.

Only identifiers are ever noted, never argument values, bodies, tokens or headers other than the request id:
the formatters write the record's message and these fields, nothing else of the request.
"""

import contextvars
import json
import logging
import re
import secrets
import sys
import time
from collections.abc import Callable
from typing import IO, Any, TypeVar

import attrs

T = TypeVar("T")

ACCESS_LOGGER = "executor_mcp.access"
REQUEST_ID_HEADER = "X-Request-Id"
_SAFE_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
LOG_FORMATS = ("text", "json")


@attrs.define
class RequestLog:
    """What is known of the request being served; filled in as it is learned."""

    request_id: str
    http_method: str
    path: str
    jsonrpc_method: str | None = None
    session_id: str | None = None
    account: str | None = None
    org: str | None = None
    execution_id: str | None = None

    def fields(self) -> dict[str, str]:
        """The context fields a log line carries: those known, by their JSON names."""
        return {name: value for name, value in _context_items(self) if value is not None}


def _context_items(entry: RequestLog) -> tuple[tuple[str, str | None], ...]:
    return (
        ("request_id", entry.request_id),
        ("session_id", entry.session_id),
        ("account", entry.account),
        ("org", entry.org),
        ("jsonrpc_method", entry.jsonrpc_method),
        ("execution_id", entry.execution_id),
    )


_CURRENT: contextvars.ContextVar[RequestLog | None] = contextvars.ContextVar("executor_mcp_request", default=None)


def current() -> RequestLog | None:
    return _CURRENT.get()


def begin(entry: RequestLog) -> contextvars.Token[RequestLog | None]:
    """Make `entry` the context of this task (and of the tasks it starts from now on)."""
    return _CURRENT.set(entry)


def end(token: contextvars.Token[RequestLog | None]) -> None:
    _CURRENT.reset(token)


def note(**fields: str | None) -> None:
    """Record what was learned about the current request; outside a request, nothing happens."""
    entry = _CURRENT.get()
    if entry is not None:
        for name, value in fields.items():
            setattr(entry, name, value)


def outside_request(start: Callable[..., T], *args: Any) -> T:
    """Call `start` (a nursery's `start_soon`) with no request context, so that what it starts, which outlives
    the request (a session's runtime), does not log as that request."""

    def cleared() -> T:
        _CURRENT.set(None)
        return start(*args)

    return contextvars.copy_context().run(cleared)


def safe_id(text: str | None) -> str | None:
    """`text` if it is an identifier fit for a log line and a header (short, safe characters), else None."""
    return text if text is not None and _SAFE_ID.fullmatch(text) else None


def request_id(incoming: str | None) -> str:
    """The client's `X-Request-Id` if it is a safe identifier (it goes into log lines and a response header),
    else a new one."""
    return safe_id(incoming) or secrets.token_hex(8)


_MAX_LOGGED_PATH = 200


def loggable_path(path: str, secret_prefixes: tuple[str, ...]) -> str:
    """`path` as a log line may show it: the rest of a path that carries a secret (a one-time link's token)
    redacted, unprintable characters (a decoded `%0A`) replaced, and the length bounded."""
    for prefix in secret_prefixes:
        if path.startswith(prefix) and len(path) > len(prefix):
            return prefix + "<redacted>"
    path = path[:_MAX_LOGGED_PATH]
    return path if path.isprintable() else "".join(c if c.isprintable() else "?" for c in path)


_second: list[Any] = [None, ""]  # the last whole second formatted, and its text


def _timestamp(created: float) -> str:
    whole = int(created)
    if _second[0] != whole:
        _second[:] = [whole, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole))]
    return f"{_second[1]}.{int(created % 1 * 1000):03d}Z"


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, the request's context where known, and the
    fields an access line passes as `extra={"fields": {...}}`."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": _timestamp(record.created),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        entry = _CURRENT.get()
        if entry is not None:
            line.update(entry.fields())
        extra = getattr(record, "fields", None)
        if isinstance(extra, dict):
            line.update(extra)
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False, separators=(",", ":"), default=str)


_IN_ACCESS_MESSAGE = frozenset({"http_method", "path", "status", "duration_ms"})


class TextFormatter(logging.Formatter):
    """The plain format, with the request's context appended as `key=value` where known."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        extra = getattr(record, "fields", None)
        entry = _CURRENT.get()
        if isinstance(extra, dict):  # an access line: its message says the exchange, the rest goes here
            fields = {name: value for name, value in extra.items() if name not in _IN_ACCESS_MESSAGE}
        elif entry is not None:
            fields = entry.fields()
        else:
            return text
        context = " ".join(f"{name}={value}" for name, value in fields.items())
        head, newline, rest = text.partition("\n")  # after the message, before any traceback
        return f"{head} [{context}]{newline}{rest}"


def configure_logging(level: str, log_format: str, stream: IO[str] | None = None) -> None:
    """The process's logging: one handler on stderr (or `stream`) in the chosen format."""
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    root = logging.getLogger()
    for existing in list(root.handlers):
        root.removeHandler(existing)
    root.addHandler(handler)
    root.setLevel(level.upper())


_access = logging.getLogger(ACCESS_LOGGER)


def log_access(entry: RequestLog, status: int, duration_ms: float) -> None:
    """The one line of a finished request, at info: the exchange in the message, its fields (the exchange's and
    the context's) beside it."""
    if not _access.isEnabledFor(logging.INFO):
        return
    fields: dict[str, Any] = {
        "http_method": entry.http_method,
        "path": entry.path,
        "status": status,
        "duration_ms": round(duration_ms, 2),
        **entry.fields(),
    }
    message = f"{entry.http_method} {entry.path} {status} {duration_ms:.1f}ms"
    # Made and handled directly: an access line needs no caller's file and line, whose search costs more than
    # the rest of the line.
    record = _access.makeRecord(ACCESS_LOGGER, logging.INFO, "", 0, message, (), None, extra={"fields": fields})
    _access.handle(record)
