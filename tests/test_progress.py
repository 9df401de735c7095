"""Progress of long work (sanitizerd/cli/progress.py): on a terminal for run, replay and findings --follow, plain
lines where stderr is not one, nothing with --quiet, and never a byte of it in what a program reads (stdout's
findings, JSON, SARIF, JUnit).

The display is checked alone against a pseudo-terminal, then each command against a real daemon, once with stderr
on a pseudo-terminal and once on a pipe."""

from __future__ import annotations

import fcntl
import io
import json
import os
import pty
import re
import signal
import struct
import subprocess
import sys
import termios
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

from client_shim.transport import FrameSocket
from sanitizerd.cli.progress import INTERVAL_ENV, PLAIN_INTERVAL, Progress, Sample, plain_interval
from sanitizerd.control_client import ControlClient
from sanitizerd_protocol import PROTOCOL_VERSION
from sanitizerd_protocol import messages as m
from tests.conftest import DEMO, ROOT, RunningDaemon, program_env, sanitizerd

ANSI = re.compile(rb"\x1b(\[[0-9;?]*[A-Za-z]|[78])")
ROWS, COLUMNS = 24, 100


class Terminal:
    """A pseudo-terminal of ROWS x COLUMNS: ``slave`` for the process under test, all it wrote in ``output``."""

    def __init__(self) -> None:
        self.master, self.slave = pty.openpty()
        fcntl.ioctl(self.slave, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLUMNS, 0, 0))
        self._chunks: list[bytes] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while True:
            try:
                chunk = os.read(self.master, 65536)
            except OSError:  # the slave side closed and nothing is left
                return
            if not chunk:
                return
            self._chunks.append(chunk)

    @property
    def output(self) -> bytes:
        return b"".join(self._chunks)

    def text(self) -> str:
        """What was written, its control sequences taken out."""
        return ANSI.sub(b"", self.output).decode(errors="replace")

    def wait_for(self, pattern: str, timeout: float = 30.0) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = re.search(pattern, self.text())
            if found:
                return found
            time.sleep(0.05)
        raise AssertionError(f"{pattern!r} never shown on the terminal:\n{self.text()[-3000:]}")

    def close(self) -> None:
        os.close(self.slave)
        self._reader.join(5)
        os.close(self.master)


@pytest.fixture
def terminal() -> Iterator[Terminal]:
    tty = Terminal()
    yield tty
    tty.close()


def counter(total: int | None = None) -> tuple[list[int], object]:
    seen = [0]

    def sample() -> Sample:
        seen[0] += 1
        return Sample(f"{seen[0]} records received", done=seen[0] if total else None, total=total)

    return seen, sample


# --- the display alone ----------------------------------------------------------------------------------------


def test_a_pipe_gets_a_plain_line_every_interval_and_quiet_gets_nothing() -> None:
    stream = io.StringIO()
    seen, sample = counter(total=200)
    with Progress("replay", sample, stream=stream, env={INTERVAL_ENV: "0.05"}) as progress:  # type: ignore[arg-type]
        time.sleep(0.5)
    assert progress.mode == "plain"
    lines = stream.getvalue().splitlines()
    assert 3 <= len(lines) <= 12, lines
    assert all(re.fullmatch(r"\[sanitizerd\] replay: \d+ records received \(\d+%\), \d+ s", line) for line in lines)
    after = len(stream.getvalue())
    time.sleep(0.2)
    assert len(stream.getvalue()) == after  # stopped means stopped

    quiet = io.StringIO()
    seen, sample = counter()
    with Progress("run", sample, quiet=True, stream=quiet, env={INTERVAL_ENV: "0.01"}):  # type: ignore[arg-type]
        time.sleep(0.2)
    assert quiet.getvalue() == "" and seen == [0]  # not even asked


@pytest.mark.parametrize(
    ("value", "seconds"), [("", PLAIN_INTERVAL), ("0.5", 0.5), ("nan", PLAIN_INTERVAL), ("-1", PLAIN_INTERVAL),
                           ("1e9", PLAIN_INTERVAL), ("soon", PLAIN_INTERVAL), ("3600", 3600.0)],
)  # fmt: skip
def test_the_interval_setting(value: str, seconds: float) -> None:
    assert plain_interval({INTERVAL_ENV: value} if value else {}) == seconds


def test_a_failing_sample_leaves_the_last_line_standing() -> None:
    stream = io.StringIO()
    calls = [0]

    def sample() -> Sample:
        calls[0] += 1
        if calls[0] > 1:
            raise ConnectionResetError("the daemon went away")
        return Sample("7 records received")

    with Progress("run", sample, stream=stream, env={INTERVAL_ENV: "0.02"}):
        time.sleep(0.2)
    lines = stream.getvalue().splitlines()
    assert len(lines) > 2 and all("7 records received" in line for line in lines), lines


