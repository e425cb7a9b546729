"""What help() and inspect show: every signature of the native classes and functions has
real defaults (never `Ellipsis`, which is what a default that is not a Python literal showed)."""

import inspect

import undertext
from undertext import _native


def _callables():
    for name, obj in vars(_native).items():
        if name.startswith("__"):
            continue
        if inspect.isclass(obj):
            yield name, obj
            for attr, member in vars(obj).items():
                if not attr.startswith("__") and callable(member):
                    yield f"{name}.{attr}", getattr(obj, attr)
        elif callable(obj):
            yield name, obj


def test_no_signature_shows_ellipsis_as_a_default():
    checked, bad = 0, []
    for name, fn in _callables():
        try:
            sig = inspect.signature(fn)
        except (TypeError, ValueError):  # a class without a constructor, a slot wrapper
            continue
        checked += 1
        bad += [f"{name}{sig}" for p in sig.parameters.values() if p.default is Ellipsis]
    assert checked > 50 and bad == []


def test_the_defaults_shown_are_the_defaults_used():
    assert inspect.signature(undertext.Store.read_context).parameters["unit"].default == "chars"
    assert inspect.signature(undertext.Chat.pin).parameters["unit"].default == "chars"
    create = inspect.signature(undertext.Store.create_chat).parameters
    assert [create[k].default for k in ("title", "model", "draft", "extra")] == ["", "", "", None]
    budget = inspect.signature(undertext.Budget).parameters
    assert budget["tool_schemas"].default == () and budget["soft"].default == 0.7
    assert inspect.signature(undertext.Store.history_tool_schemas).parameters["shape"].default == "openai"
    assert inspect.signature(undertext.Chat.lint).parameters["trims"].default == ()
    worker = inspect.signature(undertext.Store.start_worker).parameters
    assert worker["soft"].default == 2.0 / 3.0 and worker["at_hard_line"].default == "wait"
