"""Hostile and heavy clients against a real daemon (issue 10): each attack runs against a daemon started as a host
runs it (the default soft fd limit, an address-space cap: ``hostile_daemon``), and after each the daemon still serves
a fresh session (kernel, verdict, close) within seconds.

Sections: one per surface an attacker can reach (frames and connections, detector patterns, control requests and the
store, jobs and other users, configuration and the metrics endpoint)."""

from __future__ import annotations

import os
import random
import resource
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from pathlib import Path

import msgspec
import numpy as np
import pytest

from client_shim import Client, EventKind, Space, accesses
from tests.conftest import (
    RunningDaemon,
    assert_serves_fresh_session,
    peak_rss_bytes,
    sanitizerd,
    start_daemon,
    stop_daemon,
    wait_for_socket,
)

# --- frames and connections ---


def conn_connect(daemon: RunningDaemon, timeout: float = 10.0) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    sock.connect(str(daemon.socket))
    return sock


def conn_frame(body: bytes) -> bytes:
    return struct.pack("<I", len(body)) + body


def conn_encode(**message: object) -> bytes:
    return conn_frame(msgspec.msgpack.encode(message))


def conn_hello(job: str = "hostile") -> bytes:
    return conn_encode(type="hello", version=1, job=job)


def conn_replies(sock: socket.socket) -> list[dict[str, object]]:
    """Every frame the daemon sends until it closes the connection."""
    data = b""
    while True:
        try:
            chunk = sock.recv(1 << 16)
        except ConnectionResetError:
            break
        if not chunk:
            break
        data += chunk
    replies = []
    while len(data) >= 4:
        (length,) = struct.unpack_from("<I", data)
        replies.append(msgspec.msgpack.decode(data[4 : 4 + length]))
        data = data[4 + length :]
    return replies


def conn_last_error(sock: socket.socket) -> dict[str, object]:
    replies = conn_replies(sock)
    assert replies and replies[-1]["type"] == "error", f"no error frame before the close: {replies}"
    return replies[-1]


def conn_nested(depth: int) -> bytes:
    """A msgpack value ``depth`` arrays deep: 1 byte per level."""
    return b"\x91" * depth + b"\xc0"


def conn_map(**fields: bytes) -> bytes:
    """A msgpack map whose values are given already encoded (so they may be hostile)."""
    return bytes([0x80 | len(fields)]) + b"".join(msgspec.msgpack.encode(k) + v for k, v in fields.items())


