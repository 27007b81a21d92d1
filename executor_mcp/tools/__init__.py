"""The tool catalog that sandboxed code calls: built-ins, integrations and their tools."""
