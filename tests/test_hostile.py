"""Hostile and heavy clients against a real daemon (issue 10): each attack runs against a daemon started as a host
runs it (the default soft fd limit, an address-space cap: ``hostile_daemon``), and after each the daemon still serves
a fresh session (kernel, verdict, close) within seconds.

Sections: one per surface an attacker can reach (frames and connections, detector patterns, control requests and the
store, jobs and other users, configuration and the metrics endpoint)."""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import resource
import selectors
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import msgspec
import numpy as np
import pytest

from client_shim import Client, EventKind, Pipe, Space, accesses, syncs
from client_shim.transport import ClientError
from sanitizerd.control_client import ControlClient
from sanitizerd.findings.store import FindingsStore
from sanitizerd.sessions.jobs import MAX_JOBS_PER_UID
from sanitizerd_protocol import messages as m
from sanitizerd_protocol.messages import Config
from sanitizerd_protocol.model import make_finding
from tests import other_uid
from tests.conftest import (
    ROOT,
    RunningDaemon,
    assert_serves_fresh_session,
    peak_rss_bytes,
    rss_bytes,
    sanitizerd,
    start_daemon,
    stop_daemon,
    wait_for_socket,
)
from tests.other_uid import NOBODY, as_nobody, hello, open_to_nobody

# Helpers every section uses: raw frames and connections, what the daemon answers on them, its metrics.


def frame(body: bytes) -> bytes:
    return struct.pack("<I", len(body)) + body


# A daemon started by hand here is the single process (serve's default is the usable cores).
SERVE = [sys.executable, "-m", "sanitizerd", "serve", "--workers", "1"]


def encode(**message: object) -> bytes:
    """``message`` framed as a client sends it (it may be anything msgpack holds, hostile or not)."""
    return frame(msgspec.msgpack.encode(message))


def connect(daemon: RunningDaemon, timeout: float = 10.0) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    sock.connect(str(daemon.socket))
    return sock


def connect_control(daemon: RunningDaemon) -> socket.socket:
    """A control connection past its handshake (the welcome read)."""
    sock = connect(daemon)
    sock.sendall(encode(type="hello", version=1, role="control"))
    sock.recv(65536)  # welcome
    return sock


def read_all(sock: socket.socket, timeout: float | None = None) -> bytes:
    """Every byte the daemon sends until it closes the connection, or nothing more came for ``timeout`` seconds
    (the socket's own timeout when not given)."""
    if timeout is not None:
        sock.settimeout(timeout)
    got = b""
    try:
        while chunk := sock.recv(1 << 20):
            got += chunk
    except OSError:  # the wait is over, or a reset: the daemon closed with our frames still unread
        pass
    return got


def read_replies(sock: socket.socket) -> list[dict[str, object]]:
    """Every frame the daemon sends until it closes the connection, decoded."""
    return other_uid.replies(read_all(sock))


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def metric(port: int, name: str) -> float:
    """The sum of every series of ``name`` on the daemon's /metrics."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name))


# --- jobs and other users ---
# Job names are each uid's own: nobody (another uid) naming a root user's job joins, watches, records, configures,
# waits on, signs or destroys IPC names of a job of nobody's own, answered exactly as for a name nobody uses; the
# victim's sessions, findings, configuration and IPC names are as they were, and its next kernel is still checked.


def _jobs_snapshot(daemon: RunningDaemon, job: str) -> tuple[list[m.SessionInfo], list[object]]:
    """The victim's (root's) sessions and its findings of the job, as the victim would query them (root reads every
    uid's rows: the other uid's are left out here, and asserted on apart)."""
    with ControlClient(daemon.socket) as control:
        sessions = control.request(m.QuerySessions())
        findings = control.request(m.QueryFindings(job=job))
    assert isinstance(sessions, m.Sessions) and isinstance(findings, m.Findings)
    mine = [s for s in sessions.sessions if s.uid == os.getuid()]
    ids = {s.session for s in mine}
    return mine, [msgspec.to_builtins(f) for f in findings.findings if f.session in ids]


def _jobs_illegal_read(client: Client, name: str) -> m.Verdict:
    kernel = client.kernel_begin(name, 1)
    client.events(kernel, accesses(EventKind.READ, Space.GM, 0x1000 + 512, 32, block_num=1))
    client.kernel_end(kernel)
    return client.wait_kernel(kernel, timeout=10)


def _shape(reply: bytes, job: str) -> list[tuple[object, ...]]:
    """What a reply says, less what differs between any two connections (session ids) and the job's name."""
    return [
        (r["type"], r.get("reason"), str(r.get("message", "")).replace(job, "JOB"),
         *(r.get(k) for k in ("ok", "sessions", "kernels", "events", "findings")))
        for r in other_uid.replies(reply)
    ]  # fmt: skip


def _as_for_an_unused_name(daemon: RunningDaemon, messages: list[dict[str, object]], job: str, unused: str) -> None:
    """Nobody's ``messages`` naming ``job`` (another uid's) are answered as the same messages naming ``unused``, a
    name nobody has used: no refusal, nothing that tells the job exists."""
    reply = as_nobody(daemon.socket, messages, wait=2)
    fresh = json.loads(json.dumps(messages).replace(json.dumps(job)[1:-1], json.dumps(unused)[1:-1]))
    assert _shape(reply, job) == _shape(as_nobody(daemon.socket, fresh, wait=2), unused), (messages, reply)
    assert b"permission_denied" not in reply and b"error" not in reply, reply


def test_jobs_another_uid_naming_a_job_gets_its_own_and_learns_nothing(hostile_daemon: RunningDaemon) -> None:
    """Job names are each uid's own: nobody's join, sign and destroy, watch with record, job_start and wait_job
    naming root's live job are answered exactly as for a name nobody uses, and act on a job of nobody's own. The
    victim's sessions, findings, configuration and IPC names are as they were, and its next kernel is checked."""
    daemon, job = hostile_daemon, "victim-train"
    open_to_nobody(daemon.socket)
    with Client(daemon.socket, job=job, rank=0, timeout=10, resume_buffer=0) as victim:
        victim.malloc(0x1000, 256)
        victim.ipc_set("victim-buf", 0x1000, 256)
        assert victim.wait_ipc(1, timeout=10)[0].ok
        assert _jobs_illegal_read(victim, "before").errors == 1
        before = _jobs_snapshot(daemon, job)
        signature = {"type": "signature", "step": 1, "replay": 1, "rank": 0,
                     "entries": [{"name": "loss", "schema": "f32", "digest": 7}]}  # fmt: skip
        attacks: dict[str, list[dict[str, object]]] = {
            "join": [hello(job=job, rank=1)],
            "join, then sign and destroy": [
                hello(job=job, rank=0), signature, {"type": "ipc", "op": "destroy", "name": "victim-buf"},
            ],
            "watch with record": [hello("control"), {"type": "watch", "job": job, "record": True}],
            "job_start override": [
                hello("control"), {"type": "job_start", "job": job, "config": {"tools": [], "kernel_name": "none"}},
            ],
            "wait_job": [hello("control"), {"type": "wait_job", "job": job}],
        }  # fmt: skip
        for i, (attack, messages) in enumerate(attacks.items()):
            _as_for_an_unused_name(daemon, messages, job, f"never-used-{i}")
            assert _jobs_snapshot(daemon, job) == before, attack  # nothing changed: no session, no finding
        # The victim's job as it was: its configuration (memcheck on every kernel), its IPC name, its findings.
        verdict = _jobs_illegal_read(victim, "after")
        assert verdict.checked and verdict.errors == 1, verdict
        with Client(daemon.socket, job=job, rank=1, timeout=10, resume_buffer=0) as rank1:
            rank1.ipc_map("victim-buf", 0x9000)
            assert rank1.wait_ipc(1, timeout=10)[0].ok
    kinds = [f["kind"] for f in _jobs_snapshot(daemon, job)[1]]
    assert len(kinds) == 2 and "sdc" not in " ".join(kinds), kinds  # the victim's two reads, no injected finding
    assert "permission_denied" not in daemon.log_text()
    # Nobody reads its own job of the name (its sessions from the attacks), and nothing of the victim's.
    theirs_sessions, theirs_findings = other_uid.view_of(NOBODY, daemon)
    assert theirs_sessions and {s["job"] for s in theirs_sessions} == {job} | {f"never-used-{i}" for i in (0, 1)}
    assert theirs_findings == []
    assert_serves_fresh_session(daemon)


