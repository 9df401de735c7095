"""The widest pattern one record can name (issue 10): 65 535 x 65 535 blocks of 32 bytes (block_stride 2,
repeat_stride 65 535) at an unmapped GM address, read and then written, against a real daemon started as a host
runs it (default soft fd limit, 4 GiB address-space cap), memcheck with check_unused_memory. Prints each
verdict with its latency, and the daemon's RSS before and its peak after (it took tens of GB, or reported
nothing when the allocation failed at once).

    .venv/bin/python benchmarks/widest_pattern.py
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from pathlib import Path

from client_shim import Client, EventKind, Space, accesses
from sanitizerd_protocol import messages as m
from tests.conftest import peak_rss_bytes, rss_bytes, start_daemon, stop_daemon

WIDEST = dict(block_num=65535, block_stride=2, repeat=65535, repeat_stride=65535)


def main() -> None:
    base = Path(tempfile.mkdtemp(prefix="sd-", dir="/tmp"))
    daemon = start_daemon(base, hostile_limits=True)
    result: dict[str, object] = {"blocks": 65535 * 65535}
    try:
        result["rss_before_mib"] = rss_bytes(daemon.process.pid) >> 20
        config = m.Config(tools=["memcheck"], check_unused_memory=True)
        for kind in (EventKind.READ, EventKind.WRITE):
            with Client(daemon.socket, job="widest", config=config, resume_buffer=0, timeout=120) as client:
                client.malloc(0x1000, 4096)
                kernel = client.kernel_begin("widest", 1)
                started = time.perf_counter()
                client.events(kernel, accesses(kind, Space.GM, 0x7000_0000_0000, 32, **WIDEST))
                client.kernel_end(kernel)
                verdict = client.wait_kernel(kernel, timeout=120)
                result[kind.name.lower()] = {
                    "errors": verdict.errors, "seconds": round(time.perf_counter() - started, 3)
                }  # fmt: skip
        result["peak_rss_mib"] = peak_rss_bytes(daemon.process.pid) >> 20
    finally:
        stop_daemon(daemon)
        shutil.rmtree(base, ignore_errors=True)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
