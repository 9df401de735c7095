"""Lock-ups on msSanitizer's own wire (issue 28): its hooks read a kernel's record buffer once the kernel stopped,
whether it ran to its end or its runtime's timeout stopped it, and end each block's records with a BLOCK_FINISH of
their own; a pipe whose records end on a wait_flag nothing set is locked up, reported at the kernel's end or when the
connection closes with the kernel open, in msSanitizer's text.

The compat door's BLOCK_FINISH (mode BLOCK_RECORDS_ENDED) as read from bytes packed at measured offsets; synccheck
driven directly with both BLOCK_FINISH modes; then a real daemon and a client process of msSanitizer's wire
(tests/mssanitizer_job_client.py) through the job's compat socket.
"""

from __future__ import annotations

import json
import re
import sys

import numpy as np
import pytest

from client_shim.events import EventKind, Pipe, Space, accesses, make_events, syncs
from sanitizerd.compat import wire
from sanitizerd.detectors.base import KernelLaunch
from sanitizerd.detectors.synccheck import Synccheck
from sanitizerd_protocol import messages as m
from sanitizerd_protocol.model import Finding
from sanitizerd_protocol.records import BLOCK_RAN_TO_END, BLOCK_RECORDS_ENDED, BlockType
from tests.conftest import ROOT, RunningDaemon, sanitizerd
from tests.detector_helpers import make_detector, stream
from tests.mssanitizer_job_client import BARRIER_LINE, PIPE_MTE3, PIPE_V, WAIT_LINE
from tests.test_compat_layouts import Client, connect, events_of, feed_all, raw_named
from tests.test_hooks import bare_env

WAIT = EventKind.WAIT_FLAG


@pytest.mark.parametrize("name", [wire.DEFAULT_LAYOUT, "26.1.0", "master"])
def test_the_compat_doors_block_finish_says_the_records_ended(name: str) -> None:
    client = Client(raw_named(name))
    values = {"src": PIPE_MTE3, "dst": PIPE_V, "eventID": 1, "location.pc": 0xC4}
    conn = connect(wire.layout_named(name))  # type: ignore[arg-type]
    out: list[m.Message] = []
    feed_all(conn, client.device_summary() + client.kernel_summary() + client.slot([client.record("WAIT_FLAG",
             values)]), out)  # fmt: skip
    events = events_of(out)
    assert [int(k) for k in events["kind"]] == [int(WAIT), int(EventKind.BLOCK_FINISH)]
    assert events["mode"][-1] == BLOCK_RECORDS_ENDED


def finish(mode: int, block_id: int = 0) -> np.ndarray:
    return make_events(kind=EventKind.BLOCK_FINISH, mode=mode, block_id=block_id, block_type=BlockType.AIV)


def one_kernel(*parts: np.ndarray) -> list[Finding]:
    detector = make_detector("synccheck", device=1)
    assert isinstance(detector, Synccheck)
    detector.kernel_begin(KernelLaunch(kernel=1, name="vec_kernel", block_dim=2, kernel_type="aiv"))
    detector.check(stream(*parts))
    return [*detector.take_early(), *detector.kernel_end()]


def locked(findings: list[Finding]) -> list[tuple[str, str, dict[str, list[int]]]]:
    return [(f.dst_pipe, f.pipe, f.blocks) for f in findings if f.kind == "kernel_locked_up"]


class TestAtTheKernelsEnd:
    def copy_in(self, block_id: int = 0) -> np.ndarray:
        return accesses(EventKind.READ, Space.GM, 0x1000, 32, pipe=Pipe.MTE2, block_id=block_id)

    def test_records_ended_on_a_wait_nothing_set_is_locked_up(self) -> None:
        found = one_kernel(self.copy_in(), syncs(WAIT, Pipe.MTE3, Pipe.V, 1), finish(BLOCK_RECORDS_ENDED))
        assert locked(found) == [("PIPE_V", "PIPE_MTE3", {"aiv": [0]})]

    def test_a_block_that_ran_to_its_end_is_left_to_the_unpaired_check(self) -> None:
        """The native door's BLOCK_FINISH says the block ran its last instruction: no lock-up at the end (its
        lone wait is racecheck's deadlock there), as before."""
        found = one_kernel(self.copy_in(), syncs(WAIT, Pipe.MTE3, Pipe.V, 1), finish(BLOCK_RAN_TO_END))
        assert locked(found) == []

    def test_a_wait_its_set_released_is_not_locked(self) -> None:
        found = one_kernel(syncs(EventKind.SET_FLAG, Pipe.MTE3, Pipe.V, 1), syncs(WAIT, Pipe.MTE3, Pipe.V, 1),
                           finish(BLOCK_RECORDS_ENDED))  # fmt: skip
        assert locked(found) == []

    def test_only_the_blocks_whose_records_ended_are_judged(self) -> None:
        """Block 1 stopped on the same wait but said it ran to its end; block 0's records just ended."""
        found = one_kernel(
            syncs(WAIT, Pipe.MTE3, Pipe.V, 1, block_id=0), syncs(WAIT, Pipe.MTE3, Pipe.V, 1, block_id=1),
            finish(BLOCK_RECORDS_ENDED, 0), finish(BLOCK_RAN_TO_END, 1),
        )  # fmt: skip
        assert locked(found) == [("PIPE_V", "PIPE_MTE3", {"aiv": [0]})]


