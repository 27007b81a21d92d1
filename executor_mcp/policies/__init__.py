"""Tool policies: who may call what, and when a human must approve first."""
