"""The daemon as a host service: its socket, its state across restarts, its metrics, its shutdown."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from client_shim import Client, ClientError, EventKind, Space, accesses
from sanitizerd_protocol import messages as m
from tests.conftest import DEMO, RunningDaemon, sanitizerd, start_daemon, stop_daemon


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class TestSocket:
    def test_socket_mode_is_0660(self, daemon: RunningDaemon) -> None:
        """The socket is group-accessible and nothing more."""
        mode = daemon.socket.stat().st_mode
        assert stat.S_ISSOCK(mode) and stat.S_IMODE(mode) == 0o660

    def test_live_daemon_is_not_displaced(self, daemon: RunningDaemon) -> None:
        """A second daemon on the same socket refuses to start and the first keeps serving."""
        paths = ("--socket", str(daemon.socket), "--state-dir", str(daemon.state_dir / "2"))
        second = sanitizerd("serve", *paths, "--workers", "1", timeout=30)
        assert second.returncode == 1
        assert "already serving" in second.stderr
        with Client(daemon.socket, job="still-first") as client:
            assert client.session > 0

    def test_stale_socket_is_replaced(self, short_dir: Path) -> None:
        """A socket file nobody listens on (left by a killed daemon) is replaced."""
        stale = short_dir / "s.sock"
        leftover = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        leftover.bind(str(stale))
        leftover.close()
        assert stale.exists()
        daemon = start_daemon(short_dir)
        try:
            with Client(daemon.socket, job="after-stale") as client:
                assert client.session > 0
        finally:
            assert stop_daemon(daemon) == 0
        assert not stale.exists()

    def test_peer_credentials_are_recorded(self, daemon: RunningDaemon) -> None:
        """Each session records the connecting process's uid from SO_PEERCRED."""
        with Client(daemon.socket, job="creds"):
            sessions = json.loads(sanitizerd("sessions", "--socket", str(daemon.socket), "--format", "json").stdout)
        [live] = [s for s in sessions if s["job"] == "creds"]
        assert (live["state"], live["uid"], live["gid"], live["pid"]) == ("live", os.getuid(), os.getgid(), os.getpid())


class TestState:
    def test_findings_survive_a_restart(self, short_dir: Path) -> None:
        """Findings are in SQLite under the state dir and are served again by the next daemon."""
        daemon = start_daemon(short_dir)
        run = sanitizerd("run", "--socket", str(daemon.socket), "--leak-check", "yes", "--", sys.executable, str(DEMO))
        assert run.returncode == 0, run.stderr
        assert stop_daemon(daemon) == 0
        daemon = start_daemon(short_dir)
        try:
            findings = json.loads(sanitizerd("findings", "--socket", str(daemon.socket), "--format", "json").stdout)
            assert sorted(f["kind"] for f in findings) == [
                "illegal_free",
                "illegal_read",
                "memory_leak",
                "misaligned_access",
            ]
            with Client(daemon.socket, job="next") as client:
                assert client.session > max(f["session"] for f in findings)  # ids are never reused
        finally:
            assert stop_daemon(daemon) == 0


class TestMetrics:
    def test_metrics_endpoint(self, short_dir: Path) -> None:
        """/metrics counts sessions, events and findings by kind, and protocol rejections by reason."""
        port = free_port()
        daemon = start_daemon(short_dir, "--metrics-addr", f"127.0.0.1:{port}")
        try:
            run = sanitizerd("run", "--socket", str(daemon.socket), "--", sys.executable, str(DEMO))
            assert run.returncode == 0, run.stderr
            with socket.socket(socket.AF_UNIX) as bad:
                bad.connect(str(daemon.socket))
                bad.sendall(b"\xff\xff\xff\xff")
                bad.recv(1024)
            text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
            health = urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10).read()
            ready = urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=10).read()
        finally:
            assert stop_daemon(daemon) == 0
        assert (health, ready) == (b"ok\n", b"ready\n")
        assert "sanitizerd_sessions_started_total 1.0" in text
        assert 'sanitizerd_findings_total{finding_severity="error",kind="illegal_read"} 1.0' in text
        assert 'sanitizerd_rejected_connections_total{reason="frame_too_large"} 1.0' in text
        # What the demo's client sent (962 device events in its batches), received and checked.
        assert "sanitizerd_events_received_total 962.0" in text
        assert 'sanitizerd_events_checked_total{detector="memcheck"} 962.0' in text
        assert 'sanitizerd_frames_received_total{type="events"}' in text
        assert 'sanitizerd_detector_seconds_count{detector="memcheck"}' in text
        assert "sanitizerd_store_writes_total 3.0" in text and "sanitizerd_store_errors_total 0.0" in text
        assert "sanitizerd_detector_queue_batches 0.0" in text
        assert 'sanitizerd_build_info{version="' in text and "process_resident_memory_bytes" in text