def test_on_a_terminal_the_line_is_redrawn_output_goes_above_it_and_it_is_erased(terminal: Terminal) -> None:
    stream = os.fdopen(os.dup(terminal.slave), "w")
    _, sample = counter(total=40)
    progress = Progress("replay", sample, stream=stream, env={"TERM": "xterm"})
    assert progress.mode == "terminal"
    progress.start()
    terminal.wait_for(r"replay: [2-9] records received")
    progress.above(stream).write("[sanitizerd] a finding, whole\n")
    terminal.wait_for(r"replay: 1[0-9] records received")
    progress.stop()
    stream.close()
    time.sleep(0.1)
    assert "[sanitizerd] a finding, whole\r\n" in terminal.text()
    assert terminal.output.endswith(b"\x1b[2K")  # the line erased: what the command prints next takes its place
    assert progress.above(sys.stdout) is sys.stdout  # another stream than the line's own is left alone


def test_beside_a_program_the_line_keeps_the_last_row_and_the_programs_output_whole(terminal: Terminal) -> None:
    stream = os.fdopen(os.dup(terminal.slave), "w")
    _, sample = counter()
    progress = Progress("run", sample, shared=True, stream=stream, env={"TERM": "xterm"})
    assert progress.mode == "last row"
    progress.start()
    for n in range(20):  # the program writes while the line is redrawn, with no say in when
        os.write(terminal.slave, f"program line {n} of twenty\n".encode())
        time.sleep(0.03)
    terminal.wait_for(r"run: [3-9] records received")
    progress.stop()
    stream.close()
    time.sleep(0.1)
    out = terminal.output
    assert out.count(b"\x1b[1;23r") == 1 and out.endswith(b"\x1b[r\x1b8")  # the region set once, then given back
    # every redraw is one piece: the cursor saved, the last row drawn, the cursor restored
    draws = re.findall(rb"\x1b7\x1b\[24;1H\x1b\[2K(.*?)\x1b8", out)
    assert len(draws) >= 3 and all(b"\n" not in d for d in draws)
    outside = re.sub(rb"\x1b7.*?\x1b8", b"", out)  # all but the redraws: the program's lines, each whole
    for n in range(20):
        assert f"program line {n} of twenty\r\n".encode() in outside
    assert b"records received" not in outside


def test_a_terminal_too_short_for_a_row_apart_gets_plain_lines(terminal: Terminal) -> None:
    fcntl.ioctl(terminal.slave, termios.TIOCSWINSZ, struct.pack("HHHH", 3, COLUMNS, 0, 0))
    stream = os.fdopen(os.dup(terminal.slave), "w")
    progress = Progress("run", counter()[1], shared=True, stream=stream, env={"TERM": "xterm"})  # type: ignore[arg-type]
    assert progress.mode == "plain"
    stream.close()


# --- the commands, against a real daemon -----------------------------------------------------------------------

# A program that runs the demo kernel, then keeps its session open a while: long enough for progress to show.
SLOW_DEMO = f"""
import runpy, time
try:
    runpy.run_path({str(DEMO)!r}, run_name="__main__")
finally:  # it ends in sys.exit
    time.sleep(2.5)
"""


def command(*args: str) -> list[str]:
    return [sys.executable, "-m", "sanitizerd", *args]


def under_terminal(
    terminal: Terminal, args: list[str], *, stdout: Path, env: dict[str, str] | None = None, timeout: float = 120
) -> int:
    """Runs ``args`` with stderr (and stdin) on the pseudo-terminal and stdout into a file, as `cmd > out.json`
    typed at a terminal; the exit status."""
    with open(stdout, "wb") as out:
        process = subprocess.run(
            args, stdin=terminal.slave, stdout=out, stderr=terminal.slave, cwd=ROOT, timeout=timeout,
            env=terminal_env(program_env() if env is None else env),
        )  # fmt: skip
    return process.returncode


def plain_env() -> dict[str, str]:
    return dict(program_env(), **{INTERVAL_ENV: "0.2"})


def terminal_env(env: dict[str, str]) -> dict[str, str]:
    """``env`` for a command on the pseudo-terminal: its size is the terminal's own (pytest-xdist's workers have
    COLUMNS set, which rich would take over it)."""
    env = dict(env, TERM="xterm")
    env.pop("COLUMNS", None)
    env.pop("LINES", None)
    return env


