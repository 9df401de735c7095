"""Fixtures that start real daemons and run real programs; nothing of ours is mocked here."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "examples" / "add_custom.py"

# A test's program shares `sanitizerd run`'s stdout, and the run prints its reports there while the program runs.
# Buffered, the program's result line leaves it in one write at exit, which a pipe never splits; under
# PYTHONUNBUFFERED (set by some CI hosts) print writes each word on its own, and a report printed meanwhile lands
# inside the line ("lost====== ERROR ... 1276 events"). The programs' output is made as on a developer's machine.
os.environ.pop("PYTHONUNBUFFERED", None)


@dataclass
class RunningDaemon:
    socket: Path
    state_dir: Path
    log: Path
    process: subprocess.Popen[bytes]

    def log_text(self) -> str:
        return self.log.read_text()

    def wait_for_log(self, needle: str, timeout: float = 10.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.log_text()
            if needle in text:
                return text
            time.sleep(0.05)
        raise AssertionError(f"{needle!r} not in daemon log:\n{self.log_text()}")


# 60 s: a daemon starts in under a second, but CI shares two cores with whatever else the machine runs, and a
# start that loses that race must not read as a failure of the daemon.
def wait_for_socket(path: Path, process: subprocess.Popen[bytes], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"daemon exited with {process.returncode}")
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(str(path))
            return
        except OSError:
            time.sleep(0.05)
        finally:
            probe.close()
    raise AssertionError("daemon did not start listening")


# The hostile tests run the daemon as a host would: the default soft fd limit (the unit raises it; a shell does not),
# and an address-space cap so that a blow-up fails the test with MemoryError instead of waking the OOM killer.
HOSTILE_NOFILE = 1024
HOSTILE_ADDRESS_SPACE = 4 << 30


def _hostile_limits() -> None:
    import resource

    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(HOSTILE_NOFILE, hard), hard))
    resource.setrlimit(resource.RLIMIT_AS, (HOSTILE_ADDRESS_SPACE, HOSTILE_ADDRESS_SPACE))


# The daemons the fixtures start serve with this many worker processes (``serve --workers``): the same end-to-end
# tests run against one process (1, the default) and against a listener with workers (CI runs both).
TEST_WORKERS = int(os.environ.get("SANITIZERD_TEST_WORKERS", "1"))


# What would send the suite's sessions to a daemon it did not start: the caller's own job (``sanitizerd run``, the
# pytest plugin), the host's daemon at /run/sanitizerd (every client looks there first, root's daemon listens there),
# the user's private daemon under $XDG_RUNTIME_DIR or /tmp/sanitizerd-<uid>. The suite unsets the first and moves the
# others into a directory of its own, where nothing listens unless a test starts it.
# The host's configuration (/etc/sanitizerd/sanitizerd.toml: its store, metrics port, limits) is moved there too.
CALLERS_JOB = ("SANITIZERD_SOCKET", "SANITIZERD_JOB", "SANITIZERD_ATTACH", "SANITIZERD_COMPAT_LAYOUT")
_SUITE_HOME = Path(tempfile.mkdtemp(prefix="sanitizerd-suite-"))


def _isolate_from_the_host() -> None:
    for name in CALLERS_JOB:
        os.environ.pop(name, None)
    os.environ["SANITIZERD_HOST_SOCKET"] = str(_SUITE_HOME / "host" / "sanitizerd.sock")
    os.environ["SANITIZERD_CONFIG"] = str(_SUITE_HOME / "host" / "sanitizerd.toml")
    runtime = _SUITE_HOME / "runtime"
    runtime.mkdir(mode=0o700, exist_ok=True)
    os.environ["XDG_RUNTIME_DIR"] = str(runtime)


def pytest_unconfigure(config: pytest.Config) -> None:
    shutil.rmtree(_SUITE_HOME, ignore_errors=True)


def pytest_configure(config: pytest.Config) -> None:
    _isolate_from_the_host()
    config.addinivalue_line(
        "markers",
        "first_pass_only(why): a file that starts daemons but checks nothing the worker shape changes (what happens "
        "inside one session is the same code in a worker); CI's second pass leaves it out",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """With ``SANITIZERD_TEST_WORKERS`` > 1 (CI's second pass), only the test files that start a daemon run, less
    those marked ``first_pass_only``: the rest never meet a worker, and ran in the first pass."""
    if TEST_WORKERS <= 1:
        return
    sources: dict[Path, bool] = {}

    def starts_a_daemon(item: pytest.Item) -> bool:
        path = Path(str(item.path))
        if path not in sources:
            text = path.read_text()
            sources[path] = "start_daemon" in text or "RunningDaemon" in text
        return sources[path] and item.get_closest_marker("first_pass_only") is None

    kept = [item for item in items if starts_a_daemon(item)]
    if len(kept) < len(items):
        config.hook.pytest_deselected(items=[item for item in items if not starts_a_daemon(item)])
        items[:] = kept


def start_daemon(base: Path, *extra: str, hostile_limits: bool = False, workers: int = 0) -> RunningDaemon:
    """A real ``sanitizerd serve`` on ``base/s.sock``; ``hostile_limits``: as a host runs it, fd and memory capped;
    ``workers``: its worker processes (0: ``SANITIZERD_TEST_WORKERS``, by default 1)."""
    workers = workers or TEST_WORKERS
    if "--workers" not in extra:  # serve's default is the usable cores: a test says which shape it runs
        extra = (*extra, "--workers", str(workers))
    sock, state, log = base / "s.sock", base / "state", base / "daemon.log"
    env = None
    if hostile_limits:
        env = dict(os.environ, MALLOC_ARENA_MAX="2")  # glibc's per-thread arenas reserve address space, not memory
    with open(log, "ab") as log_file:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "sanitizerd",
                "serve",
                "--socket",
                str(sock),
                "--state-dir",
                str(state),
                *extra,
            ],
            stdout=log_file,
            stderr=log_file,
            stdin=subprocess.DEVNULL,
            env=env,
            preexec_fn=_hostile_limits if hostile_limits else None,
        )
    try:
        wait_for_socket(sock, process)
    except AssertionError:
        process.kill()  # not left running into the next test (an unraisable ResourceWarning there)
        process.wait()
        raise
    return RunningDaemon(sock, state, log, process)


def stop_daemon(daemon: RunningDaemon) -> int:
    if daemon.process.poll() is None:
        daemon.process.send_signal(signal.SIGTERM)
        try:
            daemon.process.wait(15)
        except subprocess.TimeoutExpired:
            daemon.process.kill()
            daemon.process.wait()
    return daemon.process.returncode


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A directory with a short path: Unix socket paths must fit in 108 bytes."""
    path = Path(tempfile.mkdtemp(prefix="sd-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def daemon(short_dir: Path) -> Iterator[RunningDaemon]:
    running = start_daemon(short_dir, "--handshake-timeout", "1")
    yield running
    code = stop_daemon(running)
    assert code == 0, f"daemon exited with {code}:\n{running.log_text()}"


@pytest.fixture
def hostile_daemon(short_dir: Path) -> Iterator[RunningDaemon]:
    """A daemon under a host's default limits (see ``_hostile_limits``); it must still exit cleanly after the test."""
    running = start_daemon(short_dir, "--handshake-timeout", "1", hostile_limits=True)
    yield running
    code = stop_daemon(running)
    assert code == 0, f"daemon exited with {code}:\n{running.log_text()}"


def rss_bytes(pid: int) -> int:
    """A process's resident set now (VmRSS), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def peak_rss_bytes(pid: int) -> int:
    """A process's largest resident set so far (VmHWM), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def assert_serves_fresh_session(daemon: RunningDaemon, within: float = 10.0) -> None:
    """After an attack: the daemon is alive and a new session gets a kernel checked, a verdict and a close."""
    from client_shim import Client, EventKind, Space, accesses

    assert daemon.process.poll() is None, f"daemon ended with {daemon.process.returncode}:\n{daemon.log_text()}"
    started = time.monotonic()
    with Client(daemon.socket, job="fresh-after-attack", timeout=within, resume_buffer=0) as client:
        client.malloc(0x1000, 256)
        kernel = client.kernel_begin("after_attack", 1)
        client.events(kernel, accesses(EventKind.READ, Space.GM, 0x1000 + 512, 32, block_num=1))
        client.kernel_end(kernel)
        verdict = client.wait_kernel(kernel, timeout=within)
        client.free(0x1000)
    assert (verdict.events, verdict.errors) == (1, 1), verdict  # the illegal read is found: it was really checked
    assert time.monotonic() - started < within, "the daemon took too long to serve a fresh session"
    assert daemon.process.poll() is None


def sanitizerd(*args: str, timeout: float = 120, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sanitizerd", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env=env,
    )


def program_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("SANITIZERD_SOCKET", None)
    env.pop("SANITIZERD_JOB", None)
    return env


def run_example(daemon: RunningDaemon, program: list[str], *options: str) -> tuple[list[dict], str]:
    """``sanitizerd run`` of ``program`` (run by this Python) with ``options``: the job's findings, as JSON, and the
    run's stdout (the reports)."""
    result = sanitizerd("run", "--socket", str(daemon.socket), *options, "--", sys.executable, *program)
    assert result.returncode == 0, result.stderr + result.stdout
    job = re.search(r"SUMMARY: job (\S+):", result.stdout).group(1)  # type: ignore[union-attr]
    query = sanitizerd("findings", "--socket", str(daemon.socket), "--job", job, "--format", "json")
    return json.loads(query.stdout), result.stdout
