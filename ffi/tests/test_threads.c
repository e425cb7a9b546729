/* 4 C threads append to one chat and take snapshots through the ABI at once. Each thread
 * checks that the snapshots it takes never go back, always read whole messages, and that
 * its own appends are visible in order; at the end every message is there exactly once. */
#include <pthread.h>
#include <stdint.h>

#include "common.h"

#define THREADS 4
#define PER_THREAD 400

typedef struct {
  int index;
  undertext_store_t store;
  uint64_t chat_id;
  undertext_chat_t shared; /* one handle used by all threads */
  int failures;
  uint64_t snapshots;
} worker_t;

static void *run(void *arg) {
  worker_t *w = arg;
  undertext_chat_t own = {0};
  if (undertext_chat_open(w->store, S("alice"), w->chat_id, &own) != UNDERTEXT_OK) {
    w->failures++;
    return NULL;
  }
  uint64_t last_len = 0;
  for (int i = 0; i < PER_THREAD; i++) {
    char text[64];
    snprintf(text, sizeof text, "thread %d message %d", w->index, i);
    uint64_t seq = 0;
    /* Alternate between the shared handle and this thread's own. */
    undertext_chat_t c = (i % 2) ? own : w->shared;
    if (undertext_chat_append_text(c, UNDERTEXT_ROLE_USER, S(text), &seq) != UNDERTEXT_OK) {
      fprintf(stderr, "append: %s\n", last_error());
      w->failures++;
      continue;
    }
    undertext_snapshot_t snap = {0};
    if (undertext_chat_snapshot(c, &snap) != UNDERTEXT_OK) {
      w->failures++;
      continue;
    }
    w->snapshots++;
    undertext_snapshot_info_t info;
    undertext_buf_t b = {0};
    if (undertext_snapshot_info(snap, &info) != UNDERTEXT_OK || info.len < last_len || info.len <= seq) {
      fprintf(stderr, "thread %d: snapshot went back or misses its own append (len %llu, seq %llu)\n", w->index,
              (unsigned long long)info.len, (unsigned long long)seq);
      w->failures++;
    } else if (undertext_snapshot_get(snap, seq, &b) != UNDERTEXT_OK || !buf_has(b, text)) {
      fprintf(stderr, "thread %d: message %llu is not what it appended: %s\n", w->index, (unsigned long long)seq,
              last_error());
      w->failures++;
    }
    last_len = info.len;
    undertext_buf_free(&b);
    /* The last message of the snapshot reads whole. */
    if (info.len > 0 && undertext_snapshot_get(snap, info.len - 1, &b) == UNDERTEXT_OK) {
      if (!buf_has(b, "\"text\":\"thread ")) w->failures++;
      undertext_buf_free(&b);
    } else {
      w->failures++;
    }
    if (undertext_snapshot_free(snap) != UNDERTEXT_OK) w->failures++;
  }
  undertext_chat_close(own);
  return NULL;
}

int main(void) {
  char *dir = temp_dir();
  undertext_options_t o = test_options();
  undertext_store_t s = {0};
  OK(undertext_store_open(S(dir), &o, &s));
  uint64_t id = 0;
  OK(undertext_chat_create(s, S("alice"), NULL, &id));
  undertext_chat_t shared = {0};
  OK(undertext_chat_open(s, S("alice"), id, &shared));

  pthread_t threads[THREADS];
  worker_t workers[THREADS];
  for (int t = 0; t < THREADS; t++) {
    workers[t] = (worker_t){t, s, id, shared, 0, 0};
    pthread_create(&threads[t], NULL, run, &workers[t]);
  }
  for (int t = 0; t < THREADS; t++) pthread_join(threads[t], NULL);
  for (int t = 0; t < THREADS; t++) {
    CHECK(workers[t].failures == 0);
    CHECK(workers[t].snapshots == PER_THREAD);
  }

  /* Every message exactly once, each thread's in its order. */
  undertext_chat_info_t info;
  OK(undertext_chat_info(shared, &info));
  CHECK(info.len == THREADS * PER_THREAD && info.revision == 0);
  int next[THREADS] = {0};
  int misordered = 0;
  for (uint64_t seq = 0; seq < info.len; seq++) {
    undertext_buf_t b = {0};
    if (undertext_chat_get(shared, seq, &b) != UNDERTEXT_OK) {
      misordered++;
      continue;
    }
    char *json = buf_cstr(b);
    const char *p = strstr(json, "\"text\":\"thread ");
    int t = -1, i = -1;
    if (p) sscanf(p, "\"text\":\"thread %d message %d", &t, &i);
    free(json);
    if (t < 0 || t >= THREADS || i != next[t]) {
      misordered++;
    } else {
      next[t]++;
    }
    undertext_buf_free(&b);
  }
  CHECK(misordered == 0);
  for (int t = 0; t < THREADS; t++) CHECK(next[t] == PER_THREAD);
  OK(undertext_store_close(s));
  remove_dir(dir);
  return finish("test_threads");
}
