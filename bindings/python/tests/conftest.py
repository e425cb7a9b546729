"""Shared fixtures: a real store in a temporary directory (real files, real fsync), and for
tests marked `fleet`, two stores on the PostgreSQL of UNDERTEXT_FLEET_URL (scripts/test-fleet
starts the server and sets it; without it those tests are skipped, or fail to collect with
UNDERTEXT_FLEET_REQUIRED=1)."""

import os
import uuid

import pytest

import undertext


@pytest.fixture
def store(tmp_path):
    with undertext.Store.open(tmp_path / "store") as s:
        yield s


@pytest.fixture
def chat(store):
    return store.create_chat("alice", title="fixture chat")


FLEET_URL = os.environ.get("UNDERTEXT_FLEET_URL", "")


def pytest_configure(config):
    config.addinivalue_line("markers", "fleet: needs a PostgreSQL at UNDERTEXT_FLEET_URL")


def pytest_collection_modifyitems(config, items):
    fleet = [item for item in items if item.get_closest_marker("fleet")]
    if not fleet or FLEET_URL:
        return
    if os.environ.get("UNDERTEXT_FLEET_REQUIRED") == "1":
        raise pytest.UsageError("UNDERTEXT_FLEET_REQUIRED=1 but UNDERTEXT_FLEET_URL is not set")
    skip = pytest.mark.skip(reason="UNDERTEXT_FLEET_URL is not set (scripts/test-fleet sets it)")
    for item in fleet:
        item.add_marker(skip)


@pytest.fixture
def two():
    """Two stores on one fleet URL, standing for two processes: each keeps its own replica."""
    a = undertext.Store.open(FLEET_URL, durability="none")
    b = undertext.Store.open(FLEET_URL, durability="none")
    yield a, b
    a.close()
    b.close()


@pytest.fixture
def owner():
    """Makes owners no other test or run uses (the fleet server outlives a run)."""
    return lambda tag: f"py-{tag}-{os.getpid()}-{uuid.uuid4().hex[:12]}"
