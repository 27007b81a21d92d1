"""LMDB storage: the trio adapter for one environment, per-session files and the control plane."""
