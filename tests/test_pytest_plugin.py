"""`pytest --sanitizerd` (sanitizerd/pytest_plugin.py, registered as a pytest11 entry point) and the Python API
(sanitizerd/api.py), each run for real: pytest in a process of its own on a generated test file, its test
processes attached to a real daemon (a private one, or the fixture's), and queries of a real daemon."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from client_shim import Client, EventKind, Space, accesses
from sanitizerd import api
from sanitizerd.control_client import ControlClient
from sanitizerd_protocol.messages import Config, QuerySessions, Sessions
from tests.conftest import RunningDaemon, program_env

# Two tests as the README's instrumenting snippet has them: a client from the environment, no device named (the
# client's own: device 0). CLOSED False leaves each test's client open, for connect()'s close at the interpreter's
# exit, which the plugin brings forward to the end of the tests, while its daemon still runs.
KERNELS = """
import client_shim
from client_shim import EventKind, Space, accesses

CLOSED = {closed}


def launch(name, *, past_the_end):
    c = client_shim.connect()
    c.device_summary("Ascend910B1", block_num=1)
    c.malloc(0x1000, 512)
    k = c.kernel_begin(name, 1)
    address = 0x1000 + (512 if past_the_end else 0)
    c.events(k, accesses(EventKind.READ, Space.GM, address, 32, block_num=1))
    c.kernel_end(k)
    verdict = c.wait_kernel(k, timeout=30)
    if CLOSED:
        c.free(0x1000)
        c.close()
    return verdict


def test_clean_kernel():
    launch("clean_add", past_the_end=False)


def test_buggy_kernel():
    launch("buggy_add", past_the_end=True)  # the test itself asserts nothing: only sanitizerd can fail it
"""
# The finding as the daemon prints it for test_buggy_kernel: msSanitizer's report, on the client's device.
BUGGY_REPORT = (
    "====== ERROR: illegal read of size 32\n"
    "======    at 0x1200 on GM in buggy_add\n"
    "======    in block aiv(0) on device 0\n"
)


def run_pytest(directory: Path, *options: str, closed: bool = True) -> subprocess.CompletedProcess[str]:
    tests = directory / "test_kernels.py"
    tests.write_text(KERNELS.replace("{closed}", str(closed)))
    env = dict(program_env(), XDG_RUNTIME_DIR=str(directory / "runtime"))  # no daemon of the user's: a private one
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *options, str(tests)],
        capture_output=True, text=True, timeout=300, cwd=directory, env=env,
    )  # fmt: skip


class TestPlugin:
    @pytest.mark.parametrize("closed", [True, False], ids=["closed", "left-open"])
    def test_one_pass_and_one_failure_that_shows_the_finding(self, short_dir: Path, closed: bool) -> None:
        """The acceptance: a clean and a buggy emulated kernel under `pytest --sanitizerd` give one pass and one
        failure that shows the finding on device 0 (a private daemon started for the run, none being there). Clients
        the tests left open are closed before that daemon stops: none is left at exit to wait for a daemon to resume
        its session, and fail saying so."""
        result = run_pytest(short_dir, "--sanitizerd", closed=closed)
        out = result.stdout
        assert result.returncode == 1, out + result.stderr
        assert "1 failed, 1 passed" in out
        assert BUGGY_REPORT in out.split("FAILED")[0]  # in the failure's report
        assert "FAILED test_kernels.py::test_buggy_kernel" in out and "test_clean_kernel" not in out.split("FAILED")[1]
        assert "sanitizerd found 1 problem(s) in job pytest-" in out
        assert "sanitizerd: 2 test(s) checked with memcheck, registercheck on a private daemon" in out
        assert "1 failed by their findings" in out
        for text in ("Traceback", "lost sanitizerd", "could not be closed"):
            assert text not in out and text not in result.stderr, out + result.stderr

    def test_without_the_option_nothing_changes(self, short_dir: Path) -> None:
        """Installed but not asked for, the plugin does nothing: no daemon is started or named for the tests, so
        their client finds none to connect to, and no report is added."""
        result = run_pytest(short_dir)
        assert "2 failed" in result.stdout and "SANITIZERD_SOCKET is not set" in result.stdout, result.stdout
        assert "sanitizerd found" not in result.stdout and "test(s) checked" not in result.stdout

    def test_a_running_daemon_and_the_tools_asked_for(self, daemon: RunningDaemon, short_dir: Path) -> None:
        """--sanitizerd-socket names the daemon; each test is its own job there, checked with the tools asked for:
        initcheck finds the clean kernel's read of memory nothing wrote, so both fail. The clients the tests left
        open were closed by them, on device 0."""
        result = run_pytest(short_dir, "--sanitizerd", "--sanitizerd-socket", str(daemon.socket),
                            "--sanitizerd-tools", "memcheck,initcheck", closed=False)  # fmt: skip
        assert result.returncode == 1 and "2 failed" in result.stdout, result.stdout + result.stderr
        assert f"with memcheck, initcheck, registercheck on {daemon.socket}" in result.stdout
        assert "uninitialized read of size 32" in result.stdout.split("test_clean_kernel")[1]
        jobs = sorted({f.job for f in api.findings(str(daemon.socket))})
        assert len(jobs) == 2 and all(job.startswith("pytest-") for job in jobs)
        with ControlClient(daemon.socket) as control:
            sessions = control.request(QuerySessions())
        assert isinstance(sessions, Sessions)
        ended = sorted((s.job, s.device, s.state, s.end_reason) for s in sessions.sessions)
        assert ended == [(job, 0, "ended", "closed by client") for job in jobs], ended

    def test_warnings_fail_only_when_asked(self, short_dir: Path) -> None:
        """A register left set is a warning: it fails the test under --sanitizerd-fail-on warning only, and shows in
        the test's report either way."""
        tests = short_dir / "test_warning.py"
        tests.write_text(textwrap.dedent('''
            import client_shim
            from client_shim import Register, register_writes

            def test_register_left_set():
                c = client_shim.connect(device=0)
                k = c.kernel_begin("masked", 1)
                c.events(k, register_writes(Register.VECTOR_MASK_0, 7))
                c.kernel_end(k)
                c.wait_kernel(k, timeout=30)
                c.close()
        '''))  # fmt: skip
        env = dict(program_env(), XDG_RUNTIME_DIR=str(short_dir / "runtime"))
        for fail_on, code in (("error", 0), ("warning", 1)):
            result = subprocess.run(
                [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rP", "--sanitizerd",
                 "--sanitizerd-fail-on", fail_on, str(tests)],
                capture_output=True, text=True, timeout=300, cwd=short_dir, env=env,
            )  # fmt: skip
            assert result.returncode == code, result.stdout + result.stderr
            assert "Register VECTOR_MASK_0 was not reset" in result.stdout

    def test_unknown_tools_are_a_usage_error(self, short_dir: Path) -> None:
        result = run_pytest(short_dir, "--sanitizerd", "--sanitizerd-tools", "memchek")
        assert result.returncode == 4, result.stdout + result.stderr  # pytest's usage error
        assert "--sanitizerd-tools: unknown tool memchek" in result.stderr


