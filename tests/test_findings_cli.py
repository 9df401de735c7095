"""``sanitizerd findings`` filters and ``--follow``, ``jobs`` and ``sessions`` names: the CLI against real daemons,
real client sessions and another uid's connection."""

from __future__ import annotations

import contextlib
import json
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest

from client_shim import Client, EventKind, Space, accesses
from sanitizerd.cli.query import parse_since
from sanitizerd.control_client import ControlClient
from sanitizerd_protocol import messages as m
from sanitizerd_protocol.messages import Config
from tests import other_uid
from tests.conftest import DEMO, ROOT, RunningDaemon, program_env, sanitizerd
from tests.other_uid import NOBODY

JOB = re.compile(r"SUMMARY: job (\S+):")


def run_demo(daemon: RunningDaemon) -> str:
    """The demo's four planted bugs (illegal read, misaligned access, illegal free, leak) as a job of the daemon's."""
    run = sanitizerd("run", "--socket", str(daemon.socket), "-t", "memcheck", "--leak-check", "yes", "--",
                     sys.executable, str(DEMO))  # fmt: skip
    assert run.returncode == 0, run.stderr
    return JOB.search(run.stdout).group(1)  # type: ignore[union-attr]


def kinds_of(daemon: RunningDaemon, *options: str) -> list[str]:
    result = sanitizerd("findings", "--socket", str(daemon.socket), "--format", "json", *options)
    assert result.returncode == 0, result.stderr
    return sorted(f["kind"] for f in json.loads(result.stdout))


def kernel_with(client: Client, name: str, *, illegal_read: bool = False, misaligned: bool = False) -> m.Verdict:
    """One launch; GM at 0x1000 (512 bytes) is the client's, a read past it is illegal, a UB read at 0x6 misaligned."""
    kernel = client.kernel_begin(name, 1)
    if illegal_read:
        client.events(kernel, accesses(EventKind.READ, Space.GM, 0x1000 + 512, 32, block_num=1))
    if misaligned:
        client.events(kernel, accesses(EventKind.READ, Space.UB, 0x6, 32, block_num=1))
    client.kernel_end(kernel)
    return client.wait_kernel(kernel, timeout=30)


class TestFilters:
    def test_kind_severity_and_since_select(self, daemon: RunningDaemon) -> None:
        job = run_demo(daemon)
        every = ["illegal_free", "illegal_read", "memory_leak", "misaligned_access"]
        assert kinds_of(daemon, "--job", job) == every
        assert kinds_of(daemon, "--job", job, "--kind", "illegal_read") == ["illegal_read"]
        assert kinds_of(daemon, "--kind", "illegal_read,memory_leak", "--kind", "illegal_free") == [
            "illegal_free", "illegal_read", "memory_leak",
        ]  # fmt: skip
        assert kinds_of(daemon, "--severity", "error") == every  # a leak is an error, as it prints
        assert kinds_of(daemon, "--severity", "warning") == every
        assert kinds_of(daemon, "--kind", "out_of_bounds") == []
        assert kinds_of(daemon, "--since", "1h") == every
        assert kinds_of(daemon, "--since", str(time.time() + 3600)) == []
        text = sanitizerd("findings", "--socket", str(daemon.socket), "--kind", "illegal_read").stdout
        assert "illegal read of size 224" in text and "misaligned" not in text
        assert text.rstrip().endswith("[sanitizerd] 1 finding(s)")

    def test_text_says_whose_findings_follow(self, daemon: RunningDaemon) -> None:
        """Findings of two jobs, each under a header naming its job and session (the reports alone do not)."""
        first, second = run_demo(daemon), run_demo(daemon)
        text = sanitizerd("findings", "--socket", str(daemon.socket)).stdout
        headers = re.findall(r"^\[sanitizerd\] job (\S+), session (\d+) \(pid \d+, device 0\)$", text, re.M)
        assert [job for job, _ in headers] == [first, second]
        assert text.index(headers[1][0]) > text.index("LeakCheck")  # the first job's reports sit under its header

    @pytest.mark.parametrize(
        ("options", "says"),
        [
            (["--kind", "illegal_reed"], "unknown finding kind illegal_reed; the kinds are: illegal_read"),
            (["--since", "yesterday"], "is not an age (90s, 10m, 2h, 1d)"),
            (["--since", "-5"], "finite and not negative"),
            (["--severity", "fatal"], "invalid choice: 'fatal'"),
            (["--follow", "--format", "sarif"], "--follow prints text or JSON lines"),
            (["--session", "-1"], "a session id is 0 to 2**63-1"),
        ],
    )
    def test_bad_options_say_why_once(self, options: list[str], says: str) -> None:
        result = sanitizerd("findings", "--socket", "/nonexistent/sock", *options)
        assert result.returncode == 2 and says in result.stderr, result.stderr
        assert "Traceback" not in result.stderr and result.stdout == ""

    def test_since_forms(self) -> None:
        now = 1_000_000.0
        assert parse_since("90s", now=now) == now - 90
        assert parse_since("10m", now=now) == now - 600
        assert parse_since("2h", now=now) == now - 7200
        assert parse_since("1d", now=now) == now - 86400
        assert parse_since("12345.5", now=now) == 12345.5
        assert parse_since("2026-12-04T10:00:00+00:00") == 1796378400.0
        for bad in ("nan", "inf", "-1", "10y", "", "1e400"):
            with pytest.raises(ValueError):
                parse_since(bad, now=now)


