"""What one execution costs inside a sandbox worker, part by part: a fresh QuickJS context, the prelude parsed and
run in it, the agent's code prepared, and the code run to its result (`return 6*7`).

    python -m benchmarks.sandbox_parts [--count 500]

In this process, with the worker's own `Realm` and `Execution` (no pipe, no server), CPU time per part: the
figures say where a worker's time per execution goes (the prelude's parse dominates), not what an execution
costs end to end (`scripts/bench` measures that). Every loop is bounded by `--count`.
"""

import argparse
import time

from executor_mcp.sandbox.source import prepare
from executor_mcp.sandbox.worker import Execution, Realm, RealmLimits

LIMITS = RealmLimits(memory=64 << 20, stack=1 << 20, max_timers=1000, max_tool_calls=1000)
CODE = "return 6*7"


def parts(count: int) -> dict[str, float]:
    """CPU ms per execution of each part, over `count` executions."""
    started = time.process_time()
    realms = [Realm(LIMITS) for _ in range(count)]
    contexts = time.process_time()
    for realm in realms:
        realm.load()
    loaded = time.process_time()
    for _ in range(count):
        prepare(CODE)
    prepared = time.process_time()
    for realm in realms:
        done = Execution(CODE, 10.0, realm).start()["done"]
        if not done or not done["ok"]:
            raise RuntimeError(f"the measured execution failed: {done}")
    ran = time.process_time()
    return {
        "context": (contexts - started) * 1000 / count,
        "prelude": (loaded - contexts) * 1000 / count,
        "prepare": (prepared - loaded) * 1000 / count,
        "run": (ran - prepared) * 1000 / count,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=500, help="executions measured (at most 5000)")
    count = min(max(parser.parse_args().count, 1), 5000)
    for name, ms in parts(count).items():
        print(f"{name:<8} {ms:7.3f} ms CPU per execution")


if __name__ == "__main__":
    main()
