"""Owner figures (issue 34.6): ``Store.owner_stats`` counts what the owner's own chats hold,
and another owner storing the same text first changes nothing of it, while the store-wide
``stats()`` (for the operator) does move."""

import undertext


def _alice_writes(store: undertext.Store, text: str) -> dict:
    chat = store.create_chat("alice")
    chat.append(undertext.user(text))
    return store.owner_stats("alice")


def test_owner_stats_count_the_owners_own_chats(tmp_path):
    with undertext.Store.open(str(tmp_path / "s")) as store:
        assert store.owner_stats("alice") == {
            "chats": 0, "messages": 0, "text_bytes": 0,
            "tool_results": 0, "archived_results": 0, "archived_bytes": 0,
        }
        s = _alice_writes(store, "hello")
        assert (s["chats"], s["messages"], s["text_bytes"]) == (1, 1, 5)
        assert store.owner_stats("bob")["chats"] == 0


def test_another_owner_storing_the_same_text_first_changes_no_owner_figure(tmp_path):
    text = "the very same tool output\n" * 2_000
    other = "a different tool output!!\n" * 2_000
    assert len(text) == len(other)
    seen, grew = [], []
    for n, bobs in enumerate([text, other]):
        with undertext.Store.open(str(tmp_path / f"s{n}")) as store:
            bob = store.create_chat("bob")
            bob.append(undertext.user(bobs))
            before = store.stats()["log_bytes"]
            seen.append(_alice_writes(store, text))
            grew.append(store.stats()["log_bytes"] - before)
    assert seen[0] == seen[1]
    # The store-wide figure is the oracle owner_stats avoids.
    assert grew[0] < grew[1]


def test_owner_stats_refuse_an_empty_owner(tmp_path):
    with undertext.Store.open(str(tmp_path / "s")) as store:
        try:
            store.owner_stats("")
        except undertext.InvalidArgument as e:
            assert "owner" in str(e)
        else:
            raise AssertionError("an empty owner was accepted")
