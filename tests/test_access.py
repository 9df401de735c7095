"""Access control: a client of another uid cannot list or read the first uid's sessions and findings, and naming
them answers exactly as naming ones that do not exist (no refusal that would say they do); root (and the admin
group) sees everything.

The other user is ``nobody`` (tests/other_uid.py): a real process with its own SO_PEERCRED uid."""

from __future__ import annotations

import json
import os
import re
import sys

import msgspec

from sanitizerd.sessions.access import Access
from sanitizerd.sessions.session import Peer
from sanitizerd_protocol import messages as m
from sanitizerd_protocol.messages import SessionInfo
from tests import other_uid
from tests.conftest import ROOT, RunningDaemon, sanitizerd
from tests.other_uid import NOBODY


def nobody_asks(daemon: RunningDaemon, request: m.Message) -> bytes:
    """The daemon's answer to ``request`` from nobody on a control connection: the frame after the welcome, raw."""
    answer = other_uid.bodies(other_uid.send(NOBODY, daemon.socket, other_uid.control(request), expect=2))
    assert len(answer) == 2, answer
    return answer[1]


def test_another_uid_learns_nothing_of_the_first_uids_sessions(daemon: RunningDaemon) -> None:
    """The other uid's answers naming the first uid's job and session are byte for byte those naming a job and a
    session that do not exist: an empty page, not a refusal."""
    other_uid.open_to_nobody(daemon.socket)
    run = sanitizerd("run", "--socket", str(daemon.socket), "--", sys.executable, str(ROOT / "examples/add_custom.py"))
    job = re.search(r"SUMMARY: job (\S+):", run.stdout).group(1)
    assert json.loads(sanitizerd("findings", "--socket", str(daemon.socket), "--job", job, "--format", "json").stdout)
    session = json.loads(sanitizerd("sessions", "--socket", str(daemon.socket), "--format", "json").stdout)[0]

    for theirs, none in (
        (m.QueryFindings(job=job), m.QueryFindings(job="no-such-job")),
        (m.QueryFindings(session=session["session"]), m.QueryFindings(session=1_000_000)),
        (m.QueryFindings(job=job, session=session["session"]), m.QueryFindings(job="no-such-job", session=1_000_000)),
        (m.QueryJobs(job=job), m.QueryJobs(job="no-such-job")),
    ):
        answer = nobody_asks(daemon, theirs)
        assert answer == nobody_asks(daemon, none), theirs
        decoded = msgspec.msgpack.decode(answer)
        assert decoded["type"] in ("findings", "jobs") and not decoded[decoded["type"]], decoded
    sessions = nobody_asks(daemon, m.QuerySessions())
    assert b"sessions" in sessions and job.encode() not in sessions  # an answer, without the other user's
    assert "permission_denied" not in daemon.log_text()  # nothing was refused
    for part in ("sanitizerd.db", "sanitizerd.db-wal"):
        assert (daemon.state_dir / part).stat().st_mode & 0o777 == 0o600  # the store is the daemon's alone


def info(session: int, uid: int, job: str = "j") -> SessionInfo:
    return SessionInfo(session=session, job=job, pid=1, uid=uid)


class TestRules:
    def test_a_user_sees_their_own_sessions_only(self) -> None:
        alice = Access(uid=1000, admin=False)
        assert [s.session for s in alice.visible([info(1, 1000), info(2, 1001)])] == [1]

    def test_root_and_admin_group_members_see_everything(self) -> None:
        assert Access.of(Peer(pid=os.getpid(), uid=0, gid=0), []).admin
        me = Peer(pid=os.getpid(), uid=1234, gid=os.getgid())
        assert Access.of(me, [os.getgid()]).admin and not Access.of(me, [99999]).admin