class TestShutdown:
    def test_sigterm_with_live_sessions_exits_cleanly(self, short_dir: Path) -> None:
        """SIGTERM ends the daemon with status 0 while a session stays connected past the drain deadline, removes
        the socket, and records the session as ended by the shutdown."""
        daemon = start_daemon(short_dir, "--drain-timeout", "1")
        client = Client(daemon.socket, job="lingering", resume_buffer=0)  # about shutdown, not resuming
        try:
            assert stop_daemon(daemon) == 0
            assert not daemon.socket.exists()
        finally:
            with contextlib.suppress(Exception):
                client.close(timeout=5)
        daemon = start_daemon(short_dir)
        try:
            sessions = json.loads(sanitizerd("sessions", "--socket", str(daemon.socket), "--format", "json").stdout)
        finally:
            assert stop_daemon(daemon) == 0
        [lingering] = [s for s in sessions if s["job"] == "lingering"]
        assert (lingering["state"], lingering["end_reason"]) == ("ended", "daemon shutting down")

    def test_sigterm_drains_a_kernel_in_flight(self, short_dir: Path) -> None:
        """After SIGTERM the daemon accepts no new connection, but a session in the middle of a kernel finishes it:
        its verdict comes back, its findings are stored, and the daemon exits 0 once it closed."""
        daemon = start_daemon(short_dir, "--drain-timeout", "30")
        client = Client(daemon.socket, job="in-flight")
        client.malloc(0x10000, 4096)
        kernel = client.kernel_begin("busy", 8)
        client.events(kernel, accesses(EventKind.READ, Space.GM, 0x10000, 8192, block_id=2))  # out of bounds
        client.flush()
        daemon.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 10
        while "draining" not in daemon.log_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        with pytest.raises(ClientError):
            Client(daemon.socket, job="late", timeout=2)
        client.kernel_end(kernel)
        verdict = client.wait_kernel(kernel, timeout=30)
        assert verdict.errors == 1
        client.close()
        assert daemon.process.wait(timeout=20) == 0
        daemon = start_daemon(short_dir)
        try:
            found = json.loads(
                sanitizerd("findings", "--socket", str(daemon.socket), "--job", "in-flight", "--format", "json").stdout
            )
        finally:
            assert stop_daemon(daemon) == 0
        assert [f["kind"] for f in found] == ["illegal_read"]


class TestBackpressure:
    def test_nothing_is_dropped_when_detectors_lag(self, short_dir: Path) -> None:
        """With one-deep detector queues the sender is slowed, and every event sent is checked."""
        daemon = start_daemon(short_dir, "--queue-depth", "1", "--detector-threads", "1")
        try:
            with Client(daemon.socket, job="flood", queue_frames=1, batch_events=4096) as client:
                client.malloc(0x10000, 1 << 20)
                kernel = client.kernel_begin("flood", 8)
                batch = accesses(EventKind.READ, Space.GM, 0x10000 + np.arange(4096), 1, block_id=3)
                for _ in range(200):
                    client.events(kernel, batch)
                client.kernel_end(kernel)
                verdict = client.wait_kernel(kernel, timeout=120)
            assert verdict.events == 200 * 4096 and verdict.errors == 0
        finally:
            assert stop_daemon(daemon) == 0


