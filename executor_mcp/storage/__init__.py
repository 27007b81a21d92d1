"""Storage: the control plane's store interfaces (`interfaces`) and their holder (`control`), the LMDB backend
(`lmdb/`), the trio adapter for one LMDB environment, and per-session files."""
