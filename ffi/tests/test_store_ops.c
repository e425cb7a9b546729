/* The C ABI for blobs and attachments, store maintenance (sync, stats, check, offline gc),
 * chat deletion, metadata versions, compaction plans and pending approvals: the happy path
 * and misuse (NULL pointers, invalid UTF-8, stale handles, wrong owners, ranges past the
 * end, malformed JSON). Run by scripts/test-ffi plain, under valgrind and with
 * -fsanitize=address,undefined. */
#include <dirent.h>
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

static undertext_chat_t new_chat(undertext_store_t s, const char *owner, uint64_t *id_out) {
  uint64_t id = 0;
  undertext_chat_t c = {0};
  OK(undertext_chat_create(s, S(owner), NULL, &id));
  OK(undertext_chat_open(s, S(owner), id, &c));
  if (id_out) *id_out = id;
  return c;
}

/* Bytes that do not compress: a xorshift stream from `seed`. */
static uint8_t *noise(size_t n, uint64_t seed) {
  uint8_t *b = malloc(n ? n : 1);
  uint64_t x = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; i++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    b[i] = (uint8_t)(x >> 24);
  }
  return b;
}

static void hex_of(const undertext_blob_id_t *id, char out[UNDERTEXT_BLOB_ID_HEX_LEN + 1]) {
  OK(undertext_blob_id_hex(id, (uint8_t *)out, UNDERTEXT_BLOB_ID_HEX_LEN));
  out[UNDERTEXT_BLOB_ID_HEX_LEN] = 0;
}

static undertext_part_t attachment(const char *mime, const char *hex) {
  undertext_part_t p;
  memset(&p, 0, sizeof p);
  p.kind = UNDERTEXT_PART_ATTACHMENT;
  p.name = S(mime);
  p.id = S(hex);
  return p;
}

/* ---- blobs ---- */
static void blobs_read_back_whole_and_by_range(void) {
  char *dir = temp_dir();
  undertext_store_t s = open_store(dir);

  /* Binary bytes (a NUL, 0xff) come back exactly; the same bytes get the same id. */
  const uint8_t bin[] = {0x89, 'P', 'N', 'G', 0, 0xff, 0xfe, 7};
  undertext_blob_id_t id, again;
  OK(undertext_put_blob(s, S("h"), bin, sizeof bin, &id));
  OK(undertext_put_blob(s, S("h"), bin, sizeof bin, &again));
  CHECK(memcmp(id.bytes, again.bytes, 32) == 0);
  undertext_buf_t b = {0};
  OK(undertext_get_blob(s, S("h"), &id, &b));
  CHECK(b.len == sizeof bin && memcmp(b.ptr, bin, sizeof bin) == 0);
  OK(undertext_buf_free(&b));
  uint64_t len = 0;
  OK(undertext_blob_len(s, S("h"), &id, &len));
  CHECK(len == sizeof bin);
  OK(undertext_get_blob_range(s, S("h"), &id, 4, 7, &b));
  CHECK(b.len == 3 && b.ptr[0] == 0 && b.ptr[1] == 0xff && b.ptr[2] == 0xfe);
  OK(undertext_buf_free(&b));
  OK(undertext_get_blob_range(s, S("h"), &id, 8, 8, &b)); /* empty range at the end */
  CHECK(b.ptr == NULL && b.len == 0);

  /* The empty blob: NULL data with length 0. */
  undertext_blob_id_t empty;
  OK(undertext_put_blob(s, S("h"), NULL, 0, &empty));
  OK(undertext_blob_len(s, S("h"), &empty, &len));
  CHECK(len == 0);
  OK(undertext_get_blob(s, S("h"), &empty, &b));
  CHECK(b.ptr == NULL && b.len == 0);

  /* A 1 MiB blob is chunked: a ranged read reads only the chunks it overlaps. */
  size_t big_n = 1 << 20;
  uint8_t *big = noise(big_n, 7);
  undertext_blob_id_t big_id;
  OK(undertext_put_blob(s, S("h"), big, big_n, &big_id));
  OK(undertext_blob_len(s, S("h"), &big_id, &len));
  CHECK(len == big_n);
  undertext_store_stats_t before, after;
  OK(undertext_store_stats(s, &before));
  OK(undertext_get_blob_range(s, S("h"), &big_id, 500000, 500100, &b));
  CHECK(b.len == 100 && memcmp(b.ptr, big + 500000, 100) == 0);
  OK(undertext_buf_free(&b));
  OK(undertext_store_stats(s, &after));
  uint64_t ranged_reads = after.blob_bodies_read - before.blob_bodies_read;
  CHECK(ranged_reads >= 1 && ranged_reads <= 2);
  OK(undertext_get_blob(s, S("h"), &big_id, &b));
  CHECK(b.len == big_n && memcmp(b.ptr, big, big_n) == 0);
  OK(undertext_buf_free(&b));
  OK(undertext_store_stats(s, &before));
  CHECK(before.blob_bodies_read - after.blob_bodies_read >= 16); /* the whole blob: every chunk */
  /* The last bytes of the chunked blob, across its last chunk boundary or not. */
  OK(undertext_get_blob_range(s, S("h"), &big_id, big_n - 70000, big_n, &b));
  CHECK(b.len == 70000 && memcmp(b.ptr, big + big_n - 70000, 70000) == 0);
  OK(undertext_buf_free(&b));

  /* Misuse. */
  FAILS(UNDERTEXT_OUT_OF_RANGE, "holds 8 bytes", undertext_get_blob_range(s, S("h"), &id, 2, 9, &b));
  FAILS(UNDERTEXT_OUT_OF_RANGE, "holds 1048576 bytes", undertext_get_blob_range(s, S("h"), &big_id, 0, big_n + 1, &b));
  FAILS(UNDERTEXT_INVALID_ARGUMENT, "reversed", undertext_get_blob_range(s, S("h"), &id, 5, 4, &b));
  CHECK(b.ptr == NULL && b.len == 0); /* out-parameters are written only on success */
  undertext_blob_id_t absent;
  memset(&absent, 0xab, sizeof absent);
  FAILS(UNDERTEXT_NOT_FOUND, "blob", undertext_get_blob(s, S("h"), &absent, &b));
  /* Another owner's blob is the same NOT_FOUND as an absent one. */
  FAILS(UNDERTEXT_NOT_FOUND, "blob", undertext_get_blob(s, S("mallory"), &id, &b));
  FAILS(UNDERTEXT_NOT_FOUND, "blob", undertext_blob_len(s, S("mallory"), &id, &len));
  FAILS(UNDERTEXT_NOT_FOUND, "blob", undertext_get_blob_range(s, S("mallory"), &id, 0, 1, &b));
  FAILS(UNDERTEXT_NOT_FOUND, "blob", undertext_blob_len(s, S("h"), &absent, &len));
  FAILS(UNDERTEXT_NOT_FOUND, "blob", undertext_get_blob_range(s, S("h"), &absent, 0, 0, &b));
  FAILS(UNDERTEXT_NULL_POINTER, "data", undertext_put_blob(s, S("h"), NULL, 3, &id));
  FAILS(UNDERTEXT_NULL_POINTER, "out", undertext_put_blob(s, S("h"), bin, sizeof bin, NULL));
  FAILS(UNDERTEXT_NULL_POINTER, "id", undertext_get_blob(s, S("h"), NULL, &b));
  FAILS(UNDERTEXT_NULL_POINTER, "out", undertext_get_blob(s, S("h"), &id, NULL));
  FAILS(UNDERTEXT_NULL_POINTER, "out", undertext_get_blob_range(s, S("h"), &id, 0, 1, NULL));
  FAILS(UNDERTEXT_NULL_POINTER, "out_len", undertext_blob_len(s, S("h"), &id, NULL));
  undertext_chat_t c = new_chat(s, "alice", NULL);
  undertext_store_t as_store = {c.id};
  FAILS(UNDERTEXT_BAD_HANDLE, "expected a store", undertext_put_blob(as_store, S("h"), bin, sizeof bin, &id));
  OK(undertext_store_close(s));
  FAILS(UNDERTEXT_STALE_HANDLE, "store handle", undertext_put_blob(s, S("h"), bin, sizeof bin, &id));
  FAILS(UNDERTEXT_STALE_HANDLE, "store handle", undertext_get_blob(s, S("h"), &id, &b));
  FAILS(UNDERTEXT_STALE_HANDLE, "store handle", undertext_get_blob_range(s, S("h"), &id, 0, 1, &b));
  FAILS(UNDERTEXT_STALE_HANDLE, "store handle", undertext_blob_len(s, S("h"), &id, &len));

  /* Durable: the blobs read back after reopening. */
  s = open_store(dir);
  OK(undertext_get_blob_range(s, S("h"), &big_id, 1000, 1010, &b));
  CHECK(b.len == 10 && memcmp(b.ptr, big + 1000, 10) == 0);
  OK(undertext_buf_free(&b));
  OK(undertext_store_close(s));
  free(big);
  remove_dir(dir);
}

