/* Full-text search through the C ABI: undertext_search finds an appended text as the JSON
 * document of the CLI's `search --json` ({"hits": [...]}), in the owner's chats only, hidden
 * messages only when asked; undertext_read_hit reads back exactly the matched words; NULL
 * pointers, invalid UTF-8 and bad arguments give their status codes. Run by scripts/test-ffi
 * plain, under valgrind and with -fsanitize=address,undefined. */
#include <stdint.h>

#include "common.h"

/* The JSON text of the first hit of a search answer ({"hits":[{...},...]}): from the first
 * '{' after '[' to its matching '}' (snippets are JSON strings; braces inside them are
 * skipped). malloc'd, or NULL when there is no hit. */
static char *first_hit(undertext_buf_t b) {
  char *s = buf_cstr(b);
  char *start = strchr(s, '[');
  if (start == NULL || (start = strchr(start, '{')) == NULL) {
    free(s);
    return NULL;
  }
  int depth = 0, in_str = 0;
  char *p = start;
  for (; *p; p++) {
    if (in_str) {
      if (*p == '\\' && p[1]) p++;
      else if (*p == '"') in_str = 0;
    } else if (*p == '"') in_str = 1;
    else if (*p == '{') depth++;
    else if (*p == '}' && --depth == 0) break;
  }
  if (*p == 0) {
    free(s);
    return NULL;
  }
  size_t n = (size_t)(p - start) + 1;
  char *hit = malloc(n + 1);
  memcpy(hit, start, n);
  hit[n] = 0;
  free(s);
  return hit;
}

/* How many hits a search answer holds (the occurrences of "seq"). */
static size_t hit_count(undertext_buf_t b) {
  size_t n = 0;
  const char *needle = "\"seq\":";
  size_t k = strlen(needle);
  for (size_t i = 0; i + k <= b.len; i++)
    if (memcmp(b.ptr + i, needle, k) == 0) n++;
  return n;
}

static void search_finds_an_appended_text_in_the_owners_chats_only(void) {
  char *dir = temp_dir();
  undertext_options_t o = test_options();
  undertext_store_t st = {0};
  OK(undertext_store_open(S(dir), &o, &st));
  uint64_t mine = 0, theirs = 0;
  OK(undertext_chat_create(st, S("alice"), NULL, &mine));
  OK(undertext_chat_create(st, S("bob"), NULL, &theirs));
  undertext_chat_t c = {0}, d = {0};
  OK(undertext_chat_open(st, S("alice"), mine, &c));
  OK(undertext_chat_open(st, S("bob"), theirs, &d));
  uint64_t seq = 0;
  OK(undertext_chat_append_text(c, UNDERTEXT_ROLE_USER, S("What lives at the zoo?"), &seq));
  OK(undertext_chat_append_text(c, UNDERTEXT_ROLE_USER, S("the build fails with exit code 101 in crate foo"), &seq));
  CHECK(seq == 1);
  uint64_t bob_seq = 0;
  OK(undertext_chat_append_text(d, UNDERTEXT_ROLE_USER, S("bob's exit code 101 too"), &bob_seq));

  undertext_buf_t b = {0};
  OK(undertext_search(st, S("alice"), S("exit code 101"), 0, 10, false, &b));
  char want[64];
  snprintf(want, sizeof want, "\"chat\":\"chat-%016llx\"", (unsigned long long)mine);
  CHECK(buf_has(b, "{\"hits\":[{"));
  CHECK(buf_has(b, want));
  CHECK(buf_has(b, "\"seq\":1,"));
  CHECK(buf_has(b, "\"archive\":null"));
  CHECK(buf_has(b, "\"field\":\"text\""));
  CHECK(buf_has(b, "exit code 101 in crate foo"));
  CHECK(hit_count(b) == 1);
  snprintf(want, sizeof want, "chat-%016llx", (unsigned long long)theirs);
  CHECK(!buf_has(b, want)); /* never another owner's chat */
  CHECK(!buf_has(b, "bob's"));

  /* The hit's span reads back as exactly the words. */
  char *hit = first_hit(b);
  CHECK(hit != NULL);
  OK(undertext_buf_free(&b));
  if (hit != NULL) {
    OK(undertext_read_hit(st, S("alice"), S(hit), &b));
    CHECK(buf_eq(b, "exit code 101"));
    OK(undertext_buf_free(&b));
    FAILS(UNDERTEXT_NOT_FOUND, "", undertext_read_hit(st, S("bob"), S(hit), &b));
    free(hit);
  }

  /* One chat; another owner's chat as the scope is NOT_FOUND, like an absent one. */
  OK(undertext_search(st, S("alice"), S("zoo"), mine, 5, false, &b));
  CHECK(hit_count(b) == 1 && buf_has(b, "\"seq\":0,"));
  OK(undertext_buf_free(&b));
  FAILS(UNDERTEXT_NOT_FOUND, "", undertext_search(st, S("alice"), S("exit"), theirs, 5, false, &b));
  FAILS(UNDERTEXT_NOT_FOUND, "", undertext_search(st, S("alice"), S("exit"), 999, 5, false, &b));

  /* Nothing found, and a query of no words: an empty list. */
  OK(undertext_search(st, S("alice"), S("nowhereword"), 0, 5, false, &b));
  CHECK(buf_eq(b, "{\"hits\":[]}"));
  OK(undertext_buf_free(&b));
  OK(undertext_search(st, S("alice"), S("!?&"), 0, 5, false, &b));
  CHECK(buf_eq(b, "{\"hits\":[]}"));
  OK(undertext_buf_free(&b));

  /* A hidden message is answered only when asked. */
  OK(undertext_chat_append_text(c, UNDERTEXT_ROLE_USER, S("secret quartz"), &seq));
  undertext_seq_range_t r = {seq, seq + 1};
  uint64_t rev = 0;
  OK(undertext_chat_hide(c, &r, 1, 0, &rev));
  OK(undertext_search(st, S("alice"), S("quartz"), 0, 5, false, &b));
  CHECK(buf_eq(b, "{\"hits\":[]}"));
  OK(undertext_buf_free(&b));
  OK(undertext_search(st, S("alice"), S("quartz"), mine, 5, true, &b));
  CHECK(hit_count(b) == 1 && buf_has(b, "\"seq\":2,"));
  OK(undertext_buf_free(&b));

  OK(undertext_chat_close(c));
  OK(undertext_chat_close(d));
  OK(undertext_store_close(st));
  remove_dir(dir);
}

