"""Kernels locked up on wait_flag, and silent kernels (issue 28: msSanitizer master's 算子卡死 check).

synccheck driven directly for the rules (which pipes are stuck, which are locked for certain, what the report
says), then end to end: a real daemon, real ``sanitizerd run`` processes running examples/emulated/lockup.py,
whose kernels never end, stopped by SIGINT sent to the run alone, as a user's Ctrl-C.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from client_shim.events import EventKind, Pipe, Space, accesses, make_events, syncs
from sanitizerd.cli.run import CTRL_C_TEXT, KILL_GRACE
from sanitizerd.detectors import _lockup
from sanitizerd.detectors.base import KernelLaunch
from sanitizerd.detectors.synccheck import Synccheck
from sanitizerd.findings.render import render_text
from sanitizerd_protocol.messages import Location
from sanitizerd_protocol.model import Finding
from tests.conftest import ROOT, RunningDaemon, sanitizerd, start_daemon, stop_daemon
from tests.detector_helpers import make_detector, stream

SET, WAIT = EventKind.SET_FLAG, EventKind.WAIT_FLAG
LOCKUP = ROOT / "examples" / "emulated" / "lockup.py"


def synccheck() -> Synccheck:
    detector = make_detector(
        "synccheck", device=1, locations={5: Location(id=5, file="/src/kernel.cpp", line=9, column=5)}
    )
    assert isinstance(detector, Synccheck)
    detector.kernel_begin(KernelLaunch(kernel=1, name="vec_kernel", block_dim=8, kernel_type="aiv"))
    return detector


def locked(findings: list[Finding]) -> list[tuple[str, str, dict[str, list[int]], int]]:
    """(waiting pipe, pipe waited for, blocks, serial) of each lock-up finding."""
    return [(f.dst_pipe, f.pipe, f.blocks, f.serial) for f in findings if f.kind == "kernel_locked_up"]


def copy_in(block_id: int = 0) -> np.ndarray:
    return accesses(EventKind.READ, Space.GM, 0x1000, 32, pipe=Pipe.MTE2, block_id=block_id)


class TestWhileRunning:
    def test_two_pipes_waiting_on_each_other_are_reported_at_once(self) -> None:
        """V waits for MTE3 and MTE3 for V, neither set: nothing left can set either, reported after the batch."""
        detector = synccheck()
        detector.check(stream(copy_in(), syncs(WAIT, Pipe.MTE3, Pipe.V, 2), syncs(WAIT, Pipe.V, Pipe.MTE3, 2)))
        assert locked(detector.take_early()) == [
            ("PIPE_V", "PIPE_MTE3", {"aiv": [0]}, 2),
            ("PIPE_MTE3", "PIPE_V", {"aiv": [0]}, 3),
        ]
        assert detector.take_early() == []  # handed over once
        # and not again when the session ends with the launch open
        assert locked(detector.finish()) == []

    def test_a_pipe_waiting_on_a_pipe_still_free_is_not_reported_yet(self) -> None:
        """MTE3 waits for PIPE_S, which waits on nothing: PIPE_S may still set the flag, so no report yet."""
        detector = synccheck()
        detector.check(stream(copy_in(), syncs(WAIT, Pipe.S, Pipe.MTE3, 3)))
        assert detector.take_early() == []
        (finding,) = detector.finish()  # the session ended with the launch open: it is reported then
        assert locked([finding]) == [("PIPE_MTE3", "PIPE_S", {"aiv": [0]}, 2)]

    def test_a_chain_into_a_cycle_is_locked_and_a_chain_to_a_free_pipe_is_not(self) -> None:
        """MTE2 waits for V, V for MTE3, MTE3 for V: all three locked; FIX waits for S (free): not, until the end."""
        detector = synccheck()
        detector.check(
            stream(
                syncs(WAIT, Pipe.V, Pipe.MTE2, 0),
                syncs(WAIT, Pipe.MTE3, Pipe.V, 1),
                syncs(WAIT, Pipe.V, Pipe.MTE3, 1),
                syncs(WAIT, Pipe.S, Pipe.FIX, 4),
            )
        )
        assert {f.dst_pipe for f in detector.take_early()} == {"PIPE_MTE2", "PIPE_V", "PIPE_MTE3"}
        assert [f.dst_pipe for f in detector.finish()] == ["PIPE_FIX"]

    def test_a_set_in_a_later_batch_releases_the_wait(self) -> None:
        """A wait may come before its set: once the set arrives the pipe is not stuck."""
        detector = synccheck()
        detector.check(stream(syncs(WAIT, Pipe.MTE2, Pipe.V, 0)))
        detector.check(stream(syncs(SET, Pipe.MTE2, Pipe.V, 0)))
        assert detector.take_early() == []
        assert locked(detector.finish()) == []

    def test_a_pipe_that_went_on_after_its_wait_is_not_stuck(self) -> None:
        """A wait met by an earlier set, then work on the pipe: only each pipe's last record counts."""
        detector = synccheck()
        batch = stream(
            syncs(SET, Pipe.MTE2, Pipe.V, 0),
            syncs(WAIT, Pipe.MTE2, Pipe.V, 0),
            syncs(WAIT, Pipe.MTE2, Pipe.V, 1),  # never set: V stuck here...
            syncs(SET, Pipe.MTE2, Pipe.V, 1),  # ...until this
            accesses(EventKind.READ, Space.UB, 0, 32, pipe=Pipe.V),
        )
        detector.check(batch)
        assert locked(detector.finish()) == []

    def test_a_finished_block_is_not_locked(self) -> None:
        """A block that sent BLOCK_FINISH ran to its end, whatever its last wait."""
        detector = synccheck()
        finish = make_events(kind=EventKind.BLOCK_FINISH, block_id=0, block_size=0)
        detector.check(stream(syncs(WAIT, Pipe.S, Pipe.MTE3, 3), finish, syncs(WAIT, Pipe.S, Pipe.V, 3, block_id=1)))
        assert locked(detector.finish()) == [("PIPE_V", "PIPE_S", {"aiv": [1]}, 3)]

    def test_a_kernel_that_ends_is_not_locked_up(self) -> None:
        """A kernel that reached its end did not hang: its unmatched wait is racecheck's deadlock, not a lock-up."""
        detector = synccheck()
        detector.check(stream(syncs(WAIT, Pipe.S, Pipe.MTE3, 3)))
        assert [f.kind for f in detector.kernel_end()] == []

    def test_the_same_wait_in_many_blocks_is_one_site_counting_each_pipe(self) -> None:
        """40 blocks stuck on one line: one entry listing the blocks, and msSanitizer's summary counts 40 pipes."""
        detector = synccheck()
        detector.check(stream(*(syncs(WAIT, Pipe.S, Pipe.MTE3, 3, block_id=b, location=5) for b in range(40))))
        findings = detector.finish()
        assert [(f.blocks, f.count) for f in findings] == [({"aiv": list(range(40))}, 40)]
        assert "====== SUMMARY: 40 pipe(s) locked up." in render_text(findings)