class TestClientSafety:
    def test_a_batch_sent_without_a_copy_is_on_the_wire_before_events_returns(self, daemon: RunningDaemon) -> None:
        """Once no resume log is kept, full batches go to the socket from the caller's own array: ``events``
        returns only after the kernel took them, so the caller may overwrite the array at once (here with
        addresses nothing allocated, which memcheck would report)."""
        with Client(daemon.socket, job="zero-copy", resume_buffer=0, batch_events=4096) as client:
            assert not client.resumable
            client.malloc(0x10000, 1 << 20)
            kernel = client.kernel_begin("direct", 8)
            valid = 0x10000 + 32 * np.arange(4096, dtype=np.uint64)
            batch = accesses(EventKind.READ, Space.GM, valid, 32, block_id=3)
            for _ in range(100):
                client.events(kernel, batch)
                batch["address"] = 0x7000_0000  # unallocated: had these been sent, they would be errors
                batch["address"] = valid
            client.kernel_end(kernel)
            verdict = client.wait_kernel(kernel, timeout=60)
        assert (verdict.events, verdict.errors, verdict.warnings) == (100 * 4096, 0, 0)

    def test_threads_share_one_client(self, daemon: RunningDaemon) -> None:
        """Several threads reporting through one client keep every message and its order per thread."""
        with Client(daemon.socket, job="threads") as client:
            client.malloc(0x1000, 1 << 16)
            kernel = client.kernel_begin("threaded", 4)

            def work(block: int) -> None:
                for i in range(50):
                    client.events(kernel, accesses(EventKind.WRITE, Space.GM, 0x1000 + block * 4096 + i * 32, 32,
                                                   block_id=block))  # fmt: skip
                    client.malloc(0x100000 + block * 0x1000 + i, 1)

            threads = [threading.Thread(target=work, args=(b,)) for b in range(4)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            client.kernel_end(kernel)
            verdict = client.wait_kernel(kernel, timeout=30)
        assert (verdict.events, verdict.errors) == (200, 0)

    def test_forked_child_gets_its_own_session(self, daemon: RunningDaemon, short_dir: Path) -> None:
        """A child process that inherits a client opens its own session instead of corrupting the parent's."""
        script = short_dir / "forks.py"
        script.write_text(
            f"""
import os
from client_shim import Client
c = Client({str(daemon.socket)!r}, job="fork")
parent = c.session
pid = os.fork()
if pid == 0:
    c.malloc(0x5000, 16)
    c.free(0x6000)  # an illegal free, reported in the child's session
    c.close()
    os._exit(0 if c.session != parent else 1)
_, status = os.waitpid(pid, 0)
c.close()
raise SystemExit(os.waitstatus_to_exitcode(status))
"""
        )
        assert subprocess.run([sys.executable, str(script)], timeout=60).returncode == 0
        findings = json.loads(
            sanitizerd("findings", "--socket", str(daemon.socket), "--job", "fork", "--format", "json").stdout
        )
        assert [f["kind"] for f in findings] == ["illegal_free"]
        sessions = json.loads(sanitizerd("sessions", "--socket", str(daemon.socket), "--format", "json").stdout)
        assert len({s["session"] for s in sessions if s["job"] == "fork"}) == 2


def test_control_hello_gets_welcome(daemon: RunningDaemon) -> None:
    """A control connection is welcomed with session 0 and may query at once."""
    from sanitizerd.control_client import ControlClient

    with ControlClient(daemon.socket) as control:
        reply = control.request(m.QueryFindings(job="nobody"))
    assert isinstance(reply, m.Findings) and reply.findings == []


def test_a_python_client_sends_the_mstx_root(daemon: RunningDaemon) -> None:
    """client_shim's host helpers send source and root: the region of an unregistered heap is an illegal free,
    judged by the MSTX table, in the stored finding's JSON."""
    base = 0x12C0_C000_0000
    with Client(daemon.socket, job="mstx-root") as client:
        client.malloc(base, 4096)
        client.malloc(base + 1024, 2048, source="mstx_heap")
        client.malloc(base + 1024, 256, source="mstx_region", root=base + 1024)
        client.free(base + 1024, source="mstx_heap")
        serial = client.free(base + 1024, source="mstx_region")
        client.store(base, 64, source="manual")  # no annotation at all: judged by the one table, legal
        client.free(base)
    deadline = time.monotonic() + 30
    while True:
        findings = json.loads(sanitizerd("findings", "--socket", str(daemon.socket), "--format", "json").stdout)
        mine = [f for f in findings if f["job"] == "mstx-root"]
        if mine or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert [(f["kind"], f["address"], f["serial"], f["table"]) for f in mine] == [
        ("illegal_free", base + 1024, serial, "mstx")
    ]
