"""SIMT end to end on the emulated kernel of examples/emulated/simt.py: real daemon, real `sanitizerd run`, real
client processes. The clean kernel is silent under every detector; each planted bug is found with msSanitizer's
report text (race_info_display.h's `Thread (x,y,z)` lines, sync_info_display.h's `Divergent thread(s)`)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, RunningDaemon, sanitizerd

pytestmark = pytest.mark.first_pass_only("SIMT on an emulated kernel: the same session code in a worker")

SIMT = ROOT / "examples" / "emulated" / "simt.py"
JOB = re.compile(r"SUMMARY: job (\S+):")
ALL = ("-t", "racecheck", "-t", "memcheck", "-t", "initcheck", "-t", "synccheck")


def marked_line(name: str) -> int:
    for number, line in enumerate(SIMT.read_text().splitlines(), 1):
        if f"# line: {name}" in line:
            return number
    raise AssertionError(f"no line marked {name}")


def run_job(daemon: RunningDaemon, bug: str, tools: tuple[str, ...]) -> tuple[list[dict], str]:
    result = sanitizerd("run", "--socket", str(daemon.socket), *tools, "--", sys.executable, str(SIMT), bug)
    assert result.returncode == 0, result.stderr + result.stdout
    job = JOB.search(result.stdout).group(1)
    found = sanitizerd("findings", "--socket", str(daemon.socket), "--job", job, "--format", "json")
    text = sanitizerd("findings", "--socket", str(daemon.socket), "--job", job, "--format", "text")
    return json.loads(found.stdout), text.stdout


def side(finding: dict, i: int) -> tuple[str, list[int], int]:
    access = finding["accesses"][i]
    return access["op"], access["thread"], access["location"]["line"]


def test_clean_simt_kernel_is_silent(daemon: RunningDaemon) -> None:
    """Stores, a barrier, the neighbour's load, a main scalar reading a flag alongside: nothing to report."""
    findings, _ = run_job(daemon, "none", ALL)
    assert findings == []


def test_thread_race_without_syncthreads(daemon: RunningDaemon) -> None:
    """Without the barrier, thread (0,0,0)'s store races with the last thread's load of it (RAW), and its own
    load with thread (1,0,0)'s store (WAR): each one report, for both blocks, lowest threads first."""
    findings, text = run_job(daemon, "thread_race", ("-t", "racecheck"))
    by_kind = {f["kind"]: f for f in findings}
    assert sorted(by_kind) == ["race_raw", "race_war"]
    raw, war = by_kind["race_raw"], by_kind["race_war"]
    assert [side(raw, 0), side(raw, 1)] == [
        ("Write", [0, 0, 0], marked_line("store-own")), ("Read", [7, 1, 0], marked_line("load-neighbour")),
    ]  # fmt: skip
    assert [side(war, 0), side(war, 1)] == [
        ("Read", [0, 0, 0], marked_line("load-neighbour")), ("Write", [1, 0, 0], marked_line("store-own")),
    ]  # fmt: skip
    assert raw["blocks"] == war["blocks"] == {"aiv": [0, 1]}
    assert raw["space"] == "UB" and raw["count"] == 2  # one pair in each block
    assert "====== ERROR: Potential RAW hazard detected at UB in simt_custom:" in text
    assert re.search(r"^======     Write Thread \(0,0,0\) at RAW\(\)\+0x0 in block 0 \(aiv\) on device 0 ", text, re.M)
    assert re.search(r"^======     Read Thread \(7,1,0\) at RAW\(\)\+0x0 in block 0 \(aiv\) on device 0 ", text, re.M)


def test_main_scalar_races_with_a_thread(daemon: RunningDaemon) -> None:
    """The main scalar's write while the threads run races with thread (0,0,0)'s store of the same element: the
    thread's line names its thread, the scalar's its pipe, in serial order."""
    findings, text = run_job(daemon, "scalar_race", ("-t", "racecheck"))
    (finding,) = findings
    assert finding["kind"] == "race_waw" and finding["space"] == "GM"
    assert side(finding, 0) == ("Write", [0, 0, 0], marked_line("store-out"))
    assert finding["accesses"][1]["pipe"] == "PIPE_S" and finding["accesses"][1]["thread"] == []
    assert finding["accesses"][1]["location"]["line"] == marked_line("scalar-write")
    assert re.search(r"^======    PIPE_S Write at WAW\(\)\+0x12c0c0000000 in block 0 \(aiv\)", text, re.M)


