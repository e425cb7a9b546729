"""Shared fixtures: a real store in a temporary directory (real files, real fsync)."""

import pytest

import undertext


@pytest.fixture
def store(tmp_path):
    with undertext.Store.open(tmp_path / "store") as s:
        yield s


@pytest.fixture
def chat(store):
    return store.create_chat("alice", title="fixture chat")
