"""Speaking the protocol as another uid: a real process with its own SO_PEERCRED uid, for cross-user tests.

Other uids cannot read this venv, so the frames are encoded here, with the project's own encoder, and written to a
file; the other uid's process (the system python) only sends them over a connection of its own, one frame at a
time, and hands back the bytes the daemon answered, which are decoded here again where a test wants messages."""

from __future__ import annotations

import os
import pwd
import struct
import subprocess
from pathlib import Path
from typing import Any

import msgspec

from client_shim import EventKind, Space, accesses
from sanitizerd_protocol import PROTOCOL_VERSION
from sanitizerd_protocol import messages as m
from tests.conftest import RunningDaemon

NOBODY = pwd.getpwnam("nobody")
DAEMON_USER = pwd.getpwnam("daemon")  # a second uid that is neither root nor an admin
_encoder = msgspec.msgpack.Encoder()

# argv: socket, frames file, frames to wait for per connection (0: until the daemon closes or the wait ends),
# connections (each sends the same frames, one after the other), seconds to wait for replies, seconds between frames.
# The frames go one at a time, as a client would send them, and stop once the daemon has closed (a refusal closes
# before the next). Writes the last connection's reply bytes.
_PIPE = r"""
import socket, struct, sys, time

def split(data):
    at = 0
    while at < len(data):
        end = at + 4 + struct.unpack("<I", data[at:at + 4])[0]
        yield data[at:end]
        at = end

path, frames = sys.argv[1], list(split(open(sys.argv[2], "rb").read()))
expect, times, wait, pause = int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]), float(sys.argv[6])
got = b""
for _ in range(times):
    sock = socket.socket(socket.AF_UNIX)
    sock.settimeout(20)
    sock.connect(path)
    for frame in frames:
        try:
            sock.sendall(frame)
        except OSError:
            break
        if pause:
            time.sleep(pause)
    deadline = time.monotonic() + wait
    got, count, at = b"", 0, 0
    while (expect == 0 or count < expect) and time.monotonic() < deadline:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            chunk = sock.recv(1 << 20)
        except OSError:  # the wait is over, or the daemon reset the connection with our frames unread
            break
        if not chunk:
            break
        got += chunk
        while len(got) - at >= 4 and len(got) - at >= 4 + struct.unpack("<I", got[at:at + 4])[0]:
            at += 4 + struct.unpack("<I", got[at:at + 4])[0]
            count += 1
    sock.close()
sys.stdout.buffer.write(got)
"""


def frames(*messages: m.Message | dict[str, Any]) -> bytes:
    """The messages framed as a client sends them (structs of the protocol, or plain dicts naming their ``type``)."""
    bodies = [_encoder.encode(message) for message in messages]
    return b"".join(struct.pack("<I", len(body)) + body for body in bodies)


def bodies(data: bytes) -> list[bytes]:
    """The daemon's frames, each without its length."""
    out, at = [], 0
    while len(data) - at >= 4:
        (size,) = struct.unpack("<I", data[at : at + 4])
        out.append(data[at + 4 : at + 4 + size])
        at += 4 + size
    return out


def replies(data: bytes) -> list[dict[str, Any]]:
    """The daemon's frames, decoded to plain dicts (``type`` names each)."""
    return [msgspec.msgpack.decode(body) for body in bodies(data)]


def hello(role: str = "producer", **fields: object) -> dict[str, object]:
    return {"type": "hello", "version": PROTOCOL_VERSION, "role": role, "pid": os.getpid(), **fields}


def open_socket_to_all(daemon: RunningDaemon) -> None:
    """Let every uid reach the daemon, as a host's service group would (the socket is 0660, group root)."""
    daemon.socket.parent.chmod(0o755)
    daemon.socket.chmod(0o666)


def open_to_nobody(socket: Path) -> None:
    """Let nobody reach a test daemon's socket, as the service's group would: its directory searchable, the
    socket (0660) in nobody's group."""
    socket.parent.chmod(0o755)
    os.chown(socket, -1, NOBODY.pw_gid)


def send(
    user: pwd.struct_passwd,
    socket: Path,
    data: bytes,
    *,
    expect: int = 0,
    wait: float = 20.0,
    pause: float = 0.0,
    times: int = 1,
    timeout: float = 120,
) -> bytes:
    """Send the frames ``data`` on a connection of ``user``'s, ``pause`` seconds after each (``times`` connections,
    one after the other), and return the bytes the last one was answered: the first ``expect`` frames, or (0) all
    until the daemon closes or ``wait`` seconds have passed. The files go beside the socket (the test's own
    directory, searchable by every uid once the socket is opened to them)."""
    work = socket.parent
    script, payload = work / "other_uid.py", work / f"frames-{os.getpid()}-{user.pw_uid}.bin"
    script.write_text(_PIPE)
    payload.write_bytes(data)
    for path in (script, payload):
        path.chmod(0o644)
    result = subprocess.run(
        ["/usr/bin/python3", str(script), str(socket), str(payload), str(expect), str(times), str(wait), str(pause)],
        user=user.pw_uid, group=user.pw_gid, extra_groups=[], capture_output=True, timeout=timeout, check=True,
    )  # fmt: skip
    return result.stdout


def as_uid(
    user: pwd.struct_passwd, daemon: RunningDaemon, data: bytes, *, expect: int, times: int = 1
) -> list[dict[str, Any]]:
    """Send ``data`` on a connection of ``user``'s (``times`` connections, one after the other) and return the
    first ``expect`` frames the daemon answered on the last one, decoded."""
    return replies(send(user, daemon.socket, data, expect=expect, times=times))


def as_nobody(socket: Path, messages: list[dict[str, object]], *, wait: float = 3.0, pause: float = 0.05) -> bytes:
    """Run ``messages`` as nobody on a connection of its own, one every ``pause`` seconds; the daemon's reply
    bytes (frames, undecoded) until it closes or ``wait`` seconds have passed."""
    return send(NOBODY, socket, frames(*messages), wait=wait, pause=pause)


def control(*requests: m.Message) -> bytes:
    return frames(m.Hello(version=PROTOCOL_VERSION, role="control"), *requests)


def producer_session(job: str, *, illegal_reads: int = 1, resume: int = 0) -> bytes:
    """A whole producer session: one kernel with ``illegal_reads`` reads of unmapped memory, then close (the
    daemon answers welcome, verdict, closed)."""
    import numpy as np

    n = illegal_reads
    records = accesses(EventKind.READ, Space.GM, 0x100000 + np.arange(n) * 0x1000, 32, pc=np.arange(n) + 1)
    return frames(
        m.Hello(version=PROTOCOL_VERSION, job=job, resume=resume),
        m.KernelBegin(kernel=1, name="victim_kernel", block_dim=1),
        m.Events(kernel=1, records=np.ascontiguousarray(records).view(np.uint8).data),
        m.KernelEnd(kernel=1),
        m.Close(),
    )


def view_of(user: pwd.struct_passwd, daemon: RunningDaemon) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """What ``user`` sees: their sessions and their findings (as ``sanitizerd sessions`` and ``findings`` ask)."""
    answer = as_uid(user, daemon, control(m.QuerySessions(), m.QueryFindings()), expect=3)
    assert [a["type"] for a in answer] == ["welcome", "sessions", "findings"], answer
    return answer[1]["sessions"], answer[2]["findings"]