class TestHostileFrames:
    def test_nested_hello_is_refused_and_the_socket_stays(self, hostile_daemon: RunningDaemon) -> None:
        """A 1 KiB hello holding 1 000 nested arrays: bad_packet, and the daemon and its socket file stay."""
        body = conn_map(type=msgspec.msgpack.encode("hello"), version=b"\x01", host=conn_nested(1000))
        assert len(body) < 1100
        with conn_connect(hostile_daemon) as sock:
            sock.sendall(conn_frame(body))
            error = conn_last_error(sock)
        assert error["reason"] == "bad_packet"
        assert hostile_daemon.socket.exists()
        hostile_daemon.wait_for_log('"reason": "bad_packet"')
        assert_serves_fresh_session(hostile_daemon)

    @pytest.mark.parametrize(
        "body",
        [
            conn_nested(100_000),  # not even a map
            conn_map(type=msgspec.msgpack.encode("hello"), version=b"\x01", extra=conn_nested(100_000)),
            conn_map(type=conn_nested(5000)),
            conn_map(type=msgspec.msgpack.encode("hello"), version=b"\xcf" + b"\xff" * 8),  # 2**64 - 1
            conn_map(type=msgspec.msgpack.encode("hello"), version=b"\x01", host=b"\xa4\xff\xfe\xfd\xfc"),  # bad UTF-8
            conn_map(type=msgspec.msgpack.encode("hello"), version=b"\x01", job=msgspec.msgpack.encode("j" * 5000)),
            b"\xd4\x01\x00",  # an extension type
            conn_map(type=msgspec.msgpack.encode("t" * 100_000)),  # an unknown type named at length
        ],
        ids=[
            "deep-array",
            "deep-unknown-field",
            "deep-type",
            "huge-version",
            "bad-utf8",
            "long-job",
            "ext",
            "long-type",
        ],
    )
    def test_hostile_hello_bodies(self, hostile_daemon: RunningDaemon, body: bytes) -> None:
        """Every hostile first frame is refused with a named reason, in a short message, never internal_error."""
        with conn_connect(hostile_daemon) as sock:
            sock.sendall(conn_frame(body))
            error = conn_last_error(sock)
        assert error["reason"] in ("bad_packet", "unknown_type", "version"), error
        assert len(str(error["message"])) < 1000
        assert_serves_fresh_session(hostile_daemon)

    @pytest.mark.parametrize(
        "body",
        [
            conn_map(type=msgspec.msgpack.encode("log"), text=conn_nested(100_000)),
            conn_map(type=msgspec.msgpack.encode("locations"), locations=conn_nested(100_000)),
            conn_map(
                type=msgspec.msgpack.encode("kernel_begin"), kernel=b"\x01", name=b"\xa1k", block_dim=conn_nested(9)
            ),
            conn_map(type=msgspec.msgpack.encode("device"), chip=msgspec.msgpack.encode("no such chip " * 1000)),
            conn_map(type=msgspec.msgpack.encode("kernel_end"), kernel=b"\xcf" + b"\xff" * 8),
            conn_map(type=msgspec.msgpack.encode("events"), kernel=b"\x05", records=msgspec.msgpack.encode(b"\0" * 56)),
        ],
        ids=["deep-log", "deep-locations", "deep-int", "unknown-chip", "unknown-kernel", "events-no-kernel"],
    )
    def test_hostile_bodies_after_the_handshake(self, hostile_daemon: RunningDaemon, body: bytes) -> None:
        """After the handshake too: the session ends with an error frame naming the reason, never a bare EOF."""
        with conn_connect(hostile_daemon) as sock:
            sock.sendall(conn_hello("hostile-after-hello") + conn_frame(body))
            error = conn_last_error(sock)
        assert error["reason"] in ("bad_packet", "bad_reference"), error
        assert len(str(error["message"])) < 1000
        assert_serves_fresh_session(hostile_daemon)

    def test_kernel_id_reused_while_checked(self, hostile_daemon: RunningDaemon) -> None:
        """A launch id reused right after its kernel_end, while its detectors still check it: bad_reference, said in an
        error frame (it was an exception inside the session pump and a bare EOF)."""
        config = {"tools": ["memcheck", "racecheck", "initcheck", "synccheck"]}
        begin = conn_encode(type="kernel_begin", kernel=1, name="k", block_dim=1)
        with conn_connect(hostile_daemon) as sock:
            sock.sendall(conn_encode(type="hello", version=1, job="reuse", config=config))
            sock.sendall(begin + conn_encode(type="kernel_end", kernel=1) + begin)
            replies = conn_replies(sock)
        assert replies[-1]["type"] == "error" and replies[-1]["reason"] == "bad_reference", replies
        assert "still being checked" in str(replies[-1]["message"])
        assert_serves_fresh_session(hostile_daemon)


