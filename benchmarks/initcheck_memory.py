"""initcheck's memory and time on strided vector accesses (issue 10): ``block_num`` 8, ``block_stride`` 2,
``repeat`` 255, ``repeat_stride`` 16, 32-byte blocks, as a vector instruction touching every other block of a
16 KiB tile. Each of 8 blocks writes its UB tile and reads it back, over and over (the writes and reads
alternate), and one GM buffer is written and read the same way. The events go to the detector directly in
batches of ``--batch`` events, in this one process, so the figure is the detector's own memory: the peak RSS
(``ru_maxrss``) after the run, minus the RSS after imports and set-up.

    .venv/bin/python benchmarks/initcheck_memory.py --accesses 16384

Prints one JSON object: accesses (reads + writes), pieces (32-byte blocks they name), seconds, base_rss_mb,
peak_rss_mb, detector_mb.
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from pathlib import Path

import numpy as np

from client_shim.events import EventKind, Space, accesses
from sanitizerd.chips import chip_named
from sanitizerd.detectors import DETECTORS
from sanitizerd.detectors.base import KernelLaunch, SessionContext
from sanitizerd_protocol.messages import Config, HostOp

BLOCKS = 8
GM = 0x12C0C0000000
PATTERN = dict(block_num=8, block_stride=2, repeat=255, repeat_stride=16)


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def stream(count: int) -> np.ndarray:
    """``count`` accesses, writes and reads alternating, blocks and spaces taken in turn."""
    n = np.arange(count)
    space = np.where(n % 4 < 2, Space.UB, Space.GM)
    events = accesses(
        np.where(n % 2 == 0, EventKind.WRITE, EventKind.READ),
        space,
        np.where(space == Space.GM, GM + (n // 2 % BLOCKS) * 0x4000, 0),
        32,
        block_id=(n // 2) % BLOCKS,
        serial=n + 1,
        **PATTERN,
    )
    return events


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--accesses", type=int, default=16384, help="reads and writes in all")
    parser.add_argument("--batch", type=int, default=4096, help="events per batch, as a client sends them")
    args = parser.parse_args()
    context = SessionContext(
        job="bench", session=1, pid=1, device=0, chip=chip_named("910B1"), config=Config(tools=["initcheck"])
    )
    detector = DETECTORS["initcheck"](context)
    events = stream(args.accesses)
    detector.host_op(HostOp(op="malloc", address=GM, size=BLOCKS * 0x4000, serial=0))
    base = rss_mb()
    started = time.perf_counter()
    detector.kernel_begin(KernelLaunch(kernel=1, name="strided", block_dim=BLOCKS, kernel_type="aiv"))
    for at in range(0, events.size, args.batch):
        detector.check(events[at : at + args.batch])
    findings = detector.kernel_end()
    seconds = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    assert not findings, findings  # every read follows a write of the same bytes
    print(json.dumps({
        "accesses": args.accesses, "pieces": args.accesses * 8 * 255, "seconds": round(seconds, 2),
        "base_rss_mb": round(base, 1), "peak_rss_mb": round(peak, 1), "detector_mb": round(peak - base, 1),
    }))  # fmt: skip


if __name__ == "__main__":
    main()
