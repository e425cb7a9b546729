"""Ranged blob reads: `get_blob_range` equals Python slicing and reads only the chunks it
needs; `blob_len`; errors; content-defined chunking deduplicates a value that grew."""

import os
import random

import pytest

import undertext

MB = 1 << 20


def test_random_ranges_of_a_1mb_blob_equal_python_slicing(store):
    data = os.urandom(MB)
    bid = store.put_blob("alice", data)
    assert store.blob_len("alice", bid) == MB
    rng = random.Random(20261130)
    ranges = [(0, 0), (0, MB), (MB, MB), (MB - 1, MB), (0, 1)]
    for _ in range(200):
        a, b = sorted((rng.randrange(MB + 1), rng.randrange(MB + 1)))
        ranges.append((a, b))
    for _ in range(100):  # short ranges, many of them across a chunk boundary somewhere
        a = rng.randrange(MB)
        ranges.append((a, min(MB, a + rng.randrange(1, 70_000))))
    for a, b in ranges:
        assert store.get_blob_range("alice", bid, a, b) == data[a:b], (a, b)


def test_ranges_of_a_small_blob_and_of_an_archive_equal_python_slicing(store):
    data = b"a small blob, stored whole"
    bid = store.put_blob("alice", data)
    assert store.blob_len("alice", bid) == len(data)
    for a in range(len(data) + 1):
        for b in range(a, len(data) + 1):
            assert store.get_blob_range("alice", bid, a, b) == data[a:b]
    text = "archived \U0001F600 text\n" * 10_000  # above the chunking threshold
    ref = store.archive("alice", text)
    raw = text.encode()
    assert store.blob_len("alice", ref) == ref.bytes == len(raw)
    assert store.get_blob_range("alice", ref, 70_000, 70_100) == raw[70_000:70_100]
    assert store.get_blob_range("alice", ref.id, len(raw) - 5, len(raw)) == raw[-5:]


def test_a_short_range_of_a_chunked_blob_reads_only_the_chunks_it_overlaps(tmp_path):
    data = os.urandom(MB)
    path = tmp_path / "s"
    with undertext.Store.open(path) as s:
        bid = s.put_blob("alice", data)
    with undertext.Store.open(path) as s:
        before = s.stats()["blob_bodies_read"]
        assert s.get_blob_range("alice", bid, 500_000, 500_010) == data[500_000:500_010]
        ranged = s.stats()["blob_bodies_read"] - before
        assert s.get_blob("alice", bid) == data
        whole = s.stats()["blob_bodies_read"] - before - ranged
    # Chunks are at most 64 KiB, so the whole 1 MiB value is at least 16 of them; ten bytes
    # lie in one chunk, or two when they straddle a cut.
    assert 1 <= ranged <= 2
    assert whole >= MB // (64 << 10)


def test_blob_len_does_not_read_the_blob_body(tmp_path):
    data = os.urandom(MB)
    path = tmp_path / "s"
    with undertext.Store.open(path) as s:
        bid = s.put_blob("alice", data)
    with undertext.Store.open(path) as s:
        before = s.stats()["blob_bodies_read"]
        assert s.blob_len("alice", bid) == MB
        assert s.stats()["blob_bodies_read"] == before


def test_a_range_outside_the_blob_raises_invalid_argument_giving_the_length(store):
    data = os.urandom(MB)
    big = store.put_blob("alice", data)
    small = store.put_blob("alice", b"0123456789")
    for bid, n in ((big, MB), (small, 10)):
        for a, b in ((0, n + 1), (n + 1, n + 2), (5, 4)):
            with pytest.raises(undertext.InvalidArgument, match=f"<= {n}"):
                store.get_blob_range("alice", bid, a, b)
        with pytest.raises(OverflowError):
            store.get_blob_range("alice", bid, -1, 2)
    with pytest.raises(ValueError):  # InvalidArgument is a ValueError
        store.get_blob_range("alice", small, 3, 2)


def test_an_unknown_blob_raises_not_found_and_a_malformed_id_invalid_argument(store):
    absent = undertext.blob_id(b"never stored")
    with pytest.raises(undertext.NotFound):
        store.get_blob_range("alice", absent, 0, 0)
    with pytest.raises(undertext.NotFound):
        store.blob_len("alice", absent)
    with pytest.raises(undertext.InvalidArgument):
        store.get_blob_range("alice", "not-hex", 0, 1)
    with pytest.raises(undertext.InvalidArgument):
        store.blob_len("alice", "ab" * 31)


def test_a_1mb_value_stored_again_with_1kb_appended_costs_only_its_new_chunks(tmp_path):
    first = os.urandom(MB)  # incompressible: storing it whole costs a full megabyte
    grown = first + os.urandom(1024)
    path = tmp_path / "s"
    with undertext.Store.open(path) as s:
        start = s.stats()["log_bytes"]
        a = s.put_blob("alice", first)
        after_first = s.stats()["log_bytes"]
        b = s.put_blob("alice", grown)
        after_grown = s.stats()["log_bytes"]
        assert a != b
    assert after_first - start >= MB
    # The grown value shares every chunk but the last with the first: it costs that chunk
    # (at most 64 KiB), the new kilobyte and a manifest, far below the megabyte it holds.
    assert after_grown - after_first < MB // 8
    with undertext.Store.open(path) as s:
        assert s.get_blob("alice", a) == first
        assert s.get_blob("alice", b) == grown
        assert s.blob_len("alice", b) == MB + 1024
        assert s.get_blob_range("alice", b, MB - 10, MB + 1024) == grown[MB - 10 :]
        assert s.check()["ok"]
