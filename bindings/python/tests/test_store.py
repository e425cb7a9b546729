"""Store round trips: open/close, blobs, stats, check, reopen across processes, the lock."""

import os
import subprocess
import sys
import textwrap

import pytest

import undertext


def test_blob_round_trip_returns_the_same_bytes_and_a_content_address(store):
    data = bytes(range(256)) * 40
    bid = store.put_blob("alice", data)
    assert len(bid) == 64 and int(bid, 16) >= 0
    assert bid == undertext.blob_id(data)
    assert store.put_blob("alice", data) == bid  # content addressed: stored once, same id
    assert store.put_blob("alice", bytearray(data)) == bid
    assert store.get_blob("alice", bid) == data
    assert store.contains_blob("alice", bid)
    assert not store.contains_blob("alice", undertext.blob_id(b"never stored"))


def test_another_owners_blob_is_not_found_as_if_it_were_absent(store):
    bid = store.put_blob("alice", b"alice's secret")
    absent = undertext.blob_id(b"never stored")
    assert not store.contains_blob("bob", bid)
    with pytest.raises(undertext.NotFound) as theirs:
        store.get_blob("bob", bid)
    with pytest.raises(undertext.NotFound) as none:
        store.get_blob("bob", absent)
    assert str(theirs.value).replace(bid, "ID") == str(none.value).replace(absent, "ID")
    with pytest.raises(undertext.NotFound):
        store.blob_len("bob", bid)
    with pytest.raises(undertext.NotFound):
        store.get_blob_range("bob", bid, 0, 1)
    bob = store.create_chat("bob")
    with pytest.raises(undertext.NotFound):
        bob.append({"role": "user", "parts": [{"type": "attachment", "mime": "text/plain", "blob": bid}]})
    assert len(bob) == 0


def test_put_blobs_stores_every_blob_in_one_call(store):
    items = [b"tool call", b"tool result", b"", "é".encode()]
    ids = store.put_blobs("alice", items)
    assert [store.get_blob("alice", i) for i in ids] == items


def test_get_blobs_reads_many_blobs_in_order_in_one_call(store):
    items = [b"first", bytes(range(256)) * 300, b"", b"first"]  # one chunked (75 KB), one twice
    ids = store.put_blobs("alice", items)
    assert store.get_blobs("alice", ids) == items
    assert store.get_blobs("alice", []) == []
    ref = store.archive("alice", "archived text")
    assert store.get_blobs("alice", [ref, ids[0]]) == [b"archived text", b"first"]


def test_blob_reads_checked_by_checksum_give_the_same_bytes_and_refuse_an_unknown_check(store):
    items = [b"first", os.urandom(5000), b"x" * 100_000]  # the last one chunked
    ids = store.put_blobs("alice", items)
    assert store.get_blobs("alice", ids, verify="checksum") == items
    assert store.get_blobs("alice", ids, verify="hash") == items
    assert [store.get_blob("alice", i, verify="checksum") for i in ids] == items
    for bad in ("crc", "none", ""):
        with pytest.raises(undertext.InvalidArgument, match='verify: expected "hash" or "checksum"'):
            store.get_blobs("alice", ids, verify=bad)
        with pytest.raises(undertext.InvalidArgument, match='verify: expected "hash" or "checksum"'):
            store.get_blob("alice", ids[0], verify=bad)
    with pytest.raises(undertext.NotFound):
        store.get_blobs("bob", ids, verify="checksum")


def test_get_blobs_of_more_blobs_than_one_engine_batch_keeps_order_and_raises_for_a_late_one(store):
    many = [f"item {i}".encode() * (i % 7 + 1) for i in range(200)]  # batches of 64: 4 of them
    ids = store.put_blobs("alice", many)
    for verify in ("hash", "checksum"):
        assert store.get_blobs("alice", ids, verify=verify) == many
        assert store.get_blobs("alice", ids[::-1], verify=verify) == many[::-1]
    theirs = store.put_blob("bob", b"not alice's")
    with pytest.raises(undertext.NotFound):
        store.get_blobs("alice", ids[:150] + [theirs] + ids[150:])


