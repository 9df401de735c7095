"""Fixtures that start real daemons and run real programs; nothing of ours is mocked here."""

from __future__ import annotations

import os
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


def wait_for_socket(path: Path, process: subprocess.Popen[bytes], timeout: float = 20.0) -> None:
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


def start_daemon(base: Path, *extra: str) -> RunningDaemon:
    sock, state, log = base / "s.sock", base / "state", base / "daemon.log"
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
        )
    wait_for_socket(sock, process)
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
