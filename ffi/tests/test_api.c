/* Every function of the C ABI: the happy path and misuse (NULL pointers, invalid UTF-8,
 * stale and wrong-kind handles, wrong owners, ranges past the end, double frees).
 * Run by scripts/test-ffi under valgrind and with -fsanitize=address,undefined. */
#include <pthread.h>
#include <stdint.h>

#include "common.h"

static const char BAD_UTF8[] = "ab\xff\xfe";
static undertext_str_t bad_utf8(void) {
  undertext_str_t s = {(const uint8_t *)BAD_UTF8, 4};
  return s;
}

static undertext_store_t open_store(const char *dir) {
  undertext_options_t o = test_options();
  undertext_store_t s = {0};
  OK(undertext_store_open(S(dir), &o, &s));
  return s;
}

static undertext_chat_t new_chat(undertext_store_t s, const char *owner) {
  uint64_t id = 0;
  undertext_chat_t c = {0};
  OK(undertext_chat_create(s, S(owner), NULL, &id));
  OK(undertext_chat_open(s, S(owner), id, &c));
  return c;
}

static undertext_part_t text_part(const char *t) {
  undertext_part_t p;
  memset(&p, 0, sizeof p);
  p.kind = UNDERTEXT_PART_TEXT;
  p.text = S(t);
  return p;
}

/* ---- store ---- */
static void store_open_close_and_lock(void) {
  char *dir = temp_dir();
  undertext_options_t o;
  OK(undertext_options_default(&o));
  CHECK(o.durability == UNDERTEXT_DURABILITY_GROUP && o.create_if_missing == 1 && o.archive_threshold == 8192);
  FAILS(UNDERTEXT_NULL_POINTER, "out", undertext_options_default(NULL));

  undertext_store_t s = open_store(dir);
  CHECK(s.id != 0);
  undertext_store_t s2 = {0};
  FAILS(UNDERTEXT_LOCKED, "locked", undertext_store_open(S(dir), NULL, &s2));
  FAILS(UNDERTEXT_NULL_POINTER, "out", undertext_store_open(S(dir), NULL, NULL));
  FAILS(UNDERTEXT_INVALID_UTF8, "path", undertext_store_open(bad_utf8(), NULL, &s2));
  undertext_str_t null_path = {NULL, 5};
  FAILS(UNDERTEXT_NULL_POINTER, "path", undertext_store_open(null_path, NULL, &s2));
  FAILS(UNDERTEXT_INVALID_ARGUMENT, "empty", undertext_store_open(S(""), NULL, &s2));
  undertext_options_t bad = test_options();
  bad.durability = 7;
  FAILS(UNDERTEXT_INVALID_ARGUMENT, "durability", undertext_store_open(S(dir), &bad, &s2));
  bad = test_options();
  bad.segment_size = 100;
  char *dir2 = temp_dir();
  FAILS(UNDERTEXT_INVALID_ARGUMENT, "segment_size", undertext_store_open(S(dir2), &bad, &s2));
  bad = test_options();
  bad.create_if_missing = 0;
  char missing[600];
  snprintf(missing, sizeof missing, "%s/absent", dir2);
  FAILS(UNDERTEXT_NOT_FOUND, "store", undertext_store_open(S(missing), &bad, &s2));
  remove_dir(dir2);

  /* Data written before close is there after reopening: close released the lock. */
  undertext_chat_t c = new_chat(s, "alice");
  uint64_t seq = 99;
  OK(undertext_chat_append_text(c, UNDERTEXT_ROLE_USER, S("hello"), &seq));
  undertext_chat_info_t info;
  OK(undertext_chat_info(c, &info));
  uint64_t chat_id = info.id;
  OK(undertext_store_close(s));
  FAILS(UNDERTEXT_STALE_HANDLE, "store handle", undertext_store_close(s));
  FAILS(UNDERTEXT_STALE_HANDLE, "chat handle", undertext_chat_info(c, &info));
  FAILS(UNDERTEXT_BAD_HANDLE, "not a handle", undertext_store_close((undertext_store_t){0}));
  FAILS(UNDERTEXT_BAD_HANDLE, "never issued", undertext_store_close((undertext_store_t){(1ull << 32) | 0xffffff}));

  s = open_store(dir);
  OK(undertext_chat_open(s, S("alice"), chat_id, &c));
  undertext_buf_t b = {0};
  OK(undertext_chat_get(c, 0, &b));
  CHECK(buf_has(b, "\"text\":\"hello\""));
  OK(undertext_buf_free(&b));
  /* A chat handle passed where a store handle is expected (a cast in C). */
  undertext_store_t as_store = {c.id};
  uint64_t id2;
  FAILS(UNDERTEXT_BAD_HANDLE, "expected a store", undertext_chat_create(as_store, S("alice"), NULL, &id2));
  OK(undertext_store_close(s));
  remove_dir(dir);
}

/* ---- chats ---- */
static void chats_owners_list_and_metadata(void) {
  char *dir = temp_dir();
  undertext_store_t s = open_store(dir);
  undertext_chat_meta_t meta = {S("fix the build"), S("gpt-x"), S(""), S("{\"repo\":\"undertext\"}")};
  uint64_t a = 0, b = 0;
  OK(undertext_chat_create(s, S("alice"), &meta, &a));
  OK(undertext_chat_create(s, S("alice"), NULL, &b));
  CHECK(a != b);
  FAILS(UNDERTEXT_INVALID_ARGUMENT, "owner", undertext_chat_create(s, S(""), NULL, &b));
  FAILS(UNDERTEXT_INVALID_UTF8, "owner", undertext_chat_create(s, bad_utf8(), NULL, &b));
  FAILS(UNDERTEXT_NULL_POINTER, "out_id", undertext_chat_create(s, S("alice"), NULL, NULL));
  undertext_chat_meta_t bad_meta = {S("t"), S(""), S(""), S("[1,2]")};
  FAILS(UNDERTEXT_INVALID_ARGUMENT, "extra_json", undertext_chat_create(s, S("alice"), &bad_meta, &b));
  bad_meta.extra_json = S("");
  bad_meta.title = bad_utf8();
  FAILS(UNDERTEXT_INVALID_UTF8, "meta.title", undertext_chat_create(s, S("alice"), &bad_meta, &b));

  undertext_chat_t c = {0};
  OK(undertext_chat_open(s, S("alice"), a, &c));
  undertext_chat_t other = {0};
  FAILS(UNDERTEXT_NOT_FOUND, "not found", undertext_chat_open(s, S("mallory"), a, &other));
  FAILS(UNDERTEXT_NOT_FOUND, "not found", undertext_chat_open(s, S("alice"), 424242, &other));
  CHECK(other.id == 0); /* out-parameters are written only on success */

  undertext_buf_t buf = {0};
  OK(undertext_chat_meta(c, &buf));
  CHECK(buf_has(buf, "\"title\":\"fix the build\"") && buf_has(buf, "\"repo\":\"undertext\"") &&
        buf_has(buf, "\"version\":1"));
  OK(undertext_buf_free(&buf));
  undertext_chat_meta_t meta2 = {S("renamed"), S("gpt-x"), S("draft text"), S("")};
  uint64_t version = 0;
  OK(undertext_chat_set_meta(c, &meta2, &version));
  CHECK(version == 2);
  OK(undertext_chat_meta(c, &buf));
  CHECK(buf_has(buf, "\"title\":\"renamed\"") && buf_has(buf, "\"draft\":\"draft text\""));
  OK(undertext_buf_free(&buf));
  FAILS(UNDERTEXT_NULL_POINTER, "out_version", undertext_chat_set_meta(c, &meta2, NULL));

  undertext_chat_info_t info;
  OK(undertext_chat_info(c, &info));
  CHECK(info.id == a && info.len == 0 && info.revision == 0);

  /* list: both of alice's chats, none for mallory; pages of one follow the cursor. */
  OK(undertext_chat_list(s, S("alice"), 10, NULL, &buf));
  CHECK(buf_has(buf, "\"title\":\"renamed\"") && buf_has(buf, "\"next\":null"));
  OK(undertext_buf_free(&buf));
  OK(undertext_chat_list(s, S("mallory"), 10, NULL, &buf));
  CHECK(buf_eq(buf, "{\"chats\":[],\"next\":null}"));
  OK(undertext_buf_free(&buf));
  OK(undertext_chat_list(s, S("alice"), 1, NULL, &buf));
  CHECK(!buf_has(buf, "\"next\":null"));
  /* Parse the cursor out of the JSON: "next":{"id":N,"last_activity_ms":M} in some order. */
  undertext_page_cursor_t cur = {0, 0};
  char *json = buf_cstr(buf);
  const char *n = strstr(json, "\"next\":");
  const char *pid = n ? strstr(n, "\"id\":") : NULL;
  const char *pms = n ? strstr(n, "\"last_activity_ms\":") : NULL;
  CHECK(pid && pms);
  if (pid && pms) {
    cur.id = strtoull(pid + 5, NULL, 10);
    cur.last_activity_ms = strtoull(pms + 19, NULL, 10);
  }
  free(json);
  OK(undertext_buf_free(&buf));
  OK(undertext_chat_list(s, S("alice"), 1, &cur, &buf));
  CHECK(buf_has(buf, "\"next\":null") && buf_has(buf, "\"chats\":[{"));
  OK(undertext_buf_free(&buf));
  FAILS(UNDERTEXT_INVALID_ARGUMENT, "limit", undertext_chat_list(s, S("alice"), 0, NULL, &buf));
  FAILS(UNDERTEXT_INVALID_UTF8, "owner", undertext_chat_list(s, bad_utf8(), 10, NULL, &buf));

  OK(undertext_chat_close(c));
  FAILS(UNDERTEXT_STALE_HANDLE, "chat handle", undertext_chat_close(c));
  FAILS(UNDERTEXT_STALE_HANDLE, "chat handle", undertext_chat_meta(c, &buf));
  OK(undertext_store_close(s));
  remove_dir(dir);
}

