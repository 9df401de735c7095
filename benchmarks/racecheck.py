"""racecheck throughput on one core, and its verdict's latency after kernel_end, on emulated kernels.

Every block runs AscendC's double-buffered add with a fused second vector op, tile after tile:

    wait_flag(MTE3->MTE2, ping)        (from the third tile on: the buffer's last result has left UB)
    MTE2: GM x -> UB x[ping], GM y -> UB y[ping]
    set_flag / wait_flag(MTE2->V, ping)
    V:    t[ping] = x[ping] + y[ping];  pipe_barrier(PIPE_V);  z[ping] = t[ping] * x[ping]
    set_flag / wait_flag(V->MTE3, ping)
    MTE3: UB z[ping] -> GM z
    set_flag(MTE3->MTE2, ping)

with a SyncAll (pipe_barrier(PIPE_ALL), cross-core set and wait, mode 0) every 1 000 tiles. That is 12 memory
and 8 sync events per tile (40 % sync events, about what AscendC's TQue hand-overs produce). The kernel is
race-free, so the figure is the cost of proving it: the whole model and every candidate pair. Blocks arrive
one after the other, each followed by its BLOCK_FINISH, as the emulator and msSanitizer's tool send them; the
detector is called directly in this one thread, in 65 536-event batches. One run reports, for racecheck as it
is (blocks proven as they complete, ``_block_proofs``) and, as the same run's baseline, with the whole check at
kernel_end only (``--no-baseline`` leaves it out):

* events/s of the whole check (every batch and kernel_end) at 1 000, 5 600 and 20 000 iterations (tiles per
  block) of an 8-block kernel (0.15 M, 0.85 M, 3.0 M events): the per-event cost should stay flat;
* the latency from the kernel_end call to the verdict for the 2.4 M-event kernel (24 blocks x 5 263 tiles).

Each kernel is checked --repeat times, each by a fresh detector (this machine is shared and single runs vary by
up to a factor of 2): every wall time, the best and the median are reported. The C allocator's thresholds are set
as the daemon sets them (``sanitizerd/allocator.py``: blocks up to 32 MiB from the heap); with glibc's defaults
(``--glibc-defaults``) each large temporary is a fresh mmap, and a run's page faults vary with what earlier runs
left mapped (0 to 24 ms of system time a 0.85 M-event run).

    .venv/bin/python benchmarks/racecheck.py
    .venv/bin/python benchmarks/racecheck.py --quick    # 200 / 1 000 tiles; latency kernel 8 x 1 000 tiles
    .venv/bin/python benchmarks/racecheck.py --no-block-finish    # blocks complete when the next one starts
    .venv/bin/python benchmarks/racecheck.py --stages    # and the CPU of each stage of the proven check

``--stages`` times the proven check's stages (``STAGES``: holding the columns, SIMT sections, the proofs' shapes
and reuse, placing and making nodes, the happens-before model, the race search, kernel_end) with a CPU timer
around each, and reports them for each kernel's run of least CPU. A stage called inside another counts in both
(a whole check at kernel_end builds its model inside kernel_end).

Prints one JSON object last.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import resource
import statistics
import time
from collections.abc import Iterator
from typing import Any

import numpy as np

from client_shim.events import EventKind, Pipe, Space, accesses, make_events, syncs
from sanitizerd import allocator
from sanitizerd.chips import chip_named
from sanitizerd.detectors._block_proofs import BlockProofs
from sanitizerd.detectors._race_columns import NATIVE, HeldColumns
from sanitizerd.detectors._simt import SimtSections
from sanitizerd.detectors.base import KernelLaunch, SessionContext
from sanitizerd.detectors.racecheck import Kernel, Racecheck
from sanitizerd_protocol.messages import Config

TILE = 512
GM_X, GM_Y, GM_Z = 0x12C0C0000000, 0x12C200000000, 0x12C400000000
SYNC_ALL_EVERY = 1000
BATCH = 65536
_R, _W = EventKind.READ, EventKind.WRITE


def tile_template(ping: int) -> tuple[np.ndarray, np.ndarray]:
    """One tile's events for buffer ``ping`` and, per event, its instruction's index within the tile."""
    ub = 0x3000 * ping
    xs, ys, ts, zs = ub, ub + 0x800, ub + 0x1000, ub + 0x1800
    n = TILE // 32
    parts = [
        (syncs(EventKind.WAIT_FLAG, Pipe.MTE3, Pipe.MTE2, ping), 0),
        (accesses(_R, Space.GM, GM_X, 32, block_num=n, pipe=Pipe.MTE2), 1),
        (accesses(_W, Space.UB, xs, 32, block_num=n, pipe=Pipe.MTE2), 1),
        (accesses(_R, Space.GM, GM_Y, 32, block_num=n, pipe=Pipe.MTE2), 2),
        (accesses(_W, Space.UB, ys, 32, block_num=n, pipe=Pipe.MTE2), 2),
        (syncs(EventKind.SET_FLAG, Pipe.MTE2, Pipe.V, ping), 3),
        (syncs(EventKind.WAIT_FLAG, Pipe.MTE2, Pipe.V, ping), 4),
        (accesses(_R, Space.UB, [xs, ys], 32, block_num=8, repeat=n // 8, repeat_stride=8, pipe=Pipe.V), 5),
        (accesses(_W, Space.UB, ts, 32, block_num=8, repeat=n // 8, repeat_stride=8, pipe=Pipe.V), 5),
        (syncs(EventKind.PIPE_BARRIER, Pipe.V), 6),
        (accesses(_R, Space.UB, [ts, xs], 32, block_num=8, repeat=n // 8, repeat_stride=8, pipe=Pipe.V), 7),
        (accesses(_W, Space.UB, zs, 32, block_num=8, repeat=n // 8, repeat_stride=8, pipe=Pipe.V), 7),
        (syncs(EventKind.SET_FLAG, Pipe.V, Pipe.MTE3, ping), 8),
        (syncs(EventKind.WAIT_FLAG, Pipe.V, Pipe.MTE3, ping), 9),
        (accesses(_R, Space.UB, zs, 32, block_num=n, pipe=Pipe.MTE3), 10),
        (accesses(_W, Space.GM, GM_Z, 32, block_num=n, pipe=Pipe.MTE3), 10),
        (syncs(EventKind.SET_FLAG, Pipe.MTE3, Pipe.MTE2, ping), 11),
    ]
    events = np.concatenate([p for p, _ in parts])
    instr = np.concatenate([np.full(p.size, i) for p, i in parts])
    return events, instr


INSTRUCTIONS_PER_TILE = 12


def block_stream(block: int, events_per_block: int, serial_base: int) -> np.ndarray:
    """One block's events: tiles until ``events_per_block``, SyncAll every SYNC_ALL_EVERY tiles."""
    t0, i0 = tile_template(0)
    t1, i1 = tile_template(1)
    pair, pair_instr = np.concatenate((t0, t1)), np.concatenate((i0, i1 + INSTRUCTIONS_PER_TILE))
    per_tile = t0.size
    tiles = events_per_block // per_tile
    tiles -= tiles % 2
    events = np.tile(pair, tiles // 2)
    instr = np.tile(pair_instr, tiles // 2) + np.repeat(np.arange(tiles // 2), pair.size) * 2 * INSTRUCTIONS_PER_TILE
    tile = np.repeat(np.arange(tiles), per_tile)
    gm = events["space"] == Space.GM
    events["address"][gm] += ((block * tiles + tile[gm]) * TILE).astype(np.uint64)
    # The first two tiles have no result to wait for; the last two signal nobody.
    first_wait = (tile < 2) & (events["kind"] == EventKind.WAIT_FLAG) & (events["dst_pipe"] == Pipe.MTE2)
    last_set = (tile >= tiles - 2) & (events["kind"] == EventKind.SET_FLAG) & (events["dst_pipe"] == Pipe.MTE2)
    keep = ~(first_wait | last_set)
    events, instr, tile = events[keep], instr[keep], tile[keep]
    events["serial"] = serial_base + instr
    events["block_id"] = block
    sync_all = np.concatenate(
        (
            syncs(EventKind.PIPE_BARRIER, Pipe.ALL),
            syncs(EventKind.CROSS_SET, Pipe.S, Pipe.S, 31, mode=0),
            syncs(EventKind.CROSS_WAIT, Pipe.S, Pipe.S, 31),
        )
    )
    sync_all["block_id"] = block
    cuts = np.searchsorted(tile, np.arange(SYNC_ALL_EVERY, tiles, SYNC_ALL_EVERY))
    pieces = np.split(events, cuts)
    out = []
    for k, piece in enumerate(pieces):
        out.append(piece)
        if k + 1 < len(pieces):
            s = sync_all.copy()
            s["serial"] = serial_base + int(instr.max()) + 1 + np.arange(3) + 3 * k
            out.append(s)
    return np.concatenate(out)


def kernel_stream(blocks: int, events_per_block: int, *, block_finish: bool = True) -> np.ndarray:
    stride = 10 * events_per_block
    parts = []
    for b in range(blocks):
        parts.append(block_stream(b, events_per_block, b * stride))
        if block_finish:
            parts.append(make_events(kind=EventKind.BLOCK_FINISH, block_id=b, block_size=0))
    return np.concatenate(parts)


def check(stream: np.ndarray, blocks: int, *, prove: bool = True) -> tuple[float, float, float, float, list, float,
                                                                         float]:  # fmt: skip
    """One kernel launch through a fresh detector, as each launch gets one: (wall s, CPU s, kernel_end's wall s,
    kernel_end's CPU s, findings, user CPU s, system CPU s). ``prove=False``: the whole check at kernel_end only
    (the baseline). The system part is mostly page faults of fresh memory (transparent huge pages' compaction
    where the host defragments on madvise), which varies by up to 3x from run to run on a loaded host."""
    detector = Racecheck(_context())
    detector.prove_blocks = prove
    usage = resource.getrusage(resource.RUSAGE_SELF)
    cpu, wall = time.process_time(), time.perf_counter()
    detector.kernel_begin(KernelLaunch(kernel=1, name="add_custom", block_dim=blocks, kernel_type="aiv"))
    for lo in range(0, stream.size, BATCH):
        detector.check(stream[lo : lo + BATCH])
    end, end_cpu = time.perf_counter(), time.process_time()
    findings = detector.kernel_end()
    done, done_cpu = time.perf_counter(), time.process_time()
    after = resource.getrusage(resource.RUSAGE_SELF)
    user, system = after.ru_utime - usage.ru_utime, after.ru_stime - usage.ru_stime
    return done - wall, done_cpu - cpu, done - end, done_cpu - end_cpu, findings, user, system


# What a proven kernel's CPU goes to, by the function that spends it.
STAGES = {
    "hold": (Racecheck, "_hold"),
    "simt": (SimtSections, "feed"),
    "shape": (BlockProofs, "shape"),
    "reuse": (BlockProofs, "reuse"),
    "make": (HeldColumns, "make"),
    "model": (Kernel, "__init__"),
    "race_search": (Kernel, "racing"),
    "kernel_end": (Racecheck, "kernel_end"),
}


@contextlib.contextmanager
def timed_stages() -> Iterator[dict[str, float]]:
    """Within it, each of STAGES adds its CPU seconds to the dict it gives."""
    spent = dict.fromkeys(STAGES, 0.0)
    originals = [(owner, attr, getattr(owner, attr)) for owner, attr in STAGES.values()]

    def timed(name: str, original: object) -> object:
        def run(*args: object, **kwargs: object) -> object:
            start = time.process_time()
            try:
                return original(*args, **kwargs)  # type: ignore[operator]
            finally:
                spent[name] += time.process_time() - start

        return run

    for name, (owner, attr, original) in zip(STAGES, originals, strict=True):
        setattr(owner, attr, timed(name, original))
    try:
        yield spent
    finally:
        for owner, attr, original in originals:
            setattr(owner, attr, original)


def _context() -> SessionContext:
    return SessionContext(
        job="bench", session=1, pid=0, device=0, chip=chip_named("910B1"), config=Config(tools=["racecheck"])
    )


EVENTS_PER_TILE = tile_template(0)[0].size  # 19


def iterations_stream(blocks: int, iterations: int, *, block_finish: bool = True) -> np.ndarray:
    """The kernel with ``iterations`` tiles per block."""
    return kernel_stream(blocks, iterations * EVENTS_PER_TILE, block_finish=block_finish)


def compiled_loops(doc: str) -> tuple[argparse.Namespace, Any]:
    """The arguments of a benchmark of racecheck's compiled loops alone (``--iterations``, ``--repeat``), and the
    compiled module, the allocator tuned as the daemon runs; exits where the module is not built."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iterations", type=int, default=5600, help="tiles per block (as racecheck.py) [5600]")
    parser.add_argument("--repeat", type=int, default=30, help="calls per figure; the least is kept [30]")
    args = parser.parse_args()
    allocator.tune()
    if NATIVE is None:
        raise SystemExit("racecheck's compiled module is not built (or SANITIZERD_NATIVE=0)")
    return args, NATIVE


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--blocks", type=int, default=8, help="blocks of the iteration sweep's kernels [8]")
    parser.add_argument(
        "--iterations", default="1000,5600,20000", help="tiles per block of the sweep's kernels [1000,5600,20000]"
    )
    parser.add_argument("--latency-blocks", type=int, default=24, help="blocks of the latency kernel [24]")
    parser.add_argument(
        "--latency-iterations", type=int, default=5263, help="tiles per block of the latency kernel [5263: 2.40 M]"
    )
    parser.add_argument("--quick", action="store_true", help="sweep 200,1000 tiles; latency kernel 8 x 1 000")
    parser.add_argument("--repeat", type=int, default=3, help="check each kernel this many times [3]")
    parser.add_argument(
        "--no-block-finish", action="store_true", help="no BLOCK_FINISH: a block completes when the next one starts"
    )
    parser.add_argument(
        "--no-baseline", action="store_true", help="leave out the baseline (the whole check at kernel_end only)"
    )
    parser.add_argument("--stages", action="store_true", help="time the proven check's stages (STAGES)")
    parser.add_argument(
        "--glibc-defaults", action="store_true", help="leave the C allocator's thresholds as glibc sets them"
    )
    args = parser.parse_args()
    if not args.glibc_defaults:
        allocator.tune()  # as the daemon runs (sanitizerd/allocator.py)
    if args.quick:
        args.iterations, args.latency_blocks, args.latency_iterations = "200,1000", 8, 1000
    shapes = {"proven": True} if args.no_baseline else {"proven": True, "whole": False}
    finish = not args.no_block_finish
    sweep = []
    for iterations in (int(n) for n in args.iterations.split(",")):
        stream = iterations_stream(args.blocks, iterations, block_finish=finish)
        row: dict[str, object] = {"iterations": iterations, "events": int(stream.size)}
        for name, prove in shapes.items():
            runs, stages = [], []
            for _ in range(args.repeat):
                with timed_stages() if args.stages and prove else contextlib.nullcontext({}) as spent:
                    runs.append(check(stream, args.blocks, prove=prove))
                stages.append({stage: round(1000 * s, 1) for stage, s in spent.items()})
            walls = [r[0] for r in runs]
            row[name] = {
                "findings": len(runs[-1][4]),
                "wall_s": [round(w, 3) for w in walls],
                "cpu_s": [round(r[1], 3) for r in runs],
                "events_per_s_best": round(stream.size / min(walls)),
                "events_per_s_median": round(stream.size / statistics.median(walls)),
                "events_per_cpu_s_best": round(stream.size / min(r[1] for r in runs)),
                "user_s": [round(r[5], 3) for r in runs],
                "sys_s": [round(r[6], 3) for r in runs],
                "events_per_user_s_best": round(stream.size / max(min(r[5] for r in runs), 1e-3)),
            }
            if args.stages and prove:
                least_cpu = min(range(len(runs)), key=lambda i: runs[i][1])
                row[name]["stages_cpu_ms"] = stages[least_cpu]  # type: ignore[index]
        sweep.append(row)
        del stream, runs
    stream = iterations_stream(args.latency_blocks, args.latency_iterations, block_finish=finish)
    latency: dict[str, object] = {
        "blocks": args.latency_blocks, "iterations": args.latency_iterations, "events": int(stream.size)
    }
    for name, prove in shapes.items():
        runs = [check(stream, args.latency_blocks, prove=prove) for _ in range(args.repeat)]
        ends = [r[2] for r in runs]
        for finding in runs[-1][4][:5]:
            print(finding.kind, [(a.pipe, a.op, a.serial, a.blocks) for a in finding.accesses], finding.detail)
        latency[name] = {
            "findings": len(runs[-1][4]),
            "kernel_end_s": [round(e, 3) for e in ends],
            "kernel_end_ms_best": round(1000 * min(ends)),
            "kernel_end_ms_median": round(1000 * statistics.median(ends)),
            "kernel_end_cpu_s": [round(r[3], 3) for r in runs],
            "wall_s": [round(r[0], 3) for r in runs],
        }
    result = {
        "blocks": args.blocks,
        "block_finish": finish,
        "sweep": sweep,
        "latency": latency,
        "max_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
