"""Hostile and heavy clients against a real daemon (issue 10): each attack runs against a daemon started as a host
runs it (the default soft fd limit, an address-space cap: ``hostile_daemon``), and after each the daemon still serves
a fresh session (kernel, verdict, close) within seconds.

Sections: one per surface an attacker can reach (frames and connections, detector patterns, control requests and the
store, jobs and other users, configuration and the metrics endpoint)."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from client_shim.client import Client
from client_shim.transport import ClientError
from tests.conftest import RunningDaemon, assert_serves_fresh_session, rss_bytes, start_daemon, stop_daemon

# --- configuration and metrics ---


def config_daemon(base: Path, text: str) -> tuple[RunningDaemon, Path, int]:
    """A daemon under host limits, reading ``text`` as its config file, serving metrics on a free port."""
    path = base / "sanitizerd.toml"
    path.write_text(text)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    daemon = start_daemon(
        base, "--config", str(path), "--handshake-timeout", "1", "--metrics-addr", f"127.0.0.1:{port}",
        hostile_limits=True,
    )  # fmt: skip
    return daemon, path, port


def config_get(port: int, path: str, *, method: str = "GET", timeout: float = 3.0) -> tuple[int, bytes]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as reply:
            return int(reply.status), reply.read()
    except urllib.error.HTTPError as refused:
        return refused.code, refused.read()


def config_wait_ready(port: int, within: float = 5.0) -> None:
    deadline = time.monotonic() + within
    while config_get(port, "/readyz") != (200, b"ready\n"):
        assert time.monotonic() < deadline, config_get(port, "/readyz")
        time.sleep(0.05)


def config_daemon_fds(daemon: RunningDaemon) -> int:
    return len(os.listdir(f"/proc/{daemon.process.pid}/fd"))


def config_daemon_threads(daemon: RunningDaemon) -> int:
    return len(os.listdir(f"/proc/{daemon.process.pid}/task"))


class TestConfigReloadAttacks:
    @pytest.mark.parametrize(
        ("text", "named"),
        [
            ("[limits]\nadmin_groups = ['no-such-group-here']\n", "limits.admin_groups: there is no group named"),
            ("[limits]\nmax_sessions = 3\nqueue_depth = 0.5\n", "limits.queue_depth must be an integer from 1"),
            ("[limits]\nmax_sessions = 3\ndetector_threads = 1.5\n", "limits.detector_threads must be an integer"),
            ("[limits]\nmax_sessions = '3'\n", "limits.max_sessions must be an integer"),
            ("[limits]\nmax_sessions = 3\nhandshake_timeout = true\n", "limits.handshake_timeout must be seconds"),
            ("[limits]\nmax_sessions = 3\njob_grace = -inf\n", "limits.job_grace must be seconds"),
            ("log_level = 7\n[limits]\nmax_sessions = 3\n", "log_level must be one of"),
            ("[limits]\nmax_sessions = 3\nmax_sessions_per_uid = [1]\n", "limits.max_sessions_per_uid must be"),
            ("[limits]\nmax_sessions = 3\nnew_limit = 1\n", "unknown setting limits.new_limit"),
            ("[limits]\nmax_sessions = 3\n\x00", "reload failed"),
        ],
    )
    def test_sighup_with_a_bad_file_keeps_the_old_limits(self, short_dir: Path, text: str, named: str) -> None:
        """The daemon serves on with its old limits (max_sessions 1), says which setting it refused, counts the
        failure; a good file after it is still applied."""
        daemon, path, port = config_daemon(short_dir, "[limits]\nmax_sessions = 1\n")
        try:
            path.write_text(text)
            daemon.process.send_signal(signal.SIGHUP)
            log = daemon.wait_for_log(named)
            assert "reload failed; settings unchanged" in log and "Traceback" not in log
            first = Client(daemon.socket, job="old-limits", timeout=10, resume_buffer=0)
            try:
                assert config_get(port, "/readyz") == (503, b"not ready: at the limit of 1 sessions\n")
                with pytest.raises(ClientError, match="session_limit"):
                    Client(daemon.socket, job="over-the-old-limit", timeout=10, resume_buffer=0)
            finally:
                first.close(timeout=10)
            _, text_metrics = config_get(port, "/metrics")
            assert b'sanitizerd_config_reloads_total{result="failed"} 1.0' in text_metrics
            config_wait_ready(port)
            assert_serves_fresh_session(daemon)

            path.write_text("[limits]\nmax_sessions = 3\n")
            daemon.process.send_signal(signal.SIGHUP)
            assert "max_sessions=3" in daemon.wait_for_log('"reloaded"')
            assert_serves_fresh_session(daemon)
        finally:
            assert stop_daemon(daemon) == 0

    def test_sighup_storm(self, short_dir: Path) -> None:
        """Many SIGHUPs in a row, the file flipping between good and bad: the daemon never ends."""
        daemon, path, port = config_daemon(short_dir, "[limits]\nqueue_depth = 2\n")
        try:
            for i in range(40):
                path.write_text("[limits]\nqueue_depth = 0.5\n" if i % 2 else "[limits]\nqueue_depth = 3\n")
                daemon.process.send_signal(signal.SIGHUP)
                time.sleep(0.01)
            config_wait_ready(port)
            assert_serves_fresh_session(daemon)
        finally:
            assert stop_daemon(daemon) == 0


class TestMetricsEndpointAttacks:
    @pytest.mark.parametrize("idle", [1, 50])
    def test_idle_connections_do_not_block_healthz(self, short_dir: Path, idle: int) -> None:
        daemon, _, port = config_daemon(short_dir, "")
        connections = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(idle)]
        try:
            time.sleep(0.2)  # all of them accepted and waiting
            for path, answer in (("/healthz", b"ok\n"), ("/readyz", b"ready\n")):
                started = time.monotonic()
                assert config_get(port, path) == (200, answer)
                assert time.monotonic() - started < 2
            status, body = config_get(port, "/metrics")
            assert status == 200 and b"sanitizerd_sessions_live" in body
        finally:
            for connection in connections:
                connection.close()
        assert_serves_fresh_session(daemon)
        assert stop_daemon(daemon) == 0

    def test_a_flood_of_idle_connections_costs_bounded_fds_and_threads(self, short_dir: Path) -> None:
        """600 idle connections: the daemon holds at most twice its 16 connections (the oldest are closed for
        newer ones, counted), so fds and threads stay bounded and probes are answered."""
        daemon, _, port = config_daemon(short_dir, "")
        fds, threads = config_daemon_fds(daemon), config_daemon_threads(daemon)
        connections = []
        try:
            for _ in range(600):
                connections.append(socket.create_connection(("127.0.0.1", port), timeout=5))
            time.sleep(0.5)
            assert config_daemon_fds(daemon) <= fds + 2 * 16 + 4
            assert config_daemon_threads(daemon) <= threads + 2 * 16 + 2
            assert config_get(port, "/healthz") == (200, b"ok\n")
            _, body = config_get(port, "/metrics")
            evicted = re.search(rb'sanitizerd_metrics_connections_dropped_total\{reason="evicted"\} (\d+)', body)
            assert evicted is not None and int(evicted[1]) >= 600 - 16
        finally:
            for connection in connections:
                connection.close()
        assert_serves_fresh_session(daemon)
        assert stop_daemon(daemon) == 0

    def test_a_request_trickled_byte_by_byte_is_cut_at_its_deadline(self, short_dir: Path) -> None:
        daemon, _, port = config_daemon(short_dir, "")
        with socket.create_connection(("127.0.0.1", port), timeout=5) as slow:
            slow.sendall(b"GET /metrics HTTP/1.0\r\n")
            started, closed = time.monotonic(), False
            while time.monotonic() - started < 15 and not closed:
                try:
                    slow.sendall(b"X-Slow: 1\r\n")
                    slow.settimeout(1)
                    closed = slow.recv(1) == b""
                except TimeoutError:
                    continue
                except OSError:
                    closed = True
            assert closed and time.monotonic() - started < 13
        _, body = config_get(port, "/metrics")
        assert b'sanitizerd_metrics_connections_dropped_total{reason="deadline"} 1.0' in body
        assert_serves_fresh_session(daemon)
        assert stop_daemon(daemon) == 0

    def test_huge_request_headers_cost_bounded_memory(self, short_dir: Path) -> None:
        """16 connections each sending 99 header lines of 60 KiB and then waiting (the standard library would hold
        all 6 MiB of each): the daemon reads 16 KiB of a request, so its RSS grows by far less than the 95 MiB."""
        daemon, _, port = config_daemon(short_dir, "")
        before = rss_bytes(daemon.process.pid)
        line = b"X-Big: " + b"a" * (60 << 10) + b"\r\n"
        connections = []
        try:
            for _ in range(16):
                big = socket.create_connection(("127.0.0.1", port), timeout=10)
                connections.append(big)
                with contextlib.suppress(OSError):  # the daemon may answer and close before all is sent
                    big.sendall(b"GET /healthz HTTP/1.0\r\n" + line * 99)
            time.sleep(0.5)
            assert rss_bytes(daemon.process.pid) - before < 32 << 20
            assert config_get(port, "/healthz") == (200, b"ok\n")
        finally:
            for big in connections:
                big.close()
        assert_serves_fresh_session(daemon)
        assert stop_daemon(daemon) == 0

    def test_unknown_paths_and_methods_are_refused(self, short_dir: Path) -> None:
        daemon, _, port = config_daemon(short_dir, "")
        try:
            for path in ("/", "/metricsx", "/healthz/x", "/../etc/passwd", "/" + "a" * 4000):
                status, body = config_get(port, path)
                assert status == 404 and body.startswith(b"not found"), path
            assert config_get(port, "/metrics", method="POST")[0] == 405
            assert config_get(port, "/healthz", method="HEAD") == (200, b"")
            with socket.create_connection(("127.0.0.1", port), timeout=5) as junk:
                junk.sendall(b"\x16\x03\x01\x02\x00" + bytes(range(256)) * 4 + b"\r\n\r\n")  # a TLS hello, say
                reply = junk.makefile("rb").read()  # answered and closed, never a hang (a hang times out here)
                assert b"400" in reply, reply
            assert config_get(port, "/healthz") == (200, b"ok\n")
            assert_serves_fresh_session(daemon)
        finally:
            assert stop_daemon(daemon) == 0

    def test_healthz_answers_under_a_connection_flood_on_the_main_socket(self, short_dir: Path) -> None:
        """500 connections that never say hello hold the main socket: /healthz (its own threads) still answers."""
        daemon, _, port = config_daemon(short_dir, "")
        flood = []
        try:
            for _ in range(500):
                connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                connection.connect(str(daemon.socket))
                flood.append(connection)
            started = time.monotonic()
            assert config_get(port, "/healthz") == (200, b"ok\n")
            assert time.monotonic() - started < 2
            assert config_get(port, "/readyz")[0] in (200, 503)  # answered, whatever the loop is doing
        finally:
            for connection in flood:
                connection.close()
        config_wait_ready(port)
        assert_serves_fresh_session(daemon)
        assert stop_daemon(daemon) == 0