/* ---- attachments ---- */
static void attachments_name_stored_blobs(void) {
  char *dir = temp_dir();
  undertext_store_t s = open_store(dir);
  undertext_chat_t c = new_chat(s, "alice", NULL);
  const uint8_t png[] = {0x89, 'P', 'N', 'G', 13, 10, 26, 10};
  undertext_blob_id_t id;
  /* Another owner's blob is not alice's to attach: the same NOT_FOUND as an absent one. */
  OK(undertext_put_blob(s, S("mallory"), png, sizeof png, &id));
  char hex[UNDERTEXT_BLOB_ID_HEX_LEN + 1];
  hex_of(&id, hex);
  undertext_part_t theirs = attachment("image/png", hex);
  undertext_message_t mt = {UNDERTEXT_ROLE_USER, &theirs, 1};
  uint64_t none = 0;
  FAILS(UNDERTEXT_NOT_FOUND, "is not stored", undertext_chat_append(c, &mt, &none));
  OK(undertext_put_blob(s, S("alice"), png, sizeof png, &id));

  undertext_part_t parts[2];
  memset(&parts[0], 0, sizeof parts[0]);
  parts[0].kind = UNDERTEXT_PART_TEXT;
  parts[0].text = S("what is in this screenshot?");
  parts[1] = attachment("image/png", hex);
  undertext_message_t m = {UNDERTEXT_ROLE_USER, parts, 2};
  uint64_t seq = 99;
  OK(undertext_chat_append(c, &m, &seq));
  CHECK(seq == 0);
  undertext_buf_t b = {0};
  OK(undertext_chat_get(c, 0, &b));
  char want[200];
  snprintf(want, sizeof want, "{\"blob\":\"%s\",\"mime\":\"image/png\",\"type\":\"attachment\"}", hex);
  CHECK(buf_has(b, want));
  OK(undertext_buf_free(&b));
  /* The part names the blob; the blob's bytes come back by id. */
  OK(undertext_get_blob(s, S("alice"), &id, &b));
  CHECK(b.len == sizeof png && memcmp(b.ptr, png, sizeof png) == 0);
  OK(undertext_buf_free(&b));

  /* Misuse: a blob that is not stored, a malformed id, no MIME type, bad UTF-8. */
  undertext_part_t absent = attachment("image/png", "abababababababababababababababababababababababababababababababab");
  undertext_message_t ma = {UNDERTEXT_ROLE_USER, &absent, 1};
  FAILS(UNDERTEXT_NOT_FOUND, "is not stored", undertext_chat_append(c, &ma, &seq));
  undertext_part_t text_ok;
  memset(&text_ok, 0, sizeof text_ok);
  text_ok.kind = UNDERTEXT_PART_TEXT;
  text_ok.text = S("first");
  undertext_message_t batch[2] = {{UNDERTEXT_ROLE_USER, &text_ok, 1}, {UNDERTEXT_ROLE_USER, &absent, 1}};
  uint64_t a, z;
  FAILS(UNDERTEXT_NOT_FOUND, "message 1, part 0", undertext_chat_append_batch(c, batch, 2, &a, &z));
  FAILS(UNDERTEXT_NOT_FOUND, "is not stored",
        undertext_chat_record_step(c, 1, S("s1"), 0, UNDERTEXT_STEP_COMPLETE, batch, 2, &a, &z));
  uint64_t rev;
  FAILS(UNDERTEXT_NOT_FOUND, "is not stored", undertext_chat_edit(c, 0, &ma, 0, &rev));
  undertext_chat_info_t info;
  OK(undertext_chat_info(c, &info));
  CHECK(info.len == 1 && info.revision == 0); /* nothing was written */
  undertext_part_t short_id = attachment("image/png", "abcd");
  undertext_message_t ms = {UNDERTEXT_ROLE_USER, &short_id, 1};
  FAILS(UNDERTEXT_INVALID_ARGUMENT, "parts[0].id: expected a blob id", undertext_chat_append(c, &ms, &seq));
  undertext_part_t no_mime = attachment("", hex);
  undertext_message_t mn = {UNDERTEXT_ROLE_USER, &no_mime, 1};
  FAILS(UNDERTEXT_INVALID_ARGUMENT, "MIME type", undertext_chat_append(c, &mn, &seq));
  undertext_part_t bad_mime = attachment("x", hex);
  bad_mime.name = bad_utf8();
  undertext_message_t mb = {UNDERTEXT_ROLE_USER, &bad_mime, 1};
  FAILS(UNDERTEXT_INVALID_UTF8, "parts[0].name", undertext_chat_append(c, &mb, &seq));

  /* An edit may put an attachment in place of a text. */
  OK(undertext_chat_append_text(c, UNDERTEXT_ROLE_ASSISTANT, S("a cat"), &seq));
  undertext_part_t only = attachment("image/png", hex);
  undertext_message_t mo = {UNDERTEXT_ROLE_ASSISTANT, &only, 1};
  OK(undertext_chat_edit(c, 1, &mo, 0, &rev));
  CHECK(rev == 1);
  OK(undertext_chat_get(c, 1, &b));
  CHECK(buf_has(b, "\"type\":\"attachment\"") && !buf_has(b, "a cat"));
  OK(undertext_buf_free(&b));
  OK(undertext_store_close(s));
  remove_dir(dir);
}

/* undertext_chat_append_with_blobs: blobs and the messages attaching them in one
 * transaction, one log sync under GROUP durability. */