/* ---- messages, edits, steps ---- */
static void messages_batches_edits_and_steps(void) {
  char *dir = temp_dir();
  undertext_store_t s = open_store(dir);
  undertext_chat_t c = new_chat(s, "alice");
  uint64_t seq = 0, start = 0, end = 0, rev = 0;

  undertext_part_t p = text_part("be brief");
  undertext_message_t m = {UNDERTEXT_ROLE_SYSTEM, &p, 1};
  OK(undertext_chat_append(c, &m, &seq));
  CHECK(seq == 0);
  OK(undertext_chat_append_text(c, UNDERTEXT_ROLE_USER, S("what is in Cargo.toml?"), &seq));
  CHECK(seq == 1);

  /* A tool call and its result, atomically. */
  undertext_part_t call;
  memset(&call, 0, sizeof call);
  call.kind = UNDERTEXT_PART_TOOL_CALL;
  call.id = S("c1");
  call.name = S("read");
  call.args = S("{\"path\":\"Cargo.toml\"}");
  undertext_part_t result;
  memset(&result, 0, sizeof result);
  result.kind = UNDERTEXT_PART_TOOL_RESULT;
  result.call_id = S("c1");
  result.text = S("[workspace]");
  undertext_message_t batch[2] = {{UNDERTEXT_ROLE_ASSISTANT, &call, 1}, {UNDERTEXT_ROLE_TOOL, &result, 1}};
  OK(undertext_chat_append_batch(c, batch, 2, &start, &end));
  CHECK(start == 2 && end == 4);

  /* A batch with one bad message writes nothing. */
  undertext_part_t bad_call = call;
  bad_call.args = S("{not json");
  undertext_message_t bad_batch[2] = {{UNDERTEXT_ROLE_USER, &p, 1}, {UNDERTEXT_ROLE_ASSISTANT, &bad_call, 1}};
  FAILS(UNDERTEXT_INVALID_ARGUMENT, "must be JSON", undertext_chat_append_batch(c, bad_batch, 2, &start, &end));
  undertext_part_t bad_text = text_part("x");
  bad_text.text = bad_utf8();
  undertext_message_t bad_utf8_batch[2] = {{UNDERTEXT_ROLE_USER, &p, 1}, {UNDERTEXT_ROLE_USER, &bad_text, 1}};
  FAILS(UNDERTEXT_INVALID_UTF8, "messages[1].parts[0].text",
        undertext_chat_append_batch(c, bad_utf8_batch, 2, &start, &end));
  undertext_chat_info_t info;
  OK(undertext_chat_info(c, &info));
  CHECK(info.len == 4);
  FAILS(UNDERTEXT_NULL_POINTER, "messages", undertext_chat_append_batch(c, NULL, 2, &start, &end));
  undertext_message_t no_parts = {UNDERTEXT_ROLE_USER, NULL, 3};
  FAILS(UNDERTEXT_NULL_POINTER, "message.parts", undertext_chat_append(c, &no_parts, &seq));
  undertext_message_t bad_role = {9, &p, 1};
  FAILS(UNDERTEXT_INVALID_ARGUMENT, "role", undertext_chat_append(c, &bad_role, &seq));
  undertext_part_t bad_kind = text_part("x");
  bad_kind.kind = 42;
  undertext_message_t bk = {UNDERTEXT_ROLE_USER, &bad_kind, 1};
  FAILS(UNDERTEXT_INVALID_ARGUMENT, "kind", undertext_chat_append(c, &bk, &seq));
  FAILS(UNDERTEXT_NULL_POINTER, "message", undertext_chat_append(c, NULL, &seq));
  FAILS(UNDERTEXT_INVALID_UTF8, "text", undertext_chat_append_text(c, UNDERTEXT_ROLE_USER, bad_utf8(), &seq));
  FAILS(UNDERTEXT_INVALID_ARGUMENT, "role", undertext_chat_append_text(c, 4, S("x"), &seq));

  /* Approval request and response parts, with and without optional fields. */
  undertext_part_t req;
  memset(&req, 0, sizeof req);
  req.kind = UNDERTEXT_PART_APPROVAL_REQUEST;
  req.id = S("a1");
  req.text = S("run rm -rf target?");
  req.call_id = S("c1");
  undertext_message_t mreq = {UNDERTEXT_ROLE_ASSISTANT, &req, 1};
  OK(undertext_chat_append(c, &mreq, &seq));
  undertext_part_t resp;
  memset(&resp, 0, sizeof resp);
  resp.kind = UNDERTEXT_PART_APPROVAL_RESPONSE;
  resp.id = S("a1");
  resp.flag = 1; /* reason: NULL pointer = none */
  undertext_message_t mresp = {UNDERTEXT_ROLE_USER, &resp, 1};
  OK(undertext_chat_append(c, &mresp, &seq));
  undertext_part_t sum = text_part("earlier: greeted");
  sum.kind = UNDERTEXT_PART_SUMMARY;
  undertext_message_t msum = {UNDERTEXT_ROLE_SYSTEM, &sum, 1};
  OK(undertext_chat_append(c, &msum, &seq));
  CHECK(seq == 6);

  undertext_buf_t b = {0};
  /* Harness feedback (a format error) starts no user turn, with either append. */
  undertext_chat_t fc = new_chat(s, "alice");
  OK(undertext_chat_append_text(fc, UNDERTEXT_ROLE_USER, S("fix the build"), &seq));
  OK(undertext_chat_append_text(fc, UNDERTEXT_ROLE_USER | UNDERTEXT_MESSAGE_FEEDBACK,
                                S("Please always provide EXACTLY ONE action."), &seq));
  undertext_part_t fp = text_part("please use exactly one bash block");
  undertext_message_t fm = {UNDERTEXT_ROLE_USER | UNDERTEXT_MESSAGE_FEEDBACK, &fp, 1};
  OK(undertext_chat_append(fc, &fm, &seq));
  CHECK(seq == 2);
  for (uint64_t i = 1; i <= 2; i++) {
    OK(undertext_chat_get(fc, i, &b));
    CHECK(buf_has(b, "\"feedback\":true") && buf_has(b, "\"turn\":1"));
    OK(undertext_buf_free(&b));
  }
  OK(undertext_chat_get(fc, 0, &b));
  CHECK(!buf_has(b, "\"feedback\"") && buf_has(b, "\"turn\":1"));
  OK(undertext_buf_free(&b));
  undertext_message_t fbad = {UNDERTEXT_ROLE_ASSISTANT | UNDERTEXT_MESSAGE_FEEDBACK, &fp, 1};
  FAILS(UNDERTEXT_INVALID_ARGUMENT, "only a user message", undertext_chat_append(fc, &fbad, &seq));
  OK(undertext_chat_close(fc));
  OK(undertext_chat_get(c, 2, &b));
  CHECK(buf_has(b, "\"type\":\"tool_call\"") && buf_has(b, "\"name\":\"read\"") && buf_has(b, "\"role\":\"assistant\""));
  OK(undertext_buf_free(&b));
  OK(undertext_chat_get(c, 4, &b));
  CHECK(buf_has(b, "\"type\":\"approval_request\"") && buf_has(b, "\"call_id\":\"c1\""));
  OK(undertext_buf_free(&b));
  OK(undertext_chat_get(c, 5, &b));
  CHECK(buf_has(b, "\"approved\":true") && buf_has(b, "\"reason\":null"));
  OK(undertext_buf_free(&b));
  OK(undertext_chat_range(c, 0, 7, &b));
  CHECK(b.len > 0 && b.ptr[0] == '[' && buf_has(b, "\"seq\":6") && buf_has(b, "\"type\":\"summary\""));
  OK(undertext_buf_free(&b));
  OK(undertext_chat_range(c, 3, 3, &b));
  CHECK(buf_eq(b, "[]"));
  OK(undertext_buf_free(&b));
  FAILS(UNDERTEXT_OUT_OF_RANGE, "has 7 messages", undertext_chat_get(c, 7, &b));
  FAILS(UNDERTEXT_OUT_OF_RANGE, "has 7 messages", undertext_chat_range(c, 5, 8, &b));
  FAILS(UNDERTEXT_INVALID_ARGUMENT, "reversed", undertext_chat_range(c, 5, 4, &b));
  FAILS(UNDERTEXT_NULL_POINTER, "out", undertext_chat_get(c, 0, NULL));

  /* Edit and truncate with an expected revision. */
  undertext_part_t fixed = text_part("be very brief");
  undertext_message_t mfixed = {UNDERTEXT_ROLE_SYSTEM, &fixed, 1};
  OK(undertext_chat_edit(c, 0, &mfixed, 0, &rev));
  CHECK(rev == 1);
  FAILS(UNDERTEXT_STALE_REVISION, "expected 0, found 1", undertext_chat_edit(c, 0, &mfixed, 0, &rev));
  FAILS(UNDERTEXT_OUT_OF_RANGE, "has 7 messages", undertext_chat_edit(c, 7, &mfixed, 1, &rev));
  FAILS(UNDERTEXT_NULL_POINTER, "message", undertext_chat_edit(c, 0, NULL, 1, &rev));
  OK(undertext_chat_truncate(c, 4, 1, &rev));
  CHECK(rev == 2);
  FAILS(UNDERTEXT_STALE_REVISION, "stale revision", undertext_chat_truncate(c, 1, 1, &rev));
  FAILS(UNDERTEXT_OUT_OF_RANGE, "has 4 messages", undertext_chat_truncate(c, 5, 2, &rev));
  OK(undertext_chat_info(c, &info));
  CHECK(info.len == 4 && info.revision == 2);
  /* The old versions stay readable at their revisions. */
  undertext_snapshot_t old = {0};
  OK(undertext_chat_snapshot_at(c, 0, &old));
  OK(undertext_snapshot_get(old, 0, &b));
  CHECK(buf_has(b, "\"text\":\"be brief\""));
  OK(undertext_buf_free(&b));
  OK(undertext_snapshot_free(old));

  /* Steps and attempts: an interrupted stream, then a complete retry. */
  OK(undertext_chat_append_text(c, UNDERTEXT_ROLE_USER, S("why does CI fail?"), &seq));
  undertext_part_t half = text_part("Let me che");
  undertext_message_t mhalf = {UNDERTEXT_ROLE_ASSISTANT, &half, 1};
  OK(undertext_chat_record_step(c, 2, S("stream-1"), 0, UNDERTEXT_STEP_INTERRUPTED, &mhalf, 1, &start, &end));
  CHECK(end == start + 1);
  undertext_part_t whole = text_part("The lockfile is stale.");
  undertext_message_t mwhole = {UNDERTEXT_ROLE_ASSISTANT, &whole, 1};
  OK(undertext_chat_record_step(c, 2, S("stream-2"), 0, UNDERTEXT_STEP_COMPLETE, &mwhole, 1, &start, &end));
  OK(undertext_chat_attempts(c, 2, &b));
  CHECK(buf_has(b, "\"stream_id\":\"stream-1\"") && buf_has(b, "\"status\":\"interrupted\"") &&
        buf_has(b, "\"stream_id\":\"stream-2\"") && buf_has(b, "\"status\":\"complete\"") &&
        buf_has(b, "The lockfile is stale."));
  OK(undertext_buf_free(&b));
  OK(undertext_chat_attempts(c, 9, &b));
  CHECK(buf_eq(b, "[]"));
  OK(undertext_buf_free(&b));
  FAILS(UNDERTEXT_INVALID_ARGUMENT, "status",
        undertext_chat_record_step(c, 2, S("stream-3"), 0, 5, &mwhole, 1, &start, &end));
  FAILS(UNDERTEXT_INVALID_ARGUMENT, "stream id",
        undertext_chat_record_step(c, 2, S(""), 0, UNDERTEXT_STEP_COMPLETE, &mwhole, 1, &start, &end));
  FAILS(UNDERTEXT_INVALID_UTF8, "stream_id",
        undertext_chat_record_step(c, 2, bad_utf8(), 0, UNDERTEXT_STEP_COMPLETE, &mwhole, 1, &start, &end));

  /* An append with an idempotency key, retried: one copy, the same seqs. */
  undertext_chat_info_t before;
  OK(undertext_chat_info(c, &before));
  OK(undertext_chat_append_idempotent(c, &mwhole, 1, S("turn-2/reply"), &start, &end));
  CHECK(start == before.len && end == before.len + 1);
  uint64_t again_start = 0, again_end = 0;
  OK(undertext_chat_append_idempotent(c, &mwhole, 1, S("turn-2/reply"), &again_start, &again_end));
  CHECK(again_start == start && again_end == end);
  undertext_message_t two[2] = {mwhole, mwhole};
  FAILS(UNDERTEXT_INVALID_ARGUMENT, "1 message(s)",
        undertext_chat_append_idempotent(c, two, 2, S("turn-2/reply"), &start, &end));
  FAILS(UNDERTEXT_INVALID_ARGUMENT, "idempotency key", undertext_chat_append_idempotent(c, &mwhole, 1, S(""), &start, &end));
  FAILS(UNDERTEXT_INVALID_UTF8, "key", undertext_chat_append_idempotent(c, &mwhole, 1, bad_utf8(), &start, &end));
  undertext_chat_info_t after;
  OK(undertext_chat_info(c, &after));
  CHECK(after.len == before.len + 1);
  OK(undertext_store_close(s));
  remove_dir(dir);
}

