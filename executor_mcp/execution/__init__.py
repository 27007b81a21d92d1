"""Executions: running agent code in the sandbox against the tool catalog, and rendering results."""
