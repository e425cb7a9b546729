"""Importing an integration without its package says which extra to install."""

import subprocess
import sys

import pytest

BLOCK = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {blocked!r}:
            raise ImportError("No module named " + repr(name) + " (blocked by the test)")
sys.meta_path.insert(0, Block())
try:
    import undertext.{module}
except ImportError as e:
    print(e)
else:
    print("imported")
"""


@pytest.mark.parametrize(
    "module, blocked, extra",
    [
        ("langgraph", {"langgraph", "langchain_core"}, "undertext[langgraph]"),
        ("agents", {"agents"}, "undertext[agents]"),
        ("claude", {"claude_agent_sdk"}, "undertext[claude]"),
        ("langgraph_store", {"langgraph"}, "undertext[langgraph]"),
        ("langchain", {"langchain_core"}, "undertext[langchain]"),
    ],
)
def test_an_integration_without_its_package_names_the_extra_to_install(module, blocked, extra):
    code = BLOCK.format(module=module, blocked=sorted(blocked))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert f"pip install '{extra}'" in out.stdout, out.stdout + out.stderr
