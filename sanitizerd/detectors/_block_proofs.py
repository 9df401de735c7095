"""Blocks proven race-free as they complete, so that a race-free kernel's verdict does not wait for the whole
check at kernel_end (issue 13; docs/design.md, racecheck, "Blocks proven as they complete").

When blocks arrive one after the other, each stretch of complete blocks (a *span*: the blocks that completed in
one batch, or at a BLOCK_FINISH) is checked as a kernel of its own, with cross-block waits teaching nothing
(``racecheck.Kernel`` with a ``TrialAccount``). That check's happens-before is a part of the whole kernel's: it
has every edge inside the span's blocks and none through other blocks, and every ordering test is monotone in
what a node knows, so a pair it finds ordered is ordered in the whole kernel. Its sweep is complete for the order
it is given (every racing pair of distinct sites), so a span in which it finds no race has no race between two
of its accesses in the whole kernel either. What it cannot see is kept for kernel_end, where it is cheap:

* accesses of two spans that overlap in GM: each span's GM footprint, as disjoint byte intervals of all its
  accesses and of its writes; two spans conflict where a write interval of one meets an interval of another;
* deadlocks: a span's own stuck waits and cycles fail its proof; across blocks, every cross-block wait must be
  matched (``_rendezvous``) and no wait may wait for itself through other blocks: a cycle of the whole kernel
  runs through cross-block waits, each one's releaser coming after the one before it in its own block, which the
  spans' clocks of their cross-block nodes say (``_happens_before.cross_deps``; Kahn's order takes them all).

The verdict "no race, no deadlock" stands when every span is proven, no two spans conflict, and the cross-block
waits all match without a cycle; anything else (a race found in a span, a conflict, a stuck or cyclic wait, a
span whose nodes were made with other pipe_barrier(PIPE_ALL) members than the kernel's) leaves the verdict to the
whole check, exactly as before. A racy kernel pays both; a race-free one pays the spans only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from sanitizerd.detectors._batches import Columns
from sanitizerd.detectors._happens_before import (
    _ALL_PIPES,
    _IS_CROSS,
    _S,
    NPIPES,
    Model,
    Nodes,
    acyclic,
    cross_deps,
)
from sanitizerd.detectors._patterns import ranges
from sanitizerd.detectors._race_columns import Span
from sanitizerd.detectors._rendezvous import match_cross
from sanitizerd.protocol.records import Space

if TYPE_CHECKING:
    from sanitizerd.detectors.racecheck import Kernel


class BlockProofs:
    """One kernel launch's spans: whether each was proven, their GM footprints and their cross-block nodes."""

    def __init__(self) -> None:
        self.failed = False  # a span was not proven: the whole check decides
        self.spans = 0
        self._members: set[bytes] = set()  # pipe_barrier(PIPE_ALL) members the spans' nodes were made with
        self._busy = 0  # the pipes busy in any span (a bit each): the kernel's members are the busy ones
        self._footprints: list[tuple[int, np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
        self._cross: list[dict[str, np.ndarray]] = []

    def fail(self) -> None:
        self.failed = True
        self._footprints, self._cross = [], []

    def add(self, span: Span, kernel: Kernel, racing: int, stuck: int, cut: int) -> None:
        """The check of ``span`` (a ``racecheck.Kernel`` over it alone): ``racing`` pairs found, ``stuck`` waits,
        ``cut`` segments with more sites than compared."""
        if self.failed:
            return
        if racing or stuck or cut:
            self.fail()
            return
        self.spans += 1
        self._busy |= span.busy
        if span.members is not None:
            self._members.add(span.members)
        self._footprints.append((self.spans, *_footprint(kernel)))
        nodes = kernel.model.nodes
        cross = np.flatnonzero(_IS_CROSS[nodes.kind])
        if cross.size:
            clock = np.full((cross.size, NPIPES), -1, dtype=np.int32)
            clock[:, nodes.active] = nodes.K[cross]
            self._cross.append(
                {
                    "block": nodes.block[cross] + span.blocks[0],
                    "pipe": nodes.pipe[cross],
                    "ordinal": nodes.ordinal[cross],
                    "kind": nodes.kind[cross],
                    "sync": nodes.local[cross] + span.syncs[0],
                    "clock": clock,
                }
            )

    def verdict(
        self, syncs: Columns, block_keys: np.ndarray, need: Callable[[int, str], None], *, cross_free: bool
    ) -> bool:
        """Whether the spans prove the whole kernel free of races and deadlocks (``syncs``: the kernel's sync
        events in arrival order; ``block_keys``: its blocks in order). ``need`` is asked for what the cross-block
        waits' dependencies may take (as many as the whole check's cross-block knowledge), and raises to refuse."""
        if self.failed or not self.spans:
            return False
        members = _ALL_PIPES[(self._busy >> _ALL_PIPES) & 1 == 1].tobytes()
        if self._members - {members}:  # a span's nodes lack a barrier member busy elsewhere: its clocks may differ
            return False
        if _conflict(self._footprints):
            return False
        return cross_free or not self._cross or _cross_settled(self._cross, syncs, block_keys, need)


def _footprint(kernel: Kernel) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The span's GM accesses as disjoint byte intervals: of all of them (start, stop), and of its writes."""
    access, ext, write = kernel.access, kernel.ext, kernel.write
    gm = np.flatnonzero(access["space"] == Space.GM)
    owner, start, stop = ranges(access, ext, gm)
    every = _merged(start, stop)
    is_write = write[owner]
    return (*every, *_merged(start[is_write], stop[is_write]))


def _merged(start: np.ndarray, stop: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Byte ranges as sorted, disjoint, non-adjacent intervals."""
    if not start.size:
        return start, stop
    order = np.argsort(start, kind="stable")
    start, stop = start[order], stop[order]
    reach = np.maximum.accumulate(stop)
    new = np.ones(start.size, dtype=bool)
    new[1:] = start[1:] > reach[:-1]
    first = np.flatnonzero(new)
    last = np.append(first[1:], start.size) - 1
    return start[first], reach[last]


def _conflict(footprints: list[tuple[int, np.ndarray, np.ndarray, np.ndarray, np.ndarray]]) -> bool:
    """Whether a write interval of one span meets an interval of another. Each span's intervals are disjoint, and
    each of its write intervals lies in one of its own, so a write interval meets another span's exactly when it
    meets more than one interval in all. Intervals meeting [s, e): those starting before e, less those ending at
    or before s (which all start before e)."""
    if len(footprints) < 2:
        return False
    starts = np.sort(np.concatenate([f[1] for f in footprints]))
    stops = np.sort(np.concatenate([f[2] for f in footprints]))
    w_start = np.concatenate([f[3] for f in footprints])
    w_stop = np.concatenate([f[4] for f in footprints])
    if not w_start.size:
        return False
    meets = np.searchsorted(starts, w_stop, side="left") - np.searchsorted(stops, w_start, side="right")
    return bool((meets > 1).any())


def _cross_settled(
    parts: list[dict[str, np.ndarray]], syncs: Columns, block_keys: np.ndarray, need: Callable[[int, str], None]
) -> bool:
    """Whether every cross-block wait is released and none waits, through other blocks, for itself: no cycle of
    waits where each one's releaser comes after the one before it in its block."""
    cross = {name: np.concatenate([p[name] for p in parts]) for name in parts[0]}
    block, pipe, ordinal = cross["block"].astype(np.int64), cross["pipe"].astype(np.int64), cross["ordinal"]
    chain = block * NPIPES + pipe
    nodes = Nodes(
        block=block, pipe=pipe, pos=np.zeros(block.size, dtype=np.int64), ordinal=ordinal, event=cross["sync"],
        local=cross["sync"], kind=cross["kind"], key=chain, chain=chain,
    )  # fmt: skip
    nodes.K = cross["clock"]
    nodes.active = np.arange(NPIPES)
    nodes.column = np.arange(NPIPES)
    rows = np.argsort(cross["sync"], kind="stable")  # arrival order, as the whole check matches them
    at = cross["sync"][rows]
    present = {(int(k) >> 16, int(k) & 0xFFFF) for k in block_keys}
    matched = match_cross(
        rows, nodes.kind[rows], syncs["block_type"][at], syncs["block_id"][at], syncs["event_id"][at].astype(np.int64),
        syncs["mode"][at], syncs["block_num"][at], syncs["address"][at], pipe[rows] == _S, present,
    )  # fmt: skip
    if matched.stuck:
        return False
    sources = matched.sources
    if not sources:
        return True
    # A wait's dependencies are at most a wait per pipe of every block: the whole check's G, and asked for alike.
    need(3 * len(sources) * block_keys.size * NPIPES * 4, f"{len(sources)} cross-block waits across {block_keys.size} "
         "blocks")  # fmt: skip
    empty = np.empty(0, dtype=np.int64)
    model = Model(
        nodes=nodes, start=empty, cross_waits=np.array(sorted(sources), dtype=np.int64),
        G=np.empty((0, 0), dtype=np.int32), lamport=empty, chains_with_cross={}, stuck=[], barriers=empty,
        nonforward=empty, rank=empty,
    )  # fmt: skip
    return acyclic(cross_deps(model, sources))
