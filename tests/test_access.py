"""Access control: a client of another uid cannot list or read the first uid's sessions and findings, and
gets a clear refusal; root (and the admin group) sees everything.

The other user is ``nobody``, speaking the protocol from the system's Python with a hand-rolled msgpack
encoder (it cannot reach this venv's packages): a real process with its own SO_PEERCRED uid."""

from __future__ import annotations

import json
import os
import pwd
import re
import subprocess
import sys
from pathlib import Path

from sanitizerd.protocol.messages import SessionInfo
from sanitizerd.sessions.access import Access
from sanitizerd.sessions.session import Peer
from tests.conftest import ROOT, RunningDaemon, sanitizerd

NOBODY = pwd.getpwnam("nobody")

OTHER_USER = r"""
import socket, struct, sys

def pack(value):
    if isinstance(value, bool):
        return b"\xc3" if value else b"\xc2"
    if isinstance(value, int):
        return bytes([value]) if 0 <= value < 128 else b"\xce" + struct.pack(">I", value)
    if isinstance(value, str):
        data = value.encode()
        return bytes([0xA0 | len(data)]) + data if len(data) < 32 else b"\xd9" + bytes([len(data)]) + data
    if isinstance(value, dict):
        return bytes([0x80 | len(value)]) + b"".join(pack(k) + pack(v) for k, v in value.items())
    raise TypeError(value)

def frame(message):
    body = pack(message)
    return struct.pack("<I", len(body)) + body

sock = socket.socket(socket.AF_UNIX)
sock.connect(sys.argv[1])
sock.sendall(frame({"type": "hello", "version": 1, "role": "control"}))
sock.recv(65536)  # welcome
request = {"type": sys.argv[2]}
if len(sys.argv) > 3:
    request["job"] = sys.argv[3]
sock.sendall(frame(request))
reply = b""
while True:
    chunk = sock.recv(65536)
    if not chunk:
        break
    reply += chunk
    if len(reply) >= 4 and len(reply) >= 4 + struct.unpack("<I", reply[:4])[0]:
        break
sys.stdout.buffer.write(reply[4:])
"""


def as_nobody(daemon: RunningDaemon, short_dir: Path, *request: str) -> bytes:
    script = short_dir / "other_user.py"
    script.write_text(OTHER_USER)
    script.chmod(0o644)
    return subprocess.run(
        ["/usr/bin/python3", str(script), str(daemon.socket), *request],
        user=NOBODY.pw_uid, group=NOBODY.pw_gid, extra_groups=[], capture_output=True, timeout=30, check=True,
    ).stdout  # fmt: skip


def test_another_uid_is_refused_and_sees_none_of_the_first_uids_sessions(
    daemon: RunningDaemon, short_dir: Path
) -> None:
    # The socket is 0660, group-owned: make nobody's group the socket's group, as the service's group would be.
    short_dir.chmod(0o755)
    os.chown(daemon.socket, -1, NOBODY.pw_gid)
    run = sanitizerd("run", "--socket", str(daemon.socket), "--", sys.executable, str(ROOT / "examples/add_custom.py"))
    job = re.search(r"SUMMARY: job (\S+):", run.stdout).group(1)
    assert json.loads(sanitizerd("findings", "--socket", str(daemon.socket), "--job", job, "--format", "json").stdout)

    refused = as_nobody(daemon, short_dir, "query_findings", job)
    assert b"permission_denied" in refused
    assert f"uid {NOBODY.pw_uid} may not read job '{job}'".encode() in refused
    sessions = as_nobody(daemon, short_dir, "query_sessions")
    assert b"sessions" in sessions and job.encode() not in sessions  # an answer, without the other user's
    assert "permission_denied" in daemon.log_text()  # the refusal is logged
    for part in ("sanitizerd.db", "sanitizerd.db-wal"):
        assert (daemon.state_dir / part).stat().st_mode & 0o777 == 0o600  # the store is the daemon's alone


def info(session: int, uid: int, job: str = "j") -> SessionInfo:
    return SessionInfo(session=session, job=job, pid=1, uid=uid)


class TestRules:
    def test_a_user_sees_their_own_sessions_only(self) -> None:
        alice = Access(uid=1000, admin=False)
        assert [s.session for s in alice.visible([info(1, 1000), info(2, 1001)])] == [1]

    def test_refused_for_another_users_job_or_session(self) -> None:
        alice = Access(uid=1000, admin=False)
        every = [info(1, 1000, "mine"), info(2, 1001, "theirs")]
        assert alice.refusal(every, job="theirs").startswith("uid 1000 may not read job 'theirs'")
        assert alice.refusal(every, session=2).startswith("uid 1000 may not read session 2")
        assert alice.refusal(every, job="mine") == "" and alice.refusal(every, job="new") == ""

    def test_root_and_admin_group_members_see_everything(self) -> None:
        assert Access.of(Peer(pid=os.getpid(), uid=0, gid=0), []).admin
        me = Peer(pid=os.getpid(), uid=1234, gid=os.getgid())
        assert Access.of(me, [os.getgid()]).admin and not Access.of(me, [99999]).admin
