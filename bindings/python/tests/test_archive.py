"""Archives and read_context: exact ranges in every unit, equal to Python slicing by default."""

import pytest

import undertext

UNICODE_TEXTS = [
    "plain ascii text\nsecond line\n",
    "emoji 😀🎉👩‍👩‍👧 and flags 🇫🇷🇯🇵 in a row",
    "CJK 漢字かなカナ한국어 混在テキスト",
    "combining marks: e\u0301 a\u0308 n\u0303 Z\u0351\u0352\u0353 and precomposed é",
    "mixed\r\nline\rends\n\n😀\u200d\U0001F9D1\u0301漢",
]


@pytest.mark.parametrize("text", UNICODE_TEXTS)
def test_read_context_in_chars_equals_python_slicing(store, text):
    doc = text * 50  # spans several offset-index strides
    a = store.archive("alice", doc)
    assert a.chars == len(doc)
    assert a.bytes == len(doc.encode())
    assert a.utf16_units == len(doc.encode("utf-16-le")) // 2
    n = len(doc)
    cuts = sorted({0, 1, 2, 3, 5, 7, 11, n // 3, n // 2, n - 3, n - 1, n})
    for i in cuts:
        for j in cuts:
            if i <= j:
                assert store.read_context("alice", a.id, i, j) == doc[i:j]
    assert store.read_context("alice", a, 0, n, unit="chars") == doc


def test_read_context_in_utf16_bytes_and_lines(store):
    doc = "ab😀cd\n漢字\nlast line"
    a = store.archive("alice", doc)
    u16 = doc.encode("utf-16-le")
    assert store.read_context("alice", a, 2, 4, unit="utf16") == u16[4:8].decode("utf-16-le") == "😀"
    with pytest.raises(undertext.InvalidArgument, match="surrogate"):
        store.read_context("alice", a, 3, 4, unit="utf16")
    b = doc.encode()
    assert store.read_context("alice", a, 2, 6, unit="bytes") == b[2:6].decode()
    with pytest.raises(undertext.InvalidArgument):
        store.read_context("alice", a, 3, 4, unit="bytes")  # splits a UTF-8 sequence
    assert store.read_context("alice", a, 1, 2, unit="lines") == "漢字\n"
    assert a.lines == 3


def test_read_context_errors_say_what_is_wrong(store):
    a = store.archive("alice", "short")
    with pytest.raises(undertext.InvalidArgument, match="5"):
        store.read_context("alice", a, 0, 6)
    with pytest.raises(undertext.InvalidArgument, match="unit"):
        store.read_context("alice", a, 0, 1, unit="words")
    with pytest.raises(undertext.NotFound):
        store.read_context("mallory", a, 0, 1)  # another owner's archive
    with pytest.raises(OverflowError):
        store.read_context("alice", a, -1, 2)


def test_a_malformed_archive_id_is_reported_as_an_archive_id_wherever_one_is_taken(store, chat):
    a = store.archive("alice", "some text\n")
    short, bad_digit = "abc", "g" + a.id[1:]
    calls = {
        "read_context": lambda i: store.read_context("alice", i, 0, 1),
        "archive_ref": lambda i: store.archive_ref("alice", i),
        "preview": lambda i: store.preview("alice", i),
        "pin": lambda i: chat.pin(i, 0, 1),
        "unpin": lambda i: chat.unpin(i, 0, 1),
        "a tool result's archive": lambda i: chat.append(
            {"role": "tool", "parts": [{"type": "tool_result", "call_id": "c", "text": "p", "archive": i}]}
        ),
    }
    for name, call in calls.items():
        with pytest.raises(undertext.InvalidArgument, match="archive id: expected 64 hex digits, found 3 characters"):
            call(short)
        with pytest.raises(undertext.InvalidArgument, match="archive id: expected a hex digit at position 0") as e:
            call(bad_digit)
        assert "blob" not in str(e.value), name
        with pytest.raises(undertext.InvalidArgument, match="archive id: expected a str of 64 hex digits or an ArchiveRef, found int"):
            call(7)
    # A blob id is still a blob id.
    with pytest.raises(undertext.InvalidArgument, match="blob id: expected 64 hex digits"):
        store.get_blob("alice", short)


def test_archives_are_content_addressed_and_owner_scoped(store):
    a = store.archive("alice", "same text")
    b = store.archive("bob", "same text")
    assert a.id == b.id and a == b
    assert store.archive_ref("alice", a.id) == a
    with pytest.raises(undertext.NotFound):
        store.archive_ref("carol", a.id)


def test_a_long_tool_result_is_archived_on_append_and_reads_back_whole(tmp_path):
    output = "".join(f"line {i}: test result ok 😀\n" for i in range(2000))
    with undertext.Store.open(tmp_path / "s", archive_threshold=1024, preview_chars=300) as store:
        chat = store.create_chat("alice")
        chat.append(undertext.tool_call("c1", "sh", {"cmd": "cargo test"}))
        seq = chat.append(undertext.tool_result("c1", output))
        part = chat[seq].parts[0]
        assert "archive" in part and len(part["text"]) < len(output)
        ref = part["archive"]
        assert ref["chars"] == len(output) and ref["lines"] == 2000
        assert store.read_context("alice", ref["id"], 0, ref["chars"]) == output
        i = output.index("line 1234")
        assert store.read_context("alice", ref["id"], i, i + 9) == "line 1234"
        # The message can be stored again with its archive reference.
        again = chat.append({"role": "tool", "parts": [part]})
        assert chat[again].parts[0]["archive"]["id"] == ref["id"]


def test_preview_names_its_archive_and_finds_the_query(store):
    doc = "".join(f"row {i}\n" for i in range(5000)) + "the needle is here\n" + "tail\n" * 10
    a = store.archive("alice", doc)
    p = store.preview("alice", a, max_chars=400, query="needle")
    assert a.id in p and "the needle is here" in p and len(p) < len(doc)
    assert store.archive("alice", store.preview("alice", a, 400)) == a  # a preview archives to its original


def test_pins_are_kept_and_removed(chat, store):
    a = store.archive("alice", "x" * 1000)
    chat.pin(a, 10, 20)
    chat.pin(a.id, 0, 1, unit="lines")
    pins = chat.pins
    assert [(p.archive, p.start, p.end, p.unit) for p in pins] == [(a.id, 10, 20, "chars"), (a.id, 0, 1, "lines")]
    chat.unpin(a, 10, 20)
    assert [(p.start, p.unit) for p in chat.pins] == [(0, "lines")]
    with pytest.raises(undertext.InvalidArgument):
        chat.pin(a, 0, 5000)
    other = store.archive("bob", "bob's text only")
    with pytest.raises(undertext.NotFound):
        chat.pin(other, 0, 1)
