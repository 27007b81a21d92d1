"""Finding a server's sandbox processes in /proc: its zygote, and its workers, spawned or forked.

A spawned worker is the server's child running the worker module; a forked one is the zygote's child
(and so shows the zygote's command line).
"""

import os

WORKER = b"executor_mcp.sandbox.worker"
ZYGOTE = b"executor_mcp.sandbox.zygote"


def stat_fields(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name, or None once the process is gone."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return None


def children(parent: int, marker: bytes) -> list[int]:
    """Live children of `parent` whose command line holds `marker`."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or (fields := stat_fields(int(entry))) is None or int(fields[1]) != parent:
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                if marker in cmdline.read() and fields[0] != "Z":
                    pids.append(int(entry))
        except OSError:
            continue
    return pids


def zygotes(server: int) -> list[int]:
    return children(server, ZYGOTE)


def workers(server: int) -> list[int]:
    return children(server, WORKER) + [pid for zygote in zygotes(server) for pid in children(zygote, ZYGOTE)]


def alive(pid: int) -> bool:
    fields = stat_fields(pid)
    return fields is not None and fields[0] != "Z"  # a zombie has stopped; only its reaping is left