static void blobs_and_their_messages_are_one_transaction(void) {
  char *dir = temp_dir();
  undertext_options_t o = test_options();
  o.durability = UNDERTEXT_DURABILITY_GROUP;
  undertext_store_t s = {0};
  OK(undertext_store_open(S(dir), &o, &s));
  uint64_t chat_id = 0;
  undertext_chat_t c = new_chat(s, "alice", &chat_id);
  uint8_t *big = noise(300000, 7);
  const uint8_t small[] = {0, 1, 2, 0xff};
  undertext_blob_id_t want[2];
  OK(undertext_blob_id_of(big, 300000, &want[0]));
  OK(undertext_blob_id_of(small, sizeof small, &want[1]));
  char hex0[UNDERTEXT_BLOB_ID_HEX_LEN + 1], hex1[UNDERTEXT_BLOB_ID_HEX_LEN + 1];
  hex_of(&want[0], hex0);
  hex_of(&want[1], hex1);

  undertext_bytes_t blobs[2] = {{big, 300000}, {small, sizeof small}};
  undertext_part_t parts0[2];
  memset(&parts0[0], 0, sizeof parts0[0]);
  parts0[0].kind = UNDERTEXT_PART_TEXT;
  parts0[0].text = S("state after step 1");
  parts0[1] = attachment("application/octet-stream", hex0);
  undertext_part_t parts1 = attachment("application/octet-stream", hex1);
  undertext_message_t ms[2] = {{UNDERTEXT_ROLE_SYSTEM, parts0, 2}, {UNDERTEXT_ROLE_SYSTEM, &parts1, 1}};
  undertext_store_stats_t st0, st1;
  OK(undertext_store_stats(s, &st0));
  undertext_blob_id_t ids[2];
  memset(ids, 0, sizeof ids);
  uint64_t a = 99, z = 99;
  OK(undertext_chat_append_with_blobs(c, blobs, 2, ms, 2, ids, &a, &z));
  OK(undertext_store_stats(s, &st1));
  CHECK(st1.log_syncs - st0.log_syncs == 1);
  CHECK(a == 0 && z == 2);
  CHECK(memcmp(ids, want, sizeof want) == 0);
  undertext_buf_t b = {0};
  OK(undertext_get_blob(s, S("alice"), &ids[0], &b));
  CHECK(b.len == 300000 && memcmp(b.ptr, big, 300000) == 0);
  OK(undertext_buf_free(&b));
  OK(undertext_chat_get(c, 1, &b));
  CHECK(buf_has(b, hex1));
  OK(undertext_buf_free(&b));
  /* A blob stored before may be attached; no blobs at all is fine (ids may be NULL). */
  OK(undertext_chat_append_with_blobs(c, NULL, 0, &ms[1], 1, NULL, &a, &z));
  CHECK(a == 2 && z == 3);

  /* Misuse: an attachment naming a blob neither stored nor passed writes nothing. */
  const uint8_t fresh[] = "passed along, but the call is refused";
  undertext_blob_id_t fresh_id;
  OK(undertext_blob_id_of(fresh, sizeof fresh, &fresh_id));
  undertext_bytes_t fb = {fresh, sizeof fresh};
  const char *unknown = "abababababababababababababababababababababababababababababababab";
  undertext_part_t absent = attachment("image/png", unknown);
  undertext_message_t ma = {UNDERTEXT_ROLE_USER, &absent, 1};
  undertext_blob_id_t out_id;
  memset(&out_id, 0x5a, sizeof out_id);
  a = z = 77;
  FAILS(UNDERTEXT_NOT_FOUND, unknown, undertext_chat_append_with_blobs(c, &fb, 1, &ma, 1, &out_id, &a, &z));
  CHECK(a == 77 && z == 77 && out_id.bytes[0] == 0x5a && out_id.bytes[31] == 0x5a); /* outs untouched */
  undertext_chat_info_t info;
  OK(undertext_chat_info(c, &info));
  CHECK(info.len == 3);
  uint64_t len = 0;
  FAILS(UNDERTEXT_NOT_FOUND, "", undertext_blob_len(s, S("h"), &fresh_id, &len)); /* the passed blob was not stored */

  /* Misuse: NULL where something is needed. */
  FAILS(UNDERTEXT_NULL_POINTER, "blobs", undertext_chat_append_with_blobs(c, NULL, 1, ms, 1, &out_id, &a, &z));
  undertext_bytes_t null_bytes = {NULL, 5};
  FAILS(UNDERTEXT_NULL_POINTER, "blobs[0]", undertext_chat_append_with_blobs(c, &null_bytes, 1, ms, 1, &out_id, &a, &z));
  FAILS(UNDERTEXT_NULL_POINTER, "out_ids", undertext_chat_append_with_blobs(c, &fb, 1, NULL, 0, NULL, &a, &z));
  FAILS(UNDERTEXT_NULL_POINTER, "messages", undertext_chat_append_with_blobs(c, &fb, 1, NULL, 1, &out_id, &a, &z));
  FAILS(UNDERTEXT_NULL_POINTER, "out_end", undertext_chat_append_with_blobs(c, &fb, 1, NULL, 0, &out_id, &a, NULL));
  OK(undertext_chat_info(c, &info));
  CHECK(info.len == 3);
  FAILS(UNDERTEXT_NOT_FOUND, "", undertext_blob_len(s, S("h"), &fresh_id, &len));

  /* After reopening, the blobs and the messages are there. */
  OK(undertext_store_close(s));
  s = open_store(dir);
  OK(undertext_chat_open(s, S("alice"), chat_id, &c));
  OK(undertext_chat_info(c, &info));
  CHECK(info.len == 3);
  OK(undertext_get_blob(s, S("alice"), &want[1], &b));
  CHECK(b.len == sizeof small && memcmp(b.ptr, small, sizeof small) == 0);
  OK(undertext_buf_free(&b));
  OK(undertext_store_close(s));
  /* A closed store's chat handle is stale. */
  FAILS(UNDERTEXT_STALE_HANDLE, "", undertext_chat_append_with_blobs(c, &fb, 1, &ma, 1, &out_id, &a, &z));
  free(big);
  remove_dir(dir);
}

/* ---- sync, stats, check ---- */

/* Finds `needle` in the store's log segments and flips the byte after its first 8 bytes.
 * Returns 1 when it did. */
static int damage_log(const char *dir, const uint8_t *needle, size_t n) {
  char logdir[600];
  snprintf(logdir, sizeof logdir, "%s/log", dir);
  DIR *d = opendir(logdir);
  if (!d) return 0;
  int done = 0;
  struct dirent *e;
  while (!done && (e = readdir(d)) != NULL) {
    size_t l = strlen(e->d_name);
    if (l < 4 || strcmp(e->d_name + l - 4, ".seg") != 0) continue;
    char path[900];
    snprintf(path, sizeof path, "%s/%s", logdir, e->d_name);
    FILE *f = fopen(path, "r+b");
    if (!f) continue;
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    uint8_t *all = malloc((size_t)size + 1);
    fseek(f, 0, SEEK_SET);
    if (fread(all, 1, (size_t)size, f) == (size_t)size) {
      for (long i = 0; i + (long)n <= size; i++) {
        if (memcmp(all + i, needle, n) == 0) {
          uint8_t flipped = all[i + 8] ^ 0x40;
          fseek(f, i + 8, SEEK_SET);
          fwrite(&flipped, 1, 1, f);
          done = 1;
          break;
        }
      }
    }
    free(all);
    fclose(f);
  }
  closedir(d);
  return done;
}

