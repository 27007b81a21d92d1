"""The embedded backend: every control-plane store over one LMDB environment (`control.mdb`), in which LMDB's
multi-process use lets an admin command write while a server runs on the same data dir."""
