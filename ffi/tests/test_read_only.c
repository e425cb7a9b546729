/* The C ABI of read-only opens: undertext_store_open_read_only beside a live writer (no
 * UNDERTEXT_LOCKED), undertext_store_refresh to see later writes, and every write refused
 * with UNDERTEXT_READ_ONLY. Run by scripts/test-ffi plain, under valgrind and with
 * -fsanitize=address,undefined. */
#include <stdint.h>

#include "common.h"

static void a_read_only_store_reads_beside_the_writer_and_refuses_writes(void) {
  char *dir = temp_dir();
  undertext_options_t o = test_options();
  undertext_store_t w = {0};
  OK(undertext_store_open(S(dir), &o, &w));
  const char *first = "written before the read-only open";
  undertext_blob_id_t id1;
  OK(undertext_put_blob(w, S("alice"), (const uint8_t *)first, strlen(first), &id1));

  /* A second ordinary open is locked out; a read-only one is not. */
  undertext_store_t other = {0};
  FAILS(UNDERTEXT_LOCKED, "locked", undertext_store_open(S(dir), &o, &other));
  undertext_store_t ro = {0};
  OK(undertext_store_open_read_only(S(dir), NULL, &ro));
  undertext_buf_t b = {0};
  OK(undertext_get_blob(ro, S("alice"), &id1, &b));
  CHECK(buf_eq(b, first));
  OK(undertext_buf_free(&b));
  OK(undertext_store_open_warnings(ro, &b)); /* nothing damaged, nothing skipped */
  CHECK(buf_eq(b, "[]"));
  OK(undertext_buf_free(&b));

  /* A later write is seen after one refresh. */
  const char *later = "written after it";
  undertext_blob_id_t id2;
  OK(undertext_put_blob(w, S("alice"), (const uint8_t *)later, strlen(later), &id2));
  FAILS(UNDERTEXT_NOT_FOUND, "blob", undertext_get_blob(ro, S("alice"), &id2, &b));
  uint64_t batches = 0;
  OK(undertext_store_refresh(ro, &batches));
  CHECK(batches == 1);
  OK(undertext_get_blob(ro, S("alice"), &id2, &b));
  CHECK(buf_eq(b, later));
  OK(undertext_buf_free(&b));

  /* Writes are refused; refresh of a writing store and a NULL out are misuse. */
  undertext_blob_id_t id3;
  FAILS(UNDERTEXT_READ_ONLY, "writes are refused", undertext_put_blob(ro, S("alice"), (const uint8_t *)"x", 1, &id3));
  FAILS(UNDERTEXT_INVALID_ARGUMENT, "read_only", undertext_store_refresh(w, &batches));
  FAILS(UNDERTEXT_NULL_POINTER, "batches", undertext_store_refresh(ro, NULL));

  OK(undertext_store_close(ro));
  OK(undertext_store_close(w));
  remove_dir(dir);
}

int main(void) {
  a_read_only_store_reads_beside_the_writer_and_refuses_writes();
  return finish("test_read_only");
}