/* ---- snapshots ---- */
static void snapshots_do_not_move(void) {
  char *dir = temp_dir();
  undertext_store_t s = open_store(dir);
  undertext_chat_t c = new_chat(s, "alice");
  uint64_t seq;
  OK(undertext_chat_append_text(c, UNDERTEXT_ROLE_USER, S("one"), &seq));
  undertext_snapshot_t snap = {0};
  OK(undertext_chat_snapshot(c, &snap));
  OK(undertext_chat_append_text(c, UNDERTEXT_ROLE_ASSISTANT, S("two"), &seq));
  undertext_snapshot_info_t si;
  OK(undertext_snapshot_info(snap, &si));
  CHECK(si.len == 1 && si.revision == 0 && si.meta_version == 1);
  undertext_buf_t b = {0};
  OK(undertext_snapshot_get(snap, 0, &b));
  CHECK(buf_has(b, "\"text\":\"one\""));
  OK(undertext_buf_free(&b));
  FAILS(UNDERTEXT_OUT_OF_RANGE, "has 1 messages", undertext_snapshot_get(snap, 1, &b));
  OK(undertext_snapshot_range(snap, 0, 1, &b));
  CHECK(buf_has(b, "\"text\":\"one\"") && !buf_has(b, "two"));
  OK(undertext_buf_free(&b));
  FAILS(UNDERTEXT_OUT_OF_RANGE, "has 1 messages", undertext_snapshot_range(snap, 0, 2, &b));
  FAILS(UNDERTEXT_NULL_POINTER, "out", undertext_snapshot_info(snap, NULL));
  FAILS(UNDERTEXT_OUT_OF_RANGE, "revision 3", undertext_chat_snapshot_at(c, 3, &snap));
  FAILS(UNDERTEXT_NULL_POINTER, "out", undertext_chat_snapshot(c, NULL));
  OK(undertext_snapshot_free(snap));
  FAILS(UNDERTEXT_STALE_HANDLE, "snapshot handle", undertext_snapshot_free(snap));
  FAILS(UNDERTEXT_STALE_HANDLE, "snapshot handle", undertext_snapshot_get(snap, 0, &b));
  /* The freed slot is reused by the next handle: the old one stays stale. */
  undertext_snapshot_t again = {0};
  OK(undertext_chat_snapshot(c, &again));
  CHECK((again.id & 0xffffffffu) == (snap.id & 0xffffffffu) && again.id != snap.id);
  FAILS(UNDERTEXT_STALE_HANDLE, "snapshot handle", undertext_snapshot_info(snap, &si));
  OK(undertext_snapshot_info(again, &si));
  CHECK(si.len == 2);
  /* Closing the store frees its snapshots too. */
  OK(undertext_store_close(s));
  FAILS(UNDERTEXT_STALE_HANDLE, "snapshot handle", undertext_snapshot_info(again, &si));
  remove_dir(dir);
}

