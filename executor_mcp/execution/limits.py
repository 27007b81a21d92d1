"""What one execution may use, as `serve`'s options set it; kept in each journal so a replay runs with the
limits the execution started with."""

import attrs


@attrs.frozen
class Limits:
    timeout: float = 300.0
    cpu: float = 60.0
    memory: int = 64 * 1024 * 1024
    stack: int = 1024 * 1024
    max_timers: int = 10_000
    max_tool_calls: int = 1_000
    journal: int = 64 * 1024 * 1024  # bytes the journal may hold
