"""Eight threads writing and reading at once: the GIL is released, nothing is lost or torn."""

import threading

import undertext


def test_eight_threads_write_and_read_their_own_and_a_shared_chat(store):
    shared = store.create_chat("team", title="shared")
    per_thread = 60
    errors = []
    barrier = threading.Barrier(8)

    def work(t):
        try:
            own = store.create_chat("team", title=f"thread {t}")
            barrier.wait()
            for i in range(per_thread):
                own.append(undertext.user(f"t{t} m{i} 😀"))
                shared.append(undertext.assistant(f"t{t} s{i}"))
                bid = store.put_blob("alice", f"blob {t} {i}".encode())
                assert store.get_blob("alice", bid) == f"blob {t} {i}".encode()
                # Read back what this thread wrote so far, and a snapshot of the shared chat.
                assert own[i].text == f"t{t} m{i} 😀"
                snap = shared.snapshot()
                tail = snap.messages(max(0, len(snap) - 5), len(snap))
                assert [m.seq for m in tail] == list(range(max(0, len(snap) - 5), len(snap)))
            assert [m.text for m in own] == [f"t{t} m{i} 😀" for i in range(per_thread)]
        except BaseException as e:  # reported to the main thread
            errors.append((t, repr(e)))

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert errors == []
    msgs = shared.messages()
    assert len(msgs) == 8 * per_thread
    assert [m.seq for m in msgs] == list(range(8 * per_thread))
    for t in range(8):
        mine = [m.text for m in msgs if m.text.startswith(f"t{t} ")]
        assert mine == [f"t{t} s{i}" for i in range(per_thread)]  # each writer's order is kept
    assert len(list(store.chats("team"))) == 9


def test_a_view_waiting_at_the_hard_line_releases_the_gil_for_the_python_summarizer(tmp_path):
    """The view blocks in the engine until the worker's job ends; the job calls a Python
    summarizer, which needs the GIL. Had the waiting view kept the GIL, nothing would be
    prepared within the wait and no swap would happen."""
    ran_on = []

    def summarize(messages):
        ran_on.append(threading.current_thread().name)
        return f"{len(messages)} messages, first: {messages[0].text[:30]}"

    with undertext.Store.open(tmp_path / "s") as store:
        chat = store.create_chat("o")
        # Straight past the hard line, with no view on the way, in plain text: the guard's
        # previews (of tool results) cannot bring it under, so the view must wait for the
        # worker's checkpoint.
        for i in range(40):
            chat.append(undertext.user(f"task {i}: " + "explain the item function " * 20))
            chat.append(undertext.assistant(f"answer {i}: " + "fn item() { let v = compute(); } " * 40))
        budget = undertext.Budget(14_000, 2_000)
        assert chat.estimate(budget) > budget.hard_limit
        with store.start_worker(summarize, at_hard_line="wait", wait_seconds=120, segment_tokens=1_000):
            view = chat.view(budget)  # waits for the worker, then swaps its checkpoint in
        assert view.swap_seconds is not None
        assert chat.published_checkpoint is not None
        # The task (the first user turn's message) stays in front; the summary follows it.
        assert [m["parts"][0]["type"] for m in view.messages[:2]] == ["text", "summary"]
        assert ran_on and threading.current_thread().name not in ran_on
