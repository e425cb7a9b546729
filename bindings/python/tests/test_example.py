"""The research-loop example runs to the end with small settings and recovers every fact."""

import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "research_loop.py"


def test_research_loop_runs_to_the_end_and_reports_every_setting():
    r = subprocess.run(
        [sys.executable, str(EXAMPLE), "--sessions", "6", "--threads", "4", "--steps", "12"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    rows = [line for line in r.stdout.splitlines() if line.split(" ")[0] in ("eager", "default", "late")]
    assert len(rows) == 3, r.stdout
    for row in rows:
        calls = int(row.split("|")[1].split()[0])
        assert calls == 6 * 12
        assert " 100% " in row.split("|")[3]  # recoverable
    assert "every fact recoverable in every setting" in r.stdout


def test_the_quickstart_runs_and_reads_the_archived_result_back():
    quickstart = EXAMPLE.parent / "quickstart.py"
    r = subprocess.run([sys.executable, str(quickstart)], capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "the whole result is still readable from the archive" in r.stdout
