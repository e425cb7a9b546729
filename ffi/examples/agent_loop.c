/* A small agent harness loop on the Undertext C ABI: append each step, build the model
 * view under a token budget, archive a large tool result and read part of it back, and
 * publish a checkpoint. The "model" and the "tools" are simulated.
 *
 *   cargo build -p undertext-ffi --release
 *   cc -std=c11 -I ffi/include ffi/examples/agent_loop.c target/release/libundertext_ffi.a \
 *      -lpthread -ldl -lm -o agent_loop
 *   ./agent_loop /tmp/agent-loop-store
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "undertext.h"

static undertext_str_t S(const char *s) {
  undertext_str_t r = {(const uint8_t *)s, strlen(s)};
  return r;
}

/* Every call returns a status; on failure print the thread's last error and stop. */
#define TRY(call)                                                                    \
  do {                                                                               \
    undertext_status_t st_ = (call);                                                 \
    if (st_ != UNDERTEXT_OK) {                                                       \
      char msg_[1024];                                                               \
      size_t len_ = 0;                                                               \
      if (undertext_last_error((uint8_t *)msg_, sizeof msg_, &len_) != UNDERTEXT_OK) \
        len_ = 0;                                                                    \
      fprintf(stderr, "%s failed (%d): %.*s\n", #call, st_, (int)len_, msg_);        \
      exit(1);                                                                       \
    }                                                                                \
  } while (0)

static const char *DECISIONS[] = {"fits", "compacted", "REFUSED"};

/* A simulated tool: `cargo test` output, large on step 2. */
static char *run_tool(int step) {
  int lines = step == 2 ? 4000 : 30;
  char *out = malloc((size_t)lines * 48 + 64);
  size_t n = 0;
  for (int i = 0; i < lines; i++) n += (size_t)sprintf(out + n, "test module_%d::case_%d ... ok\n", step, i);
  sprintf(out + n, "test result: ok. %d passed\n", lines);
  return out;
}

/* Appends a tool call and its result atomically (a call is never stored without its result). */
static uint64_t tool_step(undertext_chat_t chat, int step) {
  char id[32], args[64];
  snprintf(id, sizeof id, "call-%d", step);
  snprintf(args, sizeof args, "{\"cmd\":\"cargo test -p module_%d\"}", step);
  char *output = run_tool(step);
  undertext_part_t call = {.kind = UNDERTEXT_PART_TOOL_CALL, .id = S(id), .name = S("shell"), .args = S(args)};
  undertext_part_t result = {.kind = UNDERTEXT_PART_TOOL_RESULT, .call_id = S(id), .text = S(output)};
  undertext_message_t batch[2] = {{UNDERTEXT_ROLE_ASSISTANT, &call, 1}, {UNDERTEXT_ROLE_TOOL, &result, 1}};
  uint64_t start, end;
  TRY(undertext_chat_append_batch(chat, batch, 2, &start, &end));
  printf("step %d: tool output of %zu bytes stored as message %llu\n", step, strlen(output),
         (unsigned long long)(end - 1));
  free(output);
  return end - 1;
}

/* The archive id a tool-result message names, if it was archived. */
static int archive_of(undertext_chat_t chat, uint64_t seq, undertext_blob_id_t *id) {
  undertext_buf_t msg = {0};
  TRY(undertext_chat_get(chat, seq, &msg));
  int found = 0;
  char *json = malloc(msg.len + 1);
  memcpy(json, msg.ptr, msg.len);
  json[msg.len] = 0;
  char *a = strstr(json, "\"archive\":{");
  char *p = a ? strstr(a, "\"id\":\"") : NULL;
  if (p) {
    TRY(undertext_blob_id_parse((undertext_str_t){(const uint8_t *)p + 6, 64}, id));
    found = 1;
  }
  free(json);
  TRY(undertext_buf_free(&msg));
  return found;
}

int main(int argc, char **argv) {
  const char *dir = argc > 1 ? argv[1] : "./agent-loop-store";
  undertext_options_t opts;
  TRY(undertext_options_default(&opts));
  undertext_store_t store;
  TRY(undertext_store_open(S(dir), &opts, &store));

  undertext_chat_meta_t meta = {.title = S("fix the failing tests"), .model = S("sim-model")};
  uint64_t chat_id, seq;
  TRY(undertext_chat_create(store, S("alice"), &meta, &chat_id));
  undertext_chat_t chat;
  TRY(undertext_chat_open(store, S("alice"), chat_id, &chat));
  TRY(undertext_chat_append_text(chat, UNDERTEXT_ROLE_SYSTEM, S("You are a careful coding agent."), &seq));

  undertext_budget_t budget;
  TRY(undertext_budget_default(6000, 1000, &budget));
  uint64_t big_result = 0;
  for (int step = 0; step < 8; step++) {
    if (step % 2 == 0) {
      char task[64];
      snprintf(task, sizeof task, "Task %d: make module_%d pass.", step / 2 + 1, step);
      TRY(undertext_chat_append_text(chat, UNDERTEXT_ROLE_USER, S(task), &seq));
    }
    uint64_t r = tool_step(chat, step);
    if (step == 2) big_result = r;

    /* The view the next model call sees, under the budget. */
    undertext_view_t view;
    TRY(undertext_chat_view(chat, &budget, &view));
    undertext_view_decision_t d;
    TRY(undertext_view_decision(view, &d));
    undertext_buf_t messages = {0};
    TRY(undertext_view_messages(view, UNDERTEXT_FORMAT_OPENAI, &messages));
    printf("        view: %llu messages, ~%llu tokens, %s", (unsigned long long)d.n_messages,
           (unsigned long long)d.estimate, DECISIONS[d.kind]);
    if (d.kind == UNDERTEXT_DECISION_COMPACTED) printf(" (%llu results previewed)", (unsigned long long)d.n_previewed);
    if (d.kind == UNDERTEXT_DECISION_REFUSED) printf(" (over by %llu)", (unsigned long long)d.over_by);
    printf("; %zu bytes of OpenAI JSON\n", messages.len);
    TRY(undertext_buf_free(&messages));
    /* The model answered; it reports its real input tokens (simulated: 10 % more). */
    double factor;
    TRY(undertext_chat_report_usage(chat, d.step, d.raw_estimate * 11 / 10, &factor));
    TRY(undertext_view_free(view));
    TRY(undertext_chat_append_text(chat, UNDERTEXT_ROLE_ASSISTANT, S("Looked at the output; continuing."), &seq));
  }

  /* The large result was archived on append: the model sees a preview naming the archive,
   * and reads any part of it back exactly. */
  undertext_blob_id_t id;
  if (archive_of(chat, big_result, &id)) {
    undertext_archive_info_t info;
    TRY(undertext_archive_info(store, S("alice"), &id, &info));
    char hex[64];
    TRY(undertext_blob_id_hex(&id, (uint8_t *)hex, sizeof hex));
    printf("archive %.16s...: %llu bytes, %llu lines\n", hex, (unsigned long long)info.bytes,
           (unsigned long long)info.lines);
    undertext_buf_t part = {0};
    TRY(undertext_read_context(store, S("alice"), &id, 2000, 2003, UNDERTEXT_UNIT_LINES, &part));
    printf("read_context lines 2000..2003:\n%.*s", (int)part.len, (const char *)part.ptr);
    TRY(undertext_buf_free(&part));
    TRY(undertext_chat_pin(chat, &id, 2000, 2003, UNDERTEXT_UNIT_LINES)); /* keep them in view */
  }

  /* A checkpoint of the settled history (the built-in extractive summarizer), published
   * under the guard: later views hold its summary plus the messages after its reach. */
  undertext_checkpoint_t cp;
  TRY(undertext_chat_build_checkpoint(chat, NULL, 500, 0, &cp));
  undertext_checkpoint_info_t ci;
  TRY(undertext_checkpoint_info(cp, &ci));
  TRY(undertext_chat_publish_checkpoint(chat, cp));
  printf("checkpoint published: covers messages 0..%llu of revision %llu (%llu segments)\n",
         (unsigned long long)ci.reach, (unsigned long long)ci.base_revision, (unsigned long long)ci.n_segments);
  TRY(undertext_checkpoint_free(cp));
  undertext_view_t view;
  TRY(undertext_chat_view(chat, &budget, &view));
  undertext_view_decision_t d;
  TRY(undertext_view_decision(view, &d));
  printf("view after the checkpoint: %llu messages, ~%llu tokens, %s\n", (unsigned long long)d.n_messages,
         (unsigned long long)d.estimate, DECISIONS[d.kind]);
  TRY(undertext_view_free(view));
  TRY(undertext_store_close(store));
  return 0;
}
