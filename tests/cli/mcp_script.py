"""The command line both MCP client scripts share: `stdio BIN DB CONFIG` or `http URL TOKEN`,
one JSON document on stdout (the result, or {"error": ...} with a non-zero exit)."""

import asyncio
import json
import sys


def run(name, over_stdio, over_http):
    """Runs `over_stdio(bin, db, config)` or `over_http(url, token)` as the arguments ask."""
    try:
        if len(sys.argv) == 5 and sys.argv[1] == "stdio":
            out = asyncio.run(over_stdio(sys.argv[2], sys.argv[3], sys.argv[4]))
        elif len(sys.argv) == 4 and sys.argv[1] == "http":
            out = asyncio.run(over_http(sys.argv[2], sys.argv[3]))
        else:
            print(json.dumps({"error": f"usage: {name} stdio BIN DB CONFIG | http URL TOKEN"}))
            return 2
    except BaseException as error:  # noqa: BLE001 - report everything, including exception groups
        print(json.dumps({"error": f"{type(error).__name__}: {error!r}"}))
        return 1
    print(json.dumps(out))
    return 0