def illegal_read(socket: Path, job: str) -> None:
    with Client(socket, job=job, config=Config(tools=["memcheck"])) as client:
        client.malloc(0x1000, 512)
        kernel = client.kernel_begin("k", 1)
        client.events(kernel, accesses(EventKind.READ, Space.GM, 0x1000 + 512, 32, block_num=1))
        client.events(kernel, accesses(EventKind.READ, Space.UB, 0x6, 32, block_num=1))  # misaligned
        client.kernel_end(kernel)
        client.wait_kernel(kernel, timeout=30)


class TestApi:
    def test_query_and_filter_typed_findings(self, daemon: RunningDaemon) -> None:
        illegal_read(daemon.socket, "api-job")
        every = api.findings(str(daemon.socket), job="api-job")
        assert sorted(f.kind for f in every) == ["illegal_read", "misaligned_access"]
        [read] = api.findings(str(daemon.socket), kinds=["illegal_read"])
        assert isinstance(read, api.Finding) and (read.kernel, read.address) == ("k", 0x1000 + 512)
        assert len(api.findings(str(daemon.socket), severity="error", since=time.time() - 3600)) == 2
        assert api.findings(str(daemon.socket), since=time.time() + 3600) == []
        with pytest.raises(ValueError, match="unknown finding kind"):
            api.findings(str(daemon.socket), kinds=["ilegal_read"])
        with pytest.raises(api.SanitizerdError):
            api.findings(str(daemon.socket.parent / "none.sock"))

    def test_follow_yields_what_is_stored_after_it_started(self, daemon: RunningDaemon) -> None:
        illegal_read(daemon.socket, "before")
        followed: list[api.Finding] = []
        started = threading.Event()

        def follow() -> None:
            selected = api.FindingFilter(kinds=("illegal_read",))
            for batch in api.follow_pages(str(daemon.socket), selected=selected, started=lambda _: started.set()):
                followed.extend(batch)
                return

        thread = threading.Thread(target=follow, daemon=True)
        thread.start()
        assert started.wait(30)
        illegal_read(daemon.socket, "after")
        thread.join(10)
        assert [(f.job, f.kind) for f in followed] == [("after", "illegal_read")]