def test_jobs_a_launcher_derived_name_used_first_by_another_uid_locks_nobody_out(
    hostile_daemon: RunningDaemon,
) -> None:
    """``root/torchrun-<id>`` is predictable; nobody watching or opening it first makes a job of nobody's own, which
    neither holds the name nor sees the job root then starts under it."""
    daemon, job = hostile_daemon, "root/torchrun-1234"
    open_to_nobody(daemon.socket)
    watcher = [hello("control"), {"type": "watch", "job": job, "record": True}]
    for messages in (watcher, [hello(job=job)]):
        _as_for_an_unused_name(daemon, messages, job, "never-used")
    with Client(daemon.socket, job=job, timeout=10, resume_buffer=0) as victim:  # its owner is not locked out
        victim.malloc(0x1000, 256)
        assert _jobs_illegal_read(victim, "owned").errors == 1
    sessions, findings = _jobs_snapshot(daemon, job)
    assert [s.job for s in sessions] == [job] and len(findings) == 1
    assert other_uid.view_of(NOBODY, daemon)[1] == []  # nobody's session of the name sees none of root's findings
    assert_serves_fresh_session(daemon)


def test_jobs_an_ended_jobs_name_is_still_its_owners_job_and_anothers_own(short_dir: Path) -> None:
    """Right after root's job ended (within its grace period), nobody naming it is welcomed into a job of nobody's
    own; root's ranks that come back join root's job, whose findings stay root's alone."""
    daemon = start_daemon(short_dir, "--handshake-timeout", "1", "--job-grace", "60", hostile_limits=True)
    try:
        open_to_nobody(daemon.socket)
        job = "restartable"
        with Client(daemon.socket, job=job, timeout=10, resume_buffer=0) as victim:
            victim.malloc(0x1000, 256)
            assert _jobs_illegal_read(victim, "first").errors == 1
        before = _jobs_snapshot(daemon, job)
        _as_for_an_unused_name(daemon, [hello(job=job), {"type": "close"}], job, "never-used")
        assert _jobs_snapshot(daemon, job) == before
        with Client(daemon.socket, job=job, timeout=10, resume_buffer=0) as restarted:  # the owner comes back
            restarted.malloc(0x1000, 256)
        sessions, findings = _jobs_snapshot(daemon, job)
        assert findings == before[1] and len(sessions) == 2  # nobody's session sees nothing and adds nothing
        assert sorted(s["job"] for s in other_uid.view_of(NOBODY, daemon)[0]) == ["never-used", job]
        assert_serves_fresh_session(daemon)
    finally:
        assert stop_daemon(daemon) == 0, daemon.log_text()


def test_jobs_sessions_without_a_job_name_are_each_users_own(hostile_daemon: RunningDaemon) -> None:
    daemon = hostile_daemon
    open_to_nobody(daemon.socket)
    with Client(daemon.socket, job="", timeout=10, resume_buffer=0) as victim:
        victim.malloc(0x1000, 256)
        victim.ipc_set("no-job-buf", 0x1000, 256)
        assert victim.wait_ipc(1, timeout=10)[0].ok
        destroy = {"type": "ipc", "op": "destroy", "name": "no-job-buf"}
        reply = as_nobody(daemon.socket, [hello(job=""), destroy, {"type": "close"}], wait=3)
        assert b"no export named" in reply, reply  # nobody's job-less sessions have IPC names of their own
        with Client(daemon.socket, job="", timeout=10, resume_buffer=0) as other:
            other.ipc_map("no-job-buf", 0x9000)
            assert other.wait_ipc(1, timeout=10)[0].ok
    assert_serves_fresh_session(daemon)


def test_jobs_a_watcher_that_never_reads_is_dropped_and_never_stalls_the_job(hostile_daemon: RunningDaemon) -> None:
    daemon, job = hostile_daemon, "watched-by-a-sleeper"
    sleeper = connect(daemon)
    try:
        for message in (m.Hello(version=1, role="control"), m.Watch(job=job, record=True)):
            sleeper.sendall(frame(msgspec.msgpack.encode(message)))
        time.sleep(0.2)  # the watch is in place; the sleeper never reads another byte
        with Client(daemon.socket, job=job, timeout=30, resume_buffer=0) as client:
            client.malloc(0x1000, 1 << 20)
            kernel = client.kernel_begin("recorded", 1)
            reads = accesses(EventKind.READ, Space.GM, np.full(300_000, 0x1000, dtype=np.uint64), 32)
            for _ in range(5):  # about 84 MB recorded for the watcher: past the 64 MiB it may have waiting
                client.events(kernel, reads)
            client.kernel_end(kernel)
            verdict = client.wait_kernel(kernel, timeout=30)
        assert (verdict.events, verdict.errors) == (1_500_000, 0), verdict
        daemon.wait_for_log("slow_consumer")
    finally:
        sleeper.close()
    assert_serves_fresh_session(daemon)


def test_jobs_one_uid_cannot_take_every_job(short_dir: Path) -> None:
    """A flood of job_start names from one uid stops at its share of jobs; the refusal releases what it held.
    (One connection's requests are bounded too, lower; here that bound is raised to reach the jobs' own.)"""
    daemon = start_daemon(short_dir, "--max-control-requests", str(MAX_JOBS_PER_UID * 2), hostile_limits=True)
    try:
        _jobs_flood(daemon)
    finally:
        assert stop_daemon(daemon) == 0, daemon.log_text()


def _jobs_flood(daemon: RunningDaemon) -> None:
    open_to_nobody(daemon.socket)
    flood = [hello("control")] + [
        {"type": "job_start", "job": f"flood-{i}", "config": {"tools": ["memcheck"]}}
        for i in range(MAX_JOBS_PER_UID + 8)
    ]
    reply = as_nobody(daemon.socket, flood, wait=5, pause=0)
    assert b"job_limit" in reply and f"limit of {MAX_JOBS_PER_UID} jobs".encode() in reply, reply[-300:]
    # The refused connection's jobs are released: nobody registers and watches a job again at once.
    again = [
        hello("control"),
        {"type": "job_start", "job": "flood-again", "config": {}},
        {"type": "watch", "job": "flood-again"},
    ]
    assert b"error" not in as_nobody(daemon.socket, again, wait=1)
    assert_serves_fresh_session(daemon)


def test_jobs_a_restarted_daemons_jobs_are_still_their_owners(short_dir: Path) -> None:
    """The daemon killed under a live session: another uid naming the job at the next daemon gets a job of its own
    (there is no name to take), and the owner then resumes its session."""
    daemon = start_daemon(short_dir, hostile_limits=True)
    owner = connect(daemon)
    owner.sendall(encode(type="hello", version=1, job="resumable"))
    [welcome] = other_uid.replies(owner.recv(65536))
    daemon.process.kill()
    daemon.process.wait()
    owner.close()
    daemon = start_daemon(short_dir, hostile_limits=True)
    try:
        open_to_nobody(daemon.socket)
        _as_for_an_unused_name(daemon, [hello(job="resumable")], "resumable", "never-used")  # a job of nobody's own
        back = connect(daemon)
        back.sendall(encode(type="hello", version=1, job="resumable", resume=welcome["session"]))
        assert other_uid.replies(back.recv(65536))[0]["type"] == "welcome"
        back.close()
        assert_serves_fresh_session(daemon)
    finally:
        assert stop_daemon(daemon) == 0, daemon.log_text()


# --- control and store ---


def test_control_wait_job_flood_is_refused_and_the_loop_stays_responsive(hostile_daemon: RunningDaemon) -> None:
    """300 000 wait_job frames (10 MB) from one connection that never reads: the connection is refused by name
    once it has its limit outstanding, and meanwhile other clients are answered at once."""
    # The waits are on a job with a live session, so none is answered at once and they pile up.
    busy = Client(hostile_daemon.socket, job="busy-job", resume_buffer=0)
    sock = connect_control(hostile_daemon)
    flood = encode(type="wait_job", job="busy-job") * 300_000
    sock.setblocking(False)
    sent, started = 0, time.monotonic()
    while sent < len(flood) and time.monotonic() - started < 10:
        try:
            sent += sock.send(flood[sent : sent + (1 << 16)])
        except BlockingIOError:
            time.sleep(0.005)
        except OSError:
            break  # the daemon ended the connection: the flood was refused
    asked = time.monotonic()
    listed = sanitizerd("sessions", "--socket", str(hostile_daemon.socket), timeout=20)
    assert listed.returncode == 0 and time.monotonic() - asked < 5, listed.stderr
    reply = read_all(sock, 5)
    assert b"request_limit" in reply and b"limit of 64 requests" in reply
    sock.close()
    busy.close()
    assert "request_limit" in hostile_daemon.wait_for_log("request_limit")
    assert_serves_fresh_session(hostile_daemon)


def test_control_sigterm_drains_during_a_wait_job_flood(short_dir: Path) -> None:
    """SIGTERM while ten connections flood wait_job is acted on at once: the daemon drains and exits 0."""
    daemon = start_daemon(short_dir, hostile_limits=True)
    flood = encode(type="wait_job", job="x") * 30_000
    socks = [connect_control(daemon) for _ in range(10)]
    for sock in socks:
        sock.setblocking(False)
        try:
            sock.send(flood)
        except OSError:
            pass
    signalled = time.monotonic()
    daemon.process.send_signal(signal.SIGTERM)
    assert daemon.process.wait(15) == 0
    assert time.monotonic() - signalled < 5
    for sock in socks:
        sock.close()