class Follower:
    """A `findings --follow` process and the lines it prints, read on threads (a pipe read through a buffered
    text stream cannot be polled line by line)."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.process = process
        self.out: queue.Queue[str] = queue.Queue()
        self.err: queue.Queue[str] = queue.Queue()
        for stream, lines in ((process.stdout, self.out), (process.stderr, self.err)):
            threading.Thread(target=self._pump, args=(stream, lines), daemon=True).start()

    @staticmethod
    def _pump(stream: IO[str] | None, lines: queue.Queue[str]) -> None:
        assert stream is not None
        for line in stream:
            lines.put(line)

    @staticmethod
    def line(lines: queue.Queue[str], timeout: float) -> str:
        """The next line, within ``timeout`` seconds, or ''."""
        try:
            return lines.get(timeout=timeout)
        except queue.Empty:
            return ""


@contextlib.contextmanager
def follow(*options: str, socket: Path, ready: bool = True) -> Iterator[Follower]:
    """A `findings --follow` process; once it says it follows (``ready``), nothing stored after is missed. It is
    ended with Ctrl-C (SIGINT) when the block ends."""
    with subprocess.Popen(
        [sys.executable, "-m", "sanitizerd", "findings", *options, "--follow", "--socket", str(socket)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=program_env(), cwd=ROOT,
    ) as process:  # fmt: skip
        follower = Follower(process)
        try:
            if ready:
                assert "following findings" in follower.line(follower.err, 30)
            yield follower
        finally:
            if process.poll() is None:
                process.send_signal(signal.SIGINT)
                process.wait(10)


class TestFollow:
    def test_each_new_illegal_read_within_a_second_of_its_verdict(self, daemon: RunningDaemon) -> None:
        """The acceptance: `findings --follow --kind illegal_read` prints each new illegal read of a running job
        within a second of its verdict, and nothing of other kinds or of before it started."""
        with Client(daemon.socket, job="followed", config=Config(tools=["memcheck"])) as client:
            client.malloc(0x1000, 512)
            assert kernel_with(client, "before", illegal_read=True).errors == 1
            with follow("--kind", "illegal_read", "--format", "json", socket=daemon.socket) as follower:
                for i in range(3):
                    assert kernel_with(client, f"noise{i}", misaligned=True).errors == 1
                    verdict = kernel_with(client, f"read{i}", illegal_read=True)
                    seen = time.monotonic()
                    assert verdict.errors == 1
                    line = follower.line(follower.out, 5)
                    assert line, f"no line for read{i}"
                    assert time.monotonic() - seen <= 1.0
                    printed = json.loads(line)
                    assert (printed["kind"], printed["kernel"]) == ("illegal_read", f"read{i}")
                    assert printed["job"] == "followed"
                assert follower.line(follower.out, 0.5) == ""  # neither the misaligned reads nor the one before it
        assert follower.process.returncode == 0  # Ctrl-C ends a follow, as it ends tail -f

    def test_text_follow_has_headers_and_since_starts_earlier(self, daemon: RunningDaemon) -> None:
        job = run_demo(daemon)
        with follow("-f", "--since", "1h", socket=daemon.socket, ready=False) as follower:
            lines: list[str] = []
            while not any("LeakCheck" in line for line in lines):
                line = follower.line(follower.out, 10)
                assert line, lines
                lines.append(line)
        assert lines[0].startswith(f"[sanitizerd] job {job}, session ")

    def test_a_follower_whose_daemon_goes_says_so(self, short_dir: Path) -> None:
        from tests.conftest import start_daemon, stop_daemon

        daemon = start_daemon(short_dir)
        with follow("--follow", socket=daemon.socket) as follower:
            assert stop_daemon(daemon) == 0
            assert follower.process.wait(30) == 1
            assert "[sanitizerd] ERROR" in follower.line(follower.err, 10)


class TestNames:
    def test_jobs_and_sessions_print_whole_names_that_paste_back(self, daemon: RunningDaemon) -> None:
        job = "training-run-" + "x" * 60 + "-rank-group-7"
        with Client(daemon.socket, job=job, config=Config(tools=["memcheck"])) as client:
            client.malloc(0x1000, 512)
            kernel_with(client, "k", illegal_read=True)
        for command in ("jobs", "sessions"):
            listed = sanitizerd(command, "--socket", str(daemon.socket)).stdout
            assert re.search(rf"(^| ){re.escape(job)} ", listed, re.M), listed
        assert kinds_of(daemon, "--job", job) == ["illegal_read"]


class TestHostile:
    @pytest.mark.parametrize(
        "query",
        [
            {"kinds": ["illegal_read"] * 65},
            {"kinds": ["k" * 65]},
            {"since": -1.0},
            {"severity": "fatal"},
            {"kinds": "illegal_read"},
            {"newest": "yes"},
        ],
        ids=["too-many-kinds", "long-kind", "negative-since", "unknown-severity", "kinds-not-a-list", "newest-str"],
    )
    def test_malformed_queries_are_refused_by_name(self, daemon: RunningDaemon, query: dict[str, object]) -> None:
        """A refused query ends its connection with a named reason; the daemon answers the next one."""
        with socket.socket(socket.AF_UNIX) as sock:
            sock.settimeout(30)
            sock.connect(str(daemon.socket))
            sock.sendall(other_uid.frames(other_uid.hello("control"), {"type": "query_findings", **query}))
            received = b""
            while chunk := sock.recv(1 << 16):
                received += chunk
        answer = other_uid.replies(received)
        assert answer[-1]["type"] == "error" and answer[-1]["reason"] == "bad_packet", answer
        with ControlClient(daemon.socket) as control:
            assert isinstance(control.request(m.QueryFindings(kinds=["illegal_read"])), m.Findings)

    def test_another_uid_follows_only_its_own(self, daemon: RunningDaemon) -> None:
        """nobody's follower starts after nobody's newest finding (none) and reads none of root's, by kind or not."""
        other_uid.open_to_nobody(daemon.socket)
        run_demo(daemon)
        requests = [m.QueryFindings(newest=True), m.QueryFindings(kinds=["illegal_read"]),
                    m.QueryFindings(severity="error", since=1.0)]  # fmt: skip
        answers = other_uid.as_uid(NOBODY, daemon, other_uid.control(*requests), expect=4)
        assert [a["type"] for a in answers] == ["welcome", "findings", "findings", "findings"]
        assert answers[1]["next"] == 0
        assert answers[2]["findings"] == [] and answers[3]["findings"] == []
        with ControlClient(daemon.socket) as control:
            newest = control.request(m.QueryFindings(newest=True))
        assert isinstance(newest, m.Findings) and newest.next > 0 and newest.findings == []

