"""How a tool call fails loudly: by throwing inside the sandbox."""


class ToolThrow(Exception):
    """A tool call that must throw inside the sandbox with this message.

    Only bad built-in arguments and declined approvals throw; every other expected failure is a value
    (`{ok: false, error}`) the code can inspect.
    """