def test_run_shows_records_kernels_and_findings_on_a_terminal_and_leaves_its_outputs_alone(
    daemon: RunningDaemon, terminal: Terminal, tmp_path: Path
) -> None:
    report = tmp_path / "run.sarif"
    status = under_terminal(
        terminal,
        command("run", "--socket", str(daemon.socket), "--report", str(report), "--", sys.executable, "-c", SLOW_DEMO),
        stdout=tmp_path / "stdout",
    )
    assert status == 0, terminal.text()
    shown = terminal.text()
    assert re.search(r"run: [1-9][\d,]* records received, [1-9]\d* kernels? checked, [1-9]\d* findings? so far", shown)
    assert terminal.output.endswith(b"\x1b[r\x1b8")  # the terminal scrolls whole again
    stdout = (tmp_path / "stdout").read_bytes()
    assert b"\x1b" not in stdout and b"records received" not in stdout
    assert re.search(rb"SUMMARY: job \S+: 1 session\(s\), 1 kernel\(s\), \d+ device event\(s\) checked; 3 err", stdout)
    results = json.loads(report.read_text())["runs"][0]["results"]
    assert len(results) == 3


def test_run_without_a_terminal_writes_plain_lines_and_quiet_none(daemon: RunningDaemon, tmp_path: Path) -> None:
    args = ("run", "--socket", str(daemon.socket), "--report", str(tmp_path / "r.json"), "--", sys.executable, "-c",
            SLOW_DEMO)  # fmt: skip
    loud = sanitizerd(*args, env=plain_env())
    assert loud.returncode == 0, loud.stderr
    lines = [line for line in loud.stderr.splitlines() if line.startswith("[sanitizerd] run: ")]
    assert len(lines) >= 3, loud.stderr
    assert any(re.search(r"[1-9][\d,]* records received, 1 kernel checked, 3 findings so far", line) for line in lines)
    assert not any("replay signature" in line for line in lines), lines  # no sdccheck in this job: not said
    assert "records received" not in loud.stdout and "\x1b" not in loud.stderr + loud.stdout
    assert len(json.loads((tmp_path / "r.json").read_text())) == 3

    quiet = sanitizerd(args[0], "--quiet", *args[1:], env=plain_env())
    assert quiet.returncode == 0, quiet.stderr
    assert "[sanitizerd] run: " not in quiet.stderr and "SUMMARY" in quiet.stdout


# The demo's three findings, then a clean kernel of 0.5 M reads (29 MB, under what a recording watcher may have
# waiting) in a session of its own: the demo alone replays in ~10 ms, before a test's shortest interval has passed.
LONG_JOB = f"""
import runpy
import numpy as np
from client_shim import Client, EventKind, Space, accesses
try:
    runpy.run_path({str(DEMO)!r}, run_name="__main__")
except SystemExit:
    pass
with Client() as client:
    client.malloc(0x100000, 1 << 20)
    kernel = client.kernel_begin("clean_reads", 1)
    for _ in range(8):
        client.events(kernel, accesses(EventKind.READ, Space.GM, 0x100000 + (np.arange(65536) % 4096) * 256, 32))
    client.kernel_end(kernel)
    client.wait_kernel(kernel)
    client.free(0x100000)
"""


@pytest.fixture
def saved_run(daemon: RunningDaemon, tmp_path: Path) -> Path:
    saved = tmp_path / "job.sanitizerd"
    run = sanitizerd("run", "--quiet", "--socket", str(daemon.socket), "--save", str(saved), "--", sys.executable,
                     "-c", LONG_JOB)  # fmt: skip
    assert run.returncode == 0, run.stderr
    return saved


def test_replay_shows_the_files_bytes_on_a_terminal_and_its_json_stays_json(
    daemon: RunningDaemon, terminal: Terminal, saved_run: Path, tmp_path: Path
) -> None:
    out = tmp_path / "replay.json"
    status = under_terminal(
        terminal, command("replay", str(saved_run), "--socket", str(daemon.socket), "--format", "json"), stdout=out
    )
    assert status == 0, terminal.text()
    shown = terminal.text()
    assert re.search(r"replay: [\d.]+ of [\d.]+ MB, [\d,]+ of [\d,]+ messages sent, \d+ findings? so far", shown)
    assert len(json.loads(out.read_text())) == 3  # stdout is the findings' JSON alone

    text = tmp_path / "replay.txt"  # text findings on stdout while the line is on stderr's terminal
    assert under_terminal(terminal, command("replay", str(saved_run), "--socket", str(daemon.socket)), stdout=text) == 0
    assert b"\x1b" not in text.read_bytes() and "SUMMARY" in text.read_text()


