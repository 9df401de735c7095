"""Hostile and heavy clients against a real daemon (issue 10): each attack runs against a daemon started as a host
runs it (the default soft fd limit, an address-space cap: ``hostile_daemon``), and after each the daemon still serves
a fresh session (kernel, verdict, close) within seconds.

Sections: one per surface an attacker can reach (frames and connections, detector patterns, control requests and the
store, jobs and other users, configuration and the metrics endpoint)."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import msgspec
import numpy as np

from client_shim import Client, EventKind, Space, accesses
from sanitizerd.cli.control import ControlClient
from sanitizerd.protocol import messages as m
from sanitizerd.sessions.jobs import MAX_JOBS_PER_UID
from tests.conftest import RunningDaemon, assert_serves_fresh_session, start_daemon, stop_daemon
from tests.other_user import NOBODY, as_nobody, hello, open_to_nobody

# --- jobs and other users ---
# A job belongs to the uid that first used it: nobody (another uid) may not join a root user's job, watch or record
# it, change its configuration, wait on it, send it signatures or touch its IPC names; after each refusal the
# victim's sessions and findings are as they were, and its next kernel is still checked with its own configuration.


def _jobs_snapshot(daemon: RunningDaemon, job: str) -> tuple[list[m.SessionInfo], list[object]]:
    """Every session (root sees all) and the job's findings, as the victim's owner would query them."""
    with ControlClient(daemon.socket) as control:
        sessions = control.request(m.QuerySessions())
        findings = control.request(m.QueryFindings(job=job))
    assert isinstance(sessions, m.Sessions) and isinstance(findings, m.Findings)
    return sessions.sessions, [msgspec.to_builtins(f) for f in findings.findings]


def _jobs_illegal_read(client: Client, name: str) -> m.Verdict:
    kernel = client.kernel_begin(name, 1)
    client.events(kernel, accesses(EventKind.READ, Space.GM, 0x1000 + 512, 32, block_num=1))
    client.kernel_end(kernel)
    return client.wait_kernel(kernel, timeout=10)


def test_jobs_another_uid_cannot_join_watch_configure_wait_sign_or_destroy(
    hostile_daemon: RunningDaemon, short_dir: Path
) -> None:
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
        for attack, messages in attacks.items():
            reply = as_nobody(daemon.socket, short_dir, messages, wait=2)
            assert b"permission_denied" in reply, (attack, reply)
            assert f"uid {NOBODY.pw_uid} may not".encode() in reply and f"job '{job}'".encode() in reply, attack
            assert _jobs_snapshot(daemon, job) == before, attack  # nothing changed: no session, no finding
        # The victim's job as it was: its configuration (memcheck on every kernel), its IPC name, its findings.
        verdict = _jobs_illegal_read(victim, "after")
        assert verdict.checked and verdict.errors == 1, verdict
        with Client(daemon.socket, job=job, rank=1, timeout=10, resume_buffer=0) as rank1:
            rank1.ipc_map("victim-buf", 0x9000)
            assert rank1.wait_ipc(1, timeout=10)[0].ok
    kinds = [f["kind"] for f in _jobs_snapshot(daemon, job)[1]]
    assert len(kinds) == 2 and "sdc" not in " ".join(kinds), kinds  # the victim's two reads, no injected finding
    assert daemon.log_text().count("permission_denied") >= len(attacks)
    assert_serves_fresh_session(daemon)


def test_jobs_a_launcher_derived_name_is_its_users_before_the_job_starts(
    hostile_daemon: RunningDaemon, short_dir: Path
) -> None:
    """``root/torchrun-<id>`` is predictable; nobody watching or opening it first neither claims it nor sees it."""
    daemon, job = hostile_daemon, "root/torchrun-1234"
    open_to_nobody(daemon.socket)
    for messages in ([hello("control"), {"type": "watch", "job": job, "record": True}], [hello(job=job)]):
        reply = as_nobody(daemon.socket, short_dir, messages, wait=2)
        assert b"permission_denied" in reply, reply
    with Client(daemon.socket, job=job, timeout=10, resume_buffer=0) as victim:  # its owner is not locked out
        victim.malloc(0x1000, 256)
        assert _jobs_illegal_read(victim, "owned").errors == 1
    assert not [s for s in _jobs_snapshot(daemon, job)[0] if s.uid == NOBODY.pw_uid]
    assert_serves_fresh_session(daemon)


def test_jobs_an_ended_job_stays_its_owners_through_the_grace_period(short_dir: Path) -> None:
    daemon = start_daemon(short_dir, "--handshake-timeout", "1", "--job-grace", "2", hostile_limits=True)
    try:
        open_to_nobody(daemon.socket)
        job = "restartable"
        with Client(daemon.socket, job=job, timeout=10, resume_buffer=0) as victim:
            victim.malloc(0x1000, 256)
            assert _jobs_illegal_read(victim, "first").errors == 1
        before = _jobs_snapshot(daemon, job)
        assert b"permission_denied" in as_nobody(daemon.socket, short_dir, [hello(job=job)], wait=1)
        assert _jobs_snapshot(daemon, job) == before
        with Client(daemon.socket, job=job, timeout=10, resume_buffer=0) as restarted:  # the owner comes back
            restarted.malloc(0x1000, 256)
        time.sleep(2.5)  # the grace period is over: the name is free, for a job of nobody's own
        reply = as_nobody(daemon.socket, short_dir, [hello(job=job), {"type": "close"}], wait=3)
        assert b"welcome" in reply and b"permission_denied" not in reply, reply
        sessions, findings = _jobs_snapshot(daemon, job)
        assert findings == before[1]  # nobody's session sees nothing of the victim's, and adds nothing to it
        assert [s.uid for s in sessions if s.job == job] == [0, 0, NOBODY.pw_uid]
        assert_serves_fresh_session(daemon)
    finally:
        assert stop_daemon(daemon) == 0, daemon.log_text()


def test_jobs_sessions_without_a_job_name_are_each_users_own(hostile_daemon: RunningDaemon, short_dir: Path) -> None:
    daemon = hostile_daemon
    open_to_nobody(daemon.socket)
    with Client(daemon.socket, job="", timeout=10, resume_buffer=0) as victim:
        victim.malloc(0x1000, 256)
        victim.ipc_set("no-job-buf", 0x1000, 256)
        assert victim.wait_ipc(1, timeout=10)[0].ok
        destroy = {"type": "ipc", "op": "destroy", "name": "no-job-buf"}
        reply = as_nobody(daemon.socket, short_dir, [hello(job=""), destroy, {"type": "close"}], wait=3)
        assert b"no export named" in reply, reply  # nobody's job-less sessions have IPC names of their own
        with Client(daemon.socket, job="", timeout=10, resume_buffer=0) as other:
            other.ipc_map("no-job-buf", 0x9000)
            assert other.wait_ipc(1, timeout=10)[0].ok
    assert_serves_fresh_session(daemon)


def test_jobs_a_watcher_that_never_reads_is_dropped_and_never_stalls_the_job(hostile_daemon: RunningDaemon) -> None:
    daemon, job = hostile_daemon, "watched-by-a-sleeper"
    sleeper = socket.socket(socket.AF_UNIX)
    sleeper.connect(str(daemon.socket))
    try:
        for message in (m.Hello(version=1, role="control"), m.Watch(job=job, record=True)):
            body = msgspec.msgpack.encode(message)
            sleeper.sendall(len(body).to_bytes(4, "little") + body)
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


def test_jobs_one_uid_cannot_take_every_job(hostile_daemon: RunningDaemon, short_dir: Path) -> None:
    """A flood of job_start names from one uid stops at its share of jobs; the refusal releases what it held."""
    daemon = hostile_daemon
    open_to_nobody(daemon.socket)
    flood = [hello("control")] + [
        {"type": "job_start", "job": f"flood-{i}", "config": {"tools": ["memcheck"]}}
        for i in range(MAX_JOBS_PER_UID + 8)
    ]
    reply = as_nobody(daemon.socket, short_dir, flood, wait=5, pause=0)
    assert b"job_limit" in reply and f"limit of {MAX_JOBS_PER_UID} jobs".encode() in reply, reply[-300:]
    # The refused connection's jobs are released: nobody registers and watches a job again at once.
    again = [
        hello("control"),
        {"type": "job_start", "job": "flood-again", "config": {}},
        {"type": "watch", "job": "flood-again"},
    ]
    assert b"error" not in as_nobody(daemon.socket, short_dir, again, wait=1)
    assert_serves_fresh_session(daemon)
