"""`executor-mcp doctor`: whether this machine and data dir can run the server, one check at a time.

checks.py   the verdicts: plain functions from what was observed to ok, warn or fail (tested directly)
probes.py   the observing: the file system, the port, a real sandbox worker, the clocks (trio)
"""
