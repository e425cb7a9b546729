"""Where a growing-thread put and read spend their time, on the 1,000-message state of
``langgraph_growth.py``: serialize / deserialize with LangGraph's serializer, BLAKE3 of the
value, ``put_blobs`` of a version one message longer than a stored one (one new chunk),
``get_blob`` of the chunked value, and a small record append (one group-commit fsync).

Usage: python benches/python/value_costs.py
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph_growth import messages

import undertext


def ms(t0: float) -> str:
    return f"{(time.perf_counter() - t0) * 1e3:.2f} ms"


def main() -> None:
    msgs = messages(1000)
    serde = JsonPlusSerializer()
    t = time.perf_counter()
    typ, data = serde.dumps_typed(msgs)
    print(f"serialize 1,000 messages ({len(data):,} bytes): {ms(t)}")
    t = time.perf_counter()
    serde.loads_typed((typ, data))
    print(f"deserialize: {ms(t)}")
    t = time.perf_counter()
    undertext.blob_id(data)
    print(f"BLAKE3 of the value: {ms(t)}")
    with tempfile.TemporaryDirectory() as d, undertext.Store.open(d) as store:
        store.put_blobs("bench", [serde.dumps_typed(msgs[:999])[1]])
        t = time.perf_counter()
        (bid,) = store.put_blobs("bench", [data])
        print(f"put_blobs, one message longer than a stored value: {ms(t)}")
        t = time.perf_counter()
        store.get_blob("bench", bid)
        print(f"get_blob of the chunked value: {ms(t)}")
        chat = store.create_chat("bench")
        t = time.perf_counter()
        chat.append({"role": "system", "content": "x" * 600})
        print(f"append of a 600-byte record: {ms(t)}")


if __name__ == "__main__":
    main()
