"""Corrupt content: stored bytes that pass every checksum but are not what their record says
raise ``Corrupt`` naming the object in ``what`` (no log position: ``segment`` and ``offset``
are ``None``), with the engine's message."""

import struct

import pytest

import undertext

# CRC-32C (Castagnoli, reflected), as FORMAT.md specifies for every checksum of the log.
_TABLE = []
for _n in range(256):
    _c = _n
    for _ in range(8):
        _c = (_c >> 1) ^ 0x82F63B78 if _c & 1 else _c >> 1
    _TABLE.append(_c)


def crc32c(data, crc=0):
    crc ^= 0xFFFFFFFF
    for b in data:
        crc = _TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


SEGMENT_HEADER = 32
BATCH_HEADER = 32
RECORD_HEADER = 16
BATCH_MAGIC = 0x31425455


def rewrite_byte_with_valid_checksums(segment_path, needle, new_byte):
    """Changes the first byte of `needle` inside a record payload of the segment to
    `new_byte`, then makes the record's CRC and its batch's body and header CRCs match again:
    the log is valid, only the content is not what its id says. Returns True if found."""
    data = bytearray(segment_path.read_bytes())
    at = SEGMENT_HEADER
    while at + BATCH_HEADER <= len(data):
        magic, body_len, count = struct.unpack_from("<III", data, at)
        if magic != BATCH_MAGIC:
            return False
        body = at + BATCH_HEADER
        r = body
        for _ in range(count):
            (length,) = struct.unpack_from("<I", data, r)
            payload = r + RECORD_HEADER
            hit = data.find(needle, payload, payload + length)
            if hit >= 0:
                data[hit] = new_byte
                crc = crc32c(data[payload : payload + length], crc32c(data[r : r + 12]))
                struct.pack_into("<I", data, r + 12, crc)
                struct.pack_into("<I", data, at + 24, crc32c(data[body : body + body_len]))
                struct.pack_into("<I", data, at + 28, crc32c(data[at : at + 28]))
                segment_path.write_bytes(bytes(data))
                return True
            r = payload + ((length + 7) & ~7)
        at = body + body_len
    return False


def test_an_archive_whose_chunks_reassemble_to_other_content_raises_corrupt_naming_it(tmp_path):
    path = tmp_path / "store"
    # Over 64 KiB: the archive is stored as content-defined chunks; uncompressed, so that its
    # bytes can be found in the log.
    lines = [f"line {i:05}: the quick brown fox jumps over the lazy dog\n" for i in range(3000)]
    doc = "".join(lines)
    with undertext.Store.open(path, compression="none") as s:
        a = s.archive("alice", doc)
        assert s.read_context("alice", a.id, 0, 20) == doc[:20]
    # One ASCII letter changed for another in one chunk: still UTF-8, every CRC right.
    segments = sorted((path / "log").glob("*.seg"))
    # (A line split by a chunk boundary is not in one record: the next one is.)
    needles = [f"line {n:05}: the quick".encode() for n in range(1500, 1510)]
    assert any(rewrite_byte_with_valid_checksums(p, n, ord("X")) for n in needles for p in segments)

    with undertext.Store.open(path) as s:
        with pytest.raises(undertext.Corrupt) as caught:
            s.preview("alice", a.id, 200)
        e = caught.value
        assert e.what == f"chunked blob {a.id}"
        assert e.segment is None and e.offset is None
        assert "reassemble" in e.reason
        assert str(e).startswith(f"corrupt content in chunked blob {a.id}: {e.reason} (")
        # Not the index's damage: rebuilding it would not repair content.
        assert "--rebuild" not in str(e)
