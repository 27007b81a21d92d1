"""How long GitHub's REST description (13 MB, 1,223 operations) takes to compile, and what it compiles to.

Run `scripts/fetch-fixtures` first, then `python -m benchmarks.openapi_import [path]`.
"""

import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from executor_mcp.integrations.openapi.compile import compile_spec, decode_compiled, encode_compiled
from executor_mcp.tools.typescript import describe_types

DEFAULT = Path(__file__).parent.parent / "tests" / "fixtures" / ".cache" / "api.github.com.json"
RUNS = 3
T = TypeVar("T")


def timed(work: Callable[[], T]) -> tuple[float, T]:
    started = time.perf_counter()
    result = work()
    return time.perf_counter() - started, result


def main() -> None:
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT
    if not path.exists():
        raise SystemExit(f"{path} is missing: run scripts/fetch-fixtures")
    source = path.read_bytes()
    compiles = [timed(lambda: compile_spec(source)) for _ in range(RUNS)]
    spec = compiles[-1][1]
    encoded_time, encoded = timed(lambda: encode_compiled(spec))
    decoded_time, _ = timed(lambda: decode_compiled(encoded))
    tools = spec.catalog.tools
    defs = spec.catalog.defs
    rendered_time, _ = timed(lambda: [describe_types(t.input_schema, t.output_schema, defs) for t in tools])
    print(f"source              {len(source) / 1e6:8.1f} MB, {len(tools)} tools, {len(defs)} defs")
    print(f"compile (median/{RUNS})  {statistics.median(t for t, _ in compiles):8.2f} s")
    print(
        f"compiled size       {len(encoded) / 1e6:8.1f} MB (encode {encoded_time:.2f} s, decode {decoded_time:.2f} s)"
    )
    print(f"TypeScript, all     {rendered_time:8.2f} s")


if __name__ == "__main__":
    main()