def control_fill_store(state: Path, count: int, detail_bytes: int) -> None:
    """A store whose findings for one job come to more than one frame (64 MiB) can hold."""
    store = FindingsStore(state / "sanitizerd.db")
    session = store.open_session("big", uid=0)
    detail = "x" * detail_bytes
    batch = [
        make_finding("illegal_read", job="big", session=session, address=i, size=8, detail=detail) for i in range(count)
    ]
    for start in range(0, count, 2000):
        store.add_findings(batch[start : start + 2000])
    store.close()


def test_control_findings_over_a_frame_are_paged(short_dir: Path) -> None:
    """20 000 findings of 4 KiB each (80 MB of reply): `sanitizerd findings` pages through them all."""
    control_fill_store(short_dir / "state", 20_000, 4096)
    daemon = start_daemon(short_dir, hostile_limits=True)
    try:
        listed = sanitizerd("findings", "--socket", str(daemon.socket), "--job", "big", "--format", "json")
        assert listed.returncode == 0 and "Traceback" not in listed.stderr, listed.stderr
        found = json.loads(listed.stdout)
        assert len(found) == 20_000 and [f["address"] for f in found] == list(range(20_000))
        with ControlClient(daemon.socket) as control:
            first = control.request(m.QueryFindings(job="big"))
            assert isinstance(first, m.Findings) and first.next == first.findings[-1].id
            assert len(msgspec.msgpack.encode(first)) < 8 << 20  # a page, far below the frame limit
        assert_serves_fresh_session(daemon)
    finally:
        assert stop_daemon(daemon) == 0


def control_mount_tmpfs(path: Path, size: str) -> None:
    path.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs for the full-disk test: {mounted.stderr.decode().strip()}")


def test_store_full_disk_is_reported_counted_and_refused_clearly(short_dir: Path) -> None:
    """The state directory on a 2 MiB file system: a session whose findings do not fit hears how many were not
    stored, stored + unstored is all of them, the log says "full" once (not "cannot rollback"), and a new session
    while the disk stays full is refused with store_unavailable, not a bare EOF."""
    state = short_dir / "state"
    control_mount_tmpfs(state, "2m")
    try:
        daemon = start_daemon(short_dir, hostile_limits=True)
        try:
            import numpy as np

            n = 20_000
            with Client(daemon.socket, job="fills-the-disk", timeout=60, resume_buffer=0) as client:
                kernel = client.kernel_begin("k", 1)
                addresses = 0x100000 + np.arange(n) * 0x1000
                client.events(kernel, accesses(EventKind.READ, Space.GM, addresses, 32, pc=np.arange(n) + 1))
                client.kernel_end(kernel)
                assert client.wait_kernel(kernel, timeout=60).errors == n
                closed = client.close()
            assert closed is not None and closed.findings == n and closed.unstored > 0, closed
            listed = sanitizerd(
                "findings", "--socket", str(daemon.socket), "--job", "fills-the-disk", "--format", "json"
            )
            stored = len(json.loads(listed.stdout))
            assert stored + closed.unstored == n, (stored, closed.unstored)
            log = daemon.log_text()
            assert "cannot rollback" not in log and "disk under the state directory is full" in log
            assert log.count("findings not stored") == 1  # once per burst, not once per batch
            filler = state / "filler"
            try:  # whatever room is left, taken: nothing can be written now
                with open(filler, "wb") as f:
                    while True:
                        f.write(b"\0" * 4096)
                        f.flush()
            except OSError:
                pass
            # A session opened now either works without its findings stored, or is refused by name.
            try:
                with Client(daemon.socket, job="while-full", timeout=10, resume_buffer=0) as client:
                    kernel = client.kernel_begin("k", 1)
                    client.events(kernel, accesses(EventKind.READ, Space.GM, 0x1000, 32))
                    client.kernel_end(kernel)
                    assert client.wait_kernel(kernel, timeout=10).errors == 1
                    closed = client.close()
                assert closed is not None and closed.findings == 1
            except ClientError as exc:
                assert "store_unavailable" in str(exc)
            filler.unlink(missing_ok=True)
            assert_serves_fresh_session(daemon)
        finally:
            assert stop_daemon(daemon) == 0
    finally:
        subprocess.run(["umount", "-l", str(state)], check=False)


def control_victim_and_attacker(daemon: RunningDaemon) -> tuple[list[dict[str, object]], list[dict[str, object]]]:
    """The victim (uid daemon) runs a session with two findings; what the victim sees afterwards."""
    other_uid.open_socket_to_all(daemon)
    answer = other_uid.as_uid(
        other_uid.DAEMON_USER, daemon, other_uid.producer_session("victim-job", illegal_reads=2), expect=3
    )
    assert [a["type"] for a in answer] == ["welcome", "verdict", "closed"], answer
    sessions, findings = other_uid.view_of(other_uid.DAEMON_USER, daemon)
    assert [s["job"] for s in sessions] == ["victim-job"] and len(findings) == 2
    return sessions, findings


def test_visibility_a_thousand_sessions_of_another_user_hide_nothing(hostile_daemon: RunningDaemon) -> None:
    """1 100 empty sessions from another uid, newer than the victim's: the victim still sees its session and its
    findings (selected by uid, not through a window of the newest sessions); the attacker sees none of them."""
    before = control_victim_and_attacker(hostile_daemon)
    empty = other_uid.frames(m.Hello(version=1, job="noise"), m.Close())
    other_uid.as_uid(other_uid.NOBODY, hostile_daemon, empty, expect=2, times=1_100)
    assert other_uid.view_of(other_uid.DAEMON_USER, hostile_daemon) == before
    theirs_sessions, theirs_findings = other_uid.view_of(other_uid.NOBODY, hostile_daemon)
    assert {s["job"] for s in theirs_sessions} == {"noise"} and len(theirs_sessions) == 1000
    assert theirs_findings == []
    assert_serves_fresh_session(hostile_daemon)


def test_resume_of_another_users_session_answers_as_for_none_and_changes_nothing(
    hostile_daemon: RunningDaemon,
) -> None:
    """`hello` with resume=<the victim's session> from another uid: the answer to a session that does not exist,
    and the victim's session stays ended and visible with its findings (the check comes before it is reopened).
    Queries and watches naming the victim's session or job answer as for ones nobody has."""
    before = control_victim_and_attacker(hostile_daemon)
    victim_session = before[0][0]["session"]
    answers = []
    for resume in (victim_session, victim_session + 1000):  # another's, and one that does not exist
        answer = other_uid.as_uid(
            other_uid.NOBODY, hostile_daemon, other_uid.frames(m.Hello(version=1, resume=resume)), expect=1
        )
        assert answer and answer[0]["type"] == "error" and answer[0]["reason"] == "bad_reference", answer
        answers.append(answer[0]["message"].replace(str(resume), "N"))
        assert other_uid.view_of(other_uid.DAEMON_USER, hostile_daemon) == before
    assert answers[0] == answers[1] == "there is no session N to resume"
    for theirs, none in (
        (m.QueryFindings(session=victim_session), m.QueryFindings(session=victim_session + 1000)),
        (m.QueryFindings(job="victim-job"), m.QueryFindings(job="no-such-job")),
        (m.Watch(job="victim-job"), m.Watch(job="no-such-job")),
    ):
        replies = [
            other_uid.bodies(other_uid.send(other_uid.NOBODY, hostile_daemon.socket, other_uid.control(request),
                                            expect=2, wait=1))
            for request in (theirs, none)
        ]  # fmt: skip
        assert replies[0] == replies[1] and b"error" not in b"".join(replies[0]), (theirs, replies)
        assert other_uid.view_of(other_uid.DAEMON_USER, hostile_daemon) == before
    assert_serves_fresh_session(hostile_daemon)


def test_sessions_left_open_by_a_crash_are_closed_at_the_next_start(short_dir: Path) -> None:
    """SIGKILL with a live session: the next daemon closes it with its own reason, and its owner sees it and its
    findings (they were hidden for ever before)."""
    daemon = start_daemon(short_dir, hostile_limits=True)
    client = Client(daemon.socket, job="crashed", timeout=30, resume_buffer=0)
    kernel = client.kernel_begin("k", 1)
    client.events(kernel, accesses(EventKind.READ, Space.GM, 0x1000, 32))
    client.kernel_end(kernel)
    assert client.wait_kernel(kernel, timeout=30).errors == 1
    daemon.process.kill()
    daemon.process.wait()
    daemon = start_daemon(short_dir, hostile_limits=True)
    try:
        listed = json.loads(sanitizerd("sessions", "--socket", str(daemon.socket), "--format", "json").stdout)
        [crashed] = [s for s in listed if s["job"] == "crashed"]
        assert crashed["state"] == "ended" and crashed["end_reason"] == "daemon stopped unexpectedly"
        assert crashed["findings"] == 1 and crashed["uid"] == os.getuid()
        found = sanitizerd("findings", "--socket", str(daemon.socket), "--job", "crashed", "--format", "json")
        assert [f["kind"] for f in json.loads(found.stdout)] == ["illegal_read"]
        jobs = json.loads(sanitizerd("jobs", "--socket", str(daemon.socket), "--format", "json").stdout)
        assert "crashed" in {j["job"] for j in jobs}
        assert_serves_fresh_session(daemon)
    finally:
        assert stop_daemon(daemon) == 0


