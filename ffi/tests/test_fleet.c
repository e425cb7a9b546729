/* The C ABI against a fleet URL (`postgres://…`, the library built with the cargo feature
 * `fleet`): two stores opened on the same server stand for two processes (each open keeps
 * its own local replica, so what one writes reaches the other only through PostgreSQL).
 * Run by scripts/test-fleet (which starts the server and sets UNDERTEXT_FLEET_URL) plain,
 * under valgrind and with -fsanitize=address,undefined; without the variable it says it
 * skipped and exits 0, unless UNDERTEXT_FLEET_REQUIRED=1. */
#include <stdint.h>
#include <time.h>

#include "common.h"

/* An owner name no other run uses (the server outlives one run of the suite). */
static void unique_owner(char *out, size_t cap, const char *tag) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  snprintf(out, cap, "%s-%ld-%ld-%ld", tag, (long)getpid(), (long)ts.tv_sec, (long)ts.tv_nsec);
}

static undertext_store_t open_fleet(const char *url) {
  undertext_options_t o = test_options();
  undertext_store_t s = {0};
  OK(undertext_store_open(S(url), &o, &s));
  return s;
}

/* A tool call and its result of `size` bytes (archived on append above the threshold). */
static char *tool_step(undertext_chat_t c, const char *id, size_t size) {
  char *out = letters(size, 40, 7, strlen(id));
  append_call_and_result(c, id, "{\"file\":\"big.log\"}", out);
  return out;
}

/* Creates a chat of `owner` in `s` and opens it; its id goes to `*id`. */
static undertext_chat_t new_chat(undertext_store_t s, const char *owner, uint64_t *id) {
  undertext_chat_t c = {0};
  OK(undertext_chat_create(s, S(owner), NULL, id));
  OK(undertext_chat_open(s, S(owner), *id, &c));
  return c;
}

/* Bad URLs: a malformed one is refused before any connection, an unreachable server is an
 * I/O error naming the URL without its password. */
static void a_bad_or_unreachable_url_is_a_clear_error(void) {
  undertext_options_t o = test_options();
  undertext_store_t s = {0};
  FAILS(UNDERTEXT_INVALID_ARGUMENT, "blobs=ftp://x",
        undertext_store_open(S("postgres://127.0.0.1:1/agents?blobs=ftp://x"), &o, &s));
  FAILS(UNDERTEXT_IO, "postgres://app:***@127.0.0.1:1/agents",
        undertext_store_open(S("postgres://app:hunter2@127.0.0.1:1/agents"), &o, &s));
  CHECK(strstr(last_error(), "connect") != NULL);
  CHECK(strstr(last_error(), "hunter2") == NULL);
  CHECK(s.id == 0);
}

/* One process creates and appends (a tool result big enough to be archived); the other
 * sees it, views it within a budget and reads the archived result back by range. */
