"""The agent as judge through MCP sampling, with the official Python SDK as the client.

Usage:
    mcp_sampling_client.py stdio MEMDEDUP_BIN DB CONFIG
    mcp_sampling_client.py http URL TOKEN

The client declares the `sampling` capability; its sampling callback answers seed 003's
batches from labels (the pairs below are duplicates, nothing else is). It stores three
memories, runs dedup_run (the server's judge is `[judge] kind = "agent"`) and review_run
(a pair queued beforehand, named by $MEMDEDUP_TEST_QUEUED_PAIR as a JSON array of its two
texts: a duplicate by its label), and a second session without a sampling callback tries both. Prints one JSON object with what
it saw; tests/cli/mcp_python.rs asserts on it.
"""

import json
import os
import sys

from mcp import ClientSession, StdioServerParameters
from mcp import types
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

import mcp_script

NAMESPACE = "lessons"
FIRST = "Update the project documentation after every change to the code."
RESTATED = "Keep the documentation current whenever the code is modified by anyone."
OTHER = "The staging database is reset every Sunday night."
# What the labels say: these two are duplicates; every other pair is not.
DUPLICATES = [(FIRST, RESTATED), tuple(json.loads(os.environ["MEMDEDUP_TEST_QUEUED_PAIR"]))]


def verdict(batch):
    """Seed 003's reply to `batch`, from the labels."""
    by_text = {m["text"]: m["id"] for m in batch["memories"]}
    must_decide = [m["id"] for m in batch["memories"] if batch["mode"] == "bootstrap" or m["status"] == "unverified"]
    groups, grouped = [], set()
    for a, b in DUPLICATES:
        if a in by_text and b in by_text:
            ids = sorted([by_text[a], by_text[b]])
            groups.append({"ids": ids, "canonical_text": a, "confidence": 0.95, "reason": "labels: the same rule"})
            grouped.update(ids)
    no_match = [i for i in must_decide if i not in grouped]
    return {"groups": groups, "no_match_ids": no_match, "notes": ["judged from labels"]}


def make_sampling(seen):
    async def sampling(context, params):
        text = params.messages[0].content.text
        batch = json.loads(text)
        seen.append({"batch_id": batch["batch_id"], "mode": batch["mode"], "system": params.system_prompt or ""})
        reply = json.dumps(verdict(batch))
        return types.CreateMessageResult(
            role="assistant", content=types.TextContent(type="text", text=reply), model="label-judge",
            stopReason="endTurn")
    return sampling


def summary(result):
    text = "".join(block.text for block in result.content if getattr(block, "type", "") == "text")
    return {"is_error": bool(result.is_error), "text": text, "structured": result.structured_content}


async def with_sampling(session, seen):
    out = {}
    await session.initialize()
    for text in (FIRST, RESTATED, OTHER):
        await session.call_tool("memory_add", {"content": text, "namespace": NAMESPACE})
    out["dedup_run"] = summary(await session.call_tool("dedup_run", {"namespace": NAMESPACE}))
    out["review_run"] = summary(await session.call_tool("review_run", {}))
    out["sampled"] = seen
    return out


async def without_sampling(session):
    await session.initialize()
    out = summary(await session.call_tool("dedup_run", {"namespace": NAMESPACE}))
    return out, summary(await session.call_tool("review_run", {}))


async def over_stdio(binary, db, config):
    params = StdioServerParameters(command=binary, args=["--config", config, "--db", db, "mcp"])
    seen = []
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write, sampling_callback=make_sampling(seen)) as session:
            out = await with_sampling(session, seen)
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            out["without_sampling"], out["review_run_without_sampling"] = await without_sampling(session)
    return out


async def over_http(url, token):
    seen = []
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    async with http, streamable_http_client(url, http_client=http, terminate_on_close=False) as (read, write, *_):
        async with ClientSession(read, write, sampling_callback=make_sampling(seen)) as session:
            out = await with_sampling(session, seen)
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    async with http, streamable_http_client(url, http_client=http, terminate_on_close=False) as (read, write, *_):
        async with ClientSession(read, write) as session:
            out["without_sampling"], out["review_run_without_sampling"] = await without_sampling(session)
    return out


if __name__ == "__main__":
    sys.exit(mcp_script.run("mcp_sampling_client.py", over_stdio, over_http))