/* ---- archives ---- */
static void archives_read_back_exactly_in_every_unit(void) {
  char *dir = temp_dir();
  undertext_store_t s = open_store(dir);
  /* 3 lines: "h\xc3\xa9llo \xf0\x9f\x98\x80\n" is 'héllo 😀\n': 8 chars, 9 UTF-16 units, 12 bytes. */
  const char *text = "h\xc3\xa9llo \xf0\x9f\x98\x80\nline two\nthird";
  undertext_archive_info_t a;
  OK(undertext_archive(s, S("alice"), S(text), &a));
  CHECK(a.bytes == strlen(text) && a.chars == 8 + 9 + 5 && a.utf16_units == 9 + 9 + 5 && a.lines == 3);
  undertext_archive_info_t again;
  OK(undertext_archive(s, S("alice"), S(text), &again));
  CHECK(memcmp(a.id.bytes, again.id.bytes, 32) == 0); /* content-addressed */
  OK(undertext_archive_info(s, S("alice"), &a.id, &again));
  CHECK(again.chars == a.chars);
  FAILS(UNDERTEXT_NOT_FOUND, "not found", undertext_archive_info(s, S("mallory"), &a.id, &again));
  FAILS(UNDERTEXT_INVALID_UTF8, "text", undertext_archive(s, S("alice"), bad_utf8(), &again));

  undertext_buf_t b = {0};
  OK(undertext_read_context(s, S("alice"), &a.id, 6, 7, UNDERTEXT_UNIT_CHARS, &b));
  CHECK(buf_eq(b, "\xf0\x9f\x98\x80"));
  OK(undertext_buf_free(&b));
  OK(undertext_read_context(s, S("alice"), &a.id, 6, 8, UNDERTEXT_UNIT_UTF16, &b));
  CHECK(buf_eq(b, "\xf0\x9f\x98\x80"));
  OK(undertext_buf_free(&b));
  OK(undertext_read_context(s, S("alice"), &a.id, 0, 3, UNDERTEXT_UNIT_BYTES, &b));
  CHECK(buf_eq(b, "h\xc3\xa9"));
  OK(undertext_buf_free(&b));
  OK(undertext_read_context(s, S("alice"), &a.id, 1, 2, UNDERTEXT_UNIT_LINES, &b));
  CHECK(buf_eq(b, "line two\n"));
  OK(undertext_buf_free(&b));
  FAILS(UNDERTEXT_INVALID_ARGUMENT, "surrogate",
        undertext_read_context(s, S("alice"), &a.id, 7, 8, UNDERTEXT_UNIT_UTF16, &b));
  FAILS(UNDERTEXT_INVALID_ARGUMENT, "splits",
        undertext_read_context(s, S("alice"), &a.id, 0, 2, UNDERTEXT_UNIT_BYTES, &b));
  FAILS(UNDERTEXT_OUT_OF_RANGE, "holds 22 chars",
        undertext_read_context(s, S("alice"), &a.id, 20, 23, UNDERTEXT_UNIT_CHARS, &b));
  FAILS(UNDERTEXT_OUT_OF_RANGE, "holds 3 lines",
        undertext_read_context(s, S("alice"), &a.id, 0, 4, UNDERTEXT_UNIT_LINES, &b));
  FAILS(UNDERTEXT_INVALID_ARGUMENT, "reversed",
        undertext_read_context(s, S("alice"), &a.id, 3, 2, UNDERTEXT_UNIT_CHARS, &b));
  FAILS(UNDERTEXT_INVALID_ARGUMENT, "unit", undertext_read_context(s, S("alice"), &a.id, 0, 1, 9, &b));
  FAILS(UNDERTEXT_NOT_FOUND, "not found",
        undertext_read_context(s, S("mallory"), &a.id, 0, 1, UNDERTEXT_UNIT_CHARS, &b));
  FAILS(UNDERTEXT_NULL_POINTER, "id", undertext_read_context(s, S("alice"), NULL, 0, 1, UNDERTEXT_UNIT_CHARS, &b));
  CHECK(b.ptr == NULL && b.len == 0);

  /* Ids as hex and back. */
  char hex[64];
  OK(undertext_blob_id_hex(&a.id, (uint8_t *)hex, sizeof hex));
  undertext_str_t hs = {(const uint8_t *)hex, 64};
  undertext_blob_id_t parsed;
  OK(undertext_blob_id_parse(hs, &parsed));
  CHECK(memcmp(parsed.bytes, a.id.bytes, 32) == 0);
  FAILS(UNDERTEXT_BUFFER_TOO_SMALL, "at least 64", undertext_blob_id_hex(&a.id, (uint8_t *)hex, 63));
  FAILS(UNDERTEXT_NULL_POINTER, "out", undertext_blob_id_hex(&a.id, NULL, 64));
  FAILS(UNDERTEXT_INVALID_ARGUMENT, "", undertext_blob_id_parse(S("zz"), &parsed));
  FAILS(UNDERTEXT_INVALID_UTF8, "hex", undertext_blob_id_parse(bad_utf8(), &parsed));

  /* A large tool result is archived on append; its preview names the archive. */
  undertext_chat_t c = new_chat(s, "alice");
  size_t n = 20000;
  char *big = malloc(n + 1);
  for (size_t i = 0; i < n; i++) big[i] = (i % 50 == 49) ? '\n' : (char)('a' + i % 26);
  big[n] = 0;
  undertext_part_t r;
  memset(&r, 0, sizeof r);
  r.kind = UNDERTEXT_PART_TOOL_RESULT;
  r.call_id = S("c9");
  r.text = S(big);
  undertext_message_t mr = {UNDERTEXT_ROLE_TOOL, &r, 1};
  uint64_t seq;
  OK(undertext_chat_append(c, &mr, &seq));
  OK(undertext_chat_get(c, seq, &b));
  CHECK(buf_has(b, "\"archive\":{") && buf_has(b, "\"bytes\":20000"));
  OK(undertext_buf_free(&b));
  undertext_archive_info_t big_a;
  OK(undertext_archive(s, S("alice"), S(big), &big_a)); /* same content, same id */
  OK(undertext_read_context(s, S("alice"), &big_a.id, 100, 150, UNDERTEXT_UNIT_BYTES, &b));
  CHECK(b.len == 50 && memcmp(b.ptr, big + 100, 50) == 0);
  OK(undertext_buf_free(&b));
  /* A preview is shorter than the archive and names it (so the model can read it back). */
  char big_hex[65] = {0};
  OK(undertext_blob_id_hex(&big_a.id, (uint8_t *)big_hex, 64));
  OK(undertext_preview(s, S("alice"), &big_a.id, 300, (undertext_str_t){NULL, 0}, &b));
  CHECK(b.len > 0 && b.len < 2000 && buf_has(b, big_hex));
  OK(undertext_buf_free(&b));
  /* With a query, the lines holding it are shown. */
  OK(undertext_preview(s, S("alice"), &a.id, 1000, S("two"), &b));
  CHECK(buf_has(b, "line two"));
  OK(undertext_buf_free(&b));
  FAILS(UNDERTEXT_INVALID_UTF8, "query", undertext_preview(s, S("alice"), &a.id, 10, bad_utf8(), &b));
  FAILS(UNDERTEXT_NOT_FOUND, "not found",
        undertext_preview(s, S("mallory"), &a.id, 10, (undertext_str_t){NULL, 0}, &b));

  /* Pins. */
  OK(undertext_chat_pin(c, &big_a.id, 0, 3, UNDERTEXT_UNIT_LINES));
  OK(undertext_chat_pins(c, &b));
  CHECK(buf_has(b, "\"unit\":\"lines\"") && buf_has(b, "\"start\":0") && buf_has(b, "\"end\":3"));
  OK(undertext_buf_free(&b));
  FAILS(UNDERTEXT_OUT_OF_RANGE, "past the end", undertext_chat_pin(c, &big_a.id, 0, 100000, UNDERTEXT_UNIT_CHARS));
  FAILS(UNDERTEXT_INVALID_ARGUMENT, "unit", undertext_chat_pin(c, &big_a.id, 0, 1, 77));
  undertext_chat_t mc = new_chat(s, "mallory");
  FAILS(UNDERTEXT_NOT_FOUND, "not found", undertext_chat_pin(mc, &big_a.id, 0, 1, UNDERTEXT_UNIT_CHARS));
  OK(undertext_chat_unpin(c, &big_a.id, 0, 3, UNDERTEXT_UNIT_LINES));
  FAILS(UNDERTEXT_NOT_FOUND, "pin of", undertext_chat_unpin(c, &big_a.id, 0, 3, UNDERTEXT_UNIT_LINES));
  OK(undertext_chat_pins(c, &b));
  CHECK(buf_eq(b, "[]"));
  OK(undertext_buf_free(&b));
  free(big);
  OK(undertext_store_close(s));
  remove_dir(dir);
}

/* ---- views ---- */
static void append_tool_step(undertext_chat_t c, int i, size_t size) {
  char id[32], args[64];
  snprintf(id, sizeof id, "call-%d", i);
  snprintf(args, sizeof args, "{\"file\":\"f%d.rs\"}", i);
  char *out = letters(size, 40, 1, (size_t)i);
  append_call_and_result(c, id, args, out);
  free(out);
}