static void sync_stats_and_check_report_the_store(void) {
  char *dir = temp_dir();
  undertext_store_t s = open_store(dir);
  undertext_store_stats_t st0, st1;
  OK(undertext_store_stats(s, &st0));
  CHECK(st0.segments >= 1 && st0.chats_in_memory == 0);
  undertext_chat_t c = new_chat(s, "alice", NULL);
  uint64_t seq;
  OK(undertext_chat_append_text(c, UNDERTEXT_ROLE_USER, S("hello"), &seq));
  uint8_t *data = noise(20000, 3);
  undertext_blob_id_t id;
  OK(undertext_put_blob(s, S("h"), data, 20000, &id));
  /* No fsync on the write path (DURABILITY_NONE): sync makes it durable, and counts. */
  OK(undertext_store_sync(s));
  OK(undertext_store_stats(s, &st1));
  CHECK(st1.log_syncs > st0.log_syncs);
  CHECK(st1.log_bytes >= st0.log_bytes + 20000);
  CHECK(st1.log_file_bytes >= st1.log_bytes && st1.chats_in_memory == 1);

  undertext_buf_t b = {0};
  OK(undertext_store_check(s, &b));
  CHECK(buf_has(b, "\"ok\":true") && buf_has(b, "\"problems\":[]") && !buf_has(b, "\"blobs\":0,"));
  OK(undertext_buf_free(&b));

  /* A flipped byte inside the blob's record: check names the segment, the read fails. */
  CHECK(damage_log(dir, data + 1000, 64));
  OK(undertext_store_check(s, &b));
  CHECK(buf_has(b, "\"ok\":false") && buf_has(b, "\"segment\":") && buf_has(b, "\"reason\":"));
  OK(undertext_buf_free(&b));
  FAILS(UNDERTEXT_CORRUPT, "corrupt", undertext_get_blob(s, S("h"), &id, &b));

  FAILS(UNDERTEXT_NULL_POINTER, "out", undertext_store_stats(s, NULL));
  FAILS(UNDERTEXT_NULL_POINTER, "out", undertext_store_check(s, NULL));
  undertext_store_t as_store = {c.id};
  FAILS(UNDERTEXT_BAD_HANDLE, "expected a store", undertext_store_sync(as_store));
  OK(undertext_store_close(s));
  FAILS(UNDERTEXT_STALE_HANDLE, "store handle", undertext_store_sync(s));
  FAILS(UNDERTEXT_STALE_HANDLE, "store handle", undertext_store_stats(s, &st1));
  FAILS(UNDERTEXT_STALE_HANDLE, "store handle", undertext_store_check(s, &b));
  FAILS(UNDERTEXT_BAD_HANDLE, "not a handle", undertext_store_sync((undertext_store_t){0}));
  free(data);
  remove_dir(dir);
}

/* ---- chat deletion ---- */
static void a_deleted_chat_refuses_every_write(void) {
  char *dir = temp_dir();
  undertext_store_t s = open_store(dir);
  uint64_t id = 0, kept_id = 0;
  undertext_chat_t c = new_chat(s, "alice", &id);
  undertext_chat_t kept = new_chat(s, "alice", &kept_id);
  uint64_t seq, rev, a, z, version;
  OK(undertext_chat_append_text(c, UNDERTEXT_ROLE_USER, S("to be deleted"), &seq));
  undertext_snapshot_t snap;
  OK(undertext_chat_snapshot(c, &snap));
  undertext_archive_info_t arc;
  OK(undertext_archive(s, S("alice"), S("some long output"), &arc));

  /* Another owner cannot delete it (nor tell it exists). */
  FAILS(UNDERTEXT_NOT_FOUND, "not found", undertext_chat_delete(s, S("mallory"), id));
  OK(undertext_chat_append_text(c, UNDERTEXT_ROLE_USER, S("still here"), &seq));
  CHECK(seq == 1);
  OK(undertext_chat_delete(s, S("alice"), id));

  /* Every write through the handle already open is NOT_FOUND. */
  FAILS(UNDERTEXT_NOT_FOUND, "", undertext_chat_append_text(c, UNDERTEXT_ROLE_USER, S("x"), &seq));
  undertext_part_t p;
  memset(&p, 0, sizeof p);
  p.kind = UNDERTEXT_PART_TEXT;
  p.text = S("x");
  undertext_message_t m = {UNDERTEXT_ROLE_USER, &p, 1};
  FAILS(UNDERTEXT_NOT_FOUND, "", undertext_chat_append(c, &m, &seq));
  FAILS(UNDERTEXT_NOT_FOUND, "", undertext_chat_append_batch(c, &m, 1, &a, &z));
  FAILS(UNDERTEXT_NOT_FOUND, "", undertext_chat_edit(c, 0, &m, 0, &rev));
  FAILS(UNDERTEXT_NOT_FOUND, "", undertext_chat_truncate(c, 1, 0, &rev));
  /* A step's messages are checked before the chat is (a user message cannot be in a step):
     a well-formed step is what meets the deleted chat. */
  undertext_message_t reply = {UNDERTEXT_ROLE_ASSISTANT, &p, 1};
  FAILS(UNDERTEXT_NOT_FOUND, "",
        undertext_chat_record_step(c, 1, S("s"), 0, UNDERTEXT_STEP_COMPLETE, &reply, 1, &a, &z));
  undertext_chat_meta_t meta = {S("t"), S(""), S(""), S("")};
  FAILS(UNDERTEXT_NOT_FOUND, "", undertext_chat_set_meta(c, &meta, &version));
  FAILS(UNDERTEXT_NOT_FOUND, "", undertext_chat_pin(c, &arc.id, 0, 4, UNDERTEXT_UNIT_CHARS));
  uint64_t changes;
  FAILS(UNDERTEXT_NOT_FOUND, "", undertext_chat_compact(c, S("{}"), 0, &changes));
  /* It cannot be opened, listed or deleted again; the snapshot taken before still reads. */
  undertext_chat_t again = {0};
  FAILS(UNDERTEXT_NOT_FOUND, "not found", undertext_chat_open(s, S("alice"), id, &again));
  FAILS(UNDERTEXT_NOT_FOUND, "not found", undertext_chat_delete(s, S("alice"), id));
  undertext_buf_t b = {0};
  OK(undertext_chat_list(s, S("alice"), 10, NULL, &b));
  char idstr[64];
  snprintf(idstr, sizeof idstr, "\"id\":%llu,", (unsigned long long)kept_id);
  CHECK(buf_has(b, idstr));
  snprintf(idstr, sizeof idstr, "\"id\":%llu,", (unsigned long long)id);
  CHECK(!buf_has(b, idstr));
  OK(undertext_buf_free(&b));
  OK(undertext_snapshot_get(snap, 0, &b));
  CHECK(buf_has(b, "to be deleted"));
  OK(undertext_buf_free(&b));
  /* The other chat is untouched. */
  OK(undertext_chat_append_text(kept, UNDERTEXT_ROLE_USER, S("fine"), &seq));

  /* Misuse. */
  FAILS(UNDERTEXT_INVALID_UTF8, "owner", undertext_chat_delete(s, bad_utf8(), kept_id));
  FAILS(UNDERTEXT_INVALID_ARGUMENT, "owner", undertext_chat_delete(s, S(""), kept_id));
  FAILS(UNDERTEXT_NOT_FOUND, "not found", undertext_chat_delete(s, S("alice"), 987654));
  undertext_str_t null_owner = {NULL, 5};
  FAILS(UNDERTEXT_NULL_POINTER, "owner", undertext_chat_delete(s, null_owner, kept_id));

  /* Deleted stays deleted after reopening. */
  OK(undertext_store_close(s));
  FAILS(UNDERTEXT_STALE_HANDLE, "store handle", undertext_chat_delete(s, S("alice"), kept_id));
  s = open_store(dir);
  FAILS(UNDERTEXT_NOT_FOUND, "not found", undertext_chat_open(s, S("alice"), id, &again));
  OK(undertext_chat_open(s, S("alice"), kept_id, &again));
  OK(undertext_store_close(s));
  remove_dir(dir);
}

