"""MCP sessions: the lifecycle table (`lifecycle.py`), one session's runtime and streams, and the manager that
asks the table."""
