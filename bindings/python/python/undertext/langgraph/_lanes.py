"""Lanes: the records of one (thread, namespace) pair, one engine chat of the saver's owner,
read from the newest back; and the registry of an owner's lanes in an open store.

A ``_Lane`` decodes its chat's records lazily, newest first, and stops as soon as a read
has what it needs (``FORMAT.md``, "Reading"): the latest checkpoint of a long thread
reads only the newest records. It resolves what records name in other records (a
checkpoint stored as a patch, an item list's chain of links) and keeps the early writes.
``_Registry`` finds a thread's lanes when it is first used and shares them between every
saver on the store.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any, Callable, Optional

from ._caches import _Bounded
from ._records import EMPTY_BLOB, VERIFY, _apply, _decode, _early_of

#: ``extra`` key marking a chat as a saver lane; its value is the checkpoint namespace.
LANE_KEY = "undertext.langgraph"

#: ``extra`` key (value ``"1"``) of a lane whose newest record always carries the lane's
#: early-writes set (``"o"``). Lanes created before that key existed lack it: their set is
#: computed once from the whole chat, and the key is set after the next append.
EARLY_KEY = "undertext.langgraph.o"

_BATCH = 64  # records decoded per engine read while walking backwards

#: Seconds a lane found or created stays as fresh as the store said, for its first sync.
_FRESH = 0.1


class _Lane:
    """The records of one (thread, namespace) chat, decoded lazily from the newest back.

    ``recs`` holds decoded records for seqs in ``[lo, hi)``; ``hi`` is the chat length
    when last synced. Everything older than ``lo`` is still unread.
    """

    def __init__(
        self,
        chat: Any,
        thread_id: str,
        ns: str,
        tracked: bool = True,
        read_blobs: Optional[Callable[[list[str]], list[bytes]]] = None,
    ) -> None:
        self.chat = chat
        self.read_blobs = read_blobs  # reads the blobs of an item list's manifest chain
        self.thread_id = thread_id
        self.ns = ns
        # The chat has EARLY_KEY: its newest record carries the early-writes set.
        self.tracked = tracked
        self.lock = threading.RLock()
        self.deleted = False  # the chat was deleted (delete_thread): the lane reads as empty
        # When the chat was brought up to date by the call that found or created the lane and
        # syncs it next (``time.monotonic()``; 0: not): that sync, if it follows within
        # ``_FRESH`` seconds, asks nothing of the store (on a fleet store, a round trip less).
        self.fresh = 0.0
        self.reset()

    def reset(self) -> None:
        self.revision = self.chat.revision
        self.hi = len(self.chat)
        self.lo = self.hi
        self.recs: dict[int, dict[str, Any]] = {}
        self.floor = 0  # records below are dead (prune)
        self.dead: set[int] = set()  # seqs killed by tombstones
        self.writes: dict[str, list[int]] = {}  # checkpoint id -> seqs of its write records
        self.latest_mx: Optional[str] = None  # running max id of the newest checkpoint record
        self.mx_known = self.hi == 0
        # Checkpoint ids that may have live write records but no live checkpoint record
        # (writes stored before their checkpoint); None until read from the newest record.
        # Checkpoint id -> seq of its first write record, for ids that may have live write
        # records but no live checkpoint record (writes stored before their checkpoint);
        # None until read from the newest record.
        self.early: Optional[dict[str, int]] = None
        # Item lists (see ``item_ids``): the values this process put, by (seq, channel):
        # (the list's items, the ids of their blobs); resolved item ids; (base seq,
        # channel) -> (seq, n): the base's list is that record's first n items; records
        # below the floor read to resolve a list; objects written per checkpoint id.
        self.live: _Bounded = _Bounded(8)
        self.resolved: _Bounded = _Bounded(64)
        self.hints: _Bounded = _Bounded(1024)
        self.below: dict[int, dict[str, Any]] = {}
        self.written: _Bounded = _Bounded(8)

    # -- keeping the cache in step with the chat -------------------------------------------

    def sync(self) -> None:
        """Notices truncations (reset) and records appended by other handles, in this
        process or another one (the held ``Chat`` is brought up to date first: on a fleet
        store one round trip, on an embedded store nothing to fetch)."""
        if self.deleted:
            self.hi = self.lo = 0
            self.recs = {}
            self.writes = {}
            return
        fresh, self.fresh = self.fresh, 0.0
        if not fresh or time.monotonic() - fresh > _FRESH:
            self.chat.refresh()
        if self.chat.revision != self.revision:
            self.reset()
            return
        n = len(self.chat)
        if n > self.hi:
            self.early = None  # appended by another handle: read again from the newest record
            if self.lo == self.hi:
                self.lo = self.hi = n
                self.mx_known = False
            else:
                for m in self.chat.messages(self.hi, n):
                    rec = _decode(m)
                    self._learn(m.seq, rec)
                    if rec["k"] == "c":
                        self.latest_mx = rec["mx"]
                self.hi = n

    def current_mx(self) -> Optional[str]:
        """The running maximum id stored in the newest live checkpoint record."""
        if not self.mx_known:
            self.latest_mx = None
            for _seq, rec in self.walk():
                if rec["k"] == "c":
                    self.latest_mx = rec["mx"]
                    break
            self.mx_known = True
        return self.latest_mx

    def early_ids(self) -> dict[str, int]:
        """Checkpoint ids that may have writes stored before their checkpoint record, each
        with the seq of its first write record (a superset: ``put`` looks for such writes
        only for these ids, reading the records from that seq up, and for ids not above
        the lane's running maximum, which may be a checkpoint put again)."""
        if self.early is None:
            if self.hi == 0:
                self.early = {}
            elif self.tracked:
                rec = self.record_at(self.hi - 1)
                self.early = _early_of(rec, self.record_at)
            else:
                # A lane written before the set was kept: read it whole, once.
                self.decode_all()
                self.early = self.exact_early()
        return self.early

    def exact_early(self, extra: Sequence[tuple[int, dict[str, Any]]] = ()) -> dict[str, int]:
        """The early writes of a fully decoded lane (with ``extra`` records after it)."""
        live = sorted(list(self.walk()) + list(extra), key=lambda sr: sr[0])
        have = {r["id"] for _s, r in live if r["k"] == "c"}
        out: dict[str, int] = {}
        for seq, r in live:
            if r["k"] == "w" and r["c"] not in have:
                out.setdefault(r["c"], seq)
        return out

    def decode_all(self) -> None:
        """Decodes every live record (down to the floor)."""
        while self._extend_down():
            pass

    def decode_down_to(self, seq: int) -> None:
        """Decodes every live record from ``seq`` up."""
        while self.lo > seq and self._extend_down():
            pass

    def _learn(self, seq: int, rec: dict[str, Any]) -> None:
        self.recs[seq] = rec
        k = rec["k"]
        if k == "w":
            self.writes.setdefault(rec["c"], []).append(seq)
        elif k == "d":
            self.dead.update(rec["s"])
        elif k == "x":
            self.floor = max(self.floor, rec["f"])

    def appended(self, seq: int, rec: dict[str, Any]) -> None:
        """Records our own append at ``seq`` (the chat's last record)."""
        if self.lo == self.hi == seq:
            self.lo = seq
        self.hi = seq + 1
        self._learn(seq, rec)
        if rec["k"] == "c":
            self.latest_mx = rec["mx"]
            self.mx_known = True

    def _extend_down(self) -> bool:
        """Decodes the next batch of older records; False when nothing is left."""
        bottom = max(self.floor, 0)
        if self.lo <= bottom:
            return False
        start = max(bottom, self.lo - _BATCH)
        msgs = self.chat.messages(start, self.lo)
        for m in reversed(msgs):
            self._learn(m.seq, _decode(m))
        self.lo = start
        return True

    def walk(self) -> Iterator[tuple[int, dict[str, Any]]]:
        """Live records, newest first, decoding older batches only when reached."""
        seq = self.hi - 1
        while True:
            if seq < self.floor:
                return
            if seq < self.lo and not self._extend_down():
                return
            if seq < self.floor:
                return
            rec = self.recs.get(seq)
            if rec is not None and seq not in self.dead:
                if "cd" in rec:
                    self.resolve(seq, rec)
                yield seq, rec
            seq -= 1

    def resolve(self, seq: int, rec: dict[str, Any]) -> None:
        """Fills in a checkpoint record stored as a patch of its parent's (``cd``): its
        parent id, checkpoint and metadata, from the chain of records down to one stored
        whole (at most ``PATCH_LINKS``), each resolved in place on the way up."""
        chain = [(seq, rec)]
        while True:
            b = chain[-1][1]["cd"]["b"]
            base = self.record_at(b)
            if "cd" not in base:
                break
            chain.append((b, base))
        for _s, r in reversed(chain):
            cd = r["cd"]
            base = self.record_at(cd["b"])
            r["p"] = base["id"]
            r["c"] = _apply(base["c"], cd.get("c", {}))
            r["m"] = _apply(base["m"], cd.get("m", {}))
            r["_d"] = cd["d"]
            r["_cd"] = cd
            del r["cd"]

    def hide(self, seqs: Sequence[int], below: int = 0) -> None:
        """Hides the records at ``seqs`` and every record below ``below`` (one engine
        transaction, guarded by the revision this lane read) and forgets them as live,
        keeping the cache: the records read so far stay valid (a hide moves the revision,
        which ``sync`` would take for a truncation by another handle)."""
        ranges: list[tuple[int, int]] = [(0, below)] if below > 0 else []
        for s in sorted(set(seqs)):
            if ranges and ranges[-1][1] == s:
                ranges[-1] = (ranges[-1][0], s + 1)
            else:
                ranges.append((s, s + 1))
        if not ranges:
            return
        self.revision = self.chat.hide(ranges, expected_revision=self.revision)
        self.dead.update(seqs)
        self.floor = max(self.floor, below)

    def record_at(self, seq: int) -> dict[str, Any]:
        """The decoded record at ``seq``, live or not (a list's base may be below the
        floor, killed by a tombstone or hidden: its bytes are still in the chat)."""
        rec = self.recs.get(seq)
        if rec is None and self.floor <= seq < self.lo:
            self.decode_down_to(seq)
            rec = self.recs.get(seq)
        if rec is None:
            rec = self.below.get(seq)
            if rec is None:
                for m in self.chat.messages(max(0, seq - _BATCH + 1), seq + 1, hidden=True):
                    self.below[m.seq] = _decode(m)
                rec = self.below[seq]
        return rec

    # -- item lists ----------------------------------------------------------------------

    def _known(self, key: tuple[int, str]) -> Optional[tuple[str, ...]]:
        got: Optional[tuple[str, ...]] = self.resolved.get(key)
        if got is None:
            hint = self.hints.get(key)
            if hint is not None:
                child = self.resolved.get((hint[0], key[1]))
                if child is not None:
                    got = child[: hint[1]]
                    # And the hint for this list's own base (a listing goes on down the chain).
                    e = self.record_at(key[0])["ch"].get(key[1])
                    if type(e) is dict:
                        self.remember(key[0], key[1], e, got)
                    else:
                        self.resolved[key] = got
        return got

    def remember(self, seq: int, ch: str, entry: dict[str, Any], ids: tuple[str, ...]) -> None:
        """Caches the item ids of ``(seq, ch)``; a base kept whole is their prefix."""
        self.resolved[(seq, ch)] = ids
        if "b" in entry and "k" not in entry:
            self.hints[(entry["b"], ch)] = (seq, len(ids) - len(entry["i"]))

    def item_ids(self, seq: int, ch: str) -> tuple[str, ...]:
        """The item blob ids of the list value of ``ch`` at record ``seq``: its entry's
        base list (the record ``b``, cut to ``k`` items, or the manifest blob ``m``), then
        its own items ``i``; a chain down to a root entry (no ``b``), a manifest, or a
        list already resolved."""
        got = self._known((seq, ch))
        if got is not None:
            return got
        links: list[dict[str, Any]] = []
        ids: list[str] = []
        s = seq
        while True:
            e = self.record_at(s)["ch"].get(ch)
            if type(e) is not dict:
                raise ValueError(f"record {s} of thread {self.thread_id!r} has no item list for channel {ch!r}")
            links.append(e)
            if "m" in e:  # the kept list in a manifest blob, whole or a delta over a chain
                assert self.read_blobs is not None
                ids = []
                # The chain's blobs in one engine call (up to MANIFEST_CHAIN + 1 of them).
                for n, data in enumerate(self.read_blobs([*e.get("mb", ()), e["m"]])):
                    at = 0
                    if n > 0:
                        del ids[int.from_bytes(data[:4], "little") :]
                        at = 4
                    ids.extend(data[i : i + 32].hex() for i in range(at, len(data), 32))
                break
            b = e.get("b")
            if b is None:
                break
            base = self._known((b, ch))
            if base is not None:
                ids = list(base)
                break
            s = b
        for e in reversed(links):
            k = e.get("k")
            if k is not None:
                del ids[k:]
            ids.extend(e["i"])
        out = tuple(ids)
        self.remember(seq, ch, links[0], out)
        return out

    def manifest_below(self, seq: int, ch: str) -> Optional[tuple[list[str], Sequence[str]]]:
        """The newest manifest of the item list of ``ch`` at record ``seq`` or below it:
        its chain of blobs (root first, its own last) and the ids it gives; None when the
        chain of links ends without one."""
        s = seq
        while True:
            e = self.record_at(s)["ch"].get(ch)
            if type(e) is not dict:
                return None
            if "m" in e:
                full = self.item_ids(s, ch)
                return [*e.get("mb", ()), e["m"]], full[: len(full) - len(e.get("i", ()))]
            b = e.get("b")
            if b is None:
                return None
            s = b

    # -- checkpoints ---------------------------------------------------------------------

    def checkpoints_newest_first(self) -> Iterator[tuple[int, dict[str, Any]]]:
        """Live checkpoint records in descending id order, one per id."""
        seen: set[str] = set()
        for seq, rec in self.walk():
            if rec["k"] != "c":
                continue
            if rec["id"] != rec["mx"]:
                break  # out of id order from here: sort the whole chat instead
            if rec["id"] in seen:
                continue
            seen.add(rec["id"])
            yield seq, rec
        else:
            return
        rest = [(s, r) for s, r in self.walk() if r["k"] == "c"]
        best: dict[str, tuple[int, dict[str, Any]]] = {}
        for s, r in rest:
            if r["id"] not in best:  # newest record of an id wins
                best[r["id"]] = (s, r)
        for cid in sorted(best, reverse=True):
            if cid not in seen:
                yield best[cid]

    def find(self, checkpoint_id: Optional[str]) -> Optional[tuple[int, dict[str, Any]]]:
        """The live record of a checkpoint (the latest by id when ``checkpoint_id`` is None)."""
        if checkpoint_id is None:
            return next(self.checkpoints_newest_first(), None)
        for seq, rec in self.walk():
            if rec["k"] == "c" and rec["id"] == checkpoint_id:
                return seq, rec
        return None

    def live_writes(self, checkpoint_seq: int, checkpoint: dict[str, Any]) -> list[tuple[int, dict[str, Any]]]:
        """Write records of a checkpoint: those stored before it, copied into its record
        (``pw``), and those after it (all decoded once the checkpoint was found)."""
        early = [(pw, self.record_at(pw)) if type(pw) is int else (int(pw[0]), pw[1]) for pw in checkpoint.get("pw", ())]
        return early + [
            (s, self.recs[s])
            for s in self.writes.get(checkpoint["id"], ())
            if s > checkpoint_seq and s >= self.floor and s not in self.dead and s in self.recs
        ]

    def orphan_writes(self, checkpoint_id: str) -> list[list[Any]]:
        """Live decoded write records for a checkpoint that has no record yet, as
        ``[seq, record]`` pairs. LangGraph may store the writes of a checkpoint (an
        interrupt, for one) before the checkpoint itself."""
        return [
            [s, self.recs[s]]
            for s in self.writes.get(checkpoint_id, ())
            if s >= self.floor and s not in self.dead and s in self.recs
        ]


class _Registry:
    """The lanes of one owner in one open store, shared by every saver on that store in
    the process (a store has one process; this makes it one map), so a thread created
    through one saver is seen by the others. A thread's lanes are found when it is first
    used (an index lookup by title, ``Store.find_chats``); only a listing across threads
    reads every chat of the owner, once."""

    def __init__(self, store: Any, owner: str) -> None:
        self.store = store
        self.owner = owner
        self.lock = threading.RLock()
        self.lanes: dict[tuple[str, str], _Lane] = {}
        self.threads: dict[str, set[str]] = {}
        self.found: set[str] = set()  # threads whose lanes were looked up
        self.found_all = False

    def _add(self, infos: Any, skip: Any = ()) -> set[_Lane]:
        """Adds a lane per chat of ``infos`` that is one; returns them. The call that
        returned ``infos`` brought each chat up to date, so it is opened as that call found it
        (``refresh=False``: on a fleet store no second round trip; a write since is seen at the
        lane's next sync, which refreshes)."""
        added: set[_Lane] = set()
        for info in infos:  # newest activity first: of two chats of one lane, the older wins
            ns = info.extra.get(LANE_KEY)
            if ns is None or info.title in skip:
                continue
            self.threads.setdefault(info.title, set()).add(ns)
            tracked = info.extra.get(EARLY_KEY) == "1"
            chat = self.store.chat(self.owner, info.id, refresh=False)
            lane = self.lanes[(info.title, ns)] = _Lane(chat, info.title, ns, tracked, self.read_blobs)
            added.add(lane)
        return added

    def _find(self, thread_id: Optional[str]) -> set[_Lane]:
        """Loads the lanes of ``thread_id`` (None: of every thread) if not done yet; returns
        the lanes it added."""
        if self.found_all or thread_id in self.found:
            return set()
        if thread_id is None:
            added = self._add(self.store.chats(self.owner), skip=set(self.found))
            self.found_all = True
        else:
            added = self._add(self.store.find_chats(self.owner, title=thread_id))
            self.found.add(thread_id)
        return added

    def read_blobs(self, blob_ids: list[str]) -> list[bytes]:
        """The bytes of ``blob_ids`` (the empty blob is not stored), read in one call."""
        stored = [b for b in blob_ids if b != EMPTY_BLOB]
        got = dict(zip(stored, self.store.get_blobs(self.owner, stored, verify=VERIFY))) if stored else {}
        return [got.get(b, b"") for b in blob_ids]

    def lane(self, thread_id: str, ns: str, create: bool) -> Optional[_Lane]:
        with self.lock:
            added = self._find(thread_id)
            lane = self.lanes.get((thread_id, ns))
            if lane is None and create:
                chat = self.store.create_chat(self.owner, title=thread_id, extra={LANE_KEY: ns, EARLY_KEY: "1"})
                lane = _Lane(chat, thread_id, ns, True, self.read_blobs)
                self.lanes[(thread_id, ns)] = lane
                self.threads.setdefault(thread_id, set()).add(ns)
                added.add(lane)
            if lane is not None and lane in added:
                lane.fresh = time.monotonic()  # the caller syncs it next
            return lane

    def drop(self, thread_id: str) -> list[_Lane]:
        """Forgets a thread's lanes (a later write creates new chats) and returns them."""
        with self.lock:
            self._find(thread_id)
            lanes = [self.lanes.pop((thread_id, n)) for n in sorted(self.threads.pop(thread_id, ()))]
        return lanes

    def restore(self, thread_id: str, lanes: list[_Lane]) -> None:
        """Takes back lanes ``drop`` returned whose chats a failed delete left in the store
        (a lane a write made again meanwhile stays)."""
        with self.lock:
            for lane in lanes:
                if (thread_id, lane.ns) not in self.lanes:
                    self.lanes[(thread_id, lane.ns)] = lane
                    self.threads.setdefault(thread_id, set()).add(lane.ns)

    def lanes_of(self, thread_id: Optional[str], ns: Optional[str]) -> list[_Lane]:
        with self.lock:
            added = self._find(thread_id)
            if thread_id is None:
                lanes = list(self.lanes.values())
            else:
                lanes = [self.lanes[(thread_id, n)] for n in sorted(self.threads.get(thread_id, ()))]
            out = [ln for ln in lanes if ns is None or ln.ns == ns]
            for ln in out:
                if ln in added:
                    ln.fresh = time.monotonic()  # the caller syncs it next
        return out
