"""Speaking the protocol as another uid: a real process with its own SO_PEERCRED uid.

Other uids cannot read this venv, so the frames are encoded here, with the project's own encoder, and written to a
file; the other uid's process (the system python) only sends them over its own connection and hands back what the
daemon answered, which is decoded here again."""

from __future__ import annotations

import os
import pwd
import struct
import subprocess
from typing import Any

import msgspec

from client_shim import EventKind, Space, accesses
from sanitizerd.protocol import PROTOCOL_VERSION
from sanitizerd.protocol import messages as m
from tests.conftest import RunningDaemon

NOBODY = pwd.getpwnam("nobody")
DAEMON_USER = pwd.getpwnam("daemon")  # a second uid that is neither root nor an admin
_encoder = msgspec.msgpack.Encoder()

# argv: socket, frames file, frames expected back per connection, connections (each sends the same frames).
_PIPE = r"""
import socket, struct, sys
path, frames, expect, times = sys.argv[1], open(sys.argv[2], "rb").read(), int(sys.argv[3]), int(sys.argv[4])
out = sys.stdout.buffer
for _ in range(times):
    sock = socket.socket(socket.AF_UNIX)
    sock.settimeout(20)
    sock.connect(path)
    sock.sendall(frames)
    got, count, at = b"", 0, 0
    while count < expect:
        try:
            chunk = sock.recv(1 << 20)
        except OSError:
            break
        if not chunk:
            break
        got += chunk
        while len(got) - at >= 4 and len(got) - at >= 4 + struct.unpack("<I", got[at:at + 4])[0]:
            at += 4 + struct.unpack("<I", got[at:at + 4])[0]
            count += 1
    sock.close()
    if times == 1:
        out.write(got)
out.flush()
"""


def frames(*messages: m.Message) -> bytes:
    """The messages framed as a client sends them (all at once: the daemon reads them in order)."""
    bodies = [_encoder.encode(message) for message in messages]
    return b"".join(struct.pack("<I", len(body)) + body for body in bodies)


def replies(data: bytes) -> list[dict[str, Any]]:
    """The daemon's frames, decoded to plain dicts (``type`` names each)."""
    out, at = [], 0
    while len(data) - at >= 4:
        (size,) = struct.unpack("<I", data[at : at + 4])
        out.append(msgspec.msgpack.decode(data[at + 4 : at + 4 + size]))
        at += 4 + size
    return out


def open_socket_to_all(daemon: RunningDaemon) -> None:
    """Let every uid reach the daemon, as a host's service group would (the socket is 0660, group root)."""
    daemon.socket.parent.chmod(0o755)
    daemon.socket.chmod(0o666)


def as_uid(
    user: pwd.struct_passwd, daemon: RunningDaemon, data: bytes, *, expect: int, times: int = 1
) -> list[dict[str, Any]]:
    """Send ``data`` on a connection of ``user``'s (``times`` connections, one after the other) and return the
    first ``expect`` frames the daemon answered on it (the last connection's; none when ``times`` > 1)."""
    work = daemon.socket.parent
    script, payload = work / "other_uid.py", work / f"frames-{os.getpid()}-{user.pw_uid}.bin"
    script.write_text(_PIPE)
    payload.write_bytes(data)
    for path in (script, payload):
        path.chmod(0o644)
    result = subprocess.run(
        ["/usr/bin/python3", str(script), str(daemon.socket), str(payload), str(expect), str(times)],
        user=user.pw_uid, group=user.pw_gid, extra_groups=[], capture_output=True, timeout=120, check=True,
    )  # fmt: skip
    return replies(result.stdout)


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
