"""The exception hierarchy: one class per kind, all under UndertextError, none a panic."""

import pytest

import undertext
from undertext import _native

KINDS = [
    "IOFailure",
    "Corrupt",
    "Locked",
    "NotFound",
    "StaleRevision",
    "InvalidArgument",
    "UnsupportedVersion",
    "Conflict",
    "LintRejected",
    "IndexFailure",
    "Poisoned",
    "Forked",
    "Busy",
    "Refused",
    "Closed",
    "InternalError",
]


@pytest.mark.parametrize("name", KINDS)
def test_every_kind_is_an_undertext_error(name):
    cls = getattr(undertext, name)
    assert issubclass(cls, undertext.UndertextError) and cls is not undertext.UndertextError
    assert name in undertext.__all__


def test_builtin_bases_make_them_catchable_the_usual_way():
    assert issubclass(undertext.NotFound, KeyError)
    assert issubclass(undertext.InvalidArgument, ValueError)
    assert issubclass(undertext.IOFailure, OSError)
    assert issubclass(undertext.Closed, RuntimeError)  # as for other closed objects


def test_a_closed_store_raises_closed_caught_as_runtime_error(tmp_path):
    s = undertext.Store.open(tmp_path / "s")
    s.close()
    with pytest.raises(RuntimeError, match="open it again with undertext.Store.open"):
        s.put_blob("alice", b"x")


def test_a_panic_in_an_engine_call_arrives_as_internal_error(store):
    with pytest.raises(undertext.InternalError, match="a simulated bug"):
        _native._panic_in_engine_call("a simulated bug")
    # The interpreter and the store go on.
    assert store.get_blob("alice", store.put_blob("alice", b"still fine")) == b"still fine"