/* ---- offline gc ---- */
static void gc_drops_what_only_deleted_chats_used(void) {
  char *dir = temp_dir();
  undertext_options_t o = test_options();
  undertext_store_t s = open_store(dir);
  uint64_t gone_id = 0, kept_id = 0, seq;
  undertext_chat_t gone = new_chat(s, "alice", &gone_id);
  undertext_chat_t kept = new_chat(s, "alice", &kept_id);

  /* One blob stored with the chat that goes (its grant is that chat's), one alice stored
   * herself and attached to the chat that stays, one alice stored herself and attached only
   * to the chat that goes (her own grant keeps it), one no chat uses (the harness's own). */
  uint8_t *only_gone = noise(30000, 11), *shared = noise(30000, 12), *loose = noise(30000, 13);
  uint8_t *own = noise(30000, 14);
  undertext_blob_id_t gone_blob, kept_blob, loose_blob, own_blob;
  OK(undertext_put_blob(s, S("alice"), shared, 30000, &kept_blob));
  OK(undertext_put_blob(s, S("h"), loose, 30000, &loose_blob));
  OK(undertext_put_blob(s, S("alice"), own, 30000, &own_blob));
  OK(undertext_blob_id_of(only_gone, 30000, &gone_blob));
  char hex[UNDERTEXT_BLOB_ID_HEX_LEN + 1];
  hex_of(&gone_blob, hex);
  char hex_own[UNDERTEXT_BLOB_ID_HEX_LEN + 1];
  hex_of(&own_blob, hex_own);
  undertext_part_t pg[2] = {attachment("application/octet-stream", hex),
                            attachment("application/octet-stream", hex_own)};
  undertext_message_t mg = {UNDERTEXT_ROLE_USER, pg, 2};
  undertext_bytes_t gb = {only_gone, 30000};
  uint64_t ga, gz;
  OK(undertext_chat_append_with_blobs(gone, &gb, 1, &mg, 1, &gone_blob, &ga, &gz));
  char *bulk = malloc(50001);
  memset(bulk, 'x', 50000);
  bulk[50000] = 0;
  OK(undertext_chat_append_text(gone, UNDERTEXT_ROLE_USER, S(bulk), &seq));
  char hex2[UNDERTEXT_BLOB_ID_HEX_LEN + 1];
  hex_of(&kept_blob, hex2);
  undertext_part_t pk = attachment("application/octet-stream", hex2);
  undertext_message_t mk = {UNDERTEXT_ROLE_USER, &pk, 1};
  OK(undertext_chat_append(kept, &mk, &seq));
  OK(undertext_chat_append_text(kept, UNDERTEXT_ROLE_ASSISTANT, S("kept answer"), &seq));
  OK(undertext_chat_delete(s, S("alice"), gone_id));

  /* Offline only: refused while the store is open. */
  undertext_gc_report_t r;
  memset(&r, 0, sizeof r);
  FAILS(UNDERTEXT_LOCKED, "already open in this process", undertext_gc(S(dir), &o, &r));
  OK(undertext_store_close(s));
  OK(undertext_gc(S(dir), &o, &r));
  CHECK(r.deleted_chats == 1);
  CHECK(r.records_after < r.records_before);
  CHECK(r.blobs_removed >= 1);
  /* At least the 30,000 incompressible bytes only the deleted chat used. */
  CHECK(r.log_bytes_after + 30000 <= r.log_bytes_before);

  s = open_store(dir);
  undertext_chat_t c = {0};
  FAILS(UNDERTEXT_NOT_FOUND, "not found", undertext_chat_open(s, S("alice"), gone_id, &c));
  OK(undertext_chat_open(s, S("alice"), kept_id, &c));
  undertext_buf_t b = {0};
  OK(undertext_chat_get(c, 1, &b));
  CHECK(buf_has(b, "kept answer"));
  OK(undertext_buf_free(&b));
  OK(undertext_get_blob(s, S("alice"), &kept_blob, &b));
  CHECK(b.len == 30000 && memcmp(b.ptr, shared, 30000) == 0);
  OK(undertext_buf_free(&b));
  OK(undertext_get_blob(s, S("h"), &loose_blob, &b));
  CHECK(b.len == 30000 && memcmp(b.ptr, loose, 30000) == 0);
  OK(undertext_buf_free(&b));
  OK(undertext_get_blob(s, S("alice"), &own_blob, &b));
  CHECK(b.len == 30000 && memcmp(b.ptr, own, 30000) == 0);
  OK(undertext_buf_free(&b));
  FAILS(UNDERTEXT_NOT_FOUND, "blob", undertext_get_blob(s, S("alice"), &gone_blob, &b));
  /* A new chat does not reuse the deleted chat's id. */
  uint64_t fresh = 0;
  OK(undertext_chat_create(s, S("alice"), NULL, &fresh));
  CHECK(fresh != gone_id && fresh != kept_id);
  OK(undertext_store_check(s, &b));
  CHECK(buf_has(b, "\"ok\":true"));
  OK(undertext_buf_free(&b));
  OK(undertext_store_close(s));

  /* Again, with default options (NULL): nothing left to collect, nothing dropped (the
   * deleted chat's creation and deletion records stay, so its id is never reused), and the
   * chat collected before does not count again. */
  OK(undertext_gc(S(dir), NULL, &r));
  CHECK(r.deleted_chats == 0 && r.blobs_removed == 0 && r.records_after == r.records_before &&
        r.log_bytes_after == r.log_bytes_before);

  /* Misuse. */
  char missing[600];
  snprintf(missing, sizeof missing, "%s/absent", dir);
  FAILS(UNDERTEXT_NOT_FOUND, "store", undertext_gc(S(missing), &o, &r));
  FAILS(UNDERTEXT_NULL_POINTER, "out", undertext_gc(S(dir), &o, NULL));
  FAILS(UNDERTEXT_INVALID_UTF8, "path", undertext_gc(bad_utf8(), &o, &r));
  FAILS(UNDERTEXT_INVALID_ARGUMENT, "empty", undertext_gc(S(""), &o, &r));
  undertext_options_t bad = test_options();
  bad.durability = 9;
  FAILS(UNDERTEXT_INVALID_ARGUMENT, "durability", undertext_gc(S(dir), &bad, &r));
  free(only_gone);
  free(shared);
  free(loose);
  free(own);
  free(bulk);
  remove_dir(dir);
}

/* ---- finding chats by metadata ---- */
static void chats_are_found_by_title_or_extra_value(void) {
  char *dir = temp_dir();
  undertext_store_t s = open_store(dir);
  undertext_chat_meta_t m = {S("t-1"), S(""), S(""), S("{\"thread\":\"a\"}")};
  uint64_t id, other, version;
  OK(undertext_chat_create(s, S("alice"), &m, &id));
  OK(undertext_chat_create(s, S("bob"), &m, &other));
  undertext_buf_t b = {0};
  char want[64];
  snprintf(want, sizeof want, "\"id\":%llu,", (unsigned long long)id);
  undertext_str_t title = {NULL, 0};
  OK(undertext_chat_find(s, S("alice"), title, S("t-1"), &b));
  CHECK(buf_has(b, want) && buf_has(b, "\"next\":null"));
  OK(undertext_buf_free(&b));
  OK(undertext_chat_find(s, S("alice"), S("thread"), S("a"), &b));
  CHECK(buf_has(b, want));
  OK(undertext_buf_free(&b));
  /* Another owner's chat with the same metadata is not found; another value finds nothing. */
  snprintf(want, sizeof want, "\"id\":%llu,", (unsigned long long)other);
  OK(undertext_chat_find(s, S("alice"), S("thread"), S("a"), &b));
  CHECK(!buf_has(b, want));
  OK(undertext_buf_free(&b));
  OK(undertext_chat_find(s, S("alice"), S("thread"), S("b"), &b));
  CHECK(buf_has(b, "\"chats\":[]"));
  OK(undertext_buf_free(&b));
  /* A metadata edit moves the chat to its new value; a deleted chat is never found. */
  undertext_chat_t c = {0};
  OK(undertext_chat_open(s, S("alice"), id, &c));
  undertext_chat_meta_t m2 = {S("t-2"), S(""), S(""), S("{\"thread\":\"a\"}")};
  OK(undertext_chat_set_meta(c, &m2, &version));
  OK(undertext_chat_close(c));
  OK(undertext_chat_find(s, S("alice"), title, S("t-1"), &b));
  CHECK(buf_has(b, "\"chats\":[]"));
  OK(undertext_buf_free(&b));
  OK(undertext_chat_delete(s, S("alice"), id));
  OK(undertext_chat_find(s, S("alice"), title, S("t-2"), &b));
  CHECK(buf_has(b, "\"chats\":[]"));
  OK(undertext_buf_free(&b));
  FAILS(UNDERTEXT_NULL_POINTER, "out", undertext_chat_find(s, S("alice"), title, S("t-1"), NULL));
  FAILS(UNDERTEXT_INVALID_UTF8, "value", undertext_chat_find(s, S("alice"), title, bad_utf8(), &b));
  OK(undertext_store_close(s));
  remove_dir(dir);
}