def test_replay_without_a_terminal_and_quiet(daemon: RunningDaemon, saved_run: Path) -> None:
    env = dict(program_env(), **{INTERVAL_ENV: "0.01"})
    loud = sanitizerd("replay", str(saved_run), "--socket", str(daemon.socket), "--format", "json", env=env)
    assert loud.returncode == 0, loud.stderr
    line = r"\[sanitizerd\] replay: [\d.]+ of [\d.]+ MB, .* messages sent, .*\(\d+%\), \d+ s"
    assert re.search(line, loud.stderr), loud.stderr
    assert len(json.loads(loud.stdout)) == 3, loud.stdout
    quiet = sanitizerd("replay", "-q", str(saved_run), "--socket", str(daemon.socket), "--format", "json", env=env)
    assert quiet.returncode == 0, quiet.stderr
    assert "replay:" not in quiet.stderr, quiet.stderr
    assert len(json.loads(quiet.stdout)) == 3, quiet.stdout


def follow_until(process: subprocess.Popen[bytes], lines: int, timeout: float = 60.0) -> list[bytes]:
    """The first ``lines`` lines of a follower's stdout."""
    assert process.stdout is not None
    got: list[bytes] = []
    deadline = time.monotonic() + timeout
    while len(got) < lines and time.monotonic() < deadline:
        got.append(process.stdout.readline())
    return got


@pytest.mark.parametrize("on_terminal", [True, False], ids=["terminal", "pipe"])
def test_findings_follow_counts_live_and_its_json_lines_stay_json(
    daemon: RunningDaemon, terminal: Terminal, on_terminal: bool
) -> None:
    env = terminal_env(plain_env())
    args = command("findings", "--socket", str(daemon.socket), "--follow", "--format", "json")
    stderr = terminal.slave if on_terminal else subprocess.PIPE
    follower = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=stderr, stdin=subprocess.DEVNULL, cwd=ROOT,
                                env=env)  # fmt: skip
    try:
        if on_terminal:
            terminal.wait_for(r"following findings stored after")
        else:
            time.sleep(1.0)  # no line to wait for: the follower's start is what the pipe shows last
        run = sanitizerd("run", "--quiet", "--socket", str(daemon.socket), "--", sys.executable, str(DEMO))
        assert run.returncode == 0, run.stderr
        found = [json.loads(line) for line in follow_until(follower, 3)]
        assert [f["kind"] for f in found].count("illegal_read") == 1 and len(found) == 3
        if on_terminal:
            terminal.wait_for(r"findings --follow: 3 findings followed \(3 errors, 0 warnings\), the last at")
        time.sleep(0.5)
    finally:
        follower.send_signal(signal.SIGINT)
        _, err = follower.communicate(timeout=30)
    assert follower.returncode == 0
    if not on_terminal:
        plain = err.decode()
        line = r"\[sanitizerd\] findings --follow: 3 findings followed \(3 errors, 0 warnings\)"
        assert re.search(line, plain), plain
        assert "\x1b" not in plain


def test_a_job_named_in_query_jobs_is_answered_alone(daemon: RunningDaemon) -> None:
    for _ in range(2):
        run = sanitizerd("run", "--quiet", "--socket", str(daemon.socket), "--", sys.executable, str(DEMO),
                         env=dict(program_env()))  # fmt: skip
        assert run.returncode == 0
    named = re.search(r"SUMMARY: job (\S+):", run.stdout).group(1)  # type: ignore[union-attr]
    with ControlClient(daemon.socket) as control:
        every = control.request(m.QueryJobs())
        one = control.request(m.QueryJobs(job=named))
        none = control.request(m.QueryJobs(job="no-such-job"))
    assert isinstance(every, m.Jobs) and len(every.jobs) >= 2
    assert isinstance(one, m.Jobs) and [j.job for j in one.jobs] == [named] and one.jobs[0].events > 0
    assert one.jobs[0] == next(j for j in every.jobs if j.job == named)
    assert isinstance(none, m.Jobs) and none.jobs == []


def test_an_over_long_job_name_in_query_jobs_is_a_bad_packet(daemon: RunningDaemon) -> None:
    connection = FrameSocket(str(daemon.socket))
    try:
        connection.handshake(m.Hello(version=PROTOCOL_VERSION, role="control"))
        body = msgspec.msgpack.encode({"type": "query_jobs", "job": "j" * (m.MAX_IDENT + 1)})
        connection.sendall(struct.pack("<I", len(body)) + body)
        answer = connection.receive()
    finally:
        connection.close()
    assert isinstance(answer, m.Error) and answer.reason == "bad_packet", answer
    with ControlClient(daemon.socket) as control:  # the daemon serves on
        assert isinstance(control.request(m.QueryJobs()), m.Jobs)