def test_store_retention_by_age_and_size(short_dir: Path) -> None:
    """Sessions older than --retention-days go at the next start, with their findings; past --max-store-size the
    oldest ended sessions go and the store stops growing."""
    state = short_dir / "state"
    store = FindingsStore(state / "sanitizerd.db")
    for job in ("old", "recent"):
        session = store.open_session(job, uid=0)
        store.add_findings([make_finding("illegal_read", job=job, session=session, address=1, size=8)])
        ended_at = time.time() - (3 * 86400 if job == "old" else 0)
        store.close_session(m.SessionInfo(session=session, job=job, pid=1, uid=0, state="ended", ended=ended_at))
    store.close()
    daemon = start_daemon(short_dir, "--retention-days", "2", "--max-store-size", str(2 << 20), hostile_limits=True)
    try:
        jobs = {
            s["job"]
            for s in json.loads(sanitizerd("sessions", "--socket", str(daemon.socket), "--format", "json").stdout)
        }
        assert jobs == {"recent"}
        assert "retention: old sessions deleted" in daemon.log_text()
        # 40 sessions of 500 findings each (about 8 MB written): the store stays near its 2 MiB.
        import numpy as np

        for i in range(40):
            with Client(daemon.socket, job=f"fill-{i}", timeout=60, resume_buffer=0) as client:
                kernel = client.kernel_begin("k", 1)
                addresses = 0x100000 + np.arange(500) * 0x1000
                client.events(kernel, accesses(EventKind.READ, Space.GM, addresses, 32, pc=np.arange(500) + 1))
                client.kernel_end(kernel)
                client.wait_kernel(kernel, timeout=60)
        size = sum(p.stat().st_size for p in state.glob("sanitizerd.db*") if p.name != "sanitizerd.db-shm")
        assert size < 8 << 20, size
        jobs = {
            s["job"]
            for s in json.loads(sanitizerd("sessions", "--socket", str(daemon.socket), "--format", "json").stdout)
        }
        assert "fill-39" in jobs and "fill-0" not in jobs
        assert_serves_fresh_session(daemon)
    finally:
        assert stop_daemon(daemon) == 0


@pytest.mark.parametrize(
    "request_frame", [{"type": "watch", "job": "w-{}"}, {"type": "job_start", "job": "j-{}", "config": {}}]
)
def test_control_watch_and_job_start_floods_are_refused(
    hostile_daemon: RunningDaemon, request_frame: dict[str, object]
) -> None:
    """Watch (or job_start) frames for ever new jobs from one connection: refused by name once it holds its limit,
    so the daemon's bookkeeping for it stays small and its end costs nothing; other clients are answered meanwhile.
    (The same job again changes nothing: a connection watches or registers a job once.)"""
    sock = connect_control(hostile_daemon)
    sock.setblocking(False)
    job = str(request_frame["job"])
    flood = b"".join(encode(**{**request_frame, "job": job.format(i)}) for i in range(20_000))
    try:
        sock.send(flood[: 1 << 20])
    except OSError:
        pass
    asked = time.monotonic()
    listed = sanitizerd("sessions", "--socket", str(hostile_daemon.socket), timeout=20)
    assert listed.returncode == 0 and time.monotonic() - asked < 5, listed.stderr
    reply = read_all(sock, 5)
    assert b"request_limit" in reply and b"limit of 64 requests" in reply
    sock.close()
    assert_serves_fresh_session(hostile_daemon)