static void misuse_gets_a_status_never_a_crash(void) {
  char *dir = temp_dir();
  undertext_options_t o = test_options();
  undertext_store_t st = {0};
  OK(undertext_store_open(S(dir), &o, &st));
  undertext_buf_t b = {0};
  undertext_str_t null_str = {NULL, 3};
  const uint8_t bad_utf8[] = {'a', 0xff, 'b'};
  undertext_str_t bad = {bad_utf8, sizeof bad_utf8};
  FAILS(UNDERTEXT_NULL_POINTER, "out", undertext_search(st, S("alice"), S("x"), 0, 5, false, NULL));
  FAILS(UNDERTEXT_NULL_POINTER, "query", undertext_search(st, S("alice"), null_str, 0, 5, false, &b));
  FAILS(UNDERTEXT_NULL_POINTER, "owner", undertext_search(st, null_str, S("x"), 0, 5, false, &b));
  FAILS(UNDERTEXT_INVALID_UTF8, "query", undertext_search(st, S("alice"), bad, 0, 5, false, &b));
  FAILS(UNDERTEXT_INVALID_UTF8, "owner", undertext_search(st, bad, S("x"), 0, 5, false, &b));
  FAILS(UNDERTEXT_INVALID_ARGUMENT, "limit: expected 1 to 10000, found 0",
        undertext_search(st, S("alice"), S("x"), 0, 0, false, &b));
  FAILS(UNDERTEXT_INVALID_ARGUMENT, "owner", undertext_search(st, S(""), S("x"), 0, 5, false, &b));
  undertext_store_t stale = {0};
  FAILS(UNDERTEXT_BAD_HANDLE, "", undertext_search(stale, S("alice"), S("x"), 0, 5, false, &b));

  FAILS(UNDERTEXT_NULL_POINTER, "out", undertext_read_hit(st, S("alice"), S("{}"), NULL));
  FAILS(UNDERTEXT_NULL_POINTER, "hit_json", undertext_read_hit(st, S("alice"), null_str, &b));
  FAILS(UNDERTEXT_INVALID_UTF8, "hit_json", undertext_read_hit(st, S("alice"), bad, &b));
  FAILS(UNDERTEXT_INVALID_ARGUMENT, "invalid JSON", undertext_read_hit(st, S("alice"), S("{"), &b));
  FAILS(UNDERTEXT_INVALID_ARGUMENT, "search hit", undertext_read_hit(st, S("alice"), S("[1]"), &b));
  FAILS(UNDERTEXT_INVALID_ARGUMENT, "field",
        undertext_read_hit(st, S("alice"),
                           S("{\"chat\":\"chat-0000000000000001\",\"seq\":0,\"archive\":null,\"start\":0,"
                             "\"end\":1,\"part\":0,\"field\":\"nope\"}"),
                           &b));

  OK(undertext_store_close(st));
  /* A closed store's handle is stale. */
  FAILS(UNDERTEXT_STALE_HANDLE, "", undertext_search(st, S("alice"), S("x"), 0, 5, false, &b));
  remove_dir(dir);
}

int main(void) {
  search_finds_an_appended_text_in_the_owners_chats_only();
  misuse_gets_a_status_never_a_crash();
  return finish("test_search");
}
