"""Another user on the host: ``nobody``, speaking the protocol from the system's Python (it may not read this
venv), with a hand-rolled msgpack encoder. A real process with its own SO_PEERCRED uid, for cross-user tests."""

from __future__ import annotations

import json
import os
import pwd
import subprocess
from pathlib import Path

NOBODY = pwd.getpwnam("nobody")

# argv: socket path, a JSON list of messages (the first is the hello), seconds to wait for replies, seconds between
# messages. Sends them in order (stopping when the daemon has closed), then prints the reply bytes until EOF or the
# wait ends.
SCRIPT = r"""
import json, socket, struct, sys, time

def pack(value):
    if value is None:
        return b"\xc0"
    if isinstance(value, bool):
        return b"\xc3" if value else b"\xc2"
    if isinstance(value, int):
        if 0 <= value < 128:
            return bytes([value])
        if -32 <= value < 0:
            return struct.pack(">b", value)
        return b"\xcf" + struct.pack(">Q", value) if value >= 0 else b"\xd3" + struct.pack(">q", value)
    if isinstance(value, float):
        return b"\xcb" + struct.pack(">d", value)
    if isinstance(value, str):
        data = value.encode()
        if len(data) < 32:
            return bytes([0xA0 | len(data)]) + data
        return b"\xda" + struct.pack(">H", len(data)) + data
    if isinstance(value, list):
        head = bytes([0x90 | len(value)]) if len(value) < 16 else b"\xdc" + struct.pack(">H", len(value))
        return head + b"".join(pack(v) for v in value)
    if isinstance(value, dict):
        head = bytes([0x80 | len(value)]) if len(value) < 16 else b"\xde" + struct.pack(">H", len(value))
        return head + b"".join(pack(k) + pack(v) for k, v in value.items())
    raise TypeError(value)

def frame(message):
    body = pack(message)
    return struct.pack("<I", len(body)) + body

sock = socket.socket(socket.AF_UNIX)
sock.connect(sys.argv[1])
for message in json.loads(sys.argv[2]):
    try:
        sock.sendall(frame(message))
    except OSError:
        break
    time.sleep(float(sys.argv[4]))  # one at a time, as a client would: a refusal closes before the next
deadline = time.monotonic() + float(sys.argv[3])
reply = b""
while time.monotonic() < deadline:
    sock.settimeout(max(0.01, deadline - time.monotonic()))
    try:
        chunk = sock.recv(65536)
    except socket.timeout:
        break
    except OSError:
        break
    if not chunk:
        break
    reply += chunk
sys.stdout.buffer.write(reply)
"""


def hello(role: str = "producer", **fields: object) -> dict[str, object]:
    return {"type": "hello", "version": 1, "role": role, "pid": os.getpid(), **fields}


def as_nobody(
    socket: Path, scratch: Path, messages: list[dict[str, object]], *, wait: float = 3.0, pause: float = 0.05
) -> bytes:
    """Run ``messages`` as nobody on a connection of its own; the daemon's reply bytes (frames, undecoded)."""
    script = scratch / "other_user_session.py"
    script.write_text(SCRIPT)
    script.chmod(0o644)
    return subprocess.run(
        ["/usr/bin/python3", str(script), str(socket), json.dumps(messages), str(wait), str(pause)],
        user=NOBODY.pw_uid, group=NOBODY.pw_gid, extra_groups=[], capture_output=True, timeout=60, check=True,
    ).stdout  # fmt: skip


def open_to_nobody(socket: Path) -> None:
    """Let nobody reach a test daemon's socket, as the service's group would: its directory searchable, the
    socket (0660) in nobody's group."""
    socket.parent.chmod(0o755)
    os.chown(socket, -1, NOBODY.pw_gid)
