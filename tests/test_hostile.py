"""Hostile and heavy clients against a real daemon (issue 10): each attack runs against a daemon started as a host
runs it (the default soft fd limit, an address-space cap: ``hostile_daemon``), and after each the daemon still serves
a fresh session (kernel, verdict, close) within seconds.

Sections: one per surface an attacker can reach (frames and connections, detector patterns, control requests and the
store, jobs and other users, configuration and the metrics endpoint)."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np

from client_shim import Client, EventKind, Pipe, Space, accesses, syncs
from sanitizerd.protocol.messages import Config
from tests.conftest import (
    ROOT,
    RunningDaemon,
    assert_serves_fresh_session,
    peak_rss_bytes,
    rss_bytes,
    start_daemon,
    stop_daemon,
)

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
from sanitizerd.protocol.messages import Config

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


def _race_free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _race_metric(port: int, name: str) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    return float(re.search(rf"^{name} (\S+)$", text, re.M).group(1))  # type: ignore[union-attr]


def test_race_memory_concurrent_sessions_stay_within_the_hosts_budget(short_dir: Path) -> None:
    """Six sessions each stream a launch bigger than the whole budget, all at once, and two more leave mid-launch:
    the daemon's memory stays within the budget (plus frames in flight), every finished launch gets a verdict that
    counts an error (its internal_error: cut at the budget, or not checked at all), refusals are counted, and once
    the sessions are gone, nothing stays reserved."""
    port = _race_free_port()
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
        assert _race_metric(port, "sanitizerd_race_memory_refusals_total") >= 1
        deadline = time.monotonic() + 10
        while _race_metric(port, "sanitizerd_race_memory_bytes") and time.monotonic() < deadline:
            time.sleep(0.1)  # the two that left end when the daemon reads their EOF
        assert _race_metric(port, "sanitizerd_race_memory_bytes") == 0
        assert _race_metric(port, "sanitizerd_race_memory_limit_bytes") == RACE_MEMORY
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
