"""A client that knows nothing of Rust: Python's ctypes loads the cdylib and runs a short
scenario through the C ABI (append, view under a budget, read_context, a binary blob read
by byte range), checking each
result. Usage: python3 ffi/tests/ctypes_client.py path/to/libundertext_ffi.so
Prints "ctypes_client: N passed, 0 failed"; exits nonzero on any failure."""

import ctypes as C
import json
import sys
import tempfile

lib = C.CDLL(sys.argv[1])

OK, NOT_FOUND, OUT_OF_RANGE, STALE_HANDLE, INVALID_UTF8 = 0, 7, 4, 6, 2
ROLE_SYSTEM, ROLE_USER, ROLE_ASSISTANT, ROLE_TOOL = 0, 1, 2, 3
PART_TOOL_CALL, PART_TOOL_RESULT = 1, 2
UNIT_CHARS, UNIT_UTF16, UNIT_LINES = 0, 1, 3
FORMAT_OPENAI = 1
DECISION_FITS = 0


class Str(C.Structure):
    _fields_ = [("ptr", C.c_void_p), ("len", C.c_size_t)]


class Buf(C.Structure):
    _fields_ = [("ptr", C.POINTER(C.c_uint8)), ("len", C.c_size_t)]


class Handle(C.Structure):
    _fields_ = [("id", C.c_uint64)]


class Options(C.Structure):
    _fields_ = [("durability", C.c_uint32), ("create_if_missing", C.c_uint8), ("preallocate", C.c_uint8),
                ("segment_size", C.c_uint64), ("archive_threshold", C.c_uint64), ("preview_chars", C.c_uint64),
                ("guard_preview_chars", C.c_uint64)]


class Part(C.Structure):
    _fields_ = [("kind", C.c_uint32), ("flag", C.c_uint8), ("text", Str), ("id", Str), ("name", Str),
                ("args", Str), ("call_id", Str)]


class Message(C.Structure):
    _fields_ = [("role", C.c_uint32), ("parts", C.POINTER(Part)), ("n_parts", C.c_size_t)]


class BlobId(C.Structure):
    _fields_ = [("bytes", C.c_uint8 * 32)]


class Budget(C.Structure):
    _fields_ = [("window", C.c_uint64), ("reserve_output", C.c_uint64), ("soft", C.c_double),
                ("target", C.c_double), ("hard", C.c_double), ("tool_schemas", C.POINTER(Str)),
                ("n_tool_schemas", C.c_size_t)]


class Decision(C.Structure):
    _fields_ = [("kind", C.c_uint32), ("swapped", C.c_uint8), ("estimate", C.c_uint64),
                ("raw_estimate", C.c_uint64), ("calibration", C.c_double), ("tokens_saved", C.c_uint64),
                ("n_previewed", C.c_uint64), ("limit", C.c_uint64), ("over_by", C.c_uint64),
                ("step", C.c_uint64), ("revision", C.c_uint64), ("n_messages", C.c_uint64),
                ("swap_ns", C.c_uint64), ("stable_prefix_messages", C.c_uint64),
                ("stable_prefix_tokens", C.c_uint64), ("reread_tokens", C.c_uint64)]


for fn in ("undertext_options_default", "undertext_store_open", "undertext_store_close", "undertext_chat_create",
           "undertext_chat_open", "undertext_chat_append_text", "undertext_chat_append_batch", "undertext_chat_get",
           "undertext_budget_default", "undertext_chat_view", "undertext_view_decision", "undertext_view_messages",
           "undertext_view_free", "undertext_blob_id_parse", "undertext_read_context", "undertext_buf_free",
           "undertext_last_error", "undertext_put_blob", "undertext_get_blob_range", "undertext_blob_len"):
    getattr(lib, fn).restype = C.c_int32
lib.undertext_store_open.argtypes = [Str, C.POINTER(Options), C.POINTER(Handle)]
lib.undertext_store_close.argtypes = [Handle]
lib.undertext_chat_create.argtypes = [Handle, Str, C.c_void_p, C.POINTER(C.c_uint64)]
lib.undertext_chat_open.argtypes = [Handle, Str, C.c_uint64, C.POINTER(Handle)]
lib.undertext_chat_append_text.argtypes = [Handle, C.c_uint32, Str, C.POINTER(C.c_uint64)]
lib.undertext_chat_append_batch.argtypes = [Handle, C.POINTER(Message), C.c_size_t, C.POINTER(C.c_uint64),
                                            C.POINTER(C.c_uint64)]