def test_divergent_syncthreads(daemon: RunningDaemon) -> None:
    """Only the first row of threads reaches the barrier: msSanitizer's Divergent thread(s) report, naming the
    first thread that missed it, once per block."""
    findings, text = run_job(daemon, "divergent", ("-t", "synccheck"))
    assert [(f["kind"], f["thread"], f["blocks"]) for f in findings] == [
        ("divergent_threads", [0, 1, 0], {"aiv": [0]}), ("divergent_threads", [0, 1, 0], {"aiv": [1]}),
    ]  # fmt: skip
    assert all(f["location"]["line"] == marked_line("barrier") for f in findings)
    assert "====== ERROR: Sync error detected. Divergent thread(s) in simt_custom\n" in text
    assert "======    by thread(0,1,0) in block aiv(0) on device 0\n" in text


def test_inter_thread_stomping(daemon: RunningDaemon) -> None:
    """Two threads of a block write one GM element: msSanitizer's inter-thread stomping, an out of bounds "when
    writing data" by the second writer, named by its thread; the pipes' own stomping check is not disturbed."""
    findings, text = run_job(daemon, "thread_stomping", ("-t", "memcheck"))
    assert {f["kind"] for f in findings} == {"out_of_bounds"}
    first = min(findings, key=lambda f: f["serial"])
    assert first["thread"] == [0, 1, 0] and first["size"] == 4 and first["space"] == "GM"
    assert first["location"]["line"] == marked_line("store-out")
    assert "when writing data in simt_custom\n======    by thread (0,1,0) in block aiv(0) on device 0\n" in text


def test_thread_reading_what_no_thread_wrote(daemon: RunningDaemon) -> None:
    """SIMT initcheck: without the barrier, thread (0,0,0) loads its neighbour's element before any thread stored
    it; the report names the thread."""
    findings, text = run_job(daemon, "thread_race", ("-t", "initcheck"))
    first = min(findings, key=lambda f: f["serial"])
    assert first["kind"] == "uninitialized_read" and first["thread"] == [0, 0, 0] and first["space"] == "UB"
    assert "by thread (0,0,0) in block aiv(0-1) on device 0" in text  # the site, folded over both blocks


HOSTILE_CLIENT = """
import numpy as np
import client_shim
from client_shim.events import EventKind, Pipe, Space, accesses, syncs
from sanitizerd_protocol.records import simt_dims_address

client = client_shim.connect(device=0)
client.device_summary("Ascend950PR", block_num=4, device=0)
kernel = client.kernel_begin("hostile_simt", 4, "aiv")
parts = [
    syncs(EventKind.SIMT_START, Pipe.S, address=simt_dims_address(0, 4, 4), block_id=0),  # no threads
    accesses(EventKind.WRITE, Space.UB, 0, 4, thread=1, block_id=0),
    syncs(EventKind.SIMT_START, Pipe.S, address=simt_dims_address(2049), block_id=1),  # one thread too many
    accesses(EventKind.WRITE, Space.UB, 0, 4, thread=2049, block_id=1),
    syncs(EventKind.SIMT_START, Pipe.S, address=simt_dims_address(2), block_id=2),
    accesses(EventKind.WRITE, Space.UB, 0, 4, thread=0xFFFF, block_id=2),  # past the dims
    syncs(EventKind.SYNC_THREADS, Pipe.S, thread=7, block_id=3),  # outside any section
    accesses(EventKind.WRITE, Space.UB, 0, 4096, thread=1, block_id=2),  # wider than a thread's access
    syncs(EventKind.SIMT_END, Pipe.S, block_id=2),
    syncs(EventKind.SIMT_END, Pipe.S, block_id=2),  # no section open
]
client.events(kernel, np.concatenate(parts))
client.kernel_end(kernel)
client.wait_kernel(kernel, timeout=60)
client.close()
"""


def test_hostile_simt_records_are_refused_and_said(daemon: RunningDaemon, tmp_path: Path) -> None:
    """Dims of no thread and past 2 048, a thread past its dims, a barrier outside a section, an access wider than
    a thread's, a stray SIMT_END: none is checked, each detector says how many it left out (so the run does not
    pass as clean), and the daemon serves on (the fixture stops it and checks its exit)."""
    script = tmp_path / "hostile_simt.py"
    script.write_text(HOSTILE_CLIENT)
    result = sanitizerd(
        "run", "--socket", str(daemon.socket), "--error-exitcode", "7", "-t", "racecheck", "-t", "synccheck", "--",
        sys.executable, str(script),
    )  # fmt: skip
    assert result.returncode == 7, result.stdout + result.stderr  # not clean: errors were found
    job = JOB.search(result.stdout).group(1)
    found = json.loads(sanitizerd("findings", "--socket", str(daemon.socket), "--job", job, "--format", "json").stdout)
    details = sorted(f["detail"] for f in found if f["kind"] == "internal_error")
    assert [d.split(" did not check ")[0] for d in details] == ["racecheck", "synccheck"]
    assert all(" did not check 5 SIMT thread records of this kernel launch" in d for d in details)
    assert [f for f in found if f["kind"] != "internal_error"] == []
