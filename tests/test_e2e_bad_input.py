"""Bad input against a real daemon: each connection is refused with a reason, and the daemon serves on."""

from __future__ import annotations

import os
import signal
import socket
import struct
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import msgspec
import pytest

from client_shim import Client, EventKind, Space, accesses
from sanitizerd_protocol import messages as m
from tests.conftest import RunningDaemon, start_daemon, stop_daemon


def raw_connect(daemon: RunningDaemon) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(10)
    sock.connect(str(daemon.socket))
    return sock


def frame(body: bytes) -> bytes:
    return struct.pack("<I", len(body)) + body


def hello(**fields: object) -> bytes:
    return frame(msgspec.msgpack.encode({"type": "hello", "version": 1, **fields}))


def read_reply(sock: socket.socket) -> dict[str, object] | None:
    """The daemon's one reply frame before it closes, or None if it closed without one."""
    data = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    replies = []
    while len(data) >= 4:
        (length,) = struct.unpack_from("<I", data)
        replies.append(msgspec.msgpack.decode(data[4 : 4 + length]))
        data = data[4 + length :]
    return replies[-1] if replies else None


def assert_serves_a_good_client(daemon: RunningDaemon) -> None:
    with Client(daemon.socket, job="good") as client:
        client.malloc(0x1000, 256)
        kernel = client.kernel_begin("after_bad_input", 1)
        client.events(kernel, accesses(EventKind.WRITE, Space.GM, 0x1000, 32, block_num=8))
        client.kernel_end(kernel)
        verdict = client.wait_kernel(kernel, timeout=30)
    assert (verdict.events, verdict.errors) == (1, 0)
    assert daemon.process.poll() is None


