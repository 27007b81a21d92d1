"""How a tool call fails loudly: by throwing inside the sandbox."""


class ToolThrow(Exception):
    """A tool call that must throw inside the sandbox with this message.

    Only bad built-in arguments and declined approvals throw; every other expected failure is a value
    (`{ok: false, error}`) the code can inspect.
    """


class ToolArgumentsError(ValueError):
    """A tool's arguments do not fit it; the call answers `invalid_tool_arguments` without running."""

    def __init__(self, message: str, issues: list[str] | None = None) -> None:
        super().__init__(message)
        self.issues = issues or []


class ToolFailure(Exception):
    """An expected failure of a tool, answered as the value `{ok: false, error: {code, message}}`."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