static void another_process_sees_appends_views_them_and_reads_the_archive(const char *url) {
  char alice[96];
  unique_owner(alice, sizeof alice, "c-alice");
  undertext_store_t a = open_fleet(url);
  undertext_store_t b = open_fleet(url);

  uint64_t id = 0, seq = 0;
  undertext_chat_t ca = new_chat(a, alice, &id);
  OK(undertext_chat_append_text(ca, UNDERTEXT_ROLE_SYSTEM, S("you are a coding agent"), &seq));
  CHECK(seq == 0);
  OK(undertext_chat_append_text(ca, UNDERTEXT_ROLE_USER, S("why does the build fail?"), &seq));
  CHECK(seq == 1);
  char *big = tool_step(ca, "call-1", 40000); /* seqs 2 and 3; above the 8 KiB threshold */
  undertext_blob_id_t big_id;
  OK(undertext_blob_id_of((const uint8_t *)big, strlen(big), &big_id));
  char hex[65] = {0};
  OK(undertext_blob_id_hex(&big_id, (uint8_t *)hex, 64));

  /* The other store opens the chat as the first one left it. */
  undertext_chat_t cb = {0};
  OK(undertext_chat_open(b, S(alice), id, &cb));
  undertext_chat_info_t info;
  OK(undertext_chat_info(cb, &info));
  CHECK(info.len == 4 && info.revision == 0);
  undertext_buf_t buf = {0};
  OK(undertext_chat_get(cb, 3, &buf));
  CHECK(buf_has(buf, "\"archive\":{") && buf_has(buf, hex) && buf_has(buf, "\"bytes\":40000"));
  OK(undertext_buf_free(&buf));

  /* A view within a budget: the whole chat fits a large window; a small one previews the
   * archived result (and the preview names the archive, so the model can read it back). */
  undertext_budget_t large;
  OK(undertext_budget_default(200000, 8000, &large));
  undertext_view_t v = {0};
  OK(undertext_chat_view(cb, &large, &v));
  undertext_view_decision_t d;
  OK(undertext_view_decision(v, &d));
  CHECK(d.kind == UNDERTEXT_DECISION_FITS && d.n_messages == 4 && d.estimate > 0 && d.estimate < 200000);
  OK(undertext_view_messages(v, UNDERTEXT_FORMAT_NEUTRAL, &buf));
  CHECK(buf_has(buf, "why does the build fail?") && buf_has(buf, hex));
  OK(undertext_buf_free(&buf));
  OK(undertext_view_free(v));

  /* read_context of the archived result, through the other store, by bytes and lines. */
  OK(undertext_read_context(b, S(alice), &big_id, 1000, 1100, UNDERTEXT_UNIT_BYTES, &buf));
  CHECK(buf.len == 100 && memcmp(buf.ptr, big + 1000, 100) == 0);
  OK(undertext_buf_free(&buf));
  OK(undertext_read_context(b, S(alice), &big_id, 2, 3, UNDERTEXT_UNIT_LINES, &buf));
  CHECK(buf.len == 40 && memcmp(buf.ptr, big + 80, 40) == 0);
  OK(undertext_buf_free(&buf));
  FAILS(UNDERTEXT_OUT_OF_RANGE, "", undertext_read_context(b, S(alice), &big_id, 0, 40001, UNDERTEXT_UNIT_BYTES, &buf));

  /* A later append in the second store reaches the first at its next open of the chat. */
  OK(undertext_chat_append_text(cb, UNDERTEXT_ROLE_USER, S("and now?"), &seq));
  CHECK(seq == 4);
  undertext_chat_t ca2 = {0};
  OK(undertext_chat_open(a, S(alice), id, &ca2));
  OK(undertext_chat_get(ca2, 4, &buf));
  CHECK(buf_has(buf, "and now?"));
  OK(undertext_buf_free(&buf));
  OK(undertext_chat_append_text(ca2, UNDERTEXT_ROLE_ASSISTANT, S("it passes"), &seq));
  CHECK(seq == 5); /* dense seqs across the two stores */

  free(big);
  OK(undertext_chat_close(ca2));
  OK(undertext_chat_close(cb));
  OK(undertext_chat_close(ca));
  OK(undertext_store_close(b));
  OK(undertext_store_close(a));
}

static void history(undertext_chat_t c, int steps) {
  uint64_t seq;
  char id[32];
  for (int i = 0; i < steps; i++) {
    if (i % 2 == 0) OK(undertext_chat_append_text(c, UNDERTEXT_ROLE_USER, S("next task"), &seq));
    snprintf(id, sizeof id, "call-%d", i);
    free(tool_step(c, id, 3000));
  }
}

/* A checkpoint built on a revision another process has since edited is refused with
 * UNDERTEXT_CONFLICT, the code and message of embedded mode; so is one no newer than
 * another process's publication. */
static void a_stale_publication_is_the_same_conflict_as_embedded(const char *url) {
  char alice[96];
  unique_owner(alice, sizeof alice, "c-pub");
  undertext_store_t a = open_fleet(url);
  undertext_store_t b = open_fleet(url);
  uint64_t id = 0, rev = 0;
  undertext_chat_t ca = new_chat(a, alice, &id);
  history(ca, 12);

  undertext_checkpoint_t stale = {0};
  OK(undertext_chat_build_checkpoint(ca, NULL, 1000, 0, &stale));
  undertext_checkpoint_info_t ci;
  OK(undertext_checkpoint_info(stale, &ci));
  CHECK(ci.reach > 0 && ci.base_revision == 0);

  /* The other process edits the first message: revision 1. */
  undertext_chat_t cb = {0};
  OK(undertext_chat_open(b, S(alice), id, &cb));
  undertext_part_t p;
  memset(&p, 0, sizeof p);
  p.kind = UNDERTEXT_PART_TEXT;
  p.text = S("next task, reworded");
  undertext_message_t m = {UNDERTEXT_ROLE_USER, &p, 1};
  OK(undertext_chat_edit(cb, 0, &m, 0, &rev));
  CHECK(rev == 1);

  FAILS(UNDERTEXT_CONFLICT, "built on revision 0", undertext_chat_publish_checkpoint(ca, stale));
  undertext_published_t pub;
  OK(undertext_chat_published_checkpoint(ca, &pub));
  CHECK(pub.present == 0);
  /* An edit based on the old revision is refused too. */
  FAILS(UNDERTEXT_STALE_REVISION, "", undertext_chat_edit(ca, 1, &m, 0, &rev));
  OK(undertext_checkpoint_free(stale));

  /* Both build on revision 1; the second store publishes first, the first one's is then
   * not newer. */
  undertext_checkpoint_t cpa = {0}, cpb = {0};
  OK(undertext_chat_build_checkpoint(ca, NULL, 1000, 0, &cpa));
  OK(undertext_chat_build_checkpoint(cb, NULL, 1000, 0, &cpb));
  OK(undertext_chat_publish_checkpoint(cb, cpb));
  FAILS(UNDERTEXT_CONFLICT, "not beyond", undertext_chat_publish_checkpoint(ca, cpa));
  OK(undertext_chat_published_checkpoint(ca, &pub));
  CHECK(pub.present == 1 && pub.base_revision == 1);
  OK(undertext_checkpoint_free(cpa));
  OK(undertext_checkpoint_free(cpb));

  OK(undertext_chat_close(cb));
  OK(undertext_chat_close(ca));
  OK(undertext_store_close(b));
  OK(undertext_store_close(a));
}