def conn_raise_own_fd_limit(wanted: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < wanted:
        if hard != resource.RLIM_INFINITY and hard < wanted:
            pytest.skip(f"the test itself needs {wanted} fds; the hard limit is {hard}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))


def conn_free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def conn_metric(port: int, name: str) -> float:
    """The sum of every series of ``name`` on the daemon's /metrics."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name))


class TestHostileConnections:
    def test_idle_connections_past_the_default_fd_limit(self, hostile_daemon: RunningDaemon) -> None:
        """1 100 idle connections under the default soft limit of 1 024: the daemon raised its limit at start, each
        connection is admitted or refused by name (connection_limit, per uid), the admitted are cut at the handshake
        timeout, and the daemon serves on."""
        conn_raise_own_fd_limit(2048)
        socks = [conn_connect(hostile_daemon) for _ in range(1100)]
        try:
            reasons = Counter(str(conn_last_error(sock)["reason"]) for sock in socks)
        finally:
            for sock in socks:
                sock.close()
        assert set(reasons) <= {"handshake_timeout", "connection_limit"}, reasons
        assert reasons["connection_limit"] >= 1100 - 512, reasons  # max_connections_per_uid
        assert hostile_daemon.process.poll() is None
        assert_serves_fresh_session(hostile_daemon)

    def test_accept_out_of_fds_backs_off(self, short_dir: Path) -> None:
        """With its fds exhausted (the limit lowered under it), accept fails with EMFILE: the daemon backs off and
        retries, counts each failure, logs the burst once, and accepts again once fds are free."""
        port = conn_free_port()
        daemon = start_daemon(
            short_dir, "--handshake-timeout", "60", "--metrics-addr", f"127.0.0.1:{port}", hostile_limits=True
        )
        pid = daemon.process.pid
        try:
            soft, hard = resource.prlimit(pid, resource.RLIMIT_NOFILE)
            resource.prlimit(pid, resource.RLIMIT_NOFILE, (len(os.listdir(f"/proc/{pid}/fd")) + 3, hard))
            socks = [conn_connect(daemon) for _ in range(20)]
            daemon.wait_for_log("accept failed")
            time.sleep(2)
            assert daemon.log_text().count("accept failed") == 1  # once per burst, not once per failure
            for sock in socks:
                sock.close()
            resource.prlimit(pid, resource.RLIMIT_NOFILE, (soft, hard))
            # Read only now: the metrics server needs an fd too.
            assert conn_metric(port, 'sanitizerd_accept_errors_total{errno="EMFILE"}') >= 3
            daemon.wait_for_log("accepting again")
            assert_serves_fresh_session(daemon)
        finally:
            assert stop_daemon(daemon) == 0, daemon.log_text()

    def test_unfinished_frames_are_bounded_per_uid(self, short_dir: Path) -> None:
        """40 sessions each sending most of a 60 MB frame: the uid's budget refuses those past it (buffer_limit),
        the rest are cut at the frame timeout (frame_timeout); the daemon never holds much more than the budget."""
        budget = 128 << 20
        daemon = start_daemon(
            short_dir, "--max-unfinished-bytes-per-uid", str(budget), "--frame-timeout", "3", hostile_limits=True
        )
        size = 60_000_000
        chunk = b"\0" * (1 << 20)
        reasons: list[str] = []

        def attack() -> None:
            with conn_connect(daemon, timeout=60) as sock:
                sock.sendall(conn_hello("unfinished"))
                try:
                    sock.sendall(struct.pack("<I", size))
                    for _ in range(size // len(chunk)):
                        sock.sendall(chunk)
                except OSError:  # refused while sending
                    pass
                reasons.append(str(conn_last_error(sock)["reason"]))

        try:
            threads = [threading.Thread(target=attack) for _ in range(40)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(120)
            assert len(reasons) == 40
            assert set(reasons) <= {"buffer_limit", "frame_timeout"}, Counter(reasons)
            assert "buffer_limit" in reasons
            daemon.wait_for_log('"reason": "frame_timeout"')
            assert peak_rss_bytes(daemon.process.pid) < budget + (400 << 20)
            assert_serves_fresh_session(daemon)
        finally:
            assert stop_daemon(daemon) == 0, daemon.log_text()

    def test_silent_producer_and_stalled_frame(self, short_dir: Path) -> None:
        """After the handshake: a producer that sends nothing is ended at the idle timeout, one that stalls inside a
        frame at the (shorter) frame timeout; each is told why."""
        daemon = start_daemon(short_dir, "--idle-timeout", "3", "--frame-timeout", "1", hostile_limits=True)
        try:
            with conn_connect(daemon) as idle, conn_connect(daemon) as stalled:
                idle.sendall(conn_hello("idle"))
                stalled.sendall(conn_hello("stalled") + struct.pack("<I", 1000) + b"\x81")
                started = time.monotonic()
                assert conn_last_error(stalled)["reason"] == "frame_timeout"
                assert 0.5 < time.monotonic() - started < 2.5
                assert conn_last_error(idle)["reason"] == "idle_timeout"
                assert 2.5 < time.monotonic() - started < 5
            assert_serves_fresh_session(daemon)
        finally:
            assert stop_daemon(daemon) == 0, daemon.log_text()


class TestHostileStrings:
    def test_long_names_are_cut_before_the_store(self, hostile_daemon: RunningDaemon) -> None:
        """1 MiB kernel, file and function names on 200 illegal reads: findings carry them cut to 4 096 characters
        and marked, and the store grows by far less than the names' size."""
        huge = "n" * (1 << 20)
        with Client(hostile_daemon.socket, job="long-names", timeout=60, resume_buffer=0) as client:
            client.malloc(0x1000, 256)
            location = client.location(huge + "file.cc", 7, function=huge + "function")
            kernel = client.kernel_begin(huge + "kernel", 1)
            reads = [
                accesses(EventKind.READ, Space.GM, 0x2000 + 64 * i, 8, serial=i, location=location) for i in range(200)
            ]
            client.events(kernel, np.concatenate(reads))
            client.kernel_end(kernel)
            verdict = client.wait_kernel(kernel, timeout=60)
        assert verdict.errors >= 1
        found = sanitizerd(
            "findings", "--socket", str(hostile_daemon.socket), "--job", "long-names", "--format", "json"
        )
        assert found.returncode == 0, found.stderr
        assert len(found.stdout) < 200 * 40_000  # uncapped: 200 x 3 MiB
        assert "…[cut " in found.stdout
        database = sum(p.stat().st_size for p in hostile_daemon.state_dir.iterdir() if p.is_file())
        assert database < 50 << 20
        assert len(hostile_daemon.log_text()) < 1 << 20
        hostile_daemon.wait_for_log("client string cut to its length")
        assert_serves_fresh_session(hostile_daemon)

    def test_log_texts_are_cut_and_rate_limited(self, hostile_daemon: RunningDaemon) -> None:
        """A 20 MB log text reaches the daemon's log cut to 4 096 characters; 5 000 log lines in a burst reach it as
        at most the burst plus the rate, the rest counted."""
        before = len(hostile_daemon.log_text())
        with Client(hostile_daemon.socket, job="log-flood", timeout=60, resume_buffer=0) as client:
            client.log("x" * 20_000_000)
            for i in range(5000):
                client.log(f"line {i}")
        text = hostile_daemon.wait_for_log("client log lines dropped at the end")[before:]
        assert len(text) < 1 << 20
        assert "[cut 19995904 characters]" in text  # the JSON log escapes the ellipsis
        assert text.count('"client log"') < 200
        assert_serves_fresh_session(hostile_daemon)


class TestHostileSocketFile:
    def test_socket_file_appears_only_once_listening(self, short_dir: Path) -> None:
        """A client that connects the moment the socket file appears is served, never refused."""
        for attempt in range(3):
            base = short_dir / str(attempt)
            base.mkdir()
            path = base / "s.sock"
            process = subprocess.Popen(
                [sys.executable, "-m", "sanitizerd", "serve", "--socket", str(path), "--state-dir", str(base / "st")],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            try:
                deadline = time.monotonic() + 30
                while not path.exists():
                    assert time.monotonic() < deadline and process.poll() is None
                    time.sleep(0.0005)
                with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                    sock.connect(str(path))  # ConnectionRefusedError if it appeared before listen()
                assert [p.name for p in base.iterdir() if p.name.startswith(".")] == []  # no temporary name left
            finally:
                process.send_signal(signal.SIGTERM)
                assert process.wait(15) == 0
            assert not path.exists()

    def test_failed_start_leaves_the_running_daemons_socket(self, hostile_daemon: RunningDaemon) -> None:
        """A second daemon on the same socket refuses to start and leaves the first one's socket in place."""
        second = sanitizerd(
            "serve", "--socket", str(hostile_daemon.socket), "--state-dir", str(hostile_daemon.state_dir)
        )
        assert second.returncode != 0 and "already serving" in second.stderr
        assert hostile_daemon.socket.exists()
        assert_serves_fresh_session(hostile_daemon)


_CONN_INTS = (0, 1, -1, 7, 2**31, 2**32, 2**63 - 1, -(2**63), 2**64 - 1, 0x1000, 255, 65535)


def conn_random_message(rng: random.Random) -> dict[str, object]:
    """One producer message of any type, with numbers drawn from the edges of their ranges."""

    def num() -> int:
        return rng.choice(_CONN_INTS) if rng.random() < 0.7 else rng.randint(-(2**63), 2**64 - 1)

    kernel = rng.choice([1, 2, 3])
    kind = rng.choice(["kernel_begin", "events", "kernel_end", "host_op", "ipc", "locations", "device", "log"])
    if kind == "kernel_begin":
        return {"type": kind, "kernel": kernel, "name": "k", "block_dim": num(), "pc_start": num()}
    if kind == "events":
        if rng.random() < 0.5:
            records = rng.randbytes(56 * rng.choice([0, 1, 3]))
        else:
            records = accesses(
                rng.choice(list(EventKind)),
                rng.choice(list(Space)),
                rng.choice([0x1000, 0, 2**63, 2**64 - 64]),
                rng.choice([1, 32, 2**32 - 1]),
                block_num=rng.choice([1, 65535]),
                repeat=rng.choice([0, 1, 255]),
                block_stride=rng.choice([0, 1, 65535]),
                block_id=rng.choice([0, 1, 65535]),
            ).tobytes()
        return {"type": kind, "kernel": kernel, "records": records}
    if kind == "kernel_end":
        lost = [{"block_type": num(), "block_id": num(), "records": num()}] if rng.random() < 0.3 else []
        return {"type": kind, "kernel": kernel, "lost": lost}
    if kind == "host_op":
        op = rng.choice(["malloc", "free", "memcpy", "memset", "load", "store"])
        return {"type": kind, "op": op, "address": rng.choice([0x1000, num()]), "size": rng.choice([256, num()])}
    if kind == "ipc":
        op = rng.choice(["set", "map", "unmap", "destroy"])
        return {"type": kind, "op": op, "name": rng.choice("ab"), "address": num(), "size": num()}
    if kind == "locations":
        return {"type": kind, "locations": [{"id": num(), "file": "f", "line": num(), "callers": [num()]}]}
    if kind == "device":
        return {"type": kind, "chip": rng.choice(["Ascend910B1", "x"]), "block_num": num(), "device": num()}
    return {"type": "log", "text": "x", "level": "info"}


def test_random_producer_streams_end_only_their_session(hostile_daemon: RunningDaemon) -> None:
    """150 sessions of random messages of every producer type, numbers at the edges of their ranges, every tool on:
    each ends with closed, an error frame naming a protocol reason, or (no close sent) nothing; the daemon's
    connection handler and session pump never fail."""
    rng = random.Random(10)
    tools = ["memcheck", "racecheck", "initcheck", "synccheck", "registercheck"]
    endings: Counter[str] = Counter()
    for n in range(150):
        config = {"tools": rng.sample(tools, rng.randint(1, 5)), "leak_check": True, "check_unused_memory": True}
        data = conn_encode(type="hello", version=1, job=f"random-{n % 3}", config=config)
        data += b"".join(conn_encode(**conn_random_message(rng)) for _ in range(rng.randint(1, 30)))
        if rng.random() < 0.5:
            data += conn_encode(type="close")
        with conn_connect(hostile_daemon, timeout=30) as sock:
            sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)
            replies = conn_replies(sock)
        last = replies[-1] if replies else {}
        endings[str(last.get("reason") or last.get("type"))] += 1
    assert "internal_error" not in endings and "None" not in endings, endings
    assert endings["closed"] > 0 and endings["bad_reference"] > 0, endings
    text = hostile_daemon.log_text()
    assert "connection handler failed" not in text and "session pump failed" not in text
    assert_serves_fresh_session(hostile_daemon)


def _conn_hard_fd_limit_1024() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))
    resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))


