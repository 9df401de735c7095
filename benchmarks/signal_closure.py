"""Cross-NPU racecheck: the closure of a job's signal order (``_cross_npu.SignalClosure``) at MAX_SIGNALS, on the
shapes that cost it most, each from a fresh table (a job recomputes it only when its signals grew):

* ``chain``: one session whose 2 047 blocks pass a token on, each waiting for the previous block's flag and
  setting its own, between a writer's set and a reader's wait (2 048 hops, every block a step of its own);
* ``sessions``: 4 096 sessions of one signal each, 2 048 setters and 2 048 waiters of one flag (the most boundary
  nodes: 12 288 nodes, a 19 MiB closure);
* ``dense``: 64 blocks of 64 sets against 64 blocks of 64 waits of one flag under GE (2^18 set-wait edges);
* ``ring``: 2 048 blocks in a cycle, each waiting for the previous one's flag and setting its own (hostile: the
  first block waits for the last one's);
* ``cycles``: 1 024 hostile two-block cycles, each block in a session of its own, waiting for the other's flag
  before setting its own (the most cycles to break: one pick each);
* ``ping_pong``: two blocks of 2 048 signals answering each other (a cycle through two chains), repeated over a
  flag reused in two launches.

Reports per shape: nodes, edges, closure work (bytes ORed), whether it stopped (at MAX_CLOSURE_WORK, or edges cut
at MAX_SIGNAL_EDGES), and the best wall time of --repeat runs, edges and closure together and the closure alone
(seconds). Target: under ~0.5 s each.

    .venv/bin/python benchmarks/signal_closure.py [--repeat 3]

Prints one JSON object last.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from sanitizerd.detectors._cross_npu import MAX_SIGNALS, SIGNAL_DTYPE, SignalClosure, signal_edges

FLAG = 0x1000


def table(session: np.ndarray, block: np.ndarray, position: np.ndarray, address: np.ndarray, value: np.ndarray,
          wait: np.ndarray, ordinal: np.ndarray | int = 0, op: int = 0) -> np.ndarray:  # fmt: skip
    signals = np.zeros(np.asarray(session).size, dtype=SIGNAL_DTYPE)
    signals["session"], signals["block"], signals["position"] = session, block, position
    signals["address"], signals["value"], signals["wait"] = address, value, wait
    signals["ordinal"], signals["op"] = ordinal, op
    return signals


def chain() -> np.ndarray:
    hops = MAX_SIGNALS // 2 - 1
    k = np.arange(hops)
    step = np.tile([0, 1], hops)  # each block waits for flag k, then sets flag k + 1
    middle = table(np.full(2 * hops, 2), np.repeat(k, 2), step, FLAG + 8 * (np.repeat(k, 2) + step), np.ones(2 * hops),
                   step == 0)  # fmt: skip
    ends = table(np.array([1, 3]), np.zeros(2), np.zeros(2), np.array([FLAG, FLAG + 8 * hops]), np.ones(2),
                 np.array([False, True]))  # fmt: skip
    return np.concatenate((ends, middle))


def sessions() -> np.ndarray:
    n = MAX_SIGNALS
    return table(np.arange(n), np.zeros(n), np.zeros(n), np.full(n, FLAG), np.ones(n), np.arange(n) % 2 == 1)


def dense() -> np.ndarray:
    n = MAX_SIGNALS // 2
    sets = table(np.ones(n), np.arange(n) // 64, np.arange(n) % 64, np.full(n, FLAG), np.arange(n), np.zeros(n, bool))
    waits = table(np.full(n, 2), np.arange(n) // 64, np.arange(n) % 64, np.full(n, FLAG), np.arange(n),
                  np.ones(n, bool), op=3)  # fmt: skip
    return np.concatenate((sets, waits))


def ring() -> np.ndarray:
    n = MAX_SIGNALS // 2
    k = np.repeat(np.arange(n), 2)
    flag = np.where(np.tile([True, False], n), (k - 1) % n, k)
    return table(np.ones(2 * n), k, np.tile([0, 1], n), FLAG + 8 * flag, np.ones(2 * n), np.tile([True, False], n))


def cycles() -> np.ndarray:
    n = MAX_SIGNALS // 4
    pair, side = np.repeat(np.arange(n), 4), np.tile([0, 0, 1, 1], n)
    wait = np.tile([True, False, True, False], n)
    flag = 2 * pair + np.where(wait, 1 - side, side)
    return table(2 * pair + side, np.zeros(4 * n), np.tile([0, 1, 0, 1], n), FLAG + 8 * flag, np.ones(4 * n), wait)


def ping_pong() -> np.ndarray:
    n = MAX_SIGNALS // 8  # rounds per launch: each block sets its flag then waits for the other's
    parts = []
    for ordinal in (0, 1):
        for me in (0, 1):
            position = np.arange(2 * n)
            mine = position % 2 == 0
            address = np.where(mine, FLAG + 8 * me, FLAG + 8 * (1 - me))
            value = position // 2
            parts.append(table(np.full(2 * n, 1 + me), np.zeros(2 * n), position, address, value, ~mine, ordinal))
    return np.concatenate(parts)


SHAPES = {"chain": chain, "sessions": sessions, "dense": dense, "ring": ring, "cycles": cycles, "ping_pong": ping_pong}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    results = {}
    for name, shape in SHAPES.items():
        signals = shape()
        assert signals.size <= MAX_SIGNALS
        walls, closing = [], []
        for _ in range(args.repeat):
            began = time.perf_counter()
            edges, cut = signal_edges(signals)
            found = time.perf_counter()
            closure = SignalClosure(signals, edges, cut)
            walls.append(time.perf_counter() - began)
            closing.append(time.perf_counter() - found)
        results[name] = {"signals": int(signals.size), "nodes": int(closure.reach.shape[0]), "edges": int(edges.size),
                         "work": closure.work, "stopped": closure.unsure, "seconds": round(min(walls), 4),
                         "closure_seconds": round(min(closing), 4),
                         "closure_mib": round(closure.reach.nbytes / 2**20, 1)}  # fmt: skip
        print(name, results[name], flush=True)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
