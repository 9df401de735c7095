"""Faults of a daemon's processes that the jobs it serves must not feel: a worker killed in the middle of a compat
job or a client_shim job (its msSanitizer-form socket, the run's control connection and verdict, the session's
counts), and a stop that must end within its deadline whatever a thread is still doing."""

from __future__ import annotations

import signal
import sqlite3
import time
from pathlib import Path

import pytest

from client_shim import Client, EventKind, Space, accesses
from tests.conftest import start_daemon

DRAIN = 1.0  # --drain-timeout of the stop tests
MARGIN = 2.0 + 1.5  # the daemon's own margin past the drain timeout, and the test's for exit


@pytest.mark.parametrize("workers", [1, 2])
def test_sigterm_ends_the_daemon_within_the_drain_deadline_while_a_thread_is_stuck(
    short_dir: Path, workers: int
) -> None:
    """A session's findings write blocks in a thread (another process holds the store's write lock, for SQLite's
    30 s busy timeout), as a detector busy with a huge batch would: SIGTERM still ends the daemon (one process, or
    a listener and its workers) at the drain deadline plus its margin, abandoning the thread, where it waited for
    the thread to finish."""
    daemon = start_daemon(short_dir, "--drain-timeout", str(DRAIN), workers=workers)
    try:
        client = Client(daemon.socket, job="stuck", resume_buffer=0)
        client.malloc(0x1000, 256)
        holder = sqlite3.connect(daemon.state_dir / "sanitizerd.db", timeout=0, isolation_level=None)
        holder.execute("BEGIN EXCLUSIVE")  # the daemon's next write waits on this lock in a store thread
        kernel = client.kernel_begin("stuck", 1)
        client.events(kernel, accesses(EventKind.READ, Space.GM, 0x1000 + 512, 32, block_num=1))
        client.kernel_end(kernel)
        client.flush()
        time.sleep(1.0)  # the kernel checked, its findings' write waiting on the lock
        started = time.monotonic()
        daemon.process.send_signal(signal.SIGTERM)
        daemon.process.wait(DRAIN + MARGIN + 30)
        took = time.monotonic() - started
        assert took < DRAIN + MARGIN, (took, daemon.log_text()[-3000:])
        assert "exiting without it" in daemon.log_text()
        assert not daemon.socket.exists()  # the socket file removed on the way out
        holder.execute("ROLLBACK")
        holder.close()
    finally:
        if daemon.process.poll() is None:
            daemon.process.kill()
            daemon.process.wait()
