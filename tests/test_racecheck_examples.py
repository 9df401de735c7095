"""racecheck end to end on the emulated kernels: real daemon, real `sanitizerd run`, real client processes.

Clean kernels stay silent under racecheck; each race planted in examples/emulated/races.py is found with its
hazard, pipes, blocks and marked lines, and the stuck wait yields a deadlock finding beside the race before it.
"""

from __future__ import annotations

import json
import re
import sys

import pytest

from tests.conftest import ROOT, RunningDaemon, sanitizerd

pytestmark = pytest.mark.first_pass_only("racecheck on emulated kernels: the same session code in a worker")

EXAMPLES = ROOT / "examples" / "emulated"
RACES = EXAMPLES / "races.py"
JOB = re.compile(r"SUMMARY: job (\S+):")


def marked_line(name: str) -> int:
    for number, line in enumerate(RACES.read_text().splitlines(), 1):
        if f"# line: {name}" in line:
            return number
    raise AssertionError(f"no line marked {name}")


def run_job(daemon: RunningDaemon, *args: str, tools: tuple[str, ...] = ("-t", "racecheck")) -> list[dict]:
    result = sanitizerd("run", "--socket", str(daemon.socket), *tools, "--", sys.executable, *args)
    assert result.returncode == 0, result.stderr + result.stdout
    job = JOB.search(result.stdout).group(1)
    query = sanitizerd("findings", "--socket", str(daemon.socket), "--job", job, "--format", "json")
    return json.loads(query.stdout)


@pytest.mark.parametrize("program", ["add_double_buffer.py", "matmul_tiling.py", "planted.py none", "races.py none"])
def test_clean_kernels_have_no_race(daemon: RunningDaemon, program: str) -> None:
    """The clean examples run clean under racecheck together with every other detector."""
    name, *args = program.split()
    tools = ("-t", "racecheck", "-t", "memcheck", "-t", "initcheck", "-t", "synccheck")
    assert run_job(daemon, str(EXAMPLES / name), *args, tools=tools) == []


def access(finding: dict, i: int) -> tuple[str, str, list[int], int]:
    a = finding["accesses"][i]
    return a["pipe"], a["op"], a["blocks"], a["location"]["line"]


# bug -> (hazard, [(pipe, op, blocks, marked line) of the earlier and the later access], blocks it was found in).
# An in-block race of every block is one report, shown in block 0 as msSanitizer's, found in all four.
PLANTED = {
    "missing_wait_flag": ("race_raw", [("PIPE_MTE2", "Write", [0], "copy-x"),
                                       ("PIPE_V", "Read", [0], "add")], [0, 1, 2, 3]),
    "missing_pipe_barrier": ("race_raw", [("PIPE_V", "Write", [0], "vec-1"),
                                          ("PIPE_V", "Read", [0], "vec-2")], [0, 1, 2, 3]),
    "misordered_cross_flag": ("race_raw", [("PIPE_MTE3", "Write", [0], "publish"),
                                           ("PIPE_MTE2", "Read", [1], "consume")], [0, 1]),
}  # fmt: skip


@pytest.mark.parametrize("bug", sorted(PLANTED))
def test_planted_race(daemon: RunningDaemon, bug: str) -> None:
    """Exactly one race, of the planted hazard, between the marked lines, pipes and blocks."""
    hazard, sides, found_in = PLANTED[bug]
    (finding,) = run_job(daemon, str(RACES), bug)
    assert finding["kind"] == hazard
    expected = [(pipe, op, blocks, marked_line(line)) for pipe, op, blocks, line in sides]
    assert [access(finding, 0), access(finding, 1)] == expected
    assert finding["blocks"] == {"aiv": found_in}


def test_gm_overlap_without_sync_all(daemon: RunningDaemon) -> None:
    """Phase-2 writes of each block overlap the phase-1 write of the block before it: WAW on GM, one report per
    pair of blocks, named in serial order; block 0 adds into its own tile, a WAW within its PIPE_MTE3."""
    findings = run_job(daemon, str(RACES), "gm_overlap")
    assert {f["kind"] for f in findings} == {"race_waw"}
    lines = {marked_line("phase-1"), marked_line("phase-2")}
    for f in findings:
        assert f["space"] == "GM"
        assert {access(f, 0)[3], access(f, 1)[3]} == lines
        assert [access(f, i)[:2] for i in (0, 1)] == [("PIPE_MTE3", "Write")] * 2
    pairs = [(a["blocks"], b["blocks"]) for f in findings for a, b in [f["accesses"]]]
    assert sorted(pairs) == [([0], [0]), ([0], [1]), ([1], [2]), ([2], [3])]


def test_deadlock_and_the_race_before_it(daemon: RunningDaemon) -> None:
    findings = run_job(daemon, str(RACES), "deadlock")
    by_kind = {f["kind"]: f for f in findings}
    assert set(by_kind) == {"race_raw", "deadlock"}
    stuck = by_kind["deadlock"]
    assert stuck["location"]["line"] == marked_line("stuck")
    assert (stuck["pipe"], stuck["dst_pipe"], stuck["event_id"]) == ("PIPE_MTE3", "PIPE_MTE2", 5)
    assert stuck["blocks"] == {"aiv": [0, 1, 2, 3]} and stuck["blocked"] > 0
    race = by_kind["race_raw"]
    assert [access(race, 0)[3], access(race, 1)[3]] == [marked_line("vec-1"), marked_line("vec-2")]