def test_get_blobs_raises_for_a_blob_not_granted_and_a_bad_id_before_reading(store):
    mine = store.put_blob("alice", b"alice's")
    theirs = store.put_blob("bob", b"bob's")
    with pytest.raises(undertext.NotFound, match=theirs):
        store.get_blobs("alice", [mine, theirs])
    with pytest.raises(undertext.InvalidArgument, match="expected a str of 64 hex digits"):
        store.get_blobs("alice", [mine, 42])


def test_a_missing_blob_is_not_found_and_a_bad_id_is_invalid(store):
    with pytest.raises(undertext.NotFound) as e:
        store.get_blob("alice", undertext.blob_id(b"absent"))
    assert isinstance(e.value, KeyError)
    with pytest.raises(undertext.InvalidArgument) as e:
        store.get_blob("alice", "not-hex")
    assert isinstance(e.value, ValueError)
    with pytest.raises(undertext.InvalidArgument, match="expected a str of 64 hex digits"):
        store.get_blob("alice", 42)


def test_stats_sync_and_check_describe_a_healthy_store(store):
    store.put_blob("alice", os.urandom(1000))  # incompressible
    store.sync()
    stats = store.stats()
    assert stats["segments"] >= 1 and stats["log_bytes"] > 1000
    report = store.check()
    assert report["ok"] and report["problems"] == [] and report["blobs"] >= 1


def test_close_releases_the_lock_and_later_calls_raise_closed(tmp_path):
    path = tmp_path / "s"
    s = undertext.Store.open(path)
    chat = s.create_chat("alice")
    assert not s.closed
    s.close()
    s.close()  # harmless twice
    assert s.closed
    with pytest.raises(undertext.Closed):
        s.put_blob("alice", b"x")
    with pytest.raises(undertext.Closed):
        chat.append(undertext.user("after close"))
    with undertext.Store.open(path) as again:  # the lock was released
        assert again.chat("alice", chat.id).id == chat.id
        # Closed cleanly, with a chat handle still alive: the index opens as the close sealed it.
        assert again.stats()["index_at_open"] == "sealed"


def test_after_a_temporary_store_closes_the_error_says_its_directory_is_gone(tmp_path):
    with undertext.temporary_store() as s:
        chat = s.create_chat("alice")
        path = s.path
    assert not path.exists()
    for call in (lambda: s.put_blob("alice", b"x"), lambda: chat.append(undertext.user("after close"))):
        with pytest.raises(undertext.Closed) as e:
            call()
        msg = str(e.value)
        assert "temporary directory was removed" in msg and "open it again" not in msg, msg
    # A store of one's own still says to open it again.
    own = undertext.Store.open(tmp_path / "own")
    own.close()
    with pytest.raises(undertext.Closed, match="open it again with undertext.Store.open"):
        own.put_blob("alice", b"x")


def test_a_second_open_of_the_same_store_is_locked(tmp_path):
    with undertext.Store.open(tmp_path / "s"):
        with pytest.raises(undertext.Locked) as e:
            undertext.Store.open(tmp_path / "s")
        assert e.value.pid == os.getpid()
        assert "locked" in str(e.value)


def test_opening_a_missing_store_without_create_is_not_found(tmp_path):
    with pytest.raises(undertext.NotFound, match="store at"):
        undertext.Store.open(tmp_path / "absent", create_if_missing=False)


@pytest.mark.parametrize("compression", ["none", "lz4", "zstd", "zstd:19"])
def test_every_compression_reads_back_across_a_reopen(tmp_path, compression):
    data = b"a tool result that compresses well " * 500
    with undertext.Store.open(tmp_path / "s", compression=compression) as s:
        bid = s.put_blob("alice", data)
        size = s.stats()["log_bytes"]
    with undertext.Store.open(tmp_path / "s") as s:
        assert s.get_blob("alice", bid) == data
    assert (size > len(data)) == (compression == "none")


def test_options_are_checked(tmp_path):
    with pytest.raises(undertext.InvalidArgument, match="compression"):
        undertext.Store.open(tmp_path / "s", compression="zstd:99")
    with pytest.raises(undertext.InvalidArgument, match="durability"):
        undertext.Store.open(tmp_path / "s", durability="sometimes")
    with pytest.raises(undertext.InvalidArgument, match="segment_size"):
        undertext.Store.open(tmp_path / "s", segment_size=100)


