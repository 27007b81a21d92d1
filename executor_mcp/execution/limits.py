"""What one execution may use, as `serve`'s options set it; kept in each journal so a replay runs with the
limits the execution started with."""

import attrs

from executor_mcp.config import Settings

MIB = 1024 * 1024
# QuickJS's native stack: not an option, but kept with the rest so that a replay runs as the original did.
STACK_BYTES = 1024 * 1024


@attrs.frozen(kw_only=True)
class Limits:
    timeout: float
    cpu: float
    memory: int  # bytes of JavaScript heap
    stack: int = STACK_BYTES
    max_timers: int
    max_tool_calls: int
    journal: int  # bytes the journal may hold

    @classmethod
    def of(cls, settings: Settings) -> "Limits":
        """The limits `settings` give every execution (the options count memory in MiB)."""
        return cls(
            timeout=settings.execution_timeout,
            cpu=settings.execution_cpu_limit,
            memory=settings.execution_memory_limit * MIB,
            max_timers=settings.execution_max_timers,
            max_tool_calls=settings.execution_max_tool_calls,
            journal=settings.execution_journal_limit * MIB,
        )