/* ---- metadata versions ---- */
static void meta_at_reads_every_version(void) {
  char *dir = temp_dir();
  undertext_store_t s = open_store(dir);
  undertext_chat_meta_t m1 = {S("first title"), S("model-a"), S(""), S("{\"k\":\"v1\"}")};
  uint64_t id, version;
  OK(undertext_chat_create(s, S("alice"), &m1, &id));
  undertext_chat_t c = {0};
  OK(undertext_chat_open(s, S("alice"), id, &c));
  undertext_chat_meta_t m2 = {S("second title"), S("model-b"), S("draft"), S("")};
  OK(undertext_chat_set_meta(c, &m2, &version));
  CHECK(version == 2);
  undertext_buf_t b = {0};
  OK(undertext_chat_meta_at(c, 1, &b));
  CHECK(buf_has(b, "\"title\":\"first title\"") && buf_has(b, "\"model\":\"model-a\"") &&
        buf_has(b, "\"k\":\"v1\"") && buf_has(b, "\"version\":1"));
  OK(undertext_buf_free(&b));
  OK(undertext_chat_meta_at(c, 2, &b));
  CHECK(buf_has(b, "\"title\":\"second title\"") && buf_has(b, "\"draft\":\"draft\"") &&
        buf_has(b, "\"version\":2") && !buf_has(b, "v1"));
  OK(undertext_buf_free(&b));

  FAILS(UNDERTEXT_OUT_OF_RANGE, "expected 1 to 2", undertext_chat_meta_at(c, 3, &b));
  FAILS(UNDERTEXT_OUT_OF_RANGE, "expected 1 to 2", undertext_chat_meta_at(c, 0, &b));
  FAILS(UNDERTEXT_NULL_POINTER, "out", undertext_chat_meta_at(c, 1, NULL));

  /* Versions survive reopening. */
  OK(undertext_store_close(s));
  FAILS(UNDERTEXT_STALE_HANDLE, "chat handle", undertext_chat_meta_at(c, 1, &b));
  s = open_store(dir);
  OK(undertext_chat_open(s, S("alice"), id, &c));
  OK(undertext_chat_meta_at(c, 1, &b));
  CHECK(buf_has(b, "\"title\":\"first title\""));
  OK(undertext_buf_free(&b));
  OK(undertext_chat_close(c));
  FAILS(UNDERTEXT_STALE_HANDLE, "chat handle", undertext_chat_meta_at(c, 1, &b));
  OK(undertext_store_close(s));
  remove_dir(dir);
}

/* ---- compaction ---- */
static void tool_step(undertext_chat_t c, const char *call_id, size_t size) {
  char *out = letters(size, 50, 1, 0);
  append_call_and_result(c, call_id, "{\"path\":\"src/lib.rs\"}", out);
  free(out);
}