def test_report_text_is_mssanitizers() -> None:
    """sync_info_display.h (master): the header, each pipe after a separator line, the summary, a blank line."""
    detector = synccheck()
    detector.check(
        stream(
            syncs(WAIT, Pipe.MTE3, Pipe.V, 2, location=5),
            syncs(WAIT, Pipe.V, Pipe.MTE3, 2),
        )
    )
    assert render_text(detector.take_early()) == (
        "====== ERROR: Sync error detected. kernel locked up at\n"
        "======    \n"
        "======    WAIT_FLAG in vec_kernel\n"
        "======    by PIPE_V in block aiv(0) on device 1\n"
        "======    code in /src/kernel.cpp:9 (serialNo:1)\n"
        "======    \n"
        "======    WAIT_FLAG in vec_kernel\n"
        "======    by PIPE_MTE3 in block aiv(0) on device 1\n"
        "======    code in unknown:0 (serialNo:2)\n"
        "======    \n"
        "====== SUMMARY: 2 pipe(s) locked up.\n"
        "\n"
    )


class TestHostileRecords:
    def test_extreme_fields_do_not_break_the_check(self) -> None:
        """The largest block id, pipe and event id a record can carry: tracked, compared whole, reported."""
        detector = synccheck()
        wait = syncs(WAIT, Pipe.V, Pipe.MTE3, 0xFFFF, block_id=0xFFFF)
        wait["pipe"], wait["dst_pipe"] = 0xFF, 0xFF  # a pipe waiting on itself: locked at once
        detector.check(stream(wait))
        (finding,) = detector.take_early()
        assert (finding.blocks, finding.event_id) == ({"aiv": [0xFFFF]}, 0xFFFF)

    def test_tracking_is_bounded_and_a_stop_is_said(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Past MAX_LOCKUP_KEYS (block, pipe) pairs the launch's lock-up check stops; the session's end says so
        rather than pass the launch as free of lock-ups."""
        monkeypatch.setattr(_lockup, "MAX_LOCKUP_KEYS", 64)
        detector = synccheck()
        detector.check(stream(*(syncs(WAIT, Pipe.S, Pipe.MTE3, 3, block_id=b) for b in range(100))))
        assert detector.tails.pending.size == 0  # what it held is dropped
        findings = detector.finish()
        assert [f.kind for f in findings] == ["internal_error"]
        assert "stopped looking for locked pipes" in findings[0].detail


# --- end to end -----------------------------------------------------------------------------------------------------


class Run:
    """A ``sanitizerd run`` of lockup.py in the background, its output read as it comes."""

    def __init__(self, daemon: RunningDaemon, bug: str, *extra: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "sanitizerd", "run", "--socket", str(daemon.socket), "-t", "synccheck", "--",
             sys.executable, str(LOCKUP), bug, *extra],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
        )  # fmt: skip
        self.lines: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line)

    @property
    def text(self) -> str:
        return "".join(self.lines)

    def wait_for(self, pattern: str, timeout: float = 60.0) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = re.search(pattern, self.text)
            if found:
                return found
            assert self.process.poll() is None or self.reader.is_alive(), f"run ended:\n{self.text}"
            time.sleep(0.05)
        raise AssertionError(f"{pattern!r} not in the run's output:\n{self.text}")

    def end(self, timeout: float = 60.0) -> int:
        code = self.process.wait(timeout)
        self.reader.join(10)
        return code

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.reader.join(10)
        assert self.process.stdout is not None
        self.process.stdout.close()


@pytest.fixture
def runs() -> Iterator[list[Run]]:
    started: list[Run] = []
    yield started
    for run in started:
        run.kill()


def hung(run: Run, daemon: RunningDaemon) -> int:
    """Once the program hangs and the daemon has every event it sent: the program's pid."""
    found = run.wait_for(r"lockup.py: pid (\d+) launch \d+ hangs after (\d+) events")
    pid, sent = int(found.group(1)), int(found.group(2))
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        listed = json.loads(sanitizerd("sessions", "--socket", str(daemon.socket), "--format", "json").stdout)
        if any(s["pid"] == pid and s["events"] == sent for s in listed):
            return pid
        time.sleep(0.1)
    raise AssertionError(f"the daemon did not receive the {sent} events of pid {pid}")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/status")
    return status.exists() and "zombie" not in status.read_text()


def marked_line(name: str) -> int:
    for number, line in enumerate(LOCKUP.read_text().splitlines(), 1):
        if f"# line: {name}" in line:
            return number
    raise AssertionError(f"no line marked {name}")


def stored(daemon: RunningDaemon, run: Run) -> list[dict]:
    job = re.search(r"SUMMARY: job (\S+):", run.text)
    assert job, run.text
    query = sanitizerd("findings", "--socket", str(daemon.socket), "--job", job.group(1), "--format", "json")
    return json.loads(query.stdout)


def test_ctrl_c_reports_the_locked_pipe(daemon: RunningDaemon, runs: list[Run]) -> None:
    """The kernel never ends and nothing proves it locked while it runs; SIGINT to the run stops the program, and
    the daemon reports the pipe stuck on its wait, at the marked line; the run's status is an error."""
    run = Run(daemon, "unset_flag")
    runs.append(run)
    pid = hung(run, daemon)
    assert "locked up" not in run.text
    run.process.send_signal(signal.SIGINT)
    code = run.end()
    assert code == 128 + signal.SIGINT, run.text
    assert not alive(pid)
    assert CTRL_C_TEXT in run.text
    assert f"user program {sys.executable} exited by signal(2)" in run.text
    block = run.text[run.text.index("====== ERROR: Sync error detected. kernel locked up at") :]
    serial = re.search(r"serialNo:(\d+)", block).group(1)
    assert block.splitlines()[:7] == [
        "====== ERROR: Sync error detected. kernel locked up at",
        "======    ",
        "======    WAIT_FLAG in lockup_custom",
        "======    by PIPE_MTE3 in block aiv(1) on device 0",
        f"======    code in {LOCKUP}:{marked_line('stuck-mte3')} (serialNo:{serial})",
        "======    ",
        "====== SUMMARY: 1 pipe(s) locked up.",
    ]
    (finding,) = stored(daemon, run)
    assert (finding["kind"], finding["dst_pipe"], finding["pipe"], finding["event_id"]) == (
        "kernel_locked_up", "PIPE_MTE3", "PIPE_S", 3,
    )  # fmt: skip


def test_the_daemon_finds_a_lockup_while_the_kernel_runs(daemon: RunningDaemon, runs: list[Run]) -> None:
    """Two pipes waiting on each other: reported with no signal sent, while the program still hangs; a Ctrl-C
    after does not report them again."""
    run = Run(daemon, "cycle")
    runs.append(run)
    run.wait_for(r"SUMMARY: 2 pipe\(s\) locked up\.")
    assert run.process.poll() is None  # the program still hangs, the run still waits for it
    text = run.text
    assert f"{LOCKUP}:{marked_line('cycle-v')} " in text and f"{LOCKUP}:{marked_line('cycle-mte3')} " in text
    assert "by PIPE_V in block aiv(0)" in text and "by PIPE_MTE3 in block aiv(0)" in text
    run.process.send_signal(signal.SIGINT)
    assert run.end() != 0
    assert run.text.count("kernel locked up at") == 1
    assert sorted(f["dst_pipe"] for f in stored(daemon, run)) == ["PIPE_MTE3", "PIPE_V"]


def test_a_second_ctrl_c_ends_the_run_at_once(daemon: RunningDaemon, runs: list[Run]) -> None:
    """A program deaf to SIGINT (stuck in a driver call, say) is given KILL_GRACE seconds; a second Ctrl-C does
    not wait for them: the run ends now, with the program killed."""
    run = Run(daemon, "unset_flag", "--deaf")
    runs.append(run)
    pid = hung(run, daemon)
    run.process.send_signal(signal.SIGINT)
    run.wait_for(re.escape(CTRL_C_TEXT))
    time.sleep(0.3)
    assert run.process.poll() is None and alive(pid)  # the first Ctrl-C waits for the program
    started = time.monotonic()
    run.process.send_signal(signal.SIGINT)
    assert run.end(timeout=KILL_GRACE) == 128 + signal.SIGINT
    assert time.monotonic() - started < KILL_GRACE / 2
    deadline = time.monotonic() + 5
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(pid), "the program outlived a forced quit"
    assert "Forced to quit by a second Ctrl-C" in run.text


def test_a_deaf_program_is_killed_after_the_grace(daemon: RunningDaemon, runs: list[Run]) -> None:
    """One Ctrl-C alone ends a program that ignores SIGINT, KILL_GRACE seconds later, and the lock-up is reported."""
    run = Run(daemon, "unset_flag", "--deaf")
    runs.append(run)
    hung(run, daemon)
    run.process.send_signal(signal.SIGINT)
    assert run.end(timeout=KILL_GRACE + 60) == 128 + signal.SIGKILL
    assert "SUMMARY: 1 pipe(s) locked up." in run.text


@pytest.fixture
def quick_silence(short_dir: Path) -> Iterator[RunningDaemon]:
    running = start_daemon(short_dir, "--silent-kernel-after", "1")
    yield running
    assert stop_daemon(running) == 0, running.log_text()


def test_a_silent_kernel_is_reported_not_clean(quick_silence: RunningDaemon, runs: list[Run]) -> None:
    """Every wait met, but the kernel never ends: after --silent-kernel-after it is reported silent, with no
    signal; Ctrl-C then finds no locked pipe, and the run fails."""
    run = Run(quick_silence, "silent")
    runs.append(run)
    run.wait_for(r"Kernel lockup_custom sent no record for 1 s and has not ended")
    run.process.send_signal(signal.SIGINT)
    assert run.end() != 0
    assert "locked up at" not in run.text
    assert [f["kind"] for f in stored(quick_silence, run)] == ["kernel_silent"]
    assert quick_silence.wait_for_log("kernel launch silent")


def test_a_kernel_that_ends_is_clean_and_never_silent(quick_silence: RunningDaemon, runs: list[Run]) -> None:
    """The same kernel run to its end: clean, and a launch that ended is not reported silent after."""
    run = Run(quick_silence, "none")
    runs.append(run)
    assert run.end() == 0, run.text
    assert "No error detected." in run.text
    time.sleep(1.5)
    assert stored(quick_silence, run) == []