def test_connections_fit_a_hard_fd_limit_of_1024(short_dir: Path) -> None:
    """Where even the hard fd limit is 1 024, the daemon lowers max_connections (and max_sessions) to fit, saying so
    at start; 1 100 connections then meet connection_limit, never an out-of-fds accept, and the daemon serves on."""
    conn_raise_own_fd_limit(2048)
    sock, state, log = short_dir / "s.sock", short_dir / "state", short_dir / "daemon.log"
    command = [sys.executable, "-m", "sanitizerd", "serve", "--socket", str(sock), "--state-dir", str(state)]
    with open(log, "ab") as log_file:
        process = subprocess.Popen(
            [*command, "--handshake-timeout", "2", "--max-connections-per-uid", "4096"],
            stdout=log_file,
            stderr=log_file,
            env=dict(os.environ, MALLOC_ARENA_MAX="2"),
            preexec_fn=_conn_hard_fd_limit_1024,
        )
    daemon = RunningDaemon(sock, state, log, process)
    try:
        wait_for_socket(sock, process)
        daemon.wait_for_log("max_connections lowered from 4096 to 960")
        socks = [conn_connect(daemon) for _ in range(1100)]
        try:
            reasons = Counter(str(conn_last_error(s)["reason"]) for s in socks)
        finally:
            for s in socks:
                s.close()
        assert reasons["connection_limit"] >= 1100 - 960 and set(reasons) <= {"connection_limit", "handshake_timeout"}
        assert "accept failed" not in daemon.log_text()
        assert_serves_fresh_session(daemon)
    finally:
        assert stop_daemon(daemon) == 0, daemon.log_text()
