"""A framework's sdist unpacked, for the runners that run its own tests against an adapter
(agents_sdk/run_sdk_suite.py, langgraph_store/run_store_suites.py).

Example: ``root = extract(Path("openai_agents-0.24.0.tar.gz"), work / "baseline")``.
"""

from __future__ import annotations

import tarfile
from pathlib import Path


def extract(sdist: Path, into: Path) -> Path:
    """Unpacks ``sdist`` into ``into`` and returns its one top directory."""
    with tarfile.open(sdist) as tar:
        try:
            tar.extractall(into, filter="data")
        except TypeError:  # Python < 3.12 without the filter argument
            tar.extractall(into)
    roots = [p for p in into.iterdir() if p.is_dir()]
    if len(roots) != 1:
        raise SystemExit(f"expected one top directory in {sdist}, found {[p.name for p in roots]}")
    return roots[0]
