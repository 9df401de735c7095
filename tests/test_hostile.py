"""Hostile and heavy clients against a real daemon (issue 10): each attack runs against a daemon started as a host
runs it (the default soft fd limit, an address-space cap: ``hostile_daemon``), and after each the daemon still serves
a fresh session (kernel, verdict, close) within seconds.

Sections: one per surface an attacker can reach (frames and connections, detector patterns, control requests and the
store, jobs and other users, configuration and the metrics endpoint)."""

from __future__ import annotations

import socket
import struct

import msgspec
import pytest

from tests.conftest import RunningDaemon, assert_serves_fresh_session

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
