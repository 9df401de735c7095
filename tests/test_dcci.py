"""racecheck --check-dcci end to end on examples/emulated/dcci.py: real daemon, real `sanitizerd run`, real client
processes. Each planted omission is found between the marked lines, the write first, in msSanitizer's words; the
clean kernel, a read that comes before the write, and the check left off are silent."""

from __future__ import annotations

import pytest

from tests.conftest import ROOT, RunningDaemon, run_example

pytestmark = pytest.mark.first_pass_only("racecheck --check-dcci on an emulated kernel: the same code in a worker")

DCCI = ROOT / "examples" / "emulated" / "dcci.py"
RACECHECK = ("-t", "racecheck", "--check-dcci=yes")


def marked_line(name: str) -> int:
    for number, line in enumerate(DCCI.read_text().splitlines(), 1):
        if f"# line: {name}" in line:
            return number
    raise AssertionError(f"no line marked {name}")


def run_job(daemon: RunningDaemon, bug: str, *options: str) -> tuple[list[dict], str]:
    return run_example(daemon, [str(DCCI), bug], *options)


@pytest.mark.parametrize("bug", ["write_without_dcci", "read_without_dcci", "dcci_on_other_line"])
def test_missing_dcci_is_found(daemon: RunningDaemon, bug: str) -> None:
    findings, out = run_job(daemon, bug, *RACECHECK)
    (finding,) = findings
    assert finding["kind"] == "dcci_missing"
    assert finding["severity"] == "error"
    sides = [(a["pipe"], a["op"], a["blocks"], a["location"]["line"]) for a in finding["accesses"]]
    assert sides == [("PIPE_S", "Write", [0], marked_line("publish")), ("PIPE_S", "Read", [1], marked_line("consume"))]
    assert finding["blocks"] == {"aiv": [0, 1]}
    text = out.splitlines()
    head = text.index("====== ERROR: Missing DCCI instructions detected on cross core data dependency at GM in "
                      "dcci_custom:")  # fmt: skip
    assert text[head + 1].startswith("======    PIPE_S Write at 0x12c100000000 in block 0 (aiv) on device 0 at ")
    assert text[head + 2].startswith("======    PIPE_S Read at 0x12c100000000 in block 1 (aiv) on device 0 at ")
    assert f"dcci.py:{marked_line('publish')}" in text[head + 1]


@pytest.mark.parametrize("bug", ["none", "read_before_write"])
def test_clean_hand_over_is_silent(daemon: RunningDaemon, bug: str) -> None:
    """Both dcci in place, or a read ordered before the write: nothing, under every tool."""
    tools = ("-t", "racecheck", "-t", "memcheck", "-t", "initcheck", "-t", "synccheck", "--check-dcci=yes")
    assert run_job(daemon, bug, *tools)[0] == []


def test_off_unless_asked(daemon: RunningDaemon) -> None:
    """Without --check-dcci, racecheck alone says nothing of a missing dcci (the hand-over is ordered)."""
    assert run_job(daemon, "write_without_dcci", "-t", "racecheck")[0] == []
