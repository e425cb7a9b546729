"""A LangGraph checkpoint saver over an Undertext store: ``UndertextSaver``.

Example::

    with undertext.Store.open("state") as store:
        graph = builder.compile(checkpointer=UndertextSaver(store))

``FORMAT.md`` in this folder specifies what the saver stores (its layout in the store and
its record format). The modules, one concept each:

* ``_saver.py``: ``UndertextSaver``, LangGraph's ``BaseCheckpointSaver`` over a store;
* ``_records.py``: the records, both stored formats and the in-memory shape;
* ``_lanes.py``: a thread's records, read from the newest back, and the registry of lanes;
* ``_lazy.py``: ``LazyChannelValues``, channel values read when first accessed;
* ``_caches.py``: the decoded items of item lists, and the copies handed out of them;
* ``_langchain_decode.py``: LangChain messages decoded from LangGraph's msgpack without the
  serializer's per-message work (its native half: ``bindings/python/src/langchain_decode.rs``).
"""

from __future__ import annotations

# The saver first: without LangGraph installed, its import says which extra to install.
from ._saver import VERSION_DIGITS as VERSION_DIGITS
from ._saver import UndertextSaver
from ._lanes import EARLY_KEY as EARLY_KEY
from ._lanes import LANE_KEY as LANE_KEY
from ._lazy import LazyChannelValues, UnloadedChannelValue
from ._records import EMPTY_BLOB as EMPTY_BLOB
from ._records import HEAD_LEN as HEAD_LEN
from ._records import MANIFEST_CHAIN as MANIFEST_CHAIN
from ._records import PATCH_LINKS as PATCH_LINKS
from ._records import SNAPSHOT_LINKS as SNAPSHOT_LINKS
from ._records import VALUE_MIME as VALUE_MIME

__all__ = ["LazyChannelValues", "UnloadedChannelValue", "UndertextSaver"]