static void views_decide_under_a_budget(void) {
  char *dir = temp_dir();
  undertext_store_t s = open_store(dir);
  undertext_chat_meta_t meta = {S(""), S("model-a"), S(""), S("")};
  uint64_t id;
  OK(undertext_chat_create(s, S("alice"), &meta, &id));
  undertext_chat_t c = {0};
  OK(undertext_chat_open(s, S("alice"), id, &c));
  uint64_t seq;
  OK(undertext_chat_append_text(c, UNDERTEXT_ROLE_SYSTEM, S("you are a coding agent"), &seq));
  for (int i = 0; i < 12; i++) {
    if (i % 3 == 0) OK(undertext_chat_append_text(c, UNDERTEXT_ROLE_USER, S("next task"), &seq));
    append_tool_step(c, i, 6000);
  }

  undertext_budget_t big;
  OK(undertext_budget_default(200000, 8000, &big));
  CHECK(big.soft == 0.70 && big.target == 0.50 && big.hard == 0.90 && big.n_tool_schemas == 0);
  undertext_view_t v = {0};
  OK(undertext_chat_view(c, &big, &v));
  undertext_view_decision_t d;
  OK(undertext_view_decision(v, &d));
  CHECK(d.kind == UNDERTEXT_DECISION_FITS && d.estimate > 0 && d.n_messages == 29 && d.revision == 0);
  undertext_buf_t b = {0};
  OK(undertext_view_messages(v, UNDERTEXT_FORMAT_NEUTRAL, &b));
  CHECK(b.len > 0 && b.ptr[0] == '[' && buf_has(b, "\"seqs\":[0,1]") && buf_has(b, "\"tokens\":"));
  OK(undertext_buf_free(&b));
  OK(undertext_view_messages(v, UNDERTEXT_FORMAT_OPENAI, &b));
  CHECK(buf_has(b, "\"role\":\"system\"") && buf_has(b, "\"tool_calls\""));
  OK(undertext_buf_free(&b));
  OK(undertext_view_messages(v, UNDERTEXT_FORMAT_ANTHROPIC, &b));
  CHECK(buf_has(b, "\"system\":") && buf_has(b, "\"tool_result\""));
  OK(undertext_buf_free(&b));
  FAILS(UNDERTEXT_INVALID_ARGUMENT, "format", undertext_view_messages(v, 3, &b));
  OK(undertext_view_previewed(v, &b));
  CHECK(buf_eq(b, "[]"));
  OK(undertext_buf_free(&b));

  /* Real usage above the estimate raises the factor; later estimates carry it. */
  double factor = 0;
  OK(undertext_chat_report_usage(c, d.step, d.raw_estimate * 2, &factor));
  CHECK(factor > 1.9 && factor < 2.1);
  uint64_t est = 0;
  OK(undertext_chat_estimate(c, &big, &est));
  CHECK(est >= d.raw_estimate * 19 / 10);
  FAILS(UNDERTEXT_NOT_FOUND, "view step", undertext_chat_report_usage(c, d.step + 1000, 5, &factor));
  FAILS(UNDERTEXT_NULL_POINTER, "out_factor", undertext_chat_report_usage(c, d.step, 5, NULL));
  OK(undertext_view_free(v));
  FAILS(UNDERTEXT_STALE_HANDLE, "view handle", undertext_view_free(v));
  FAILS(UNDERTEXT_STALE_HANDLE, "view handle", undertext_view_decision(v, &d));

  /* A budget the chat is over: older tool results become previews. */
  undertext_budget_t mid;
  OK(undertext_budget_default(est * 10 / 8 + 8000, 8000, &mid)); /* estimate at 80 % */
  OK(undertext_chat_view(c, &mid, &v));
  OK(undertext_view_decision(v, &d));
  CHECK(d.kind == UNDERTEXT_DECISION_COMPACTED && d.n_previewed > 0 && d.tokens_saved > 0);
  OK(undertext_view_previewed(v, &b));
  CHECK(buf_has(b, "[3"));
  OK(undertext_buf_free(&b));
  OK(undertext_view_free(v));

  /* A budget far too small: refused, saying by how much. */
  undertext_budget_t tiny;
  OK(undertext_budget_default(2000, 1000, &tiny));
  OK(undertext_chat_view(c, &tiny, &v));
  OK(undertext_view_decision(v, &d));
  CHECK(d.kind == UNDERTEXT_DECISION_REFUSED && d.limit == 900 && d.over_by == d.estimate - d.limit);
  OK(undertext_view_free(v));

  /* Tool schemas count; bad budgets are refused. */
  undertext_str_t schemas[2] = {S("{\"name\":\"read\",\"parameters\":{}}"), S("{\"name\":\"write\"}")};
  undertext_budget_t with_tools = big;
  with_tools.tool_schemas = schemas;
  with_tools.n_tool_schemas = 2;
  uint64_t est2 = 0;
  OK(undertext_chat_estimate(c, &with_tools, &est2));
  CHECK(est2 > est);
  schemas[1] = bad_utf8();
  FAILS(UNDERTEXT_INVALID_UTF8, "tool_schemas[1]", undertext_chat_view(c, &with_tools, &v));
  with_tools.tool_schemas = NULL;
  FAILS(UNDERTEXT_NULL_POINTER, "tool_schemas", undertext_chat_view(c, &with_tools, &v));
  undertext_budget_t wrong = big;
  wrong.reserve_output = wrong.window;
  FAILS(UNDERTEXT_INVALID_ARGUMENT, "budget", undertext_chat_view(c, &wrong, &v));
  wrong = big;
  wrong.soft = 0.95;
  FAILS(UNDERTEXT_INVALID_ARGUMENT, "soft", undertext_chat_view(c, &wrong, &v));
  FAILS(UNDERTEXT_NULL_POINTER, "budget", undertext_chat_view(c, NULL, &v));
  FAILS(UNDERTEXT_NULL_POINTER, "out", undertext_budget_default(1, 0, NULL));
  OK(undertext_store_close(s));
  remove_dir(dir);
}

/* ---- checkpoints and the C summarizer ---- */
typedef struct {
  int summarize_calls;
  int merge_calls;
  int fail;       /* 1: return an error status; 2: return OK without a summary */
  int bogus_out;  /* call undertext_summary_out_set with a pointer that is not `out` */
  pthread_t last_thread;
  pthread_mutex_t lock;
  /* For the synchronous hard-line test: calls on other threads than `main` wait until
   * `released`, so the calls made on the viewing thread are not raced by the worker. */
  int block_others;
  int released;
  int on_main_calls;
  pthread_t main;
  pthread_cond_t cv;
} counter_t;

static undertext_status_t count_summarize(void *ud, undertext_str_t input, undertext_summary_out_t *out) {
  counter_t *c = ud;
  pthread_mutex_lock(&c->lock);
  c->summarize_calls++;
  c->last_thread = pthread_self();
  int on_main = c->block_others && pthread_equal(pthread_self(), c->main);
  c->on_main_calls += on_main;
  while (c->block_others && !on_main && !c->released) pthread_cond_wait(&c->cv, &c->lock);
  int fail = c->fail, bogus = c->bogus_out;
  pthread_mutex_unlock(&c->lock);
  if (bogus) {
    undertext_summary_out_t *wrong = (undertext_summary_out_t *)&input;
    if (undertext_summary_out_set(wrong, S("x")) != UNDERTEXT_BAD_HANDLE) return 1;
  }
  if (fail == 1) {
    undertext_summary_out_set(out, S("model unavailable"));
    return 7;
  }
  if (fail == 2) return UNDERTEXT_OK;
  /* The input is a JSON array of messages. */
  if (input.len == 0 || input.ptr[0] != '[') return 3;
  char s[64];
  snprintf(s, sizeof s, "summary of %zu bytes", input.len);
  return undertext_summary_out_set(out, S(s));
}

static undertext_status_t count_merge(void *ud, undertext_str_t input, undertext_summary_out_t *out) {
  counter_t *c = ud;
  pthread_mutex_lock(&c->lock);
  c->merge_calls++;
  pthread_mutex_unlock(&c->lock);
  if (input.len == 0 || input.ptr[0] != '[') return 3;
  return undertext_summary_out_set(out, S("merged summary"));
}

static void fill_history(undertext_chat_t c, int steps) {
  uint64_t seq;
  for (int i = 0; i < steps; i++) {
    if (i % 2 == 0) OK(undertext_chat_append_text(c, UNDERTEXT_ROLE_USER, S("next task"), &seq));
    append_tool_step(c, i, 3000);
  }
}

