"""Runs LangGraph's own store tests against ``UndertextStore``.

LangGraph publishes no store conformance suite; its store tests ship in the sdists of the
packages that hold stores:

* ``langgraph-checkpoint``: ``tests/test_store.py`` (``InMemoryStore``, the reference store,
  and the async batching wrapper over it);
* ``langgraph-checkpoint-sqlite``: ``tests/test_store.py`` and ``tests/test_async_store.py``
  (``SqliteStore``, ``AsyncSqliteStore``).

Each sdist's tests run unmodified, in a copy of the sdist, with the plugin
``undertext_swap.py`` (next to this file) putting ``UndertextStore`` where they take their
store from; the plugin deselects the tests that check vector search or SQLite internals and
says why. Exits 1 unless every selected test passes (none failing, none erroring, at least
one passing in each suite).

Usage: python run_store_suites.py SDIST.tar.gz... [--workdir DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from sdist import extract  # noqa: E402 (tests/sdist.py, once the path is set)

#: sdist name prefix -> its store test files
SUITES = {
    "langgraph_checkpoint_sqlite-": ["tests/test_store.py", "tests/test_async_store.py"],
    "langgraph_checkpoint-": ["tests/test_store.py"],
}


def targets_of(sdist: Path) -> list[str]:
    for prefix, files in SUITES.items():
        if sdist.name.startswith(prefix):
            return files
    raise SystemExit(f"{sdist.name}: not a sdist with known store tests ({', '.join(SUITES)})")


def run(root: Path, targets: list[str]) -> bool:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")])))
    cmd = [
        sys.executable, "-m", "pytest", *targets, "-q", "-p", "no:cacheprovider", "-p", "undertext_swap",
        "-o", "addopts=", "-o", "asyncio_mode=auto", "-o", "asyncio_default_fixture_loop_scope=function",
    ]
    print(f"== {root.name}: {' '.join(targets)}", flush=True)
    proc = subprocess.run(cmd, cwd=root, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    print(proc.stdout[-20000:], flush=True)
    return proc.returncode == 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("sdists", type=Path, nargs="+")
    ap.add_argument("--workdir", type=Path)
    args = ap.parse_args()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="undertext-store-suites-"))
    try:
        ok = True
        for i, sdist in enumerate(args.sdists):
            root = extract(sdist, work / str(i))
            ok = run(root, targets_of(sdist)) and ok
        print("LangGraph store suites with UndertextStore:", "PASSED" if ok else "FAILED")
        return 0 if ok else 1
    finally:
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