def test_opening_a_file_as_a_store_is_an_io_failure(tmp_path):
    f = tmp_path / "a-file"
    f.write_text("not a directory")
    with pytest.raises(undertext.IOFailure) as e:
        undertext.Store.open(f)
    assert isinstance(e.value, OSError)
    assert "expected a directory" in str(e.value) and "found a file" in str(e.value)
    assert f.read_text() == "not a directory"


def _child(code: str, path) -> str:
    script = textwrap.dedent(code)
    r = subprocess.run(
        [sys.executable, "-c", script, str(path)], capture_output=True, text=True, timeout=120, check=False
    )
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_a_store_written_by_one_process_reads_back_in_another(tmp_path):
    path = tmp_path / "shared"
    out = _child(
        """
        import sys, undertext
        with undertext.Store.open(sys.argv[1], durability="immediate") as s:
            c = s.create_chat("alice", title="from the child", extra={"thread": "t-1"})
            c.append(undertext.user("written in process one"))
            c.append(undertext.assistant("ünïcödé 😀"))
            print(c.id, s.put_blob("alice", b"child blob"))
        """,
        path,
    )
    chat_id, bid = out.split()
    with undertext.Store.open(path) as s:
        chat = s.chat("alice", chat_id)
        assert [m.text for m in chat] == ["written in process one", "ünïcödé 😀"]
        assert chat.meta.extra == {"thread": "t-1"}
        assert s.get_blob("alice", bid) == b"child blob"
        chat.append(undertext.user("and appended in process two"))
    out = _child(
        """
        import sys, undertext
        with undertext.Store.open(sys.argv[1]) as s:
            (info,) = s.find_chats("alice", extra={"thread": "t-1"})
            print(len(s.chat("alice", info.id)))
        """,
        path,
    )
    assert out.strip() == "3"


def test_a_store_held_by_another_process_is_locked_with_its_pid(tmp_path):
    path = tmp_path / "held"
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, undertext\n"
            "s = undertext.Store.open(sys.argv[1])\n"
            "print('open', flush=True)\n"
            "sys.stdin.readline()\n"
            "s.close()\n",
            str(path),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout.readline().strip() == "open"
        with pytest.raises(undertext.Locked) as e:
            undertext.Store.open(path)
        assert e.value.pid == child.pid
    finally:
        child.stdin.write("\n")
        child.stdin.close()
        assert child.wait(timeout=60) == 0
    with undertext.Store.open(path):
        pass


def test_a_flipped_byte_in_a_sealed_segment_reads_as_corrupt(tmp_path):
    path = tmp_path / "s"
    payload = os.urandom(3000)
    with undertext.Store.open(path, segment_size=4096) as s:
        bid = s.put_blob("alice", payload)
        for i in range(6):  # roll over to later segments, so the first one is sealed
            s.put_blob("alice", os.urandom(3000) + bytes([i]))
    segs = sorted((path / "log").iterdir())
    first = segs[0]
    raw = bytearray(first.read_bytes())
    at = raw.find(payload[:64])
    assert at >= 0, "the incompressible blob is stored as is"
    raw[at + 100] ^= 0x01
    first.write_bytes(bytes(raw))
    with undertext.Store.open(path, segment_size=4096) as s:
        with pytest.raises(undertext.Corrupt) as e:
            s.get_blob("alice", bid)
        assert e.value.segment == int(first.stem)
        # A read that checks only the record's checksum refuses the damaged bytes alike.
        with pytest.raises(undertext.Corrupt) as e:
            s.get_blob("alice", bid, verify="checksum")
        assert e.value.segment == int(first.stem)
        with pytest.raises(undertext.Corrupt):
            s.get_blobs("alice", [bid], verify="checksum")
        assert not s.check()["ok"]


