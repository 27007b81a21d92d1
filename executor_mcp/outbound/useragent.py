"""The User-Agent outbound requests carry unless a spec or connection sets one.

Some upstreams (GitHub) answer a request without one with a 403 that reads like a credential rejection.
"""

import executor_mcp

_version = getattr(executor_mcp, "__version__", None)
DEFAULT_USER_AGENT = f"executor-mcp/{_version}" if _version else "executor-mcp"