# --- end to end --------------------------------------------------------------------------------------------------

JOB = re.compile(r"SUMMARY: job (\S+):")


def run_job(
    daemon: RunningDaemon, scenario: str, tools: tuple[str, ...] = ("synccheck",), release: str = "master"
) -> tuple[str, list[dict]]:
    env = bare_env(SANITIZERD_COMPAT_LAYOUT=release, PYTHONPATH=str(ROOT))
    chosen = [word for tool in tools for word in ("-t", tool)]
    result = sanitizerd("run", "--socket", str(daemon.socket), *chosen, "--", sys.executable, "-m",
                        "tests.mssanitizer_job_client", release, scenario, env=env)  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    job = JOB.search(result.stdout).group(1)  # type: ignore[union-attr]
    query = sanitizerd("findings", "--socket", str(daemon.socket), "--job", job, "--format", "json")
    return result.stdout, json.loads(query.stdout)


def locked_up(serial: int) -> str:
    return "\n".join(
        [
            "====== ERROR: Sync error detected. kernel locked up at",
            "======    ",
            "======    WAIT_FLAG in hung_kernel",
            "======    by PIPE_V in block aiv(0) on device 0",
            f"======    code in unknown:{WAIT_LINE} (serialNo:{serial})",
            "======    ",
            "====== SUMMARY: 1 pipe(s) locked up.",
        ]
    )


# The wait is the kernel's second record and nothing came before it: msSanitizer's tool numbered it 1 until aca3f9d
# (``serialNo_++``, from 0), and 2 from it on (``++serialNo_``: 26.1.0 and master).
@pytest.mark.parametrize(
    ("scenario", "release", "serial"),
    [("hung-close", "master", 2), ("hung-timeout", "master", 2), ("hung-timeout", "26.1.0", 2),
     ("hung-timeout", wire.DEFAULT_LAYOUT, 1)],
)  # fmt: skip
def test_a_hung_kernels_records_give_msSanitizers_lockup_report(
    daemon: RunningDaemon, scenario: str, release: str, serial: int
) -> None:
    """``hung-close``: one block's slot of two, then the connection closes (the kernel is also said incomplete);
    ``hung-timeout``: every slot came and the verdict was awaited. Either way the stuck pipe is locked up, printed
    with the serial number the client's release prints."""
    out, findings = run_job(daemon, scenario, release=release)
    assert locked_up(serial) in out, out
    [lockup] = [f for f in findings if f["kind"] == "kernel_locked_up"]
    assert (lockup["dst_pipe"], lockup["pipe"], lockup["blocks"]) == ("PIPE_V", "PIPE_MTE3", {"aiv": [0]})
    incomplete = [f for f in findings if f["kind"] == "internal_error"]
    assert bool(incomplete) == (scenario == "hung-close"), findings
    assert "No error detected" not in out


def test_a_kernel_whose_wait_was_set_is_silent(daemon: RunningDaemon) -> None:
    out, findings = run_job(daemon, "paired")
    assert findings == [], out
    assert "locked up" not in out


def test_blocks_at_a_barrier_a_hung_block_never_reaches_are_all_locked_up(daemon: RunningDaemon) -> None:
    """Block 0's scalar stops on a wait_flag nobody sets; blocks 1-3 stop at msSanitizer's mstx cross-core
    barrier, which needs block 0: all four are locked up, named as msSanitizer's replay names them."""
    out, findings = run_job(daemon, "barrier-hung")
    lockups = [f for f in findings if f["kind"] == "kernel_locked_up"]
    stuck = sorted((f["detail"], f["dst_pipe"], f["blocks"]["aiv"]) for f in lockups)
    assert stuck == [("MSTX_CROSS_CORE_BARRIER", "PIPE_S", [1, 2, 3]), ("WAIT_FLAG", "PIPE_S", [0])], findings
    assert "======    MSTX_CROSS_CORE_BARRIER in barrier_kernel" in out, out
    assert f"code in unknown:{BARRIER_LINE}" in out
    assert "====== SUMMARY: 4 pipe(s) locked up." in out


def test_a_barrier_every_block_reaches_is_silent(daemon: RunningDaemon) -> None:
    out, findings = run_job(daemon, "barrier-met")
    assert findings == [], out
    assert "locked up" not in out


@pytest.mark.parametrize("scenario", ["hung-timeout", "barrier-hung"])
def test_with_racecheck_on_too_each_stuck_wait_is_reported_once(daemon: RunningDaemon, scenario: str) -> None:
    """synccheck and racecheck both on: each stuck wait of a kernel whose records ended is synccheck's lock-up, as
    msSanitizer reports it (its racecheck says nothing of a hung kernel), and not racecheck's deadlock as well."""
    out, findings = run_job(daemon, scenario, ("synccheck", "racecheck"))
    kinds = sorted(f["kind"] for f in findings)
    assert kinds == ["kernel_locked_up"] * (1 if scenario == "hung-timeout" else 2), findings
    assert "deadlock" not in out.lower() and "locked up at" in out