static void compaction_plans_are_linted_then_recorded(void) {
  char *dir = temp_dir();
  undertext_store_t s = open_store(dir);
  undertext_chat_t c = new_chat(s, "alice", NULL);
  uint64_t seq;
  char explanation[700];
  memset(explanation, 0, sizeof explanation);
  strcpy(explanation, "LONGEXPLANATION ");
  for (int i = 0; i < 40; i++) strcat(explanation, "the module ");
  OK(undertext_chat_append_text(c, UNDERTEXT_ROLE_SYSTEM, S("you are a coding agent"), &seq)); /* 0 */
  OK(undertext_chat_append_text(c, UNDERTEXT_ROLE_USER, S("task 1"), &seq));                  /* 1 */
  tool_step(c, "c1", 3000);                                                                       /* 2, 3 */
  OK(undertext_chat_append_text(c, UNDERTEXT_ROLE_ASSISTANT, S(explanation), &seq));            /* 4 */
  OK(undertext_chat_append_text(c, UNDERTEXT_ROLE_USER, S("task 2"), &seq));                  /* 5 */
  tool_step(c, "c2", 3000);                                                                       /* 6, 7 */
  OK(undertext_chat_append_text(c, UNDERTEXT_ROLE_USER, S("task 3"), &seq));                  /* 8 */
  OK(undertext_chat_append_text(c, UNDERTEXT_ROLE_ASSISTANT, S("ok"), &seq));                 /* 9 */
  CHECK(seq == 9);

  /* The index: one line per message with role, tokens and a 60-character preview. */
  undertext_buf_t b = {0};
  OK(undertext_chat_index(c, &b));
  CHECK(b.len > 0 && b.ptr[0] == '[');
  CHECK(buf_has(b, "\"seq\":0,") && buf_has(b, "\"seq\":9,") && !buf_has(b, "\"seq\":10,"));
  CHECK(buf_has(b, "\"role\":\"tool\"") && buf_has(b, "\"preview\":\"LONGEXPLANATION the module"));
  CHECK(!buf_has(b, "the module the module the module the module the module the module"));
  CHECK(buf_has(b, "\"tokens\":"));
  OK(undertext_buf_free(&b));

  /* A plan breaking every rule: lint lists each problem; compact refuses it whole. */
  char bad_plan[1400];
  char long_rewrite[600];
  memset(long_rewrite, 0, sizeof long_rewrite);
  for (int i = 0; i < 50; i++) strcat(long_rewrite, "verbose ");
  snprintf(bad_plan, sizeof bad_plan,
           "{\"trims\":[7,2,9,9],\"squishes\":[{\"from\":1,\"to\":3,\"rewrite\":\"x\"},"
           "{\"from\":2,\"to\":4,\"rewrite\":\"y\"},{\"from\":3,\"to\":99,\"rewrite\":\"z\"},"
           "{\"from\":0,\"to\":1,\"rewrite\":\"%s\"}]}",
           long_rewrite);
  OK(undertext_chat_lint(c, S(bad_plan), &b));
  CHECK(buf_has(b, "\"rule\":\"range\"") && buf_has(b, "\"rule\":\"boundary\"") &&
        buf_has(b, "\"rule\":\"overlap\"") && buf_has(b, "\"rule\":\"protected\"") &&
        buf_has(b, "\"rule\":\"trim\"") && buf_has(b, "\"rule\":\"longer\""));
  CHECK(buf_has(b, "\"detail\":\"trim 9 is named twice\""));
  OK(undertext_buf_free(&b));
  undertext_chat_info_t info;
  OK(undertext_chat_info(c, &info));
  uint64_t changes = 77;
  FAILS(UNDERTEXT_PLAN_REFUSED, "overlap", undertext_chat_compact(c, S(bad_plan), info.revision, &changes));
  const char *msg = last_error();
  CHECK(strstr(msg, "range: squish 3..99") != NULL && strstr(msg, "protected: trim 7") != NULL);
  CHECK(changes == 77);

  /* A good plan: no problems, recorded; views show it, the originals stay. */
  const char *good = "{\"trims\":[3],\"squishes\":[{\"from\":4,\"to\":5,\"rewrite\":\"explained lib.rs\"}]}";
  OK(undertext_chat_lint(c, S(good), &b));
  CHECK(buf_eq(b, "[]"));
  OK(undertext_buf_free(&b));
  FAILS(UNDERTEXT_STALE_REVISION, "revision", undertext_chat_compact(c, S(good), info.revision + 1, &changes));
  undertext_view_t v;
  undertext_budget_t big;
  OK(undertext_budget_default(200000, 8000, &big));
  OK(undertext_chat_view(c, &big, &v));
  OK(undertext_view_messages(v, UNDERTEXT_FORMAT_NEUTRAL, &b));
  CHECK(buf_has(b, "LONGEXPLANATION") && !buf_has(b, "explained lib.rs"));
  OK(undertext_buf_free(&b));
  OK(undertext_view_free(v));
  OK(undertext_chat_compact(c, S(good), info.revision, &changes));
  CHECK(changes == 2);
  OK(undertext_chat_view(c, &big, &v));
  OK(undertext_view_messages(v, UNDERTEXT_FORMAT_NEUTRAL, &b));
  CHECK(buf_has(b, "explained lib.rs") && !buf_has(b, "LONGEXPLANATION"));
  OK(undertext_buf_free(&b));
  OK(undertext_view_free(v));
  OK(undertext_chat_get(c, 4, &b));
  CHECK(buf_has(b, "LONGEXPLANATION"));
  OK(undertext_buf_free(&b));
  /* The empty plan is fine and changes nothing. */
  OK(undertext_chat_info(c, &info));
  OK(undertext_chat_compact(c, S("{}"), info.revision, &changes));
  CHECK(changes == 0);

  /* Misuse: JSON that is not a plan, bad UTF-8, NULL, stale handle. */
  /* The engine's plan grammar (the model's tool call reads plans the same way): the error
     names the place, what was expected and what was found. */
  FAILS(UNDERTEXT_INVALID_ARGUMENT, "plan: expected a JSON object, found invalid JSON",
        undertext_chat_lint(c, S("{\"trims\":"), &b));
  FAILS(UNDERTEXT_INVALID_ARGUMENT, "plan: trims[0]: expected a non-negative integer seq, found \"3\"",
        undertext_chat_lint(c, S("{\"trims\":[\"3\"]}"), &b));
  FAILS(UNDERTEXT_INVALID_ARGUMENT, "plan: expected only \"trims\", \"squishes\", found \"trim\"",
        undertext_chat_compact(c, S("{\"trim\":[3]}"), 0, &changes));
  FAILS(UNDERTEXT_INVALID_ARGUMENT, "plan: squishes[0]: expected a member \"to\", found none",
        undertext_chat_compact(c, S("{\"squishes\":[{\"from\":1,\"rewrite\":\"r\"}]}"), 0, &changes));
  /* An unknown member of a squish is refused too: a misspelt name never drops a change. */
  FAILS(UNDERTEXT_INVALID_ARGUMENT, "plan: squishes[0]: expected only \"from\", \"to\", \"rewrite\", found \"why\"",
        undertext_chat_lint(c, S("{\"squishes\":[{\"from\":4,\"to\":5,\"rewrite\":\"r\",\"why\":1}]}"), &b));
  /* null is an absent member. */
  OK(undertext_chat_lint(c, S("{\"trims\":null,\"squishes\":null}"), &b));
  CHECK(buf_eq(b, "[]"));
  OK(undertext_buf_free(&b));
  FAILS(UNDERTEXT_INVALID_UTF8, "plan_json", undertext_chat_lint(c, bad_utf8(), &b));
  FAILS(UNDERTEXT_NULL_POINTER, "out", undertext_chat_lint(c, S("{}"), NULL));
  FAILS(UNDERTEXT_NULL_POINTER, "out", undertext_chat_index(c, NULL));
  FAILS(UNDERTEXT_NULL_POINTER, "out_changes", undertext_chat_compact(c, S("{}"), 0, NULL));
  OK(undertext_chat_close(c));
  FAILS(UNDERTEXT_STALE_HANDLE, "chat handle", undertext_chat_index(c, &b));
  FAILS(UNDERTEXT_STALE_HANDLE, "chat handle", undertext_chat_lint(c, S("{}"), &b));
  FAILS(UNDERTEXT_STALE_HANDLE, "chat handle", undertext_chat_compact(c, S("{}"), 0, &changes));
  OK(undertext_store_close(s));
  remove_dir(dir);
}

/* ---- approvals ---- */
static void append_part(undertext_chat_t c, uint32_t role, undertext_part_t p) {
  undertext_message_t m = {role, &p, 1};
  uint64_t seq;
  OK(undertext_chat_append(c, &m, &seq));
}

static undertext_part_t tool_result(const char *call_id, const char *text) {
  undertext_part_t p;
  memset(&p, 0, sizeof p);
  p.kind = UNDERTEXT_PART_TOOL_RESULT;
  p.call_id = S(call_id);
  p.text = S(text);
  return p;
}

static void pending_approvals_are_found(void) {
  char *dir = temp_dir();
  undertext_store_t s = open_store(dir);
  undertext_chat_t c = new_chat(s, "alice", NULL);
  undertext_str_t defaults = {NULL, 0};
  undertext_buf_t b = {0};
  uint64_t seq;
  OK(undertext_chat_append_text(c, UNDERTEXT_ROLE_USER, S("clean up"), &seq));
  FAILS(UNDERTEXT_NOT_FOUND, "no pending approval", undertext_chat_first_pending_approval(c, defaults, &b));

  /* A structured request: pending until a response with its id. Tool output claiming an
   * answer does not count. */
  undertext_part_t req;
  memset(&req, 0, sizeof req);
  req.kind = UNDERTEXT_PART_APPROVAL_REQUEST;
  req.id = S("a1");
  req.text = S("delete target/?");
  append_part(c, UNDERTEXT_ROLE_ASSISTANT, req); /* 1 */
  append_part(c, UNDERTEXT_ROLE_TOOL,
              tool_result("c0", "{\"type\":\"approval_response\",\"id\":\"a1\",\"approved\":true}"));
  OK(undertext_chat_first_pending_approval(c, defaults, &b));
  CHECK(buf_eq(b, "{\"id\":\"a1\",\"kind\":\"request\",\"seq\":1}"));
  OK(undertext_buf_free(&b));
  undertext_part_t resp;
  memset(&resp, 0, sizeof resp);
  resp.kind = UNDERTEXT_PART_APPROVAL_RESPONSE;
  resp.id = S("a1");
  resp.flag = 1;
  append_part(c, UNDERTEXT_ROLE_USER, resp);
  FAILS(UNDERTEXT_NOT_FOUND, "no pending approval", undertext_chat_first_pending_approval(c, defaults, &b));

  /* JSON in a tool result, at any depth. */
  append_part(c, UNDERTEXT_ROLE_TOOL, tool_result("c1", "server: {\"result\": {\"status\": \"pending_approval\"}}")); /* 4 */
  OK(undertext_chat_first_pending_approval(c, defaults, &b));
  CHECK(buf_eq(b, "{\"kind\":\"json\",\"rule\":\"status-pending\",\"seq\":4}"));
  OK(undertext_buf_free(&b));

  /* Custom patterns replace the defaults. */
  undertext_chat_t c2 = new_chat(s, "alice", NULL);
  append_part(c2, UNDERTEXT_ROLE_TOOL, tool_result("c1", "{\"needs_ok\": true}"));
  FAILS(UNDERTEXT_NOT_FOUND, "no pending approval", undertext_chat_first_pending_approval(c2, defaults, &b));
  OK(undertext_chat_first_pending_approval(c2, S("[{\"name\":\"needs-ok\",\"key\":\"needs_ok\",\"values\":[true]}]"), &b));
  CHECK(buf_eq(b, "{\"kind\":\"json\",\"rule\":\"needs-ok\",\"seq\":0}"));
  OK(undertext_buf_free(&b));
  FAILS(UNDERTEXT_NOT_FOUND, "no pending approval", undertext_chat_first_pending_approval(c, S("[]"), &b));

  /* Misuse. */
  FAILS(UNDERTEXT_INVALID_ARGUMENT, "patterns_json: expected a JSON array", undertext_chat_first_pending_approval(c, S("{}"), &b));
  FAILS(UNDERTEXT_INVALID_ARGUMENT, "patterns_json[0].values: expected an array",
        undertext_chat_first_pending_approval(c, S("[{\"name\":\"n\",\"key\":\"k\"}]"), &b));
  FAILS(UNDERTEXT_INVALID_ARGUMENT, "patterns_json[0].key: expected a string",
        undertext_chat_first_pending_approval(c, S("[{\"name\":\"n\",\"key\":1,\"values\":[]}]"), &b));
  FAILS(UNDERTEXT_INVALID_ARGUMENT, "unknown member \"value\"",
        undertext_chat_first_pending_approval(c, S("[{\"name\":\"n\",\"key\":\"k\",\"values\":[],\"value\":1}]"), &b));
  FAILS(UNDERTEXT_INVALID_ARGUMENT, "patterns_json: expected JSON", undertext_chat_first_pending_approval(c, S("[{"), &b));
  FAILS(UNDERTEXT_INVALID_UTF8, "patterns_json", undertext_chat_first_pending_approval(c, bad_utf8(), &b));
  FAILS(UNDERTEXT_NULL_POINTER, "out", undertext_chat_first_pending_approval(c, defaults, NULL));
  OK(undertext_store_close(s));
  FAILS(UNDERTEXT_STALE_HANDLE, "chat handle", undertext_chat_first_pending_approval(c, defaults, &b));
  remove_dir(dir);
}