static void checkpoints_publish_under_the_guard(void) {
  char *dir = temp_dir();
  undertext_store_t s = open_store(dir);
  undertext_chat_t c = new_chat(s, "alice");
  fill_history(c, 12);

  undertext_checkpoint_t cp = {0};
  OK(undertext_chat_build_checkpoint(c, NULL, 1000, 0, &cp));
  undertext_checkpoint_info_t ci;
  OK(undertext_checkpoint_info(cp, &ci));
  CHECK(ci.reach > 0 && ci.base_revision == 0 && ci.n_segments > 1 && ci.summarized == ci.n_segments);
  undertext_buf_t b = {0};
  OK(undertext_checkpoint_summary(cp, &b));
  CHECK(b.len > 0 && buf_has(b, "[0 user]"));
  OK(undertext_buf_free(&b));
  undertext_published_t pub;
  OK(undertext_chat_published_checkpoint(c, &pub));
  CHECK(pub.present == 0);
  OK(undertext_chat_publish_checkpoint(c, cp));
  OK(undertext_chat_published_checkpoint(c, &pub));
  CHECK(pub.present == 1 && pub.reach == ci.reach && pub.base_revision == 0);
  FAILS(UNDERTEXT_CONFLICT, "not beyond", undertext_chat_publish_checkpoint(c, cp));

  /* The view now holds the summary and the messages after the reach. */
  undertext_budget_t big;
  OK(undertext_budget_default(200000, 8000, &big));
  undertext_view_t v;
  OK(undertext_chat_view(c, &big, &v));
  OK(undertext_view_messages(v, UNDERTEXT_FORMAT_NEUTRAL, &b));
  CHECK(buf_has(b, "\"type\":\"summary\""));
  OK(undertext_buf_free(&b));
  OK(undertext_view_free(v));

  /* Built, then the chat is edited: publication is refused. */
  fill_history(c, 4);
  undertext_checkpoint_t stale = {0};
  OK(undertext_chat_build_checkpoint(c, NULL, 1000, 0, &stale));
  undertext_checkpoint_info_t si;
  OK(undertext_checkpoint_info(stale, &si));
  CHECK(si.cached > 0); /* unchanged segments were not summarized again */
  uint64_t rev;
  undertext_part_t p = text_part("next task, reworded");
  undertext_message_t m = {UNDERTEXT_ROLE_USER, &p, 1};
  OK(undertext_chat_edit(c, 0, &m, 0, &rev));
  FAILS(UNDERTEXT_CONFLICT, "built on revision 0", undertext_chat_publish_checkpoint(c, stale));
  OK(undertext_checkpoint_free(stale));
  FAILS(UNDERTEXT_STALE_HANDLE, "checkpoint handle", undertext_checkpoint_free(stale));
  FAILS(UNDERTEXT_STALE_HANDLE, "checkpoint handle", undertext_chat_publish_checkpoint(c, stale));

  /* A checkpoint of one chat cannot be published on another. */
  undertext_chat_t c2 = new_chat(s, "alice");
  fill_history(c2, 2);
  FAILS(UNDERTEXT_INVALID_ARGUMENT, "built for chat", undertext_chat_publish_checkpoint(c2, cp));
  OK(undertext_checkpoint_free(cp));

  /* A C summarizer: called on this thread, with JSON input. */
  counter_t cnt;
  memset(&cnt, 0, sizeof cnt);
  pthread_mutex_init(&cnt.lock, NULL);
  undertext_summarizer_t sum = {S("c-counter-v1"), count_summarize, count_merge, &cnt};
  OK(undertext_chat_build_checkpoint(c, &sum, 1000, 2, &cp));
  OK(undertext_checkpoint_info(cp, &ci));
  CHECK(cnt.summarize_calls == (int)ci.n_segments && cnt.merge_calls > 0 && ci.base_revision == 1);
  CHECK(pthread_equal(cnt.last_thread, pthread_self()));
  OK(undertext_checkpoint_summary(cp, &b));
  CHECK(buf_eq(b, "merged summary"));
  OK(undertext_buf_free(&b));
  OK(undertext_chat_publish_checkpoint(c, cp));
  OK(undertext_checkpoint_free(cp));
  int before = cnt.summarize_calls;
  OK(undertext_chat_build_checkpoint(c, &sum, 1000, 2, &cp)); /* all cached */
  CHECK(cnt.summarize_calls == before);
  OK(undertext_checkpoint_free(cp));

  /* Failing callbacks are UNDERTEXT_CALLBACK with their message. */
  undertext_summarizer_t fresh = {S("c-counter-v2"), count_summarize, count_merge, &cnt};
  cnt.fail = 1;
  FAILS(UNDERTEXT_CALLBACK, "model unavailable", undertext_chat_build_checkpoint(c, &fresh, 1000, 2, &cp));
  cnt.fail = 2;
  FAILS(UNDERTEXT_CALLBACK, "without calling undertext_summary_out_set",
        undertext_chat_build_checkpoint(c, &fresh, 1000, 2, &cp));
  cnt.fail = 0;
  cnt.bogus_out = 1;
  OK(undertext_chat_build_checkpoint(c, &fresh, 1000, 2, &cp)); /* bogus out was refused inside */
  OK(undertext_checkpoint_free(cp));
  cnt.bogus_out = 0;
  FAILS(UNDERTEXT_BAD_HANDLE, "summarizer callback", undertext_summary_out_set(NULL, S("x")));
  undertext_summarizer_t no_merge = {S("x"), count_summarize, NULL, &cnt};
  FAILS(UNDERTEXT_NULL_POINTER, "merge", undertext_chat_build_checkpoint(c, &no_merge, 0, 0, &cp));
  undertext_summarizer_t no_id = {S(""), count_summarize, count_merge, &cnt};
  FAILS(UNDERTEXT_INVALID_ARGUMENT, "summarizer.id", undertext_chat_build_checkpoint(c, &no_id, 0, 0, &cp));
  FAILS(UNDERTEXT_NOT_FOUND, "prepared checkpoint", undertext_chat_prepared_checkpoint(c, &cp));
  OK(undertext_store_close(s));
  pthread_mutex_destroy(&cnt.lock);
  remove_dir(dir);
}

/* ---- worker ---- */
static void wait_jobs(undertext_worker_t w, uint64_t n) {
  /* Waits for the worker's jobs; the bound (10 minutes) only keeps a broken build from
   * hanging the suite, it is not a timing claim. */
  undertext_worker_stats_t st = {0, 0};
  for (int i = 0; i < 300000; i++) {
    if (undertext_worker_stats(w, &st) != UNDERTEXT_OK || st.jobs_done >= n) break;
    usleep(2000);
  }
  CHECK(st.jobs_done >= n);
}

static void worker_prepares_on_its_own_thread(void) {
  char *dir = temp_dir();
  undertext_store_t s = open_store(dir);
  undertext_chat_t c = new_chat(s, "alice");
  fill_history(c, 12);
  counter_t cnt;
  memset(&cnt, 0, sizeof cnt);
  pthread_mutex_init(&cnt.lock, NULL);
  undertext_summarizer_t sum = {S("c-worker-v1"), count_summarize, count_merge, &cnt};
  undertext_worker_options_t wo;
  OK(undertext_worker_options_default(&wo));
  CHECK(wo.threads == 1 && wo.at_hard_line == UNDERTEXT_HARD_LINE_WAIT && wo.fan_in == 4);
  wo.segment_tokens = 1000;
  wo.at_hard_line = UNDERTEXT_HARD_LINE_REFUSE;
  undertext_worker_t w = {0};
  OK(undertext_worker_start(s, &sum, &wo, &w));

  /* A view past the worker's soft line (2/3) but under the guard's (0.7) asks for a job. */
  uint64_t est;
  undertext_budget_t big;
  OK(undertext_budget_default(1000000, 0, &big));
  OK(undertext_chat_estimate(c, &big, &est));
  undertext_budget_t b68;
  OK(undertext_budget_default(est * 100 / 68, 0, &b68));
  undertext_view_t v;
  OK(undertext_chat_view(c, &b68, &v));
  OK(undertext_view_free(v));
  wait_jobs(w, 1);
  undertext_worker_stats_t st;
  OK(undertext_worker_stats(w, &st));
  CHECK(st.jobs_done >= 1 && st.n_errors == 0);
  pthread_mutex_lock(&cnt.lock);
  CHECK(cnt.summarize_calls > 0 && !pthread_equal(cnt.last_thread, pthread_self()));
  pthread_mutex_unlock(&cnt.lock);
  undertext_checkpoint_t cp;
  OK(undertext_chat_prepared_checkpoint(c, &cp));
  undertext_checkpoint_info_t ci;
  OK(undertext_checkpoint_info(cp, &ci));
  CHECK(ci.reach > 0);
  OK(undertext_checkpoint_free(cp));
  undertext_buf_t b = {0};
  OK(undertext_worker_errors(w, &b));
  CHECK(buf_eq(b, "[]"));
  OK(undertext_buf_free(&b));

  /* At the hard line the view swaps the prepared checkpoint in. */
  undertext_budget_t b95;
  OK(undertext_budget_default(est * 100 / 95, 0, &b95));
  OK(undertext_chat_view(c, &b95, &v));
  undertext_view_decision_t d;
  OK(undertext_view_decision(v, &d));
  CHECK(d.swapped == 1);
  OK(undertext_view_free(v));
  undertext_published_t pub;
  OK(undertext_chat_published_checkpoint(c, &pub));
  CHECK(pub.present == 1 && pub.reach == ci.reach);

  OK(undertext_worker_stop(w));
  FAILS(UNDERTEXT_STALE_HANDLE, "worker handle", undertext_worker_stop(w));
  FAILS(UNDERTEXT_STALE_HANDLE, "worker handle", undertext_worker_stats(w, &st));

  /* A failing summarizer: the worker reports the error (retries 0). */
  undertext_summarizer_t failing = {S("c-worker-v2"), count_summarize, count_merge, &cnt};
  cnt.fail = 1;
  wo.retries = 0;
  OK(undertext_worker_start(s, &failing, &wo, &w));
  undertext_chat_t c2 = new_chat(s, "alice");
  fill_history(c2, 12);
  OK(undertext_chat_estimate(c2, &big, &est));
  OK(undertext_budget_default(est * 100 / 68, 0, &b68));
  OK(undertext_chat_view(c2, &b68, &v));
  OK(undertext_view_free(v));
  wait_jobs(w, 1);
  OK(undertext_worker_errors(w, &b));
  CHECK(buf_has(b, "model unavailable"));
  OK(undertext_buf_free(&b));
  /* Closing the store stops the worker too. */
  OK(undertext_store_close(s));
  FAILS(UNDERTEXT_STALE_HANDLE, "worker handle", undertext_worker_stats(w, &st));

  s = open_store(dir);
  /* Synchronous policy: over the hard line with nothing prepared and the guard's previews
   * not enough, the view builds the checkpoint on the calling thread (the worker's own job
   * is held back meanwhile). Where previews alone fit, nothing is built: no stall. */
  counter_t sync;
  memset(&sync, 0, sizeof sync);
  pthread_mutex_init(&sync.lock, NULL);
  pthread_cond_init(&sync.cv, NULL);
  sync.block_others = 1;
  sync.main = pthread_self();
  undertext_summarizer_t sync_sum = {S("c-sync-v1"), count_summarize, count_merge, &sync};
  wo.at_hard_line = UNDERTEXT_HARD_LINE_SYNCHRONOUS;
  OK(undertext_worker_start(s, &sync_sum, &wo, &w));
  undertext_chat_t c3 = new_chat(s, "alice");
  fill_history(c3, 12);
  OK(undertext_chat_estimate(c3, &big, &est));
  OK(undertext_budget_default(est * 100 / 95, 0, &b95));
  OK(undertext_chat_view(c3, &b95, &v));
  OK(undertext_view_decision(v, &d));
  CHECK(d.swapped == 0 && d.kind == UNDERTEXT_DECISION_COMPACTED);
  OK(undertext_view_free(v));
  undertext_budget_t b500;
  OK(undertext_budget_default(est * 100 / 500, 0, &b500));
  OK(undertext_chat_view(c3, &b500, &v));
  OK(undertext_view_decision(v, &d));
  CHECK(d.swapped == 1);
  OK(undertext_view_free(v));
  pthread_mutex_lock(&sync.lock);
  CHECK(sync.on_main_calls > 0);
  sync.released = 1;
  pthread_cond_broadcast(&sync.cv);
  pthread_mutex_unlock(&sync.lock);
  OK(undertext_worker_stop(w));
  pthread_cond_destroy(&sync.cv);
  pthread_mutex_destroy(&sync.lock);
  wo.at_hard_line = UNDERTEXT_HARD_LINE_REFUSE;

  FAILS(UNDERTEXT_NULL_POINTER, "out", undertext_worker_start(s, NULL, NULL, NULL));
  wo.threads = 0;
  FAILS(UNDERTEXT_INVALID_ARGUMENT, "threads", undertext_worker_start(s, NULL, &wo, &w));
  wo.threads = 1;
  wo.at_hard_line = 8;
  FAILS(UNDERTEXT_INVALID_ARGUMENT, "at_hard_line", undertext_worker_start(s, NULL, &wo, &w));
  OK(undertext_worker_start(s, NULL, NULL, &w)); /* built-in summarizer, defaults */
  OK(undertext_worker_stop(w));
  OK(undertext_store_close(s));
  pthread_mutex_destroy(&cnt.lock);
  remove_dir(dir);
}

