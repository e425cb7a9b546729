"""Fleet mode from Python: `Store.open("postgres://…")` on a real PostgreSQL (the extension
built with the cargo feature `fleet`; scripts/test-fleet starts the server, sets
UNDERTEXT_FLEET_URL and builds it). Two stores opened on the same URL stand for two
processes: each keeps its own local replica, so what one writes reaches the other only
through PostgreSQL. Skipped without the variable (a failure with UNDERTEXT_FLEET_REQUIRED=1).
"""

from __future__ import annotations

import pytest

import undertext

pytestmark = pytest.mark.fleet


def result_text(n: int = 30_000) -> str:
    line = "build step failed: missing symbol in module {}\n"
    return "".join(line.format(i) for i in range(n // len(line) + 1))[:n]


def test_a_bad_url_or_an_unreachable_server_is_a_clear_error():
    with pytest.raises(undertext.InvalidArgument, match="blobs=ftp://x"):
        undertext.Store.open("postgres://127.0.0.1:1/agents?blobs=ftp://x")
    with pytest.raises(undertext.IOFailure) as e:
        undertext.Store.open("postgres://app:hunter2@127.0.0.1:1/agents")
    text = str(e.value)
    assert "postgres://app:***@127.0.0.1:1/agents" in text and "connect" in text, text
    assert "hunter2" not in text


def test_another_process_sees_appends_views_them_and_reads_the_archived_result(two, owner):
    a, b = two
    o = owner("view")
    chat = a.create_chat(o, title="fleet from python")
    chat.append(undertext.system("You are a careful agent."))
    chat.append(undertext.user("why does the build fail?"))
    chat.append(undertext.tool_call("c1", "read", {"path": "build.log"}))
    seq = chat.append(undertext.tool_result("c1", result_text()))
    assert seq == 3

    other = b.chat(o, chat.id)
    assert len(other) == 4 and other.revision == 0
    ref = other[3].parts[0]["archive"]  # above archive_threshold: archived on append
    assert ref["chars"] == 30_000
    # The view within a budget: the archived result is sent as its preview, which names the
    # archive so the model can read it back; a window below the chat's minimum is refused.
    v = other.view(undertext.Budget(200_000))
    assert v.decision == "fits" and len(v) == 4 and 0 < v.estimate < 2_000
    assert ref["id"] in str(v.messages[3])
    with pytest.raises(undertext.Refused):
        other.view(undertext.Budget(300, 100))
    assert b.read_context(o, ref["id"], 100, 200) == result_text()[100:200]
    assert b.read_context(o, ref["id"], 2, 4, unit="lines") == "".join(result_text().splitlines(True)[2:4])

    # Dense seqs across the two stores.
    assert other.append(undertext.user("and now?")) == 4
    assert a.chat(o, chat.id).append(undertext.assistant("it passes")) == 5
    assert [m.seq for m in b.chat(o, chat.id).messages()] == list(range(6))


def test_a_held_chat_reads_without_a_round_trip_and_refresh_shows_other_writes(two, owner):
    a, b = two
    o = owner("held")
    mine = a.create_chat(o)
    mine.append(undertext.user("one"))
    theirs = b.chat(o, mine.id)
    theirs.append(undertext.assistant("two"))
    # The held handle shows the chat as of its last resolution and this store's writes.
    assert len(mine) == 1
    mine.refresh()
    assert len(mine) == 2 and mine[1].text == "two"
    # A write catches up first: its seq follows the other store's.
    theirs.append(undertext.user("three"))
    assert mine.append(undertext.assistant("four")) == 3
    assert [m.text for m in mine.messages()] == ["one", "two", "three", "four"]
    # Store.chat resolves again too, and the handles of one store share the chat.
    theirs.append(undertext.user("five"))
    assert len(a.chat(o, mine.id)) == 5 and len(mine) == 5
    # A chat deleted by the other store: refresh says so.
    b.delete_chat(o, mine.id)
    with pytest.raises(undertext.NotFound):
        mine.refresh()
    with pytest.raises(undertext.NotFound):
        a.chat(o, mine.id)


def test_a_stale_publication_is_the_same_conflict_as_embedded(two, owner):
    a, b = two
    o = owner("pub")
    c = a.create_chat(o)
    c.append(undertext.user("start"))
    for i in range(20):
        c.append(undertext.assistant(f"step {i}: " + "checked the module and moved on. " * 20))
    c.append(undertext.user("two"))
    c.append(undertext.user("three"))
    stale = c.build_checkpoint()
    other = b.chat(o, c.id)
    other.edit(3, undertext.assistant("edited elsewhere"), expected_revision=0)
    with pytest.raises(undertext.Conflict) as e:
        c.publish_checkpoint(stale)
    assert (e.value.kind, e.value.base, e.value.now) == ("edited", 0, 1)
    with pytest.raises(undertext.StaleRevision):
        c.edit(4, undertext.assistant("edited here"), expected_revision=0)
    # Both build on revision 1; the other store publishes first.
    c.refresh()
    mine, theirs = c.build_checkpoint(), other.build_checkpoint()
    other.publish_checkpoint(theirs)
    with pytest.raises(undertext.Conflict) as e:
        c.publish_checkpoint(mine)
    assert e.value.kind == "not_newer"
    c.refresh()
    assert c.published_checkpoint == (1, theirs.reach)


def test_another_owners_blob_and_chat_are_refused_across_stores(two, owner):
    a, b = two
    alice, mallory = owner("alice"), owner("mallory")
    blob = a.put_blob(alice, b"alice's notes, stored in the fleet")
    chat = a.create_chat(alice)
    with pytest.raises(undertext.NotFound):
        b.get_blob(mallory, blob)
    with pytest.raises(undertext.NotFound):
        b.chat(mallory, chat.id)
    assert not b.contains_blob(mallory, blob)
    assert b.get_blob(alice, blob) == b"alice's notes, stored in the fleet"
    # Mallory storing the same bytes gets her own grant, not alice's chat.
    assert b.put_blob(mallory, b"alice's notes, stored in the fleet") == blob
    with pytest.raises(undertext.NotFound):
        b.chat(mallory, chat.id)


def test_a_held_chats_view_asks_postgresql_only_when_notified_of_a_change(two, owner):
    """The view of a held chat is served from the local replica, as embedded. A store that does
    not listen for change notification (notify=off) shows the old length after the other
    store's append until a refresh; one that listens follows the notification of it (one
    query, then the appended message), without a refresh."""
    import os
    import time

    listening, b = two
    url = os.environ["UNDERTEXT_FLEET_URL"]
    quiet = undertext.Store.open(url + ("&" if "?" in url else "?") + "notify=off", durability="none")
    try:
        o = owner("cached")
        chat = quiet.create_chat(o)
        for i in range(20):
            chat.append_batch([undertext.user(f"step {i}"), undertext.assistant("done")])
        budget = undertext.Budget(200_000)
        assert len(chat.view(budget)) == 40
        held = listening.chat(o, chat.id)
        assert len(held.view(budget)) == 40
        b.chat(o, chat.id).append(undertext.user("from elsewhere"))
        for _ in range(3):
            assert len(chat.view(budget)) == 40, "a held chat's view asks PostgreSQL only when notified"
        chat.refresh()
        assert len(chat.view(budget)) == 41
        # The listening store learns of the append (a moment after its commit) and its held
        # chat's view follows; a minute at most, only to fail instead of hanging.
        deadline = time.monotonic() + 60
        while len(held.view(budget)) != 41:
            assert time.monotonic() < deadline, "the held chat's view never followed the notified append"
            time.sleep(0.01)
    finally:
        quiet.close()


def test_a_keyed_append_retried_by_another_process_is_written_once(two, owner):
    a, b = two
    o = owner("idem")
    chat = a.create_chat(o)
    assert chat.append(undertext.assistant("tests pass"), key="req-42") == 0
    # The other process retries (it never learned of the first's outcome): one copy.
    assert b.chat(o, chat.id).append(undertext.assistant("tests pass"), key="req-42") == 0
    assert b.chat(o, chat.id).append_batch([undertext.user("next")], key="req-43") == range(1, 2)
    assert a.chat(o, chat.id).append_batch([undertext.user("next")], key="req-43") == range(1, 2)
    assert len(a.chat(o, chat.id)) == 2 and len(b.chat(o, chat.id)) == 2
