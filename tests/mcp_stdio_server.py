"""A stdio MCP server (the official SDK) for the stdio transport tests: it tells what environment it sees
and its pid, and can sleep so a test can stop the executor mid-call."""

import os
import time

from mcp.server.mcpserver import MCPServer

server = MCPServer("stdio-downstream", version="0.1")


@server.tool(description="The names of the environment variables this process sees.")
def environment() -> dict[str, list[str]]:
    return {"names": sorted(os.environ)}


@server.tool(description="The value of one variable.")
def variable(name: str) -> str:
    return os.environ.get(name, "<unset>")


@server.tool(description="This process's pid and its process group.")
def whoami() -> dict[str, int]:
    return {"pid": os.getpid(), "pgid": os.getpgid(0)}


@server.tool(description="Write the pid to the file, then sleep.")
def linger(path: str, seconds: float) -> str:
    with open(path, "w") as out:
        out.write(str(os.getpid()))
    time.sleep(seconds)
    return "done"


@server.tool(description="Exit at once, answering nothing.")
def crash() -> str:
    os._exit(3)


if __name__ == "__main__":
    server.run("stdio")
