"""Bytes of memory racecheck costs per held event: the batches it holds until a kernel ends, plus the check's
temporaries at kernel_end.

The kernel is the one of ``benchmarks/racecheck.py`` (AscendC's double-buffered add, 40 % sync events, no
race). A child process builds it and writes it to a temporary file, so that building it leaves no peak in this
process. This process then reads it back in 65 536-event frames (fresh ``bytes`` each, as the daemon's
receive buffer hands them out), gives each to ``Racecheck.check`` and keeps no reference of its own, so the
detector is the only holder, as in the daemon; then ends the kernel.

* ``held_bytes_per_event``: RSS after the last batch, over the baseline (RSS before the first frame), per
  event: what a launch costs while it streams.
* ``peak_bytes_per_event``: peak RSS (``VmHWM``, reset just before the first frame) over the baseline, per
  event: what the launch costs at its worst, during kernel_end's check.

    .venv/bin/python benchmarks/racecheck_memory.py                     # 2 M events (24 blocks x 83 334)
    .venv/bin/python benchmarks/racecheck_memory.py --events 500000
    .venv/bin/python benchmarks/racecheck_memory.py --kernel racy      # the dearest per event found

Prints one JSON object last.
"""

from __future__ import annotations

import argparse
import gc
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from sanitizerd.chips import chip_named
from sanitizerd.detectors.base import KernelLaunch, SessionContext
from sanitizerd.detectors.racecheck import Racecheck
from sanitizerd_protocol.messages import Config
from sanitizerd_protocol.records import EVENT_DTYPE, as_events

BATCH = 65536


def _status(field: str) -> int:
    """A ``/proc/self/status`` figure (kB there), in bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(field)


def _reset_peak() -> None:
    """Set VmHWM back to the current RSS (Linux: ``clear_refs`` 5)."""
    Path("/proc/self/clear_refs").write_text("5")


def _write_kernel(path: str, kernel: str, blocks: int, per_block: int) -> None:
    sys.path.insert(0, str(Path(__file__).parent))
    from racecheck import block_stream, kernel_stream  # the throughput benchmark's kernel

    from client_shim.events import EventKind, Pipe, Space, accesses

    if kernel == "tiled":
        kernel_stream(blocks, per_block).tofile(path)
        return
    if kernel == "syncs":  # the tiled kernel's sync events alone, each block a few tiles longer than the one before
        # (so no two share their model's fixpoint): the model with no access to place, at its dearest
        per = per_block * 8 // 3 - 200 * blocks
        events = np.concatenate([block_stream(b, per + 400 * b, b * 10**8) for b in range(blocks)])
        events[events["kind"] >= EventKind.SET_FLAG].tofile(path)
        return
    i = np.arange(blocks * per_block)
    block, nth = i // per_block, i % per_block
    if kernel == "accesses":  # no sync at all, every block writing its own slots: no candidate pair
        events = accesses(EventKind.WRITE, Space.UB, nth * 32, 32, pipe=Pipe.V, block_id=block, serial=i + 1)
    else:  # "racy": reads (MTE2) of one GM word, a write (MTE3) every 8th: two racing pairs per read
        write = nth % 8 == 0
        events = accesses(EventKind.READ, Space.GM, 0x10000, 32, pipe=Pipe.MTE2, block_id=block, serial=i + 1)
        events["kind"][write], events["pipe"][write] = EventKind.WRITE, Pipe.MTE3
    events.tofile(path)


def measure(path: Path, blocks: int) -> dict[str, object]:
    context = SessionContext(
        job="bench", session=1, pid=0, device=0, chip=chip_named("910B1"), config=Config(tools=["racecheck"])
    )
    try:
        from sanitizerd.detectors.memory_budget import MemoryBudget
    except ImportError:  # the code before the budget (commit ec2c78a), for the figures before and after
        budget = None
    else:
        budget = MemoryBudget(1 << 62)
        context.race_memory = budget.account()
    detector = Racecheck(context)
    detector.kernel_begin(KernelLaunch(kernel=1, name="add_custom", block_dim=blocks, kernel_type="aiv"))
    gc.collect()
    baseline = _status("VmRSS")
    _reset_peak()
    events = 0
    with path.open("rb") as f:
        while frame := f.read(BATCH * EVENT_DTYPE.itemsize):
            batch = as_events(frame)
            events += batch.size
            detector.check(batch)
            del frame, batch
    held = _status("VmRSS") - baseline
    findings = detector.kernel_end()
    peak = _status("VmHWM") - baseline
    result: dict[str, object] = {
        "events": events,
        "findings": len(findings),
        "held_mib": round(held / 2**20, 1),
        "peak_mib": round(peak / 2**20, 1),
        "held_bytes_per_event": round(held / events),
        "peak_bytes_per_event": round(peak / events),
    }
    if budget is not None:  # what the launch reserved from the host's budget at most: not less than the peak
        result["reserved_bytes_per_event"] = round(budget.peak / events)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=2_000_000, help="about this many events [2 000 000]")
    parser.add_argument("--blocks", type=int, default=24)
    parser.add_argument(
        "--kernel", choices=["tiled", "syncs", "accesses", "racy"], default="tiled",
        help="tiled: benchmarks/racecheck.py's kernel; syncs: its sync events only, every block different; "
        "accesses: memory accesses only, none overlapping; racy: reads of one GM word, a write every 8th, two "
        "racing pairs per read [tiled]",
    )  # fmt: skip
    parser.add_argument("--write", help=argparse.SUPPRESS)  # the child: build the kernel into this file
    args = parser.parse_args()
    per_block = -(-args.events // args.blocks)
    if args.write:
        _write_kernel(args.write, args.kernel, args.blocks, per_block)
        return
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "kernel.bin"
        cmd = [sys.executable, __file__, "--events", str(args.events), "--blocks", str(args.blocks)]
        cmd += ["--kernel", args.kernel]
        subprocess.run([*cmd, "--write", str(path)], check=True)
        np.zeros(1)  # numpy's lazy start-up costs land before the baseline
        result = {"kernel": args.kernel, "blocks": args.blocks, **measure(path, args.blocks)}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