/* Owner figures come from the owner's own chats: another owner storing the same text first
   moves none of them (the store-wide stats do move: they are for the operator). */
static void owner_stats_do_not_depend_on_what_another_owner_stored(void) {
  char *text = malloc(20001), *other = malloc(20001);
  for (int i = 0; i < 20000; i++) {
    text[i] = (char)('a' + i % 26);
    other[i] = (char)('A' + i % 26);
  }
  text[20000] = other[20000] = 0;
  undertext_owner_stats_t seen[2];
  uint64_t grew[2];
  for (int w = 0; w < 2; w++) {
    char *dir = temp_dir();
    undertext_store_t s = open_store(dir);
    undertext_chat_t bob = new_chat(s, "bob", NULL);
    uint64_t seq;
    OK(undertext_chat_append_text(bob, UNDERTEXT_ROLE_USER, S(w == 0 ? text : other), &seq));
    undertext_store_stats_t before, after;
    OK(undertext_store_stats(s, &before));
    undertext_chat_t alice = new_chat(s, "alice", NULL);
    OK(undertext_chat_append_text(alice, UNDERTEXT_ROLE_USER, S(text), &seq));
    OK(undertext_owner_stats(s, S("alice"), &seen[w]));
    OK(undertext_store_stats(s, &after));
    grew[w] = after.log_bytes - before.log_bytes;
    FAILS(UNDERTEXT_NULL_POINTER, "out", undertext_owner_stats(s, S("alice"), NULL));
    FAILS(UNDERTEXT_INVALID_ARGUMENT, "owner", undertext_owner_stats(s, S(""), &seen[w]));
    OK(undertext_store_close(s));
    remove_dir(dir);
  }
  CHECK(seen[0].chats == 1 && seen[0].messages == 1 && seen[0].text_bytes == 20000);
  CHECK(memcmp(&seen[0], &seen[1], sizeof seen[0]) == 0);
  CHECK(grew[0] < grew[1]);
  free(text);
  free(other);
}

/* ---- erasure ---- */
static void erased_messages_leave_every_read_and_gc_drops_their_bytes(void) {
  char *dir = temp_dir();
  undertext_options_t o = test_options();
  undertext_store_t s = open_store(dir);
  uint64_t id = 0, seq = 0, rev = 0;
  undertext_chat_t c = new_chat(s, "alice", &id);
  OK(undertext_chat_append_text(c, UNDERTEXT_ROLE_USER, S("hello"), &seq));
  uint8_t *secret = noise(30000, 21); /* incompressible: gc must drop these bytes */
  char *text = malloc(60001);
  for (int i = 0; i < 30000; i++) snprintf(text + 2 * i, 3, "%02x", secret[i]);
  OK(undertext_chat_append_text(c, UNDERTEXT_ROLE_USER, S(text), &seq));
  OK(undertext_chat_append_text(c, UNDERTEXT_ROLE_ASSISTANT, S("kept answer"), &seq));
  undertext_seq_range_t one = {1, 2};
  FAILS(UNDERTEXT_STALE_REVISION, "expected 7", undertext_chat_erase(c, &one, 1, 7, &rev));
  FAILS(UNDERTEXT_NULL_POINTER, "ranges", undertext_chat_erase(c, NULL, 1, 0, &rev));
  OK(undertext_chat_erase(c, &one, 1, 0, &rev));
  CHECK(rev == 1);
  undertext_buf_t b = {0};
  FAILS(UNDERTEXT_NOT_FOUND, "erased", undertext_chat_get(c, 1, &b));
  OK(undertext_chat_range(c, 0, 3, &b));
  CHECK(buf_has(b, "hello") && buf_has(b, "kept answer") && !buf_has(b, "\"seq\":1,"));
  OK(undertext_buf_free(&b));
  OK(undertext_chat_close(c));
  OK(undertext_store_close(s));

  undertext_gc_report_t r;
  memset(&r, 0, sizeof r);
  OK(undertext_gc(S(dir), &o, &r));
  /* The 60,000 bytes of hex text (zstd makes them ~30,000) left the log. */
  CHECK(r.log_bytes_after + 25000 <= r.log_bytes_before);
  s = open_store(dir);
  OK(undertext_chat_open(s, S("alice"), id, &c));
  FAILS(UNDERTEXT_NOT_FOUND, "erased", undertext_chat_get(c, 1, &b));
  OK(undertext_chat_get(c, 2, &b));
  CHECK(buf_has(b, "kept answer"));
  OK(undertext_buf_free(&b));
  OK(undertext_store_check(s, &b));
  CHECK(buf_has(b, "\"ok\":true"));
  OK(undertext_buf_free(&b));
  OK(undertext_chat_close(c));
  OK(undertext_store_close(s));
  free(text);
  free(secret);
  remove_dir(dir);
}

int main(void) {
  owner_stats_do_not_depend_on_what_another_owner_stored();
  blobs_read_back_whole_and_by_range();
  attachments_name_stored_blobs();
  blobs_and_their_messages_are_one_transaction();
  sync_stats_and_check_report_the_store();
  a_deleted_chat_refuses_every_write();
  gc_drops_what_only_deleted_chats_used();
  erased_messages_leave_every_read_and_gc_drops_their_bytes();
  meta_at_reads_every_version();
  chats_are_found_by_title_or_extra_value();
  compaction_plans_are_linted_then_recorded();
  pending_approvals_are_found();
  return finish("test_store_ops");
}
