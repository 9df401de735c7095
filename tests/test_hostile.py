"""Hostile and heavy clients against a real daemon (issue 10): each attack runs against a daemon started as a host
runs it (the default soft fd limit, an address-space cap: ``hostile_daemon``), and after each the daemon still serves
a fresh session (kernel, verdict, close) within seconds.

Sections: one per surface an attacker can reach (frames and connections, detector patterns, control requests and the
store, jobs and other users, configuration and the metrics endpoint)."""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import subprocess
import time
from pathlib import Path

import msgspec
import pytest

from client_shim import Client, EventKind, Space, accesses
from client_shim.transport import ClientError
from sanitizerd.cli.control import ControlClient
from sanitizerd.findings.model import make_finding
from sanitizerd.findings.store import FindingsStore
from sanitizerd.protocol import messages as m
from tests import other_uid
from tests.conftest import RunningDaemon, assert_serves_fresh_session, sanitizerd, start_daemon, stop_daemon

# --- control and store ---


def control_raw_frame(message: dict[str, object]) -> bytes:
    body = msgspec.msgpack.encode(message)
    return struct.pack("<I", len(body)) + body


def control_connect(daemon: RunningDaemon) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX)
    sock.connect(str(daemon.socket))
    sock.sendall(control_raw_frame({"type": "hello", "version": 1, "role": "control"}))
    sock.recv(65536)  # welcome
    return sock


def control_read_all(sock: socket.socket, timeout: float) -> bytes:
    sock.settimeout(timeout)
    got = b""
    try:
        while chunk := sock.recv(1 << 20):
            got += chunk
    except OSError:  # a timeout, or a reset: the daemon closed with our frames still unread
        pass
    return got


def test_control_wait_job_flood_is_refused_and_the_loop_stays_responsive(hostile_daemon: RunningDaemon) -> None:
    """300 000 wait_job frames (10 MB) from one connection that never reads: the connection is refused by name
    once it has its limit outstanding, and meanwhile other clients are answered at once."""
    sock = control_connect(hostile_daemon)
    flood = control_raw_frame({"type": "wait_job", "job": "nobody-runs-this"}) * 300_000
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
    reply = control_read_all(sock, 5)
    assert b"request_limit" in reply and b"limit of 64 requests" in reply
    sock.close()
    assert "request_limit" in hostile_daemon.wait_for_log("request_limit")
    assert_serves_fresh_session(hostile_daemon)


def test_control_sigterm_drains_during_a_wait_job_flood(short_dir: Path) -> None:
    """SIGTERM while ten connections flood wait_job is acted on at once: the daemon drains and exits 0."""
    daemon = start_daemon(short_dir, hostile_limits=True)
    flood = control_raw_frame({"type": "wait_job", "job": "x"}) * 30_000
    socks = [control_connect(daemon) for _ in range(10)]
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


def test_resume_of_another_users_session_is_refused_and_changes_nothing(hostile_daemon: RunningDaemon) -> None:
    """`hello` with resume=<the victim's session> from another uid: permission_denied, and the victim's session
    stays ended and visible with its findings (the check comes before the session is reopened)."""
    before = control_victim_and_attacker(hostile_daemon)
    victim_session = before[0][0]["session"]
    for resume in (victim_session, victim_session + 1000):  # another's, and one that does not exist
        answer = other_uid.as_uid(
            other_uid.NOBODY, hostile_daemon, other_uid.frames(m.Hello(version=1, resume=resume)), expect=1
        )
        assert answer and answer[0]["type"] == "error", answer
        if resume == victim_session:
            assert answer[0]["reason"] == "permission_denied", answer
        assert other_uid.view_of(other_uid.DAEMON_USER, hostile_daemon) == before
    for request in (
        m.QueryFindings(session=victim_session),
        m.QueryFindings(job="victim-job"),
        m.Watch(job="victim-job"),
    ):
        answer = other_uid.as_uid(other_uid.NOBODY, hostile_daemon, other_uid.control(request), expect=2)
        assert answer[-1]["type"] == "error" and answer[-1]["reason"] == "permission_denied", answer
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
    "request_frame", [{"type": "watch", "job": "w"}, {"type": "job_start", "job": "j", "config": {}}]
)
def test_control_watch_and_job_start_floods_are_refused(
    hostile_daemon: RunningDaemon, request_frame: dict[str, object]
) -> None:
    """100 000 watch (or job_start) frames from one connection: refused by name once it holds its limit, so the
    daemon's bookkeeping for it stays small and its end costs nothing; other clients are answered meanwhile."""
    sock = control_connect(hostile_daemon)
    sock.setblocking(False)
    flood = control_raw_frame(request_frame) * 100_000
    try:
        sock.send(flood[: 1 << 20])
    except OSError:
        pass
    asked = time.monotonic()
    listed = sanitizerd("sessions", "--socket", str(hostile_daemon.socket), timeout=20)
    assert listed.returncode == 0 and time.monotonic() - asked < 5, listed.stderr
    reply = control_read_all(sock, 5)
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
