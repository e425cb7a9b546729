"""First steps, typed: a store, a chat with a long tool result, the model view under a
budget, and a read of the archived result. ``mypy --strict`` runs over the examples
(scripts/test-python): a ``return`` inside ``with Store.open(...)`` type-checks, since the
store never swallows an exception.

    python quickstart.py
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import undertext


def model_view(path: Path, log: str) -> list[dict[str, object]]:
    """The messages a model would be sent for a short debugging chat."""
    with undertext.Store.open(path, archive_threshold=4096) as store:
        chat = store.create_chat("alice", title="fix the build")
        chat.append(undertext.user("why does CI fail?"))
        chat.append(undertext.tool_call("c1", "sh", {"cmd": "cargo test"}))
        chat.append(undertext.tool_result("c1", log))  # long: archived, previewed
        view = chat.view(undertext.Budget(200_000, 8_000))
        return view.openai()


def archived_head(path: Path, chars: int) -> str:
    """The first ``chars`` characters of the archived tool result, read back exactly."""
    with undertext.Store.open(path) as store:
        (info,) = store.chats("alice")
        result = store.chat("alice", info.id)[2].parts[0]
        return store.read_context("alice", result["archive"]["id"], 0, chars)


def main() -> None:
    log = "".join(f"test t{i} ... ok\n" for i in range(1000)) + "test build ... FAILED\n"
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "store"
        messages = model_view(path, log)
        print(f"{len(messages)} messages; the tool result is sent as a preview of {len(str(messages[-1]))} chars")
        assert archived_head(path, 40) == log[:40]
        print("the whole result is still readable from the archive")


if __name__ == "__main__":
    main()