def test_store_that_takes_no_write_refuses_new_sessions_by_name(short_dir: Path) -> None:
    """The store's files made immutable under the running daemon (an ext4 image, chattr +i: even root cannot
    write): a new session is refused with store_unavailable, not a bare EOF; writable again, sessions work."""
    image, state = short_dir / "state.img", short_dir / "state"
    subprocess.run(["truncate", "-s", "16M", str(image)], check=True)
    if subprocess.run(["mkfs.ext4", "-q", str(image)], capture_output=True).returncode != 0:
        pytest.skip("no mkfs.ext4 for the unwritable-store test")
    state.mkdir()
    mounted = subprocess.run(["mount", "-o", "loop", str(image), str(state)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot loop-mount an ext4 image: {mounted.stderr.decode().strip()}")
    files = [str(state / name) for name in ("sanitizerd.db", "sanitizerd.db-wal")]
    try:
        daemon = start_daemon(short_dir, hostile_limits=True)
        try:
            subprocess.run(["chattr", "+i", *files], check=True)
            with pytest.raises(ClientError, match=r"store_unavailable.*cannot open a session"):
                with Client(daemon.socket, job="unwritable", timeout=10, resume_buffer=0) as client:
                    client.close()
            subprocess.run(["chattr", "-i", *files], check=True)
            assert_serves_fresh_session(daemon)
        finally:
            subprocess.run(["chattr", "-i", *files], check=False)
            assert stop_daemon(daemon) == 0
    finally:
        subprocess.run(["umount", "-l", str(state)], check=False)


# --- configuration and metrics ---


@contextlib.contextmanager
def config_daemon(base: Path, text: str) -> Iterator[tuple[RunningDaemon, Path, int]]:
    """A daemon under host limits, reading ``text`` as its config file, serving metrics on a free port: (daemon, the
    file, the port). After a body that passed, the daemon still serves a fresh session; it must stop cleanly."""
    path = base / "sanitizerd.toml"
    path.write_text(text)
    port = free_port()
    daemon = start_daemon(
        base, "--config", str(path), "--handshake-timeout", "1", "--metrics-addr", f"127.0.0.1:{port}",
        hostile_limits=True,
    )  # fmt: skip
    try:
        yield daemon, path, port
        assert_serves_fresh_session(daemon)
    finally:
        assert stop_daemon(daemon) == 0, daemon.log_text()


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
        with config_daemon(short_dir, "[limits]\nmax_sessions = 1\n") as (daemon, path, port):
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

    def test_sighup_storm(self, short_dir: Path) -> None:
        """Many SIGHUPs in a row, the file flipping between good and bad: the daemon never ends."""
        with config_daemon(short_dir, "[limits]\nqueue_depth = 2\n") as (daemon, path, port):
            for i in range(40):
                path.write_text("[limits]\nqueue_depth = 0.5\n" if i % 2 else "[limits]\nqueue_depth = 3\n")
                daemon.process.send_signal(signal.SIGHUP)
                time.sleep(0.01)
            config_wait_ready(port)


class TestMetricsEndpointAttacks:
    @pytest.mark.parametrize("idle", [1, 50])
    def test_idle_connections_do_not_block_healthz(self, short_dir: Path, idle: int) -> None:
        with config_daemon(short_dir, "") as (_, _, port), contextlib.ExitStack() as held:
            for _ in range(idle):
                held.enter_context(socket.create_connection(("127.0.0.1", port), timeout=5))
            time.sleep(0.2)  # all of them accepted and waiting
            for path, answer in (("/healthz", b"ok\n"), ("/readyz", b"ready\n")):
                started = time.monotonic()
                assert config_get(port, path) == (200, answer)
                assert time.monotonic() - started < 2
            status, body = config_get(port, "/metrics")
            assert status == 200 and b"sanitizerd_sessions_live" in body

    # Connections a flood round opens: far fewer than the listener's backlog (128), so the kernel queues every one for
    # the daemon to take at once. 600 at once overflowed it: the kernel then dropped handshakes and retransmitted them
    # seconds apart, so when (and whether) the daemon saw each one was up to those timers and the machine's load.
    FLOOD_ROUND = 50
    FLOOD_HELD = 16  # what the metrics server serves at once (metrics_server.MAX_CONNECTIONS)

    def test_a_flood_of_idle_connections_costs_bounded_fds_and_threads(self, short_dir: Path) -> None:
        """600 idle connections, 50 a round: the daemon holds at most twice its 16 connections (the oldest are closed
        for newer ones, counted), so fds and threads stay bounded and probes are answered. A round is over when the
        daemon has closed all but 16 of its connections, as each of them tells by its end of file, and its survivors
        end before the next: each count is checked at a point the daemon reached, however fast it got there."""
        rounds, held = 600 // self.FLOOD_ROUND, self.FLOOD_HELD
        with config_daemon(short_dir, "") as (daemon, _, port):
            fds, threads = config_daemon_fds(daemon), config_daemon_threads(daemon)

            def bounded() -> None:
                assert config_daemon_fds(daemon) <= fds + 2 * held + 4
                assert config_daemon_threads(daemon) <= threads + 2 * held + 2

            deadline = time.monotonic() + 120  # a safety net for a daemon that stops closing: no round waits on time
            for _ in range(rounds):
                before = self.flood_dropped(port)
                flood = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(self.FLOOD_ROUND)]
                try:
                    survivors = self.flood_wait_closed(flood, leave=held, deadline=deadline, each=bounded)
                    bounded()
                    # The connections pushed out end on their threads, which a loaded machine runs late; until they
                    # have, a newcomer past twice 16 is refused by design. Once the daemon has no more threads than
                    # the survivors', a probe finds room.
                    while config_daemon_threads(daemon) > threads + held + 2:
                        assert time.monotonic() < deadline, "the connections pushed out did not end"
                        time.sleep(0.01)
                    assert config_get(port, "/healthz") == (200, b"ok\n")
                    # Every connection pushed out for a newer one was counted (the probes may push out more). Only
                    # an idle connection's own read timeout (5 s) closes one uncounted, and the daemon takes a queued
                    # round in a fraction of that.
                    assert self.flood_dropped(port) - before >= self.FLOOD_ROUND - held
                    for sock in survivors:  # they end, and the daemon closes them: the next round finds none held
                        with contextlib.suppress(OSError):
                            sock.shutdown(socket.SHUT_WR)
                    self.flood_wait_closed(survivors, leave=0, deadline=deadline, each=bounded)
                finally:
                    for sock in flood:
                        sock.close()
            bounded()
            assert self.flood_dropped(port) >= rounds * (self.FLOOD_ROUND - held)

    @staticmethod
    def flood_dropped(port: int) -> float:
        """Connections the daemon closed for newer ones, or refused, by its metrics (a probe of its own)."""
        status, body = config_get(port, "/metrics")
        assert status == 200
        dropped = rb'sanitizerd_metrics_connections_dropped_total\{reason="(?:evicted|overflow)"\} (\S+)'
        counts = re.findall(dropped, body)
        return sum(float(count) for count in counts)

    @staticmethod
    def flood_wait_closed(
        socks: list[socket.socket], *, leave: int, deadline: float, each: Callable[[], None]
    ) -> list[socket.socket]:
        """Wait until the daemon has closed all but ``leave`` of ``socks`` (each reads end of file, or a reset, when
        it has), calling ``each`` at every wake-up; the ones still open."""
        open_ = set(socks)
        with selectors.DefaultSelector() as selector:
            for sock in socks:
                selector.register(sock, selectors.EVENT_READ)
            while len(open_) > leave:
                assert time.monotonic() < deadline, f"{len(open_)} connections still open, {leave} expected"
                for key, _ in selector.select(timeout=1.0):
                    sock = key.fileobj
                    assert isinstance(sock, socket.socket)
                    try:
                        closed = sock.recv(4096) == b""
                    except OSError:
                        closed = True
                    if closed:
                        selector.unregister(sock)
                        open_.discard(sock)
                each()
        return [sock for sock in socks if sock in open_]

    def test_a_request_trickled_byte_by_byte_is_cut_at_its_deadline(self, short_dir: Path) -> None:
        with config_daemon(short_dir, "") as (_, _, port):
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

    def test_huge_request_headers_cost_bounded_memory(self, short_dir: Path) -> None:
        """16 connections each sending 99 header lines of 60 KiB and then waiting (the standard library would hold
        all 6 MiB of each): the daemon reads 16 KiB of a request, so its RSS grows by far less than the 95 MiB."""
        with config_daemon(short_dir, "") as (daemon, _, port), contextlib.ExitStack() as held:
            before = rss_bytes(daemon.process.pid)
            line = b"X-Big: " + b"a" * (60 << 10) + b"\r\n"
            for _ in range(16):
                big = held.enter_context(socket.create_connection(("127.0.0.1", port), timeout=10))
                with contextlib.suppress(OSError):  # the daemon may answer and close before all is sent
                    big.sendall(b"GET /healthz HTTP/1.0\r\n" + line * 99)
            time.sleep(0.5)
            assert rss_bytes(daemon.process.pid) - before < 32 << 20
            assert config_get(port, "/healthz") == (200, b"ok\n")

    def test_unknown_paths_and_methods_are_refused(self, short_dir: Path) -> None:
        with config_daemon(short_dir, "") as (_, _, port):
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

    def test_healthz_answers_under_a_connection_flood_on_the_main_socket(self, short_dir: Path) -> None:
        """500 connections that never say hello hold the main socket: /healthz (its own threads) still answers."""
        with config_daemon(short_dir, "") as (daemon, _, port):
            with contextlib.ExitStack() as held:
                for _ in range(500):
                    held.enter_context(connect(daemon))
                started = time.monotonic()
                assert config_get(port, "/healthz") == (200, b"ok\n")
                assert time.monotonic() - started < 2
                assert config_get(port, "/readyz")[0] in (200, 503)  # answered, whatever the loop is doing
            config_wait_ready(port)


# --- frames and connections ---


def conn_hello(job: str = "hostile") -> bytes:
    return encode(type="hello", version=1, job=job)


def conn_last_error(sock: socket.socket) -> dict[str, object]:
    answer = read_replies(sock)
    assert answer and answer[-1]["type"] == "error", f"no error frame before the close: {answer}"
    return answer[-1]


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
        with connect(hostile_daemon) as sock:
            sock.sendall(frame(body))
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
        with connect(hostile_daemon) as sock:
            sock.sendall(frame(body))
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
        with connect(hostile_daemon) as sock:
            sock.sendall(conn_hello("hostile-after-hello") + frame(body))
            error = conn_last_error(sock)
        assert error["reason"] in ("bad_packet", "bad_reference"), error
        assert len(str(error["message"])) < 1000
        assert_serves_fresh_session(hostile_daemon)

    def test_kernel_id_reused_while_checked(self, hostile_daemon: RunningDaemon) -> None:
        """A launch id reused right after its kernel_end, while its detectors still check it: bad_reference, said in an
        error frame (it was an exception inside the session pump and a bare EOF)."""
        config = {"tools": ["memcheck", "racecheck", "initcheck", "synccheck"]}
        begin = encode(type="kernel_begin", kernel=1, name="k", block_dim=1)
        with connect(hostile_daemon) as sock:
            sock.sendall(encode(type="hello", version=1, job="reuse", config=config))
            sock.sendall(begin + encode(type="kernel_end", kernel=1) + begin)
            replies = read_replies(sock)
        assert replies[-1]["type"] == "error" and replies[-1]["reason"] == "bad_reference", replies
        assert "still being checked" in str(replies[-1]["message"])
        assert_serves_fresh_session(hostile_daemon)


def conn_raise_own_fd_limit(wanted: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < wanted:
        if hard != resource.RLIM_INFINITY and hard < wanted:
            pytest.skip(f"the test itself needs {wanted} fds; the hard limit is {hard}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))


class TestHostileConnections:
    def test_idle_connections_past_the_default_fd_limit(self, short_dir: Path) -> None:
        """1 100 idle connections under the default soft limit of 1 024: the daemon raised its limit at start, each
        connection is admitted or refused by name (connection_limit, per uid), the admitted are cut at the handshake
        timeout, and the daemon serves on. The timeout is long enough (5 s) for all 1 100 to be open at once on a
        loaded machine: with 1 s, the first were cut before the last connected and freed their places."""
        hostile_daemon = start_daemon(short_dir, "--handshake-timeout", "5", hostile_limits=True)
        try:
            self._idle_connections(hostile_daemon)
        finally:
            code = stop_daemon(hostile_daemon)
        assert code == 0, hostile_daemon.log_text()

    def _idle_connections(self, hostile_daemon: RunningDaemon) -> None:
        conn_raise_own_fd_limit(2048)
        socks = [connect(hostile_daemon) for _ in range(1100)]
        try:
            reasons = Counter(str(conn_last_error(sock)["reason"]) for sock in socks)
        finally:
            for sock in socks:
                sock.close()
        assert set(reasons) <= {"handshake_timeout", "connection_limit"}, reasons
        assert reasons["connection_limit"] >= 1100 - 512, reasons  # max_connections_per_uid
        # The refusals are counted, but the log takes a burst and then a rate of them: a flood cannot flood it.
        logged = hostile_daemon.log_text().count("connection_limit")
        assert logged <= 50 + 5 * 30, logged
        assert hostile_daemon.process.poll() is None
        assert_serves_fresh_session(hostile_daemon)

    def test_accept_out_of_fds_backs_off(self, short_dir: Path) -> None:
        """With its fds exhausted (the limit lowered under it), accept fails with EMFILE: the daemon backs off and
        retries, counts each failure, logs the burst once, and accepts again once fds are free."""
        port = free_port()
        daemon = start_daemon(
            short_dir, "--handshake-timeout", "60", "--metrics-addr", f"127.0.0.1:{port}", hostile_limits=True
        )
        pid = daemon.process.pid
        try:
            soft, hard = resource.prlimit(pid, resource.RLIMIT_NOFILE)
            resource.prlimit(pid, resource.RLIMIT_NOFILE, (len(os.listdir(f"/proc/{pid}/fd")) + 3, hard))
            socks = [connect(daemon) for _ in range(20)]
            daemon.wait_for_log("accept failed")
            time.sleep(2)
            assert daemon.log_text().count("accept failed") == 1  # once per burst, not once per failure
            for sock in socks:
                sock.close()
            resource.prlimit(pid, resource.RLIMIT_NOFILE, (soft, hard))
            # Read only now: the metrics server needs an fd too.
            assert metric(port, 'sanitizerd_accept_errors_total{errno="EMFILE"}') >= 3
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
            with connect(daemon, timeout=60) as sock:
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
            with connect(daemon) as idle, connect(daemon) as stalled:
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
                [*SERVE, "--socket", str(path), "--state-dir", str(base / "st")],
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
                # The temporary name goes right after the link that made the socket appear: no temporary name left
                # (on a loaded machine the unlink may come a moment after this connect).
                gone = time.monotonic() + 5
                while [p.name for p in base.iterdir() if p.name.startswith(".")] and time.monotonic() < gone:
                    time.sleep(0.01)
                assert [p.name for p in base.iterdir() if p.name.startswith(".")] == []
            finally:
                process.send_signal(signal.SIGTERM)
                assert process.wait(15) == 0
            assert not path.exists()

    def test_failed_start_leaves_the_running_daemons_socket(self, hostile_daemon: RunningDaemon) -> None:
        """A second daemon on the same socket refuses to start and leaves the first one's socket in place."""
        paths = ("--socket", str(hostile_daemon.socket), "--state-dir", str(hostile_daemon.state_dir))
        second = sanitizerd("serve", *paths, "--workers", "1")
        assert second.returncode != 0 and "already serving" in second.stderr
        assert hostile_daemon.socket.exists()
        assert_serves_fresh_session(hostile_daemon)


_CONN_INTS = (0, 1, -1, 7, 2**31, 2**32, 2**63 - 1, -(2**63), 2**64 - 1, 0x1000, 255, 65535)


CONN_TOOLS = ["memcheck", "racecheck", "initcheck", "synccheck", "registercheck"]


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


def random_session(daemon: RunningDaemon, rng: random.Random, job: str) -> str:
    """One session of 1-30 random producer messages, some tools on, ended by the client (half of the time with a
    close): how the daemon ended it (an error's reason, else its last reply's type; "None": it said nothing)."""
    config = {"tools": rng.sample(CONN_TOOLS, rng.randint(1, 5)), "leak_check": True, "check_unused_memory": True}
    data = encode(type="hello", version=1, job=job, config=config)
    data += b"".join(encode(**conn_random_message(rng)) for _ in range(rng.randint(1, 30)))
    if rng.random() < 0.5:
        data += encode(type="close")
    with connect(daemon, timeout=30) as sock:
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)
        replies = read_replies(sock)
    last = replies[-1] if replies else {}
    return str(last.get("reason") if last.get("type") == "error" else last.get("type"))


def assert_nothing_of_ours_failed(daemon: RunningDaemon) -> None:
    """No connection handler, session pump or detector failed: each would be a bug of ours, logged in full."""
    failed = [line for line in daemon.log_text().splitlines() if re.search(r'"event": "[a-z ]+ failed"', line)]
    assert not failed, "\n".join(failed[:3])


def test_random_producer_streams_end_only_their_session(hostile_daemon: RunningDaemon) -> None:
    """150 sessions of random messages of every producer type, numbers at the edges of their ranges, every tool on:
    each ends with closed, an error frame naming a protocol reason, or (no close sent) nothing; the daemon's
    connection handler, session pumps and detectors never fail."""
    rng = random.Random(10)
    endings = Counter(random_session(hostile_daemon, rng, f"random-{n % 3}") for n in range(150))
    assert "internal_error" not in endings and "None" not in endings, endings
    assert endings["closed"] > 0 and endings["bad_reference"] > 0, endings
    assert_nothing_of_ours_failed(hostile_daemon)
    assert_serves_fresh_session(hostile_daemon)


def test_random_producer_streams_in_parallel_on_shared_jobs(hostile_daemon: RunningDaemon) -> None:
    """Three clients at once send random producer streams to the same three jobs: the sessions of a job meet
    (IPC names, verdicts finishing while another message refuses the session), and still every session ends
    with closed, a protocol reason or nothing, and no handler, pump or detector of ours fails."""

    def client(seed: int, endings: Counter[str]) -> None:
        rng = random.Random(seed)
        endings.update(random_session(hostile_daemon, rng, f"shared-{n % 3}") for n in range(80))

    endings: list[Counter[str]] = [Counter() for _ in range(3)]
    threads = [threading.Thread(target=client, args=(200 + k, endings[k])) for k in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    total = sum(endings, Counter())
    assert total.total() == 240 and "internal_error" not in total and "None" not in total, total
    assert_nothing_of_ours_failed(hostile_daemon)
    assert_serves_fresh_session(hostile_daemon)


@pytest.mark.parametrize(
    "op",
    [
        {"op": "malloc", "address": 2**64 - 16, "size": 32},
        {"op": "store", "address": 2**64 - 1, "size": 2**63},
        {"op": "memset", "address": 2**63, "size": 2**63},  # ends at 2**64: one past what a uint64 holds
        {"op": "memcpy", "address": 0x1000, "src": 2**64 - 8, "size": 16},
    ],
    ids=["malloc", "store", "memset", "memcpy-src"],
)
def test_host_ranges_past_the_address_space_end_their_session_by_name(
    hostile_daemon: RunningDaemon, op: dict[str, int]
) -> None:
    """A host operation whose address (or memcpy's source) plus its size passes 2**64 - 1: each number fits its
    field, but the range does not. The session ends with bad_packet naming it; no detector fails on it."""
    config = {"tools": ["memcheck", "initcheck"], "leak_check": True}
    with connect(hostile_daemon) as sock:
        sock.sendall(encode(type="hello", version=1, job="host-range", config=config))
        sock.sendall(encode(type="host_op", **op) + encode(type="close"))
        replies = read_replies(sock)
    assert replies[-1]["type"] == "error" and replies[-1]["reason"] == "bad_packet", replies
    assert "passes the end of the address space" in str(replies[-1]["message"])
    assert_nothing_of_ours_failed(hostile_daemon)
    assert_serves_fresh_session(hostile_daemon)


def test_host_range_ending_at_the_last_address_is_checked(hostile_daemon: RunningDaemon) -> None:
    """The edge: a malloc ending at 2**64 - 1 and a store into it are ordinary operations, and checked."""
    end = 2**64 - 1
    config = {"tools": ["memcheck", "initcheck"], "leak_check": True}
    ops = [
        {"op": "malloc", "address": end - 64, "size": 64},
        {"op": "store", "address": end - 64, "size": 64},
        {"op": "store", "address": end - 32, "size": 32},
        {"op": "free", "address": end - 64},
    ]
    with connect(hostile_daemon) as sock:
        sock.sendall(encode(type="hello", version=1, job="host-edge", config=config))
        sock.sendall(b"".join(encode(type="host_op", **op) for op in ops) + encode(type="close"))
        replies = read_replies(sock)
    assert replies[-1]["type"] == "closed", replies
    assert_nothing_of_ours_failed(hostile_daemon)


def test_ipc_ranges_past_the_address_space_are_refused_and_change_nothing(hostile_daemon: RunningDaemon) -> None:
    """An export, or a mapping of a good export, that would pass 2**64 - 1 is answered ok=false with the reason;
    the name stays free (a good export of it then works) and the address unmapped; the session goes on."""
    messages = [
        {"op": "set", "name": "a", "address": 2**64 - 16, "size": 32},  # refused
        {"op": "set", "name": "a", "address": 0x1000, "size": 4096},  # the name is still free
        {"op": "map", "name": "a", "address": 2**64 - 100},  # refused: 4 096 bytes do not fit there
        {"op": "unmap", "address": 2**64 - 100},  # refused: nothing was mapped
        {"op": "map", "name": "a", "address": 0x9000},
    ]
    with connect(hostile_daemon) as sock:
        sock.sendall(encode(type="hello", version=1, job="ipc-range", config={"tools": ["memcheck"]}))
        sock.sendall(b"".join(encode(type="ipc", **message) for message in messages) + encode(type="close"))
        replies = read_replies(sock)
    results = [r for r in replies if r["type"] == "ipc_result"]
    assert [r["ok"] for r in results] == [False, True, False, False, True], results
    assert "passes the end of the address space" in str(results[0]["reason"])
    assert "passes the end of the address space" in str(results[2]["reason"])
    assert replies[-1]["type"] == "closed"
    assert_nothing_of_ours_failed(hostile_daemon)


def _conn_hard_fd_limit_1024() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))
    resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))


