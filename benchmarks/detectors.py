"""Detector throughput on one core: memcheck and initcheck (and optionally synccheck) over a realistic stream.

The stream is the demo's AscendC add kernel scaled up: each of 8 vector blocks copies tiles GM->UB on MTE2
(x and y), adds them on V, and copies the result UB->GM on MTE3, with set_flag/wait_flag between the pipes
(about one event in three is a sync event). Host stores define the inputs first. Batches are cut from the
stream as a client would send them; the detectors are called directly, in this one thread, so the figure is
detector CPU per event with no I/O.

    .venv/bin/python benchmarks/detectors.py --quick

With ``--non-repeating``, memcheck alone on a stream whose GM addresses never repeat (issue 13): every access
reads or writes bytes no earlier access touched, at 0.3 M, 1 M, 3 M and 9 M events, so that ownership and the
heap lookups grow with the stream as they would on a kernel streaming through large buffers.

    .venv/bin/python benchmarks/detectors.py --non-repeating
    .venv/bin/python benchmarks/detectors.py --non-repeating --baseline /path/to/a/checkout/of/main

``--baseline`` runs the same command with another checkout's sanitizerd, in fresh processes alternating with
this tree's, and prints each figure beside its baseline, with the ratio. Prints one JSON object last:
events_per_s for each detector set (or stream size) measured.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from client_shim.events import EventKind, Pipe, Space, accesses, syncs
from sanitizerd.chips import chip_named
from sanitizerd.detectors import create_detectors
from sanitizerd.detectors.base import KernelLaunch, SessionContext
from sanitizerd_protocol.messages import Config, HostOp

BLOCKS = 8
TILE_BYTES = 512
GM_X, GM_Y, GM_Z = 0x12C0C0000000, 0x12C100000000, 0x12C140000000
UB_X, UB_Y, UB_Z = 0x0, 0x200, 0x400


def kernel_stream(tiles_per_block: int) -> np.ndarray:
    """Every block's tiles, blocks interleaved tile by tile as a multi-core trace would arrive."""
    blocks32 = TILE_BYTES // 32
    one_tile = [
        accesses(EventKind.READ, Space.GM, GM_X, 32, block_num=blocks32, pipe=Pipe.MTE2),
        accesses(EventKind.WRITE, Space.UB, UB_X, 32, block_num=blocks32, pipe=Pipe.MTE2),
        accesses(EventKind.READ, Space.GM, GM_Y, 32, block_num=blocks32, pipe=Pipe.MTE2),
        accesses(EventKind.WRITE, Space.UB, UB_Y, 32, block_num=blocks32, pipe=Pipe.MTE2),
        syncs(EventKind.SET_FLAG, Pipe.MTE2, Pipe.V, 0),
        syncs(EventKind.WAIT_FLAG, Pipe.MTE2, Pipe.V, 0),
        accesses(EventKind.READ, Space.UB, [UB_X, UB_Y], 32, block_num=8, repeat=blocks32 // 8, repeat_stride=8,
                 pipe=Pipe.V),
        accesses(EventKind.WRITE, Space.UB, UB_Z, 32, block_num=8, repeat=blocks32 // 8, repeat_stride=8, pipe=Pipe.V),
        syncs(EventKind.SET_FLAG, Pipe.V, Pipe.MTE3, 0),
        syncs(EventKind.WAIT_FLAG, Pipe.V, Pipe.MTE3, 0),
        accesses(EventKind.READ, Space.UB, UB_Z, 32, block_num=blocks32, pipe=Pipe.MTE3),
        accesses(EventKind.WRITE, Space.GM, GM_Z, 32, block_num=blocks32, pipe=Pipe.MTE3),
        syncs(EventKind.SET_FLAG, Pipe.MTE3, Pipe.MTE2, 0),
        syncs(EventKind.WAIT_FLAG, Pipe.MTE3, Pipe.MTE2, 0),
    ]  # fmt: skip
    tile = np.concatenate(one_tile)
    per_tile = tile.size
    n_tiles = tiles_per_block * BLOCKS
    events = np.tile(tile, n_tiles)
    tile_index = np.repeat(np.arange(n_tiles), per_tile)
    block = tile_index % BLOCKS
    offset = (tile_index // BLOCKS + block * tiles_per_block).astype(np.uint64) * TILE_BYTES
    events["block_id"] = block
    gm = events["space"] == Space.GM
    events["address"][gm] += offset[gm]
    events["serial"] = np.arange(1, events.size + 1)
    return events


def non_repeating_stream(n_events: int, layout: str) -> np.ndarray:
    """``n_events`` GM accesses of one tile each, every one at bytes no other touches: each block reads a tile of
    x and of y and writes a tile of z, blocks interleaved event by event. ``contiguous``: each block streams
    through its own slice of the buffers (an AscendC kernel's blockIdx * blockLength); ``interleaved``: tiles
    dealt to the blocks in turn, so each block owns every BLOCKS-th tile of z and ownership fragments;
    ``accumulate``: every block adds into every tile of z in atomic mode (a split-K reduction), so the first of
    them to reach a tile claims it and the others' writes meet it."""
    blocks32 = TILE_BYTES // 32
    tile = np.concatenate(
        [
            accesses(EventKind.READ, Space.GM, GM_X, 32, block_num=blocks32, pipe=Pipe.MTE2),
            accesses(EventKind.READ, Space.GM, GM_Y, 32, block_num=blocks32, pipe=Pipe.MTE2),
            accesses(EventKind.WRITE, Space.GM, GM_Z, 32, block_num=blocks32, pipe=Pipe.MTE3),
        ]
    )
    n_tiles = -(-n_events // tile.size)
    tiles_per_block = -(-n_tiles // BLOCKS)
    events = np.tile(tile, n_tiles)[:n_events]
    tile_index = np.arange(n_events) // tile.size
    block = tile_index % BLOCKS
    if layout == "contiguous":
        slot = tile_index // BLOCKS + block * tiles_per_block
    elif layout == "accumulate":  # every block adds into each tile of z in atomic mode (a split-K reduction)
        slot = tile_index // BLOCKS
        events["flags"][events["kind"] == EventKind.WRITE] |= 1
    else:
        slot = tile_index
    events["block_id"] = block
    events["address"] += slot.astype(np.uint64) * TILE_BYTES
    events["serial"] = np.arange(1, events.size + 1)
    return events


def measure_non_repeating(
    sizes: list[int], layout: str, batch: int, repeat: int, log_level: str = "warn"
) -> dict[str, int]:
    """events/s per stream size, by the wall clock and by this process's CPU time (the machine is shared: CPU time
    is the steadier of the two), best of ``repeat`` runs (more for streams under 3 M events, so that a short
    stream's figure is not one moment of a shared machine); a small stream first, untimed, so that no size pays for
    first calls."""
    measure_both(["memcheck"], non_repeating_stream(4 * batch, layout), batch, 4 * batch * TILE_BYTES, stores=False)
    rates: dict[str, int] = {}
    for n in sizes:
        events = non_repeating_stream(n, layout)
        total_bytes = (-(-n // 3) + BLOCKS) * TILE_BYTES
        wall, cpu = 0.0, 0.0
        for _ in range(max(repeat, -(-3_000_000 // n))):  # small streams run until 3 M events were measured
            w, c = measure_both(["memcheck"], events, batch, total_bytes, stores=False, log_level=log_level)
            wall, cpu = max(wall, w), max(cpu, c)
        print(f"memcheck, non-repeating ({layout}), {n / 1e6:g} M events: {wall / 1e6:.2f} M events/s on one core "
              f"({cpu / 1e6:.2f} M/s of CPU time)")  # fmt: skip
        rates[f"memcheck_non_repeating_{layout}_{n}_events_per_s"] = round(wall)
        rates[f"memcheck_non_repeating_{layout}_{n}_cpu_events_per_s"] = round(cpu)
    return rates


def against_baseline(baseline: str, argv: list[str], rounds: int) -> None:
    """The same measurement with the sanitizerd of ``baseline`` (a checkout's root) and of this tree, each in a
    fresh process, alternating ``rounds`` times; the best of each side per figure, and their ratio."""
    here = str(Path(__file__).resolve().parents[1])
    best: dict[str, dict[str, int]] = {"baseline": {}, "this tree": {}}
    for _ in range(rounds):
        for side, root in (("baseline", baseline), ("this tree", here)):
            env = {**os.environ, "PYTHONPATH": root}
            out = subprocess.run([sys.executable, __file__, *argv], env=env, check=True, capture_output=True, text=True)
            for key, value in json.loads(out.stdout.strip().splitlines()[-1]).items():
                if key.endswith("_per_s"):
                    best[side][key] = max(best[side].get(key, 0), value)
    result: dict[str, object] = {"baseline": baseline}
    for key, new in best["this tree"].items():
        old = best["baseline"][key]
        print(f"{key}: baseline {old / 1e6:.2f} M/s, this tree {new / 1e6:.2f} M/s, x{new / old:.2f}")
        result[key] = {"baseline": old, "this_tree": new, "ratio": round(new / old, 2)}
    print(json.dumps(result))


def measure(tools: list[str], events: np.ndarray, batch: int, total_bytes: int, stores: bool = True) -> float:
    return measure_both(tools, events, batch, total_bytes, stores)[0]


def measure_both(
    tools: list[str], events: np.ndarray, batch: int, total_bytes: int, stores: bool = True, log_level: str = "warn"
) -> tuple[float, float]:
    """events/s through ``tools``: by the wall clock, and by this process's CPU time."""
    context = SessionContext(job="bench", session=1, pid=0, device=0, chip=chip_named("910B1"),
                             config=Config(tools=tools, log_level=log_level))  # fmt: skip
    detectors = create_detectors(context)
    for detector in detectors:
        for address in (GM_X, GM_Y, GM_Z):
            detector.host_op(HostOp(op="malloc", address=address, size=total_bytes))
        for address in (GM_X, GM_Y) if stores else ():
            detector.host_op(HostOp(op="store", address=address, size=total_bytes))
        detector.kernel_begin(KernelLaunch(kernel=1, name="add_custom", block_dim=BLOCKS, kernel_type="aiv"))
    started, cpu_started = time.perf_counter(), time.process_time()
    for lo in range(0, events.size, batch):
        chunk = events[lo : lo + batch]
        for detector in detectors:
            detector.check(chunk)
    findings = [f for detector in detectors for f in detector.kernel_end()]
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    if findings:
        raise SystemExit(f"the clean stream produced findings: {findings[:3]}")
    return events.size / elapsed, events.size / max(cpu, 1e-9)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiles", type=int, default=20000, help="tiles per block")
    parser.add_argument("--batch-events", type=int, default=65536)
    parser.add_argument("--quick", action="store_true", help="fewer tiles (a few seconds)")
    parser.add_argument("--non-repeating", action="store_true", help="memcheck on fresh addresses per event")
    parser.add_argument("--layout", choices=("contiguous", "interleaved", "accumulate"), default="contiguous")
    parser.add_argument("--sizes", default="0.3,1,3,9", help="stream sizes for --non-repeating, M events")
    parser.add_argument("--repeat", type=int, default=3, help="runs per size (--non-repeating) or rounds (--baseline)")
    parser.add_argument("--baseline", metavar="ROOT", help="also measure the sanitizerd of this checkout, alternating")
    parser.add_argument("--log-level", choices=("info", "warn", "error"), default="warn",
                        help="the sessions' level: error skips multi-core stomping, as msSanitizer does")  # fmt: skip
    args = parser.parse_args()
    if args.baseline:
        argv = sys.argv[1:]
        at = argv.index("--baseline") if "--baseline" in argv else -1
        argv = argv[:at] + argv[at + 2 :] if at >= 0 else [a for a in argv if not a.startswith("--baseline=")]
        against_baseline(args.baseline, [*argv, "--repeat", "1"], args.repeat)
        return
    if args.non_repeating:
        sizes = [round(float(m) * 1e6) for m in args.sizes.split(",")]
        result = {"batch_events": args.batch_events, "layout": args.layout}
        result.update(measure_non_repeating(sizes, args.layout, args.batch_events, args.repeat, args.log_level))
        print(json.dumps(result))
        return
    tiles = 4000 if args.quick else args.tiles
    events = kernel_stream(tiles)
    total_bytes = tiles * BLOCKS * TILE_BYTES
    print(f"stream: {events.size:,} events ({BLOCKS} blocks x {tiles} tiles), batches of {args.batch_events:,}")
    result: dict[str, object] = {"events": int(events.size), "batch_events": args.batch_events}
    for name, tools in (
        ("memcheck", ["memcheck"]),
        ("initcheck", ["initcheck"]),
        ("memcheck+initcheck", ["memcheck", "initcheck"]),
        ("memcheck+initcheck+synccheck", ["memcheck", "initcheck", "synccheck"]),
    ):
        rate, cpu = measure_both(tools, events, args.batch_events, total_bytes, log_level=args.log_level)
        print(f"{name}: {rate / 1e6:.2f} M events/s on one core ({cpu / 1e6:.2f} M/s of CPU time)")
        result[f"{name}_events_per_s"] = round(rate)
        result[f"{name}_cpu_events_per_s"] = round(cpu)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
