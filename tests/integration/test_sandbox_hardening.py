"""Hostile sandbox code: strings UTF-8 cannot hold end with a text a model can act on, never
`Internal tool error`, and the server keeps serving."""

from pathlib import Path

import pytest
import trio
from mcp import Client

from tests.conftest import ServerUnderTest, start_server
from tests.sdk import execute as run
from tests.sdk import text_of


@pytest.fixture
async def executor(nursery: trio.Nursery, data_dir: Path) -> ServerUnderTest:
    return await start_server(nursery, data_dir, execution_cpu_limit=10.0, execution_timeout=10.0)


async def still_serving(client: Client) -> None:
    assert text_of(await run(client, "return 'still serving'")) == "still serving"


# -- lone surrogates ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "shown"),
    [
        (r"return '\ud800'", "\ufffd"),
        (r"return 'a' + '\udc00' + 'b'", "a\ufffdb"),
        (r"console.log('a\udc00b'); return 1", "1\n\nLogs:\n[log] a\ufffdb"),
        (r"emit('x\ud800'); return 1", "x\ufffd"),
        (r"throw new Error('bad \udfff')", "Error: bad \ufffd (1:"),
        (r"return { '\ud800': 1 }", '{\n  "\\ud800": 1\n}'),
    ],
)
async def test_lone_surrogates_are_replaced_not_fatal(client: Client, code: str, shown: str) -> None:
    result = await run(client, code)
    assert text_of(result).startswith(shown), text_of(result)
    await still_serving(client)