lib.undertext_chat_get.argtypes = [Handle, C.c_uint64, C.POINTER(Buf)]
lib.undertext_budget_default.argtypes = [C.c_uint64, C.c_uint64, C.POINTER(Budget)]
lib.undertext_chat_view.argtypes = [Handle, C.POINTER(Budget), C.POINTER(Handle)]
lib.undertext_view_decision.argtypes = [Handle, C.POINTER(Decision)]
lib.undertext_view_messages.argtypes = [Handle, C.c_uint32, C.POINTER(Buf)]
lib.undertext_view_free.argtypes = [Handle]
lib.undertext_blob_id_parse.argtypes = [Str, C.POINTER(BlobId)]
lib.undertext_read_context.argtypes = [Handle, Str, C.POINTER(BlobId), C.c_uint64, C.c_uint64, C.c_uint32,
                                       C.POINTER(Buf)]
lib.undertext_put_blob.argtypes = [Handle, Str, C.c_char_p, C.c_size_t, C.POINTER(BlobId)]
lib.undertext_get_blob_range.argtypes = [Handle, Str, C.POINTER(BlobId), C.c_uint64, C.c_uint64, C.POINTER(Buf)]
lib.undertext_blob_len.argtypes = [Handle, Str, C.POINTER(BlobId), C.POINTER(C.c_uint64)]
lib.undertext_buf_free.argtypes = [C.POINTER(Buf)]
lib.undertext_last_error.argtypes = [C.c_void_p, C.c_size_t, C.POINTER(C.c_size_t)]

passed = failed = 0
keep = []  # the bytes behind every Str stay alive until the end


def s(text):
    """A Python str or bytes as an undertext_str_t (explicit length, no terminator)."""
    b = text.encode() if isinstance(text, str) else text
    cb = C.create_string_buffer(b, len(b))
    keep.append(cb)
    return Str(C.cast(cb, C.c_void_p), len(b))


def last_error():
    n = C.c_size_t(0)
    lib.undertext_last_error(None, 0, C.byref(n))
    buf = C.create_string_buffer(n.value)
    lib.undertext_last_error(buf, n.value, C.byref(n))
    return buf.raw[: n.value].decode()


def check(cond, what):
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print(f"check failed: {what}", file=sys.stderr)


def ok(status, what):
    check(status == OK, f"{what}: status {status}: {last_error() if status else ''}")


def take(buf):
    """The buffer's bytes as str; frees it (and the free must succeed)."""
    data = C.string_at(buf.ptr, buf.len).decode() if buf.len else ""
    ok(lib.undertext_buf_free(C.byref(buf)), "buf_free")
    check(not buf.ptr and buf.len == 0, "buf_free resets the struct")
    return data


