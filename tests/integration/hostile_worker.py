"""A sandbox worker gone bad: it answers each request with the next raw frame payload from argv (a JSON
list, or `@path` of a file that holds one, for replies longer than an argument may be).

It stands in for a worker whose JavaScript escaped the prelude, so the host's own checks can be seen
working. Standalone on purpose (the pool starts workers with an empty environment in `/`).
"""

import json
import os
import struct
import sys


def main() -> None:
    argument = sys.argv[1]
    if argument.startswith("@"):
        with open(argument[1:]) as file:
            argument = file.read()
    replies = json.loads(argument)
    buffer = b""
    for payload in replies:
        while len(buffer) < 4 or len(buffer) < 4 + struct.unpack(">I", buffer[:4])[0]:
            chunk = os.read(0, 1 << 16)
            if not chunk:
                return
            buffer += chunk
        buffer = buffer[4 + struct.unpack(">I", buffer[:4])[0] :]
        data = payload.encode()
        os.write(1, struct.pack(">I", len(data)) + data)
    os.read(0, 1)  # then wait to be killed or closed


if __name__ == "__main__":
    main()
