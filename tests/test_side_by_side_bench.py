"""benchmarks/side_by_side.py without msSanitizer's driver (as CI runs it): it builds every stream as msSanitizer
record bytes, our compat door decodes them with nothing to say, our detectors find nothing in these valid kernels,
and the JSON line carries the figures the side-by-side table needs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _run(*args: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "side_by_side.py"), "--quick", *args],
        capture_output=True, text=True, timeout=120, cwd=ROOT, env=env, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_side_by_side_quick_without_driver() -> None:
    result = _run()
    assert result["driver"] is False and result["quick"] is True
    assert result["layout"] == "mssanitizer-1e040de1"  # the wire of msSanitizer's master, as the driver builds it
    names = [row["stream"] for row in result["rows"]]
    assert names == [
        "memcheck, contiguous",
        "memcheck, strided x8",
        "memcheck+initcheck",
        "racecheck, 200 iterations",
        "racecheck, 1000 iterations",
    ]
    for row in result["rows"]:
        # 12 records a tile, less the first two tiles' waits and the last two's sets; a barrier per 1 000 tiles;
        # 3 mallocs (and 2 host stores for initcheck)
        kernel = row["blocks"] * (12 * row["tiles"] - 4 + (row["tiles"] - 1) // 1000)
        assert row["records"] == kernel + (5 if "initcheck" in row["checks"] else 3)
        # 19 events a tile (racecheck.py's kernel): the DMAs' reads and writes, the vector ops' operands, the syncs;
        # and each block's BLOCK_FINISH
        assert row["events"] == row["blocks"] * (19 * row["tiles"] - 3 + (row["tiles"] - 1) // 1000)
        assert row["ours_findings"] == row["ours_detectors_findings"] == 0, row
        assert row["ours_cpu_s"] > 0 and row["ours_detectors_cpu_s"] > 0
        assert "theirs_cpu_s" not in row and "theirs_over_ours" not in row


def test_side_by_side_planted_bugs_are_found() -> None:
    """``--plant``: every stream carries a bug (z half allocated, y never written, a missing WAIT_FLAG), so a
    detector that silently checked nothing would show; the driver's side is checked the same way by hand
    (docs/performance.md, issue 29's side-by-side section)."""
    result = _run("--plant")
    assert result["plant"] is True and len(result["rows"]) == 5
    for row in result["rows"]:
        assert row["ours_findings"] > 0 and row["ours_findings"] == row["ours_detectors_findings"], row