class TestRejectedConnections:
    @pytest.mark.parametrize(
        ("payload", "reason"),
        [
            (b"GET / HTTP/1.1\r\n\r\n" + os.urandom(64), "frame_too_large"),
            (frame(b"\xc1\xc1\xc1 not msgpack"), "bad_packet"),
            (frame(msgspec.msgpack.encode({"type": "teleport", "version": 1})), "unknown_type"),
            (frame(msgspec.msgpack.encode({"type": "kernel_end", "kernel": 1})), "unexpected_message"),
            (struct.pack("<I", 0xFFFFFFF0), "frame_too_large"),
            (hello(version=2), "version"),
        ],
        ids=["garbage", "bad-msgpack", "unknown-type", "no-hello", "oversized-length", "wrong-version"],
    )
    def test_bad_first_frame(self, daemon: RunningDaemon, payload: bytes, reason: str) -> None:
        """A bad first frame gets an error reply naming the reason, is logged, and the daemon serves on."""
        with raw_connect(daemon) as sock:
            sock.sendall(payload)
            reply = read_reply(sock)
        assert reply is not None and reply["type"] == "error" and reply["reason"] == reason
        daemon.wait_for_log(f'"reason": "{reason}"')
        assert_serves_a_good_client(daemon)

    def test_version_error_names_both_versions(self, daemon: RunningDaemon) -> None:
        """The version refusal says which version the client spoke and which the daemon speaks."""
        with raw_connect(daemon) as sock:
            sock.sendall(hello(version=7))
            reply = read_reply(sock)
        assert reply is not None and "version 7" in str(reply["message"]) and "version 1" in str(reply["message"])

    def test_unknown_type_after_handshake_ends_only_that_session(self, daemon: RunningDaemon) -> None:
        """An unknown message mid-session ends that session with a reason; a concurrent session is unaffected."""
        with Client(daemon.socket, job="bystander") as bystander:
            bystander.malloc(0x2000, 64)
            with raw_connect(daemon) as sock:
                sock.sendall(hello(job="bad"))
                sock.sendall(frame(msgspec.msgpack.encode({"type": "teleport"})))
                reply = read_reply(sock)
            assert reply is not None and reply["reason"] == "unknown_type"
            kernel = bystander.kernel_begin("still_served", 1)
            bystander.events(kernel, accesses(EventKind.READ, Space.GM, 0x2000, 64))
            bystander.kernel_end(kernel)
            assert bystander.wait_kernel(kernel, timeout=30).events == 1

    def test_truncated_frame_then_close(self, daemon: RunningDaemon) -> None:
        """A peer that closes halfway through a frame is logged as truncated."""
        with raw_connect(daemon) as sock:
            sock.sendall(hello(job="truncated"))
            body = msgspec.msgpack.encode(m.Events(kernel=1, records=memoryview(bytes(56 * 10))))
            sock.sendall(frame(body)[: len(body) // 2])
            sock.shutdown(socket.SHUT_WR)
            read_reply(sock)
        daemon.wait_for_log('"reason": "truncated"')
        assert_serves_a_good_client(daemon)

    def test_bad_batch_size(self, daemon: RunningDaemon) -> None:
        """An events batch that is not a whole number of records is refused as bad_batch."""
        with raw_connect(daemon) as sock:
            sock.sendall(hello(job="bad-batch"))
            sock.sendall(
                frame(msgspec.msgpack.encode({"type": "kernel_begin", "kernel": 1, "name": "k", "block_dim": 1}))
            )
            sock.sendall(frame(msgspec.msgpack.encode({"type": "events", "kernel": 1, "records": b"x" * 57})))
            reply = read_reply(sock)
        assert reply is not None and reply["reason"] == "bad_batch"
        assert_serves_a_good_client(daemon)

    def test_silent_client_times_out(self, daemon: RunningDaemon) -> None:
        """A client that connects and never speaks is dropped after the handshake timeout (1 s here)."""
        started = time.monotonic()
        with raw_connect(daemon) as sock:
            reply = read_reply(sock)
        assert reply is not None and reply["reason"] == "handshake_timeout"
        assert 0.5 < time.monotonic() - started < 5
        assert_serves_a_good_client(daemon)

    def test_client_killed_mid_frame(self, daemon: RunningDaemon, short_dir: Path) -> None:
        """A client process killed while writing a frame ends its session; the daemon serves the next client."""
        script = short_dir / "dies.py"
        script.write_text(
            textwrap.dedent(
                f"""
                import socket, struct, sys, time, msgspec
                s = socket.socket(socket.AF_UNIX); s.connect({str(daemon.socket)!r})
                body = msgspec.msgpack.encode({{"type": "hello", "version": 1, "job": "killed"}})
                s.sendall(struct.pack("<I", len(body)) + body)
                s.recv(65536)
                s.sendall(struct.pack("<I", 1 << 20) + b"x" * 1000)
                print("ready", flush=True)
                time.sleep(60)
                """
            )
        )
        process = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
        assert process.stdout is not None and process.stdout.readline().strip() == "ready"
        process.send_signal(signal.SIGKILL)
        process.wait()
        process.stdout.close()
        daemon.wait_for_log('"reason": "truncated"')
        assert_serves_a_good_client(daemon)


class TestLimits:
    def test_frame_limit_is_configurable(self, short_dir: Path) -> None:
        """--max-frame-size refuses a frame larger than the limit before reading its body."""
        daemon = start_daemon(short_dir, "--max-frame-size", "1024")
        try:
            with raw_connect(daemon) as sock:
                sock.sendall(hello(job="big"))
                sock.sendall(struct.pack("<I", 2048))
                reply = read_reply(sock)
            assert reply is not None and reply["reason"] == "frame_too_large"
            assert "2048" in str(reply["message"]) and "1024" in str(reply["message"])
        finally:
            assert stop_daemon(daemon) == 0

    def test_session_limit(self, short_dir: Path) -> None:
        """Past --max-sessions a producer is refused with session_limit; once one leaves, the next is served."""
        daemon = start_daemon(short_dir, "--max-sessions", "1")
        try:
            first = Client(daemon.socket, job="first")
            with pytest.raises(Exception, match="session_limit"):
                Client(daemon.socket, job="second")
            first.close()
            assert_serves_a_good_client(daemon)
        finally:
            assert stop_daemon(daemon) == 0