with tempfile.TemporaryDirectory() as d:
    opts = Options()
    ok(lib.undertext_options_default(C.byref(opts)), "options_default")
    opts.durability = 2
    store = Handle()
    ok(lib.undertext_store_open(s(d), C.byref(opts), C.byref(store)), "store_open")
    cid = C.c_uint64()
    ok(lib.undertext_chat_create(store, s("alice"), None, C.byref(cid)), "chat_create")
    chat = Handle()
    ok(lib.undertext_chat_open(store, s("alice"), cid, C.byref(chat)), "chat_open")
    check(lib.undertext_chat_open(store, s("mallory"), cid, C.byref(Handle())) == NOT_FOUND, "wrong owner")

    # append: a question, then a tool call and its large result in one batch.
    seq = C.c_uint64()
    ok(lib.undertext_chat_append_text(chat, ROLE_USER, s("Why is the build red? ✓ ünïcode"), C.byref(seq)),
       "append_text")
    check(lib.undertext_chat_append_text(chat, ROLE_USER, s(b"\xff\xfe"), C.byref(seq)) == INVALID_UTF8,
          "bad UTF-8 refused")
    log = "".join(f"line {i}: naïve café 😀 ok\n" for i in range(3000))
    parts = (Part * 2)()
    parts[0].kind, parts[0].id, parts[0].name, parts[0].args = PART_TOOL_CALL, s("c1"), s("sh"), s('{"cmd":"make"}')
    parts[1].kind, parts[1].call_id, parts[1].text = PART_TOOL_RESULT, s("c1"), s(log)
    msgs = (Message * 2)(Message(ROLE_ASSISTANT, C.pointer(parts[0]), 1), Message(ROLE_TOOL, C.pointer(parts[1]), 1))
    start, end = C.c_uint64(), C.c_uint64()
    ok(lib.undertext_chat_append_batch(chat, msgs, 2, C.byref(start), C.byref(end)), "append_batch")
    check((start.value, end.value) == (1, 3), "batch seqs")

    got = Buf()
    ok(lib.undertext_chat_get(chat, 2, C.byref(got)), "chat_get")
    message = json.loads(take(got))
    archive = message["parts"][0]["archive"]
    check(archive["chars"] == len(log), "archive length in chars equals Python's len()")
    check(lib.undertext_chat_get(chat, 3, C.byref(got)) == OUT_OF_RANGE, "get past the end")
    check("has 3 messages" in last_error(), "the error gives the length")

    # view under a budget: decision as a struct, messages as JSON.
    budget = Budget()
    ok(lib.undertext_budget_default(100000, 4000, C.byref(budget)), "budget_default")
    view = Handle()
    ok(lib.undertext_chat_view(chat, C.byref(budget), C.byref(view)), "chat_view")
    dec = Decision()
    ok(lib.undertext_view_decision(view, C.byref(dec)), "view_decision")
    check(dec.kind == DECISION_FITS and dec.n_messages == 3 and dec.estimate > 0, "decision")
    out = Buf()
    ok(lib.undertext_view_messages(view, FORMAT_OPENAI, C.byref(out)), "view_messages")
    openai = json.loads(take(out))
    check([m["role"] for m in openai] == ["user", "assistant", "tool"], "OpenAI roles")
    check(archive["id"] in openai[2]["content"], "the tool message is a preview naming its archive")
    ok(lib.undertext_view_free(view), "view_free")
    check(lib.undertext_view_free(view) == STALE_HANDLE, "a freed view is stale")

    # read_context: exact ranges in Python's own indexes (chars) and in UTF-16.
    bid = BlobId()
    ok(lib.undertext_blob_id_parse(s(archive["id"]), C.byref(bid)), "blob_id_parse")
    ok(lib.undertext_read_context(store, s("alice"), C.byref(bid), 1000, 1234, UNIT_CHARS, C.byref(out)),
       "read_context chars")
    check(take(out) == log[1000:1234], "chars range equals Python slicing")
    ok(lib.undertext_read_context(store, s("alice"), C.byref(bid), 2000, 2002, UNIT_LINES, C.byref(out)),
       "read_context lines")
    check(take(out) == "".join(log.splitlines(keepends=True)[2000:2002]), "lines range")
    u16 = log.encode("utf-16-le")
    ok(lib.undertext_read_context(store, s("alice"), C.byref(bid), 0, 60, UNIT_UTF16, C.byref(out)),
       "read_context utf16")
    check(take(out) == u16[:120].decode("utf-16-le"), "UTF-16 range equals JavaScript-style slicing")
    check(lib.undertext_read_context(store, s("alice"), C.byref(bid), 0, len(log) + 1, UNIT_CHARS,
                                     C.byref(out)) == OUT_OF_RANGE, "range past the end")
    check(lib.undertext_read_context(store, s("mallory"), C.byref(bid), 0, 1, UNIT_CHARS,
                                     C.byref(out)) == NOT_FOUND, "another owner's archive")

    # A binary blob (NULs, bytes that are not UTF-8) of 300 kB, so stored chunked: byte
    # ranges equal Python slicing.
    data = bytes((i * 7919 + i // 251) % 256 for i in range(300_000))
    blob = BlobId()
    ok(lib.undertext_put_blob(store, s("alice"), data, len(data), C.byref(blob)), "put_blob")
    blen = C.c_uint64(0)
    ok(lib.undertext_blob_len(store, s("alice"), C.byref(blob), C.byref(blen)), "blob_len")
    check(blen.value == len(data), "blob_len equals len()")
    for lo, hi in ((0, 10), (123_456, 200_000), (299_990, 300_000)):
        ok(lib.undertext_get_blob_range(store, s("alice"), C.byref(blob), lo, hi, C.byref(out)), f"get_blob_range {lo}..{hi}")
        got = C.string_at(out.ptr, out.len)
        ok(lib.undertext_buf_free(C.byref(out)), "buf_free")
        check(got == data[lo:hi], f"blob bytes {lo}..{hi} equal Python slicing")
    check(lib.undertext_get_blob_range(store, s("alice"), C.byref(blob), 0, len(data) + 1, C.byref(out)) == OUT_OF_RANGE,
          "blob range past the end")
    check("holds 300000 bytes" in last_error(), "the error gives the blob's length")
    check(lib.undertext_blob_len(store, s("mallory"), C.byref(blob), C.byref(blen)) == NOT_FOUND,
          "another owner's blob is not found")
    ok(lib.undertext_store_close(store), "store_close")

print(f"ctypes_client: {passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
