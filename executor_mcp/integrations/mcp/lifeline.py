"""The shim a stdio MCP server runs under: `lifeline <fd> <NAMES> -- <command> [args…]`.

It leads the process group the server starts it in and runs the command in that group with exactly the
environment variables named in NAMES (Python may add its own to ours at startup, such as a coerced
LC_CTYPE; those are not passed on). A daemon thread waits on `fd`, the read end of a pipe only the server
writes to: when the server is gone, even SIGKILLed, the pipe hangs up and the shim kills the whole group,
the command and anything it started. When the command exits, the group is killed too, so nothing it left
behind survives the call.
"""

import os
import select
import signal
import subprocess
import sys
import threading


def _kill_group() -> None:
    os.killpg(0, signal.SIGKILL)


def _watch(fd: int) -> None:
    poller = select.poll()
    poller.register(fd, 0)  # only a hang-up or an error wakes this thread
    while True:
        if any(events & (select.POLLHUP | select.POLLERR | select.POLLNVAL) for _, events in poller.poll()):
            _kill_group()


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[2] != "--":
        print("usage: lifeline <fd> <NAMES> -- <command> [args...]", file=sys.stderr)
        return 2
    fd = int(argv[0])
    names = set(filter(None, argv[1].split(",")))
    env = {name: value for name, value in os.environ.items() if name in names}
    threading.Thread(target=_watch, args=(fd,), name="lifeline", daemon=True).start()
    try:
        child = subprocess.Popen(argv[3:], env=env, close_fds=True)
    except OSError as error:
        print(f"cannot start {argv[3]}: {error.strerror or error}", file=sys.stderr)
        return 127
    code = child.wait()
    sys.stderr.flush()
    _kill_group()
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
