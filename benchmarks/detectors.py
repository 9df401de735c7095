"""Detector throughput on one core: memcheck and initcheck (and optionally synccheck) over a realistic stream.

The stream is the demo's AscendC add kernel scaled up: each of 8 vector blocks copies tiles GM->UB on MTE2
(x and y), adds them on V, and copies the result UB->GM on MTE3, with set_flag/wait_flag between the pipes
(about one event in three is a sync event). Host stores define the inputs first. Batches are cut from the
stream as a client would send them; the detectors are called directly, in this one thread, so the figure is
detector CPU per event with no I/O.

    .venv/bin/python benchmarks/detectors.py --quick

Prints one JSON object last: events_per_s for each detector set measured.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from client_shim.events import EventKind, Pipe, Space, accesses, syncs
from sanitizerd.chips import chip_named
from sanitizerd.detectors import create_detectors
from sanitizerd.detectors.base import KernelLaunch, SessionContext
from sanitizerd.protocol.messages import Config, HostOp

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


def measure(tools: list[str], events: np.ndarray, batch: int, total_bytes: int) -> float:
    context = SessionContext(job="bench", session=1, pid=0, device=0, chip=chip_named("910B1"),
                             config=Config(tools=tools))  # fmt: skip
    detectors = create_detectors(context)
    for detector in detectors:
        for address in (GM_X, GM_Y, GM_Z):
            detector.host_op(HostOp(op="malloc", address=address, size=total_bytes))
        for address in (GM_X, GM_Y):
            detector.host_op(HostOp(op="store", address=address, size=total_bytes))
        detector.kernel_begin(KernelLaunch(kernel=1, name="add_custom", block_dim=BLOCKS, kernel_type="aiv"))
    started = time.perf_counter()
    for lo in range(0, events.size, batch):
        chunk = events[lo : lo + batch]
        for detector in detectors:
            detector.check(chunk)
    findings = [f for detector in detectors for f in detector.kernel_end()]
    elapsed = time.perf_counter() - started
    if findings:
        raise SystemExit(f"the clean stream produced findings: {findings[:3]}")
    return events.size / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiles", type=int, default=20000, help="tiles per block")
    parser.add_argument("--batch-events", type=int, default=65536)
    parser.add_argument("--quick", action="store_true", help="fewer tiles (a few seconds)")
    args = parser.parse_args()
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
        rate = measure(tools, events, args.batch_events, total_bytes)
        print(f"{name}: {rate / 1e6:.2f} M events/s on one core")
        result[f"{name}_events_per_s"] = round(rate)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