/* ---- buffers and errors ---- */
static void *error_on_other_thread(void *arg) {
  (void)arg;
  size_t len = 1;
  undertext_last_error(NULL, 0, &len);
  /* A fresh thread has no error yet. */
  return (void *)(uintptr_t)(len == 0);
}

static void buffers_and_last_error(void) {
  char *dir = temp_dir();
  undertext_store_t s = open_store(dir);
  undertext_chat_t c = new_chat(s, "alice");
  uint64_t seq;
  OK(undertext_chat_append_text(c, UNDERTEXT_ROLE_USER, S("hello"), &seq));
  undertext_buf_t b = {0};
  OK(undertext_chat_get(c, 0, &b));
  undertext_buf_t copy = b;
  OK(undertext_buf_free(&b));
  CHECK(b.ptr == NULL && b.len == 0);
  OK(undertext_buf_free(&b)); /* the nulled struct: a no-op */
  FAILS(UNDERTEXT_BAD_BUFFER, "already freed", undertext_buf_free(&copy)); /* a copy: refused */
  char stack[16];
  undertext_buf_t forged = {(uint8_t *)stack, sizeof stack};
  FAILS(UNDERTEXT_BAD_BUFFER, "not handed out", undertext_buf_free(&forged));
  OK(undertext_chat_get(c, 0, &b));
  undertext_buf_t wrong_len = {b.ptr, b.len + 1};
  FAILS(UNDERTEXT_BAD_BUFFER, "expected length", undertext_buf_free(&wrong_len));
  OK(undertext_buf_free(&b));
  undertext_buf_t null_len = {NULL, 3};
  FAILS(UNDERTEXT_BAD_BUFFER, "length 0", undertext_buf_free(&null_len));
  FAILS(UNDERTEXT_NULL_POINTER, "buf", undertext_buf_free(NULL));
  /* A misaligned out-pointer is refused, not written. */
  uint64_t words[3];
  undertext_chat_info_t *odd = (undertext_chat_info_t *)((char *)words + 1);
  FAILS(UNDERTEXT_NULL_POINTER, "aligned", undertext_chat_info(c, odd));

  /* last_error: size query, too small, exact; a successful call leaves the message. */
  FAILS(UNDERTEXT_NOT_FOUND, "not found", undertext_chat_open(s, S("bob"), 12345, &c));
  OK(undertext_chat_append_text(c, UNDERTEXT_ROLE_USER, S("ok"), &seq));
  size_t len = 0;
  undertext_status_t st = undertext_last_error(NULL, 0, &len);
  CHECK(st == UNDERTEXT_BUFFER_TOO_SMALL && len > 9);
  char small[4];
  st = undertext_last_error((uint8_t *)small, sizeof small, &len);
  CHECK(st == UNDERTEXT_BUFFER_TOO_SMALL && len > 4);
  char *full = malloc(len);
  size_t len2 = 0;
  OK(undertext_last_error((uint8_t *)full, len, &len2));
  CHECK(len2 == len && memcmp(full, "not found", 9) == 0);
  free(full);
  FAILS(UNDERTEXT_NULL_POINTER, "out_len", undertext_last_error((uint8_t *)small, sizeof small, NULL));
  pthread_t t;
  void *fresh = NULL;
  pthread_create(&t, NULL, error_on_other_thread, NULL);
  pthread_join(t, &fresh);
  CHECK(fresh == (void *)1);

  undertext_str_t v;
  OK(undertext_version(&v));
  CHECK(v.len == 5 && memcmp(v.ptr, "0.1.0", 5) == 0);
  OK(undertext_store_close(s));
  remove_dir(dir);
}

/* The long autonomous loop: one task, then only tool calls. The bounded protected tail
 * lets the guard preview settled steps of the one turn; the nudge carries the index; the
 * compaction tool answers with lint problems, then applies a corrected plan. */
static void a_single_task_loop_is_compacted_inside_its_turn(void) {
  char *dir = temp_dir();
  undertext_store_t s = open_store(dir);
  undertext_chat_meta_t meta = {S(""), S("model-a"), S(""), S("")};
  uint64_t id, seq;
  OK(undertext_chat_create(s, S("alice"), &meta, &id));
  undertext_chat_t c = {0};
  OK(undertext_chat_open(s, S("alice"), id, &c));
  OK(undertext_chat_append_text(c, UNDERTEXT_ROLE_USER, S("fix the parser"), &seq));
  for (int i = 0; i < 20; i++) append_tool_step(c, i, 3000);
  undertext_budget_t all;
  OK(undertext_budget_default(1000000, 0, &all));
  uint64_t est = 0;
  OK(undertext_chat_estimate(c, &all, &est));
  undertext_budget_t b;
  OK(undertext_budget_default(est * 10 / 8, 0, &b)); /* the loop at 80 % */
  undertext_tail_t tail = {1500, 0, 0.5};
  undertext_view_t v = {0};
  OK(undertext_chat_view_tail(c, &b, &tail, &v));
  undertext_view_decision_t d;
  OK(undertext_view_decision(v, &d));
  CHECK(d.kind == UNDERTEXT_DECISION_COMPACTED && d.n_previewed > 0);
  undertext_buf_t buf = {0};
  OK(undertext_view_nudge(v, &buf));
  CHECK(buf_has(buf, "compact_history") && buf_has(buf, "1 assistant"));
  OK(undertext_buf_free(&buf));
  uint64_t minimum = 0;
  OK(undertext_chat_protected_minimum(c, &b, &tail, &minimum));
  CHECK(minimum > 0 && minimum < d.limit + d.estimate);
  OK(undertext_chat_compaction_tool_call(c, S("{\"trims\": [1]}"), d.revision, &b, &tail, &buf));
  CHECK(buf_has(buf, "compaction refused") && buf_has(buf, "not a tool result"));
  OK(undertext_buf_free(&buf));
  OK(undertext_chat_compaction_tool_call(c, S("{\"trims\": [2]}"), d.revision, &b, &tail, &buf));
  CHECK(buf_has(buf, "compaction applied"));
  OK(undertext_buf_free(&buf));
  OK(undertext_compaction_tool_schema(UNDERTEXT_FORMAT_ANTHROPIC, &buf));
  CHECK(buf_has(buf, "\"input_schema\""));
  OK(undertext_buf_free(&buf));
  FAILS(UNDERTEXT_INVALID_ARGUMENT, "format", undertext_compaction_tool_schema(7, &buf));
  FAILS(UNDERTEXT_NULL_POINTER, "out", undertext_view_nudge(v, NULL));
  /* A NULL tail is the defaults. */
  undertext_view_t v2 = {0};
  OK(undertext_chat_view_tail(c, &b, NULL, &v2));
  OK(undertext_view_free(v2));
  OK(undertext_view_free(v));
  OK(undertext_chat_close(c));
  OK(undertext_store_close(s));
  remove_dir(dir);
}