def _crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli), the checksum of the log's frames (engine/FORMAT.md)."""
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def test_a_segment_of_a_newer_format_version_is_refused_as_unsupported(tmp_path):
    path = tmp_path / "s"
    with undertext.Store.open(path) as s:
        s.put_blob("alice", b"written by version 1")
    (seg,) = sorted((path / "log").iterdir())
    raw = bytearray(seg.read_bytes())
    assert raw[:8] == b"UTXTSEG\x00"
    raw[8:12] = (2).to_bytes(4, "little")  # a format version this build does not know
    raw[28:32] = _crc32c(bytes(raw[:28])).to_bytes(4, "little")  # a valid header otherwise
    seg.write_bytes(bytes(raw))
    with pytest.raises(undertext.UnsupportedVersion) as e:
        undertext.Store.open(path)
    assert (e.value.expected, e.value.found) == (1, 2)
    assert str(seg) in str(e.value)


def test_a_deleted_chat_is_gone_and_gc_reclaims_its_bytes(tmp_path):
    path = tmp_path / "s"
    with undertext.Store.open(path) as s:
        keep = s.create_chat("alice", title="keep")
        keep.append(undertext.user("kept"))
        gone = s.create_chat("alice", title="gone")
        gone.append(undertext.user(os.urandom(50_000).hex()))
        snap = gone.snapshot()
        s.delete_chat("alice", gone.id)
        with pytest.raises(undertext.NotFound):
            s.chat("alice", gone.id)
        assert [c.id for c in s.chats("alice")] == [keep.id]
        assert snap[0].text  # a snapshot taken before still reads
        with pytest.raises(undertext.Locked):
            undertext.Store.gc(path)
    report = undertext.Store.gc(path)
    assert report["deleted_chats"] == 1
    assert report["log_bytes_after"] < report["log_bytes_before"]
    with undertext.Store.open(path) as s:
        assert [m.text for m in s.chat("alice", keep.id)] == ["kept"]
        assert s.check()["ok"]


def test_a_temporary_store_is_a_real_store_removed_on_exit():
    with undertext.temporary_store(durability="none") as store:
        path = store.path
        chat = store.create_chat("alice")
        chat.append(undertext.user("hi"))
        assert path.exists() and len(chat) == 1
    assert store.closed
    assert not path.exists()


def test_find_chats_answers_what_a_filter_over_every_chat_answers_through_edits_deletes_and_reopen(tmp_path):
    import random

    rng = random.Random(18)
    vals = ["a", "b", "", "x" * 300]
    path = tmp_path / "find"

    def meta():
        extra = {k: rng.choice(vals) for k in ("k1", "k2") if rng.random() < 0.7}
        return {"title": rng.choice(vals), "extra": extra}

    def check(s):
        for owner in ("alice", "bob"):
            every = list(s.chats(owner))
            for title in [None, *vals]:
                for extra in [None, {"k1": "a"}, {"k2": "b", "k1": "a"}, {"k2": "x" * 300}, {"zz": "a"}]:
                    want = [
                        c.id
                        for c in every
                        if (title is None or c.title == title)
                        and all(c.extra.get(k) == v for k, v in (extra or {}).items())
                    ]
                    assert [c.id for c in s.find_chats(owner, title=title, extra=extra)] == want, (owner, title, extra)

    with undertext.Store.open(path) as s:
        made = [(o, s.create_chat(o, **meta()).id) for o in rng.choices(["alice", "bob"], k=40)]
        check(s)
        for o, cid in rng.sample(made, 15):
            s.chat(o, cid).set_meta(**meta())
        for o, cid in rng.sample(made, 8):
            s.delete_chat(o, cid)
        check(s)
    with undertext.Store.open(path) as s:
        check(s)


def test_the_installed_package_ships_the_api_reference_its_docstring_names():
    import importlib.resources

    assert "API.md" in undertext.__doc__
    api = importlib.resources.files("undertext").joinpath("API.md").read_text(encoding="utf-8")
    assert "Store.open" in api and "read_context" in api and len(api) > 10_000


def test_the_installed_package_ships_the_langgraph_saver_s_record_format():
    import importlib.resources

    spec = (importlib.resources.files("undertext") / "langgraph" / "FORMAT.md").read_text(encoding="utf-8")
    assert "## Records (format 2)" in spec and "SNAPSHOT_LINKS" in spec