/* Owners are walls across processes: another owner's blob and chat are NOT_FOUND, the
 * same as absent ones. */
static void another_owners_blob_and_chat_are_refused_across_stores(const char *url) {
  char alice[96], mallory[96];
  unique_owner(alice, sizeof alice, "c-wall-a");
  unique_owner(mallory, sizeof mallory, "c-wall-m");
  undertext_store_t a = open_fleet(url);
  undertext_store_t b = open_fleet(url);
  const char *secret = "alice's notes, stored in the fleet";
  undertext_blob_id_t bid;
  OK(undertext_put_blob(a, S(alice), (const uint8_t *)secret, strlen(secret), &bid));
  uint64_t id = 0;
  OK(undertext_chat_create(a, S(alice), NULL, &id));

  undertext_buf_t buf = {0};
  FAILS(UNDERTEXT_NOT_FOUND, "", undertext_get_blob(b, S(mallory), &bid, &buf));
  FAILS(UNDERTEXT_NOT_FOUND, "", undertext_read_context(b, S(mallory), &bid, 0, 4, UNDERTEXT_UNIT_BYTES, &buf));
  undertext_chat_t cm = {0};
  FAILS(UNDERTEXT_NOT_FOUND, "", undertext_chat_open(b, S(mallory), id, &cm));
  OK(undertext_get_blob(b, S(alice), &bid, &buf));
  CHECK(buf_eq(buf, secret));
  OK(undertext_buf_free(&buf));
  /* Mallory storing the same bytes gets her own grant, not alice's chat. */
  undertext_blob_id_t again;
  OK(undertext_put_blob(b, S(mallory), (const uint8_t *)secret, strlen(secret), &again));
  CHECK(memcmp(&again, &bid, sizeof bid) == 0);
  FAILS(UNDERTEXT_NOT_FOUND, "", undertext_chat_open(b, S(mallory), id, &cm));

  OK(undertext_store_close(b));
  OK(undertext_store_close(a));
}

/* A retry of an append with its idempotency key, from the other process: one copy. */
static void a_keyed_append_retried_by_another_process_is_written_once(const char *url) {
  char owner[96];
  unique_owner(owner, sizeof owner, "c-idem");
  undertext_store_t a = open_fleet(url);
  undertext_store_t b = open_fleet(url);
  uint64_t id = 0, start = 0, end = 0;
  undertext_chat_t ca = new_chat(a, owner, &id);
  undertext_part_t p;
  memset(&p, 0, sizeof p);
  p.kind = UNDERTEXT_PART_TEXT;
  p.text = S("tests pass");
  undertext_message_t m = {UNDERTEXT_ROLE_ASSISTANT, &p, 1};
  OK(undertext_chat_append_idempotent(ca, &m, 1, S("req-42"), &start, &end));
  CHECK(start == 0 && end == 1);
  undertext_chat_t cb = {0};
  OK(undertext_chat_open(b, S(owner), id, &cb));
  uint64_t again_start = 9, again_end = 9;
  OK(undertext_chat_append_idempotent(cb, &m, 1, S("req-42"), &again_start, &again_end));
  CHECK(again_start == 0 && again_end == 1);
  undertext_chat_info_t info;
  OK(undertext_chat_info(cb, &info));
  CHECK(info.len == 1);
  OK(undertext_chat_close(ca));
  OK(undertext_chat_close(cb));
  OK(undertext_store_close(a));
  OK(undertext_store_close(b));
}

int main(void) {
  const char *url = getenv("UNDERTEXT_FLEET_URL");
  if (url == NULL || *url == 0) {
    const char *req = getenv("UNDERTEXT_FLEET_REQUIRED");
    if (req != NULL && strcmp(req, "1") == 0) {
      fprintf(stderr, "test_fleet: UNDERTEXT_FLEET_REQUIRED=1 but UNDERTEXT_FLEET_URL is not set\n");
      return 1;
    }
    printf("test_fleet: skipped (UNDERTEXT_FLEET_URL is not set; scripts/test-fleet sets it)\n");
    return 0;
  }
  a_bad_or_unreachable_url_is_a_clear_error();
  another_process_sees_appends_views_them_and_reads_the_archive(url);
  a_stale_publication_is_the_same_conflict_as_embedded(url);
  another_owners_blob_and_chat_are_refused_across_stores(url);
  a_keyed_append_retried_by_another_process_is_written_once(url);
  return finish("test_fleet");
}