/* ---- soft deletion ---- */
static void hidden_messages_leave_reads_and_views(void) {
  char *dir = temp_dir();
  undertext_store_t s = open_store(dir);
  undertext_chat_t c = new_chat(s, "alice");
  uint64_t seq = 0, rev = 0, start = 0, end = 0;
  OK(undertext_chat_append_text(c, UNDERTEXT_ROLE_USER, S("first"), &seq));
  OK(undertext_chat_append_text(c, UNDERTEXT_ROLE_ASSISTANT, S("a wrong turn"), &seq));
  append_tool_step(c, 1, 20); /* seqs 2 (call) and 3 (result) */
  OK(undertext_chat_append_text(c, UNDERTEXT_ROLE_USER, S("again"), &seq));
  CHECK(seq == 4);

  undertext_seq_range_t one = {1, 2};
  OK(undertext_chat_hide(c, &one, 1, 0, &rev));
  CHECK(rev == 1);
  FAILS(UNDERTEXT_STALE_REVISION, "expected 0, found 1", undertext_chat_hide(c, &one, 1, 0, &rev));
  undertext_seq_range_t past = {3, 6};
  FAILS(UNDERTEXT_OUT_OF_RANGE, "has 5 messages", undertext_chat_hide(c, &past, 1, 1, &rev));
  undertext_seq_range_t empty = {2, 2};
  FAILS(UNDERTEXT_INVALID_ARGUMENT, "non-empty", undertext_chat_hide(c, &empty, 1, 1, &rev));
  FAILS(UNDERTEXT_INVALID_ARGUMENT, "at least one range", undertext_chat_hide(c, NULL, 0, 1, &rev));
  FAILS(UNDERTEXT_NULL_POINTER, "ranges", undertext_chat_hide(c, NULL, 1, 1, &rev));
  /* A tool call alone, without its result: refused, naming both. */
  undertext_seq_range_t call_only = {2, 3};
  FAILS(UNDERTEXT_INVALID_ARGUMENT, "result is message 3", undertext_chat_hide(c, &call_only, 1, 1, &rev));

  undertext_buf_t b = {0};
  OK(undertext_chat_range(c, 0, 5, &b));
  CHECK(buf_has(b, "\"text\":\"first\"") && !buf_has(b, "a wrong turn") && buf_has(b, "\"text\":\"again\""));
  OK(undertext_buf_free(&b));
  OK(undertext_chat_get(c, 1, &b)); /* read by its seq, the bytes stay */
  CHECK(buf_has(b, "a wrong turn"));
  OK(undertext_buf_free(&b));

  undertext_snapshot_t snap = {0};
  OK(undertext_chat_snapshot(c, &snap));
  bool hidden = false;
  OK(undertext_snapshot_is_hidden(snap, 1, &hidden));
  CHECK(hidden);
  OK(undertext_snapshot_is_hidden(snap, 0, &hidden));
  CHECK(!hidden);
  FAILS(UNDERTEXT_OUT_OF_RANGE, "has 5 messages", undertext_snapshot_is_hidden(snap, 5, &hidden));
  FAILS(UNDERTEXT_NULL_POINTER, "out", undertext_snapshot_is_hidden(snap, 0, NULL));
  OK(undertext_snapshot_hidden(snap, &b));
  CHECK(buf_eq(b, "[[1,2]]"));
  OK(undertext_buf_free(&b));
  OK(undertext_snapshot_free(snap));

  /* Hide the whole step and append its replacement in one transaction. */
  undertext_seq_range_t step = {2, 4};
  undertext_part_t p = text_part("the step, in short");
  undertext_message_t m = {UNDERTEXT_ROLE_ASSISTANT, &p, 1};
  OK(undertext_chat_hide_and_append(c, &step, 1, &m, 1, 1, &rev, &start, &end));
  CHECK(rev == 2 && start == 5 && end == 6);

  undertext_budget_t big;
  OK(undertext_budget_default(200000, 8000, &big));
  undertext_view_t v = {0};
  OK(undertext_chat_view(c, &big, &v));
  OK(undertext_view_messages(v, UNDERTEXT_FORMAT_NEUTRAL, &b));
  CHECK(!buf_has(b, "a wrong turn") && !buf_has(b, "call-1") && buf_has(b, "the step, in short"));
  OK(undertext_buf_free(&b));
  OK(undertext_view_free(v));
  undertext_chat_info_t info;
  OK(undertext_chat_info(c, &info));
  CHECK(info.len == 6 && info.revision == 2);
  OK(undertext_store_close(s));

  /* After a reopen, the same. */
  s = open_store(dir);
  undertext_chat_t again = {0};
  OK(undertext_chat_open(s, S("alice"), info.id, &again));
  OK(undertext_chat_snapshot(again, &snap));
  OK(undertext_snapshot_hidden(snap, &b));
  CHECK(buf_eq(b, "[[1,4]]"));
  OK(undertext_buf_free(&b));
  OK(undertext_snapshot_free(snap));
  OK(undertext_store_close(s));
  remove_dir(dir);
}

/* Consecutive views of a growing chat extend the previous request (its stable prefix is the
 * whole previous view), and the history tools read back by the handles a view names. */
static void views_extend_the_previous_request_and_history_tools_read_back(void) {
  char *dir = temp_dir();
  undertext_store_t s = open_store(dir);
  uint64_t id = 0, seq = 0;
  undertext_chat_t c = {0};
  OK(undertext_chat_create(s, S("alice"), NULL, &id));
  OK(undertext_chat_open(s, S("alice"), id, &c));
  OK(undertext_chat_append_text(c, UNDERTEXT_ROLE_USER, S("find the flaky test"), &seq));
  undertext_budget_t big;
  OK(undertext_budget_default(200000, 8000, &big));
  uint64_t prev = 0;
  for (int i = 0; i < 5; i++) {
    OK(undertext_chat_append_text(c, UNDERTEXT_ROLE_ASSISTANT, S("looking at tests/flaky_test.rs"), &seq));
    undertext_view_t v = {0};
    OK(undertext_chat_view(c, &big, &v));
    undertext_view_decision_t d;
    OK(undertext_view_decision(v, &d));
    CHECK(d.stable_prefix_messages == prev);
    CHECK(d.stable_prefix_tokens + d.reread_tokens == d.estimate);
    prev = d.n_messages;
    OK(undertext_view_free(v));
  }
  char args[160];
  snprintf(args, sizeof args, "{\"chat\": \"chat-%016llx\", \"start\": 0, \"end\": 2}", (unsigned long long)id);
  undertext_buf_t b = {0};
  OK(undertext_history_tool_call(s, S("alice"), S("read_messages"), S(args), &b));
  CHECK(buf_has(b, "find the flaky test") && buf_has(b, "flaky_test.rs"));
  OK(undertext_buf_free(&b));
  OK(undertext_history_tool_call(s, S("mallory"), S("read_messages"), S(args), &b));
  CHECK(buf_has(b, "error: not found"));
  OK(undertext_buf_free(&b));
  OK(undertext_history_tool_call(s, S("alice"), S("read_context"), S("{}"), &b));
  CHECK(buf_has(b, "error:"));
  OK(undertext_buf_free(&b));
  FAILS(UNDERTEXT_INVALID_UTF8, "name", undertext_history_tool_call(s, S("alice"), bad_utf8(), S(args), &b));
  FAILS(UNDERTEXT_NULL_POINTER, "out", undertext_history_tool_call(s, S("alice"), S("read_context"), S(args), NULL));
  OK(undertext_history_tool_schemas(UNDERTEXT_FORMAT_ANTHROPIC, &b));
  CHECK(buf_has(b, "\"input_schema\"") && buf_has(b, "read_messages") && buf_has(b, "read_context"));
  OK(undertext_buf_free(&b));
  FAILS(UNDERTEXT_INVALID_ARGUMENT, "format", undertext_history_tool_schemas(7, &b));
  OK(undertext_chat_close(c));
  OK(undertext_store_close(s));
  remove_dir(dir);
}

int main(void) {
  store_open_close_and_lock();
  chats_owners_list_and_metadata();
  messages_batches_edits_and_steps();
  snapshots_do_not_move();
  hidden_messages_leave_reads_and_views();
  views_extend_the_previous_request_and_history_tools_read_back();
  archives_read_back_exactly_in_every_unit();
  views_decide_under_a_budget();
  a_single_task_loop_is_compacted_inside_its_turn();
  checkpoints_publish_under_the_guard();
  worker_prepares_on_its_own_thread();
  buffers_and_last_error();
  return finish("test_api");
}