def test_connections_fit_a_hard_fd_limit_of_1024(short_dir: Path) -> None:
    """Where even the hard fd limit is 1 024, the daemon lowers max_connections (and max_sessions) to fit, saying so
    at start; 1 100 connections then meet connection_limit, never an out-of-fds accept, and the daemon serves on."""
    conn_raise_own_fd_limit(2048)
    sock, state, log = short_dir / "s.sock", short_dir / "state", short_dir / "daemon.log"
    command = [*SERVE, "--socket", str(sock), "--state-dir", str(state)]
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
        socks = [connect(daemon) for _ in range(1100)]
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


# --- racecheck memory ---
# racecheck holds a launch's events until the launch ends (about 300 B each with its check), and a client chooses how
# many it sends. The host's budget (--race-memory) bounds all sessions together: a launch that finds it spent is left
# unchecked, and its verdict says so.

RACE_MEMORY = 64 << 20
RACE_BATCH = 65536
# Each client: one launch of 24 batches (1.5 M events, 88 MB of records): alone, more than the whole budget.
RACE_CLIENT = """
import json, sys
import numpy as np
from client_shim import Client, EventKind, Pipe, Space, accesses
from sanitizerd_protocol.messages import Config

socket_path, job, size, batches, leave = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
i = np.arange(size)
# 32 blocks, each writing its own 32-byte slots: no candidate pair, so the check itself is quick.
events = accesses(EventKind.WRITE, Space.UB, (i // 32) * 32, 32, pipe=Pipe.V, block_id=i % 32, serial=i + 1)
client = Client(socket_path, job=job, config=Config(tools=["racecheck"]), resume_buffer=0, timeout=60)
kernel = client.kernel_begin("hold_everything", 32)
for _ in range(batches):
    client.events(kernel, events)
client.flush()
print("streamed", flush=True)
sys.stdin.readline()  # every client has streamed: now they all hold (or were refused) at once
if leave == "leave":  # gone mid-launch, without kernel_end or close: what it held must come back all the same
    import os
    os._exit(0)
client.kernel_end(kernel)
verdict = client.wait_kernel(kernel, timeout=60)
client.close()
print(json.dumps({"events": verdict.events, "errors": verdict.errors, "checked": verdict.checked}), flush=True)
"""


