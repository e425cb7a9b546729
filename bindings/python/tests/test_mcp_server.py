"""`undertext mcp` driven by the official MCP Python SDK's stdio client (the `mcp` package):
initialize, list the four tools, search the history a transcript import wrote, and read the
hit's message back. Needs the `undertext` binary (UNDERTEXT_BIN, else target/debug or
target/release of this workspace) and the `mcp` package; skipped without either."""

import asyncio
import json
import os
import pathlib
import subprocess

import pytest

mcp = pytest.importorskip("mcp")
from mcp.client.stdio import StdioServerParameters, stdio_client  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[3]


def undertext_bin():
    env = os.environ.get("UNDERTEXT_BIN")
    if env:
        return env
    for profile in ("debug", "release"):
        p = ROOT / "target" / profile / "undertext"
        if p.exists():
            return str(p)
    pytest.skip("no undertext binary (set UNDERTEXT_BIN or build it)")


def test_an_mcp_client_searches_and_reads_back_over_stdio(tmp_path):
    exe = undertext_bin()
    store = tmp_path / "store"
    transcript = tmp_path / "chat.json"
    transcript.write_text(
        json.dumps(
            [
                {"role": "user", "content": "Which port does the staging gateway use?"},
                {"role": "assistant", "content": "The staging gateway listens on port 48213."},
            ]
        )
    )
    subprocess.run(
        [exe, "--store", str(store), "import", str(transcript), "--format", "openai"],
        check=True,
        capture_output=True,
    )

    async def session():
        params = StdioServerParameters(command=exe, args=["--store", str(store), "mcp"])
        async with stdio_client(params) as (read, write):
            async with mcp.ClientSession(read, write) as s:
                init = await s.initialize()
                # The SDK's field names: snake_case since mcp 2, camelCase before.
                info = getattr(init, "server_info", None) or getattr(init, "serverInfo")
                assert info.name == "undertext"
                tools = sorted(t.name for t in (await s.list_tools()).tools)
                assert tools == ["list_chats", "read_context", "read_messages", "search_history"]
                chats = (await s.call_tool("list_chats", {})).content[0].text
                chat = chats.split()[0]
                assert chat.startswith("chat-"), chats
                found = (await s.call_tool("search_history", {"query": "staging gateway port"})).content[0].text
                assert f"{chat} seq 1: text" in found, found
                msgs = await s.call_tool("read_messages", {"chat": chat, "start": 1, "end": 2})
                assert "listens on port 48213" in msgs.content[0].text
                bad = await s.call_tool("read_context", {"archive": "00" * 32, "start": 0, "end": 1})
                assert getattr(bad, "is_error", None) or getattr(bad, "isError", None)

    asyncio.run(session())
