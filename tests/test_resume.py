"""Restart without loss: a daemon killed with SIGKILL in the middle of a stream, restarted, and a client that
resumes its session: the findings equal those of an uninterrupted run, none is lost or stored twice, and
those stored before the kill are intact."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from client_shim import Client, ClientError, EventKind, Space, accesses
from sanitizerd_protocol.messages import Config
from tests.conftest import RunningDaemon, sanitizerd, start_daemon, stop_daemon

GM, SIZE = 0x12C0C0000000, 4096


def first_part(client: Client) -> int:
    """A kernel with an illegal read, checked; then a second kernel's first batch (a misaligned UB access)."""
    client.malloc(GM, SIZE)
    client.store(GM, SIZE)
    k1 = client.kernel_begin("first", 8)
    client.events(k1, accesses(EventKind.READ, Space.GM, GM + SIZE - 32, 96, block_id=1))  # 64 bytes past the end
    client.kernel_end(k1)
    assert client.wait_kernel(k1, timeout=30).errors == 1
    k2 = client.kernel_begin("second", 8)
    client.events(k2, accesses(EventKind.WRITE, Space.UB, 0x210, 32, block_id=0))  # misaligned on UB
    client.flush()
    return k2


def second_part(client: Client, k2: int) -> None:
    """The rest of the second kernel (an illegal write), its end, a double free."""
    client.events(k2, accesses(EventKind.WRITE, Space.GM, GM + SIZE, 32, block_id=3))
    client.kernel_end(k2)
    assert client.wait_kernel(k2, timeout=60).errors == 2
    client.free(GM)
    client.free(GM)  # illegal free
    client.close(timeout=60)


def findings(daemon: RunningDaemon, job: str) -> list[dict]:
    out = sanitizerd("findings", "--socket", str(daemon.socket), "--job", job, "--format", "json").stdout
    return json.loads(out)


def assert_resumed_intact(resumed: list[dict], uninterrupted: list[dict], before: list[dict]) -> None:
    """A resumed session's findings are an uninterrupted run's: the first part's finding kept as stored (same id),
    nothing stored twice, all in the one session."""
    assert what(resumed) == what(uninterrupted)
    assert sorted(f["kind"] for f in resumed) == ["illegal_free", "illegal_read", "illegal_write", "misaligned_access"]
    assert [f["id"] for f in resumed if f["kind"] == "illegal_read"] == [before[0]["id"]]  # intact, not re-stored
    assert len({f["session"] for f in resumed}) == 1


def what(found: list[dict]) -> list[tuple]:
    """A run's findings without what differs between two runs (job, session, pid, ids, times)."""
    return sorted((f["kind"], f["address"], f["size"], f["launch"], f["serial"], f["space"]) for f in found)


def test_sigkill_in_mid_stream_loses_nothing_and_duplicates_nothing(short_dir: Path) -> None:
    daemon = start_daemon(short_dir)
    client = Client(daemon.socket, job="resumed", resume_buffer=64 << 20, resume_timeout=30)
    k2 = first_part(client)
    before = findings(daemon, "resumed")
    assert [f["kind"] for f in before] == ["illegal_read"]
    time.sleep(0.3)  # the second kernel's first batch is in the daemon, unchecked until the kernel ends
    daemon.process.kill()
    daemon.process.wait()
    daemon = start_daemon(short_dir)  # same socket, same store
    try:
        second_part(client, k2)  # the client notices, resumes and replays
        assert client.resumes == 1
        resumed = findings(daemon, "resumed")
        baseline = Client(daemon.socket, job="uninterrupted")
        second_part(baseline, first_part(baseline))
        uninterrupted = findings(daemon, "uninterrupted")
    finally:
        assert stop_daemon(daemon) == 0
    assert_resumed_intact(resumed, uninterrupted, before)


def test_a_planned_restart_resumes_without_false_leaks(short_dir: Path) -> None:
    """SIGTERM while a session holds memory it frees later: the drain deadline cuts the session off without
    end-of-session checks (a leak report now would be false), the client resumes on the restarted daemon, and
    the result equals an uninterrupted run's, leak check included."""
    leaks = Config(tools=["memcheck"], leak_check=True)
    daemon = start_daemon(short_dir, "--drain-timeout", "0.5")
    client = Client(daemon.socket, job="restarted", config=leaks, resume_buffer=64 << 20, resume_timeout=30)
    k2 = first_part(client)
    stop_daemon(daemon)  # SIGTERM; the session stays open past the drain deadline
    daemon = start_daemon(short_dir)
    try:
        second_part(client, k2)
        assert client.resumes == 1
        restarted = findings(daemon, "restarted")
        baseline = Client(daemon.socket, job="straight", config=leaks)
        second_part(baseline, first_part(baseline))
        straight = findings(daemon, "straight")
    finally:
        assert stop_daemon(daemon) == 0
    assert what(restarted) == what(straight)
    assert "memory_leak" not in {f["kind"] for f in restarted}


def test_a_session_cannot_be_resumed_twice_at_once(daemon: RunningDaemon) -> None:
    """Resuming a session that is still live (or unknown) is refused by name."""
    from client_shim.transport import ClientError, FrameSocket
    from sanitizerd_protocol import messages as m

    client = Client(daemon.socket, job="live")
    try:
        for ident, reason in ((client.session, "is still live"), (999_999, "there is no session 999999")):
            sock = FrameSocket(daemon.socket)
            try:
                sock.handshake(m.Hello(version=1, resume=ident))
                raise AssertionError("resume accepted")
            except ClientError as exc:
                assert reason in str(exc)
            finally:
                sock.close()
    finally:
        client.close()


def test_a_daemon_that_lost_the_session_refuses_and_the_client_says_so_at_once(short_dir: Path) -> None:
    """Restarted on another store, the daemon does not know the session: the client gives up at once (no 30 s
    of retries) and says why, instead of checking half a session."""
    daemon = start_daemon(short_dir)
    client = Client(daemon.socket, job="orphan", resume_buffer=64 << 20, resume_timeout=30)
    k2 = first_part(client)
    daemon.process.kill()
    daemon.process.wait()
    daemon = start_daemon(short_dir, "--state-dir", str(short_dir / "another-store"))  # same socket
    try:
        started = time.monotonic()
        with pytest.raises(ClientError, match="would not resume session"):
            client.events(k2, accesses(EventKind.WRITE, Space.GM, GM, 32, block_id=3))
            client.kernel_end(k2)
            client.wait_kernel(k2, timeout=20)
        assert time.monotonic() - started < 15
    finally:
        assert stop_daemon(daemon) == 0
