/* Shared helpers of the C tests: checks that count, string literals as undertext_str_t,
 * temporary store directories. Every check prints what failed and where. */
#ifndef UNDERTEXT_TEST_COMMON_H
#define UNDERTEXT_TEST_COMMON_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "undertext.h"

static int passed = 0;
static int failed = 0;

/* A string literal or NUL-terminated C string as an undertext_str_t (length explicit). */
static inline undertext_str_t S(const char *s) {
  undertext_str_t r = {(const uint8_t *)s, strlen(s)};
  return r;
}

/* The last error message on this thread, in a static buffer (for messages). */
static inline const char *last_error(void) {
  static char buf[4096];
  size_t len = 0;
  if (undertext_last_error((uint8_t *)buf, sizeof buf - 1, &len) != UNDERTEXT_OK) len = 0;
  buf[len] = 0;
  return buf;
}

#define CHECK(cond)                                                      \
  do {                                                                   \
    if (cond) {                                                          \
      passed++;                                                          \
    } else {                                                             \
      failed++;                                                          \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
    }                                                                    \
  } while (0)

/* A call that must succeed; on failure prints the status and the last error. */
#define OK(call)                                                                     \
  do {                                                                               \
    undertext_status_t st_ = (call);                                                 \
    if (st_ == UNDERTEXT_OK) {                                                       \
      passed++;                                                                      \
    } else {                                                                         \
      failed++;                                                                      \
      fprintf(stderr, "%s:%d: %s returned %d: %s\n", __FILE__, __LINE__, #call, st_, \
              last_error());                                                         \
    }                                                                                \
  } while (0)

/* A call that must fail with `want`, and whose message must contain `needle`. */
#define FAILS(want, needle, call)                                                        \
  do {                                                                                   \
    undertext_status_t st_ = (call);                                                     \
    const char *m_ = last_error();                                                       \
    if (st_ == (want) && strstr(m_, (needle)) != NULL) {                                 \
      passed++;                                                                          \
    } else {                                                                             \
      failed++;                                                                          \
      fprintf(stderr, "%s:%d: %s: expected status %d with \"%s\", found %d: %s\n",       \
              __FILE__, __LINE__, #call, (int)(want), (needle), st_, st_ ? m_ : "(ok)"); \
    }                                                                                    \
  } while (0)

/* Buffer content equals a C string. */
static inline int buf_eq(undertext_buf_t b, const char *s) {
  return b.len == strlen(s) && (b.len == 0 || memcmp(b.ptr, s, b.len) == 0);
}

/* Buffer content contains a C string. */
static inline int buf_has(undertext_buf_t b, const char *s) {
  size_t n = strlen(s);
  if (n == 0) return 1;
  for (size_t i = 0; i + n <= b.len; i++)
    if (memcmp(b.ptr + i, s, n) == 0) return 1;
  return 0;
}

/* A NUL-terminated copy of a buffer (buffers carry no terminator); free() it. */
static inline char *buf_cstr(undertext_buf_t b) {
  char *s = malloc(b.len + 1);
  if (b.len) memcpy(s, b.ptr, b.len);
  s[b.len] = 0;
  return s;
}

/* A fresh temporary directory for a store (removed by remove_dir). */
static inline char *temp_dir(void) {
  const char *base = getenv("TMPDIR");
  char tmpl[512];
  snprintf(tmpl, sizeof tmpl, "%s/undertext-ffi-XXXXXX", base ? base : "/tmp");
  char *d = mkdtemp(tmpl);
  if (!d) {
    perror("mkdtemp");
    exit(2);
  }
  return strdup(d);
}

static inline void remove_dir(char *dir) {
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  free(dir);
}

/* Options for tests: no fsync, small segments not preallocated (fast, small files). */
static inline undertext_options_t test_options(void) {
  undertext_options_t o;
  undertext_options_default(&o);
  o.durability = UNDERTEXT_DURABILITY_NONE;
  o.preallocate = 0;
  o.segment_size = 1 << 20;
  return o;
}

/* Prints the closing line the suite reads and returns the exit status. */
static inline int finish(const char *name) {
  printf("%s: %d passed, %d failed\n", name, passed, failed);
  return failed == 0 ? 0 : 1;
}

/* `size` bytes of lowercase letters, letter k being 'a' + (k * mul + add) % 26, with a newline
 * ending every `line` bytes; NUL-terminated, malloc'd (the caller frees it). */
static inline char *letters(size_t size, size_t line, size_t mul, size_t add) {
  char *out = malloc(size + 1);
  if (out == NULL) abort();
  for (size_t k = 0; k < size; k++) out[k] = (k % line == line - 1) ? '\n' : (char)('a' + (k * mul + add) % 26);
  out[size] = 0;
  return out;
}

/* Appends an assistant's `read` tool call with `args` and the tool's `result`, as one batch. */
static inline void append_call_and_result(undertext_chat_t c, const char *call_id, const char *args,
                                          const char *result) {
  undertext_part_t call;
  memset(&call, 0, sizeof call);
  call.kind = UNDERTEXT_PART_TOOL_CALL;
  call.id = S(call_id);
  call.name = S("read");
  call.args = S(args);
  undertext_part_t res;
  memset(&res, 0, sizeof res);
  res.kind = UNDERTEXT_PART_TOOL_RESULT;
  res.call_id = S(call_id);
  res.text = S(result);
  undertext_message_t ms[2] = {{UNDERTEXT_ROLE_ASSISTANT, &call, 1}, {UNDERTEXT_ROLE_TOOL, &res, 1}};
  uint64_t a = 0, b = 0;
  OK(undertext_chat_append_batch(c, ms, 2, &a, &b));
}

#endif
