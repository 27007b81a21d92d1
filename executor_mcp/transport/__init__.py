"""Streamable HTTP: the quart-trio edge that turns HTTP exchanges into session calls and back."""