def test_race_memory_concurrent_sessions_stay_within_the_hosts_budget(short_dir: Path) -> None:
    """Six sessions each stream a launch bigger than the whole budget, all at once, and two more leave mid-launch:
    the daemon's memory stays within the budget (plus frames in flight), every finished launch gets a verdict that
    counts an error (its internal_error: cut at the budget, or not checked at all), refusals are counted, and once
    the sessions are gone, nothing stays reserved."""
    port = free_port()
    daemon = start_daemon(
        short_dir, "--race-memory", str(RACE_MEMORY), "--metrics-addr", f"127.0.0.1:{port}", hostile_limits=True
    )
    try:
        baseline = rss_bytes(daemon.process.pid)
        clients = [
            subprocess.Popen(
                [sys.executable, "-c", RACE_CLIENT, str(daemon.socket), f"race-{n}", str(RACE_BATCH), "24", mode],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                cwd=ROOT,
            )
            for n, mode in enumerate(["stay"] * 6 + ["leave"] * 2)
        ]
        for client in clients:
            assert client.stdout is not None and client.stdout.readline() == "streamed\n"
        for client in clients:
            assert client.stdin is not None
            client.stdin.write("go\n")
            client.stdin.flush()
        verdicts = []
        for client in clients:
            out, _ = client.communicate(timeout=120)
            assert client.returncode == 0
            verdicts.extend(json.loads(line) for line in out.splitlines() if line.startswith("{"))
        assert len(verdicts) == 6
        for verdict in verdicts:  # none silently "0 errors": each says its launch was cut, or left unchecked, or both
            assert (verdict["events"], verdict["checked"]) == (24 * RACE_BATCH, True), verdict
            assert verdict["errors"] in (1, 2), verdict
        grown = peak_rss_bytes(daemon.process.pid) - baseline
        # Without the budget: 8 x 1.5 M events x ~300 B, about 3.7 GB. With it: the budget, and the frames each
        # session's queues and socket hold (8 sessions x queue_depth 4 x 3.5 MiB).
        assert grown < RACE_MEMORY + (160 << 20), f"the daemon grew by {grown >> 20} MiB"
        assert metric(port, "sanitizerd_race_memory_refusals_total") >= 1
        # Each launch left unchecked is also counted as a check racecheck cut short.
        assert metric(port, 'sanitizerd_detector_checks_cut_total{detector="racecheck"}') >= 1
        deadline = time.monotonic() + 10
        while metric(port, "sanitizerd_race_memory_bytes") and time.monotonic() < deadline:
            time.sleep(0.1)  # the two that left end when the daemon reads their EOF
        assert metric(port, "sanitizerd_race_memory_bytes") == 0
        assert metric(port, "sanitizerd_race_memory_limit_bytes") == RACE_MEMORY
        assert "race-check memory budget spent" in daemon.log_text()
        assert_serves_fresh_session(daemon)
    finally:
        assert stop_daemon(daemon) == 0, daemon.log_text()


