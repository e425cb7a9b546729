"""Imports an optional integration dependency for a test module.

The LangGraph and Agents SDK tests need packages the core test environment does not
install. Outside ``scripts/test-python-integrations`` a module whose dependency is missing
is skipped; under it (``UNDERTEXT_REQUIRE_INTEGRATIONS=1``) a missing dependency fails.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

import pytest


def require(module: str) -> ModuleType:
    """``module`` imported, or the calling test module skipped (or failed, see above)."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        if os.environ.get("UNDERTEXT_REQUIRE_INTEGRATIONS") == "1":
            raise
        pytest.skip(f"{module} is not installed ({e}); run scripts/test-python-integrations", allow_module_level=True)
        raise
