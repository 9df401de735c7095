"""The systemd units and the daemon under systemd's protocols: socket activation (a socket passed in
LISTEN_FDS) and sd_notify (READY=1, STATUS=, watchdog pings from the event loop, STOPPING=1)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from client_shim.client import Client
from sanitizerd.systemd import Notifier, listen_sockets
from tests.conftest import ROOT

DEPLOY = ROOT / "deploy"
needs = pytest.mark.skipif  # the tools come with systemd; a machine without it cannot run these checks


@needs(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
def test_units_verify_clean() -> None:
    units = sorted(str(p) for p in (DEPLOY / "systemd").iterdir())
    result = subprocess.run(["systemd-analyze", "verify", *units], capture_output=True, text=True)
    assert (result.returncode, result.stderr.strip()) == (0, "")


@needs(shutil.which("systemd-sysusers") is None, reason="systemd-sysusers is not installed")
def test_sysusers_creates_the_service_user_and_group(tmp_path: Path) -> None:
    """Against an empty root, not the host's: where a sanitizerd user already exists, sysusers creates nothing."""
    conf = str((DEPLOY / "sysusers.d" / "sanitizerd.conf").resolve())
    result = subprocess.run(
        ["systemd-sysusers", f"--root={tmp_path}", "--dry-run", conf], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout + result.stderr
    assert "group 'sanitizerd'" in out and "user 'sanitizerd'" in out


class TestProtocolHelpers:
    def test_not_activated_without_our_pid(self) -> None:
        env = {"LISTEN_PID": "1", "LISTEN_FDS": "1"}
        assert listen_sockets(env) == []

    def test_notify_without_a_manager_is_silent(self) -> None:
        notifier = Notifier({})
        assert not notifier.enabled and notifier.watchdog_interval is None
        notifier.ready("serving")  # no socket: nothing happens

    def test_watchdog_interval_is_half_the_timeout_and_only_for_us(self) -> None:
        env = {"NOTIFY_SOCKET": "@x", "WATCHDOG_USEC": "30000000", "WATCHDOG_PID": str(os.getpid())}
        assert Notifier(env).watchdog_interval == 15.0
        other = {"NOTIFY_SOCKET": "@x", "WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "1"}
        assert Notifier(other).watchdog_interval is None


def receive_all(sock: socket.socket, until: float) -> list[str]:
    messages = []
    while time.monotonic() < until:
        sock.settimeout(max(0.01, until - time.monotonic()))
        try:
            messages.append(sock.recv(4096).decode())
        except TimeoutError:
            break
    return messages


@needs(shutil.which("systemd-socket-activate") is None, reason="systemd-socket-activate is not installed")
def test_socket_activation_ready_watchdog_and_stopping(short_dir: Path) -> None:
    """Under systemd-socket-activate the daemon serves on the socket it is given, says READY=1 with a STATUS,
    pings the watchdog at half its timeout, and says STOPPING=1 on SIGTERM."""
    notify_path = short_dir / "notify.sock"
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify.bind(str(notify_path))
    activated = short_dir / "act.sock"
    env = dict(os.environ, NOTIFY_SOCKET=str(notify_path), WATCHDOG_USEC="1000000")
    manager = subprocess.Popen(
        # -E: the daemon gets only the variables named, so the suite's own places for the host's (tests/conftest.py)
        # are named too: else it reads the host's /etc/sanitizerd and binds the host daemon's metrics port.
        ["systemd-socket-activate", "-l", str(activated), "-E", "NOTIFY_SOCKET", "-E", "WATCHDOG_USEC",
         "-E", "SANITIZERD_CONFIG", "-E", "SANITIZERD_HOST_SOCKET", sys.executable, "-m", "sanitizerd", "serve",
         "--state-dir", str(short_dir / "state"), "--log-level", "warning", "--workers", "1"],
        env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 10
        while not activated.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        client = Client(activated, job="activated")  # the first connection starts the daemon
        assert client.session == 1
        client.close()
        messages = receive_all(notify, time.monotonic() + 3)
        ready = [m for m in messages if "READY=1" in m]
        assert ready and f"STATUS=serving on {activated}" in ready[0]
        assert sum("WATCHDOG=1" in m for m in messages) >= 3  # every 0.5 s
        manager.send_signal(signal.SIGTERM)  # systemd-socket-activate execs the daemon: this is its pid
        manager.wait(timeout=15)
        assert any("STOPPING=1" in m for m in receive_all(notify, time.monotonic() + 1))
        assert activated.exists()  # the socket is the manager's: the daemon leaves it be
    finally:
        if manager.poll() is None:
            manager.kill()
            manager.wait()
        notify.close()