def test_race_memory_patterns_past_the_budget_are_refused_up_front(
    hostile_daemon: RunningDaemon,
) -> None:
    """One record spanning 65 535 blocks x 65 535 repeats with gaps (4 G byte ranges in racecheck's sweep), then a
    launch of wide writes over many small ones (pieces quadratic in the accesses: 100 M), then a SyncAll over 8 192
    blocks (what each wait knows of every block: 800 M clocks): each asks the budget before making them, is refused,
    and its verdict counts the internal_error; the daemon does not grow."""
    daemon = hostile_daemon
    baseline = rss_bytes(daemon.process.pid)
    huge = accesses(
        EventKind.READ, Space.GM, 0x10000, 32, block_num=65535, block_stride=2, repeat=65535, repeat_stride=65535,
        pipe=Pipe.MTE2, serial=1,
    )  # fmt: skip
    i = np.arange(20_000)
    wide = i % 2 == 0
    nested = accesses(
        EventKind.WRITE, Space.GM, np.where(wide, 0, (i // 2) * 64), np.where(wide, 1 << 20, 32), pipe=Pipe.MTE3,
        serial=i + 1,
    )  # fmt: skip
    blocks = np.arange(8192)
    sync_all = np.concatenate(
        [
            syncs(EventKind.CROSS_SET, Pipe.S, Pipe.S, 31, block_id=blocks, serial=1),
            syncs(EventKind.CROSS_WAIT, Pipe.S, Pipe.S, 31, block_id=blocks, serial=2),
        ]
    )
    sync_all = sync_all[np.argsort(sync_all["block_id"], kind="stable")]
    launches = (("one_huge_record", huge), ("nested_ranges", nested), ("sync_all", sync_all))
    with Client(daemon.socket, job="race-patterns", config=Config(tools=["racecheck"]), resume_buffer=0) as client:
        for name, events in launches:
            kernel = client.kernel_begin(name, 1)
            client.events(kernel, events)
            client.kernel_end(kernel)
            verdict = client.wait_kernel(kernel, timeout=30)
            assert (verdict.events, verdict.errors) == (events.size, 1), (name, verdict)
        client.close()
    assert rss_bytes(daemon.process.pid) - baseline < 200 << 20
    log = daemon.log_text()
    assert log.count("race-check memory budget spent") == 3, log
    assert_serves_fresh_session(daemon)


# --- detector patterns ---
# One 56-byte record can name 65 535 x 65 535 blocks; an ordinary strided vector workload names thousands per
# record. Detectors work on the pattern's runs in closed form or in bounded chunks, never block by block.

PATTERNS_RSS_LIMIT = 500 << 20
PATTERNS_UNMAPPED = 0x7000_0000_0000
PATTERNS_INITCHECK_GROWTH = 100 << 20


def patterns_findings(daemon: RunningDaemon, job: str) -> list[dict[str, object]]:
    out = sanitizerd("findings", "--socket", str(daemon.socket), "--job", job, "--format", "json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


class TestPatternsWidest:
    @pytest.mark.parametrize("kind", [EventKind.READ, EventKind.WRITE], ids=["read", "write"])
    def test_widest_pattern_at_unmapped_address_is_reported(
        self, hostile_daemon: RunningDaemon, kind: EventKind
    ) -> None:
        """65 535 x 65 535 blocks of 32 bytes at an unmapped GM address: one illegal access, its exact byte count,
        and the daemon's RSS stays under 500 MB (the expansion would be 4.3 billion ranges)."""
        config = m.Config(tools=["memcheck"], check_unused_memory=True)
        with Client(hostile_daemon.socket, job="patterns-widest", config=config, resume_buffer=0, timeout=60) as client:
            client.malloc(0x1000, 4096)
            kernel = client.kernel_begin("widest", 1)
            client.events(kernel, accesses(kind, Space.GM, PATTERNS_UNMAPPED, 32, block_num=65535, block_stride=2,
                                           repeat=65535, repeat_stride=65535))  # fmt: skip
            client.kernel_end(kernel)
            verdict = client.wait_kernel(kernel, timeout=60)
            client.free(0x1000)
        assert (verdict.events, verdict.errors) == (1, 1), verdict
        assert peak_rss_bytes(hostile_daemon.process.pid) < PATTERNS_RSS_LIMIT
        [finding] = [f for f in patterns_findings(hostile_daemon, "patterns-widest") if f["kind"] != "unused_memory"]
        expected = "illegal_read" if kind == EventKind.READ else "illegal_write"
        assert (finding["kind"], finding["address"], finding["size"]) == (
            expected,
            PATTERNS_UNMAPPED,
            65535 * 65535 * 32,
        )
        assert_serves_fresh_session(hostile_daemon)

    def test_widest_pattern_under_initcheck(self, hostile_daemon: RunningDaemon) -> None:
        """initcheck: the widest read of unwritten GM is one uninitialized_read of its exact size; the widest write
        would fragment the defined bytes into 4.3 billion ranges, so initcheck stops and says so."""
        config = m.Config(tools=["initcheck"])
        widest = dict(block_num=65535, block_stride=2, repeat=65535, repeat_stride=65535)
        with Client(hostile_daemon.socket, job="patterns-init", config=config, resume_buffer=0, timeout=60) as client:
            client.malloc(PATTERNS_UNMAPPED, 1 << 46)
            kernel = client.kernel_begin("widest", 1)
            client.events(kernel, accesses(EventKind.READ, Space.GM, PATTERNS_UNMAPPED, 32, **widest))
            client.events(kernel, accesses(EventKind.WRITE, Space.GM, PATTERNS_UNMAPPED, 32, **widest))
            client.kernel_end(kernel)
            verdict = client.wait_kernel(kernel, timeout=60)
        assert (verdict.events, verdict.errors) == (2, 2), verdict
        assert peak_rss_bytes(hostile_daemon.process.pid) < PATTERNS_RSS_LIMIT
        found = {f["kind"]: f for f in patterns_findings(hostile_daemon, "patterns-init")}
        read = found["uninitialized_read"]
        assert (read["address"], read["size"]) == (PATTERNS_UNMAPPED, 65535 * 65535 * 32)
        assert "initcheck stopped" in str(found["internal_error"]["detail"])
        assert_serves_fresh_session(hostile_daemon)


class TestPatternsInitcheckStrided:
    def test_strided_vector_accesses_stay_small(self, hostile_daemon: RunningDaemon) -> None:
        """initcheck on 8 192 strided vector writes and 8 192 reads of them (block_num 8, block_stride 2, repeat
        255: 2 040 blocks each): no error, and the daemon grows by less than 100 MB (it took GBs)."""
        before = rss_bytes(hostile_daemon.process.pid)
        config = m.Config(tools=["initcheck"])
        n = 16384
        kinds = np.where(np.arange(n) % 2 == 0, EventKind.WRITE, EventKind.READ)
        block = (np.arange(n) // 2) % 8
        events = accesses(kinds, Space.UB, 0, 32, block_num=8, block_stride=2, repeat=255, repeat_stride=16,
                          block_id=block)  # fmt: skip
        with Client(hostile_daemon.socket, job="patterns-initcheck", config=config, resume_buffer=0, timeout=120) as c:
            kernel = c.kernel_begin("strided", 8)
            for at in range(0, n, 4096):
                c.events(kernel, events[at : at + 4096])
            c.kernel_end(kernel)
            verdict = c.wait_kernel(kernel, timeout=120)
        assert (verdict.events, verdict.errors) == (n, 0), verdict
        grown = peak_rss_bytes(hostile_daemon.process.pid) - before
        assert grown < PATTERNS_INITCHECK_GROWTH, f"initcheck grew the daemon by {grown >> 20} MiB"
        assert_serves_fresh_session(hostile_daemon)


class TestPatternsHostOpsAndScatteredWrites:
    def test_alternating_mallocs_and_stores_stay_linear(self, hostile_daemon: RunningDaemon) -> None:
        """20 000 host operations alternating malloc and store (each store re-derived legal GM from every allocation:
        54 s of event-loop CPU, quadratic) under memcheck with unused-memory tracking and initcheck: the session
        closes with nothing to report, and meanwhile another session is served within seconds."""
        config = m.Config(tools=["memcheck", "initcheck"], check_unused_memory=True)
        done = threading.Event()

        def flood() -> None:
            with Client(hostile_daemon.socket, job="patterns-hostops", config=config, resume_buffer=0) as client:
                for i in range(10_000):
                    client.malloc(0x1_0000_0000 + 1024 * i, 512)
                    client.store(0x1_0000_0000 + 1024 * i, 64)
                client.flush()
            done.set()

        worker = threading.Thread(target=flood)
        worker.start()
        try:
            time.sleep(1)  # well into the flood
            assert_serves_fresh_session(hostile_daemon)
        finally:
            worker.join(timeout=120)
        assert done.is_set(), "the flood's session did not close"
        findings = patterns_findings(hostile_daemon, "patterns-hostops")
        assert {f["kind"] for f in findings} == {"unused_memory"}  # each allocation was only partly written

    def test_scattered_one_byte_writes_under_unused_memory_stay_bounded(self, hostile_daemon: RunningDaemon) -> None:
        """Batches of 65 536 one-byte writes at random even addresses of a 4 GiB allocation (a range each for the
        written set and stomping): every batch is checked, the kernel gets its verdict, memory stays bounded."""
        config = m.Config(tools=["memcheck"], check_unused_memory=True)
        rng = np.random.default_rng(7)
        base = 0x2_0000_0000
        with Client(hostile_daemon.socket, job="patterns-scattered", config=config, resume_buffer=0) as client:
            client.malloc(base, 4 << 30)
            kernel = client.kernel_begin("scattered", 1)
            for _ in range(10):
                offsets = rng.integers(0, 2 << 30, 65536, dtype=np.uint64) * np.uint64(2)
                client.events(kernel, accesses(EventKind.WRITE, Space.GM, base + offsets, 1))
            client.kernel_end(kernel)
            verdict = client.wait_kernel(kernel, timeout=120)
            client.free(base)
        assert (verdict.events, verdict.errors) == (655_360, 0), verdict
        assert peak_rss_bytes(hostile_daemon.process.pid) < PATTERNS_RSS_LIMIT
        assert_serves_fresh_session(hostile_daemon)


# --- allocations and IPC names ---
# Host operations cost the daemon per live allocation (a heap entry in each detector, a range of legal GM), and IPC
# exports and mappings cost a job's table: both are bounded, and a client past them is refused by name.


def test_allocations_past_the_sessions_bound_end_it_by_name(short_dir: Path) -> None:
    """A client that mallocs without end gets resource_limit at the session's bound (here 20 000 live allocations:
    the default, 2^18, only takes longer to reach); the daemon serves on."""
    bound = 20_000
    daemon = start_daemon(short_dir, "--max-live-allocations", str(bound), hostile_limits=True)
    try:
        sock = connect(daemon, timeout=60)
        sock.sendall(encode(type="hello", version=1, job="malloc-flood"))
        mallocs = b"".join(
            encode(type="host_op", op="malloc", address=0x1000_0000 + 64 * i, size=64) for i in range(bound + 1)
        )
        with contextlib.suppress(OSError):  # the daemon may close before it has read everything
            sock.sendall(mallocs)
        replies = read_replies(sock)
        sock.close()
        assert replies[-1]["type"] == "error" and replies[-1]["reason"] == "resource_limit", replies[-1]
        assert f"{bound} live allocations" in str(replies[-1]["message"])
        assert_serves_fresh_session(daemon)
    finally:
        assert stop_daemon(daemon) == 0, daemon.log_text()


def test_ipc_names_past_the_jobs_bound_are_refused_and_change_nothing(hostile_daemon: RunningDaemon) -> None:
    """Exports past the job's bound are answered ok=false with the reason, one by one; the session goes on, and its
    own names still work."""
    from sanitizerd.sessions.ipc import MAX_EXPORTS

    sock = connect(hostile_daemon, timeout=60)
    exports = [
        encode(type="ipc", op="set", name=f"n{i}", address=0x1000 * (i + 1), size=64) for i in range(MAX_EXPORTS + 3)
    ]
    sock.sendall(encode(type="hello", version=1, job="ipc-flood") + b"".join(exports) + encode(type="close"))
    replies = read_replies(sock)
    sock.close()
    results = [r for r in replies if r["type"] == "ipc_result"]
    assert [r["ok"] for r in results] == [True] * MAX_EXPORTS + [False] * 3
    assert f"limit of {MAX_EXPORTS} exported names" in str(results[-1]["reason"])
    assert replies[-1]["type"] == "closed"
    assert_serves_fresh_session(hostile_daemon)
