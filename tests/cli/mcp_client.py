"""A second, independent MCP client for memdedup: the official Python SDK (`mcp` on PyPI).

Usage:
    mcp_client.py stdio MEMDEDUP_BIN DB CONFIG
    mcp_client.py http URL TOKEN

Drives initialize, list tools, and a check -> add -> duplicate -> search -> dedup_run ->
undo round trip, then update -> history -> undo -> delete -> undo, and prints one JSON object with what it saw; tests/cli/mcp_python.rs
asserts on it. Any exception is printed as {"error": ...} with exit code 1.
"""

import sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

import mcp_script

NAMESPACE = "lessons"
FIRST = "Update the project documentation after every change to the code."
# Cosine 0.94 to FIRST: a semantic duplicate at the default threshold (0.90).
PARAPHRASE = "After changing any code, bring the project documentation up to date."
# Cosine 0.80 to FIRST: stored by memory_add (under the threshold), merged by dedup_run's
# learned judge (P(duplicate) 0.75).
RESTATED = "Whenever anyone modifies the code, the project docs must be updated too."
# Unlike every other memory of the namespace: an update memory_update applies.
UPDATED = "Release notes are written by the person who merges the change."


def call_summary(result):
    """What a tool call returned: the error flag, the text and the structured content."""
    text = "".join(block.text for block in result.content if getattr(block, "type", "") == "text")
    return {"is_error": bool(result.is_error), "text": text, "structured": result.structured_content}


async def round_trip(session):
    out = {}
    init = await session.initialize()
    out["server_name"] = init.server_info.name
    out["protocol_version"] = init.protocol_version
    tools = await session.list_tools()
    out["tools"] = sorted(tool.name for tool in tools.tools)
    out["add_schema"] = next(t.input_schema for t in tools.tools if t.name == "memory_add")

    async def call(name, arguments):
        return call_summary(await session.call_tool(name, arguments))

    out["check"] = await call("memory_check", {"content": FIRST, "namespace": NAMESPACE})
    out["add"] = await call("memory_add", {"content": FIRST, "namespace": NAMESPACE})
    out["duplicate"] = await call("memory_add", {"content": FIRST, "namespace": NAMESPACE})
    out["add_paraphrase"] = await call("memory_add", {"content": PARAPHRASE, "namespace": NAMESPACE})
    out["add_restated"] = await call("memory_add", {"content": RESTATED, "namespace": NAMESPACE})
    out["search"] = await call("memory_search", {"query": "update the docs when the code changes", "namespace": NAMESPACE})
    out["bad_type"] = await call("memory_check", {"content": 5, "namespace": NAMESPACE})
    out["dedup_run"] = await call("dedup_run", {"namespace": NAMESPACE})
    run_id = (out["dedup_run"]["structured"] or {}).get("run_id")
    out["undo"] = await call("merge_undo", {"run_id": run_id}) if run_id else None
    out["search_after_undo"] = await call("memory_search", {"query": "documentation", "namespace": NAMESPACE})
    # The lifecycle: an update refused as a duplicate, one applied, the history, a delete
    # and the undo of each.
    first_id = (out["add"]["structured"] or {}).get("stored")
    out["update_duplicate"] = await call("memory_update", {"id": first_id, "content": RESTATED})
    out["update"] = await call("memory_update", {"id": first_id, "content": UPDATED})
    out["history"] = await call("memory_history", {"id": first_id})
    update_change = (out["update"]["structured"] or {}).get("change")
    out["undo_update"] = await call("memory_undo", {"change": update_change})
    out["delete"] = await call("memory_delete", {"id": str(first_id)})
    out["search_after_delete"] = await call("memory_search", {"query": "documentation", "namespace": NAMESPACE})
    out["undo_delete"] = await call("memory_undo", {"change": (out["delete"]["structured"] or {}).get("change")})
    return out


async def over_stdio(binary, db, config):
    params = StdioServerParameters(command=binary, args=["--config", config, "--db", db, "mcp"])
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            return await round_trip(session)


async def over_http(url, token):
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    async with http, streamable_http_client(url, http_client=http, terminate_on_close=False) as (read, write, *_):
        async with ClientSession(read, write) as session:
            return await round_trip(session)


if __name__ == "__main__":
    sys.exit(mcp_script.run("mcp_client.py", over_stdio, over_http))
