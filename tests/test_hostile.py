"""Hostile and heavy clients against a real daemon (issue 10): each attack runs against a daemon started as a host
runs it (the default soft fd limit, an address-space cap: ``hostile_daemon``), and after each the daemon still serves
a fresh session (kernel, verdict, close) within seconds.

Sections: one per surface an attacker can reach (frames and connections, detector patterns, control requests and the
store, jobs and other users, configuration and the metrics endpoint)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from client_shim import Client, EventKind, Space, accesses
from sanitizerd.protocol import messages as m
from tests.conftest import RunningDaemon, assert_serves_fresh_session, peak_rss_bytes, rss_bytes, sanitizerd

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
