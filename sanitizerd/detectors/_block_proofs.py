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

SPMD blocks run one program on their own GM tiles: a span alike to a proven one (the same events up to a GM
offset and a serial offset, ``alike``) is proven by that proof, moved by the offset, without a check.

The verdict "no race, no deadlock" stands when every span is proven, no two spans conflict, and the cross-block
waits all match without a cycle; anything else (a race found in a span, a conflict, a stuck or cyclic wait, a
span whose nodes were made with other pipe_barrier(PIPE_ALL) members than the kernel's) leaves the verdict to the
whole check, exactly as before. A racy kernel pays both; a race-free one pays the spans only.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

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
from sanitizerd.detectors._patterns import ADDRESS_LIMIT, ends, ranges
from sanitizerd.detectors._race_columns import HeldColumns, Span, Stretch
from sanitizerd.detectors._rendezvous import match_cross
from sanitizerd_protocol.records import Space


class Kernel(Protocol):
    """What a proof reads of a span's check (a ``racecheck.Kernel`` over the span alone). Declared here, not
    imported, because racecheck imports this module: the proofs sit below the detector (issue 27: no circle)."""

    model: Model
    access: np.ndarray  # the accesses, sorted by block
    ext: np.ndarray  # their extents, as _patterns.ranges takes them
    write: np.ndarray  # which of them write
    native: object | None  # the compiled module, or None for numpy's path
    listed: tuple[np.ndarray, np.ndarray, np.ndarray] | None  # its pair search's ranges of every access, where kept


_ALIKE_KEPT = 16  # proofs kept for spans alike up to their GM offset, per launch
_COMPARED_ACCESS_FIELDS = ("kind", "block_size", "block_num", "block_stride", "repeat", "repeat_stride", "pipe",
                           "space", "flags", "pc", "location", "block_type", "ext")  # fmt: skip
_COMPARED_SYNC_FIELDS = ("pipe", "dst_pipe", "event_id", "mode", "block_num", "address", "block_type")


@dataclass(slots=True)
class _Proof:
    """What a proven span leaves for kernel_end, relative to its GM base, first block and first sync event."""

    footprint: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
    cross: dict[str, np.ndarray] | None
    busy: int
    members: bytes | None


class BlockProofs:
    """One kernel launch's spans: whether each was proven, their GM footprints and their cross-block nodes."""

    def __init__(self) -> None:
        self.failed = False  # a span was not proven: the whole check decides
        self.spans = 0
        self.reused = 0  # spans proven by an alike span's proof
        self.mirrored_blocks = 0  # of them, blocks found alike to the reference as they arrived (``mirrored``)
        self.reference: _Proof | None = None  # the proof of that reference block (``HeldColumns.mirror_from``)
        self._alike: dict[bytes, tuple[Shape, _Proof]] = {}  # by shape key: the first stretch proven, its proof
        self._members: set[bytes] = set()  # pipe_barrier(PIPE_ALL) members the spans' nodes were made with
        self._busy = 0  # the pipes busy in any span (a bit each): the kernel's members are the busy ones
        self._footprints: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
        self._cross: list[dict[str, np.ndarray]] = []

    def fail(self) -> None:
        self.failed = True
        self._footprints, self._cross = [], []

    def shape(self, held: HeldColumns, stretch: Stretch) -> Shape | None:
        """The stretch's shape (``shape``), while proofs are still of use."""
        return None if self.failed else shape(held, stretch)

    def reuse(self, held: HeldColumns, shaped: Shape) -> bool:
        """Whether a stretch alike was proven (``alike``): its proof then stands for this one too."""
        entry = self._alike.get(shaped.key)
        if entry is None or not alike(held, entry[0], shaped):
            return False
        self.reused += 1
        self._proven(shaped.stretch, entry[1], shaped.base)
        return True

    def mirrored(self, stretch: Stretch, base: int) -> None:
        """A block found alike to the reference block as it arrived (``HeldColumns.mirror_from``): the reference's
        proof stands for it, moved to its GM ``base``."""
        if self.failed:
            return
        assert self.reference is not None
        self.reused += 1
        self.mirrored_blocks += 1
        self._proven(stretch, self.reference, base)

    def add(self, span: Span, kernel: Kernel, racing: int, stuck: int, cut: int, shaped: Shape | None) -> _Proof | None:
        """The check of ``span`` (a ``racecheck.Kernel`` over it alone): ``racing`` pairs found, ``stuck`` waits,
        ``cut`` segments with more sites than compared; ``shaped``: its shape, if it has one. Its proof, if it
        proved the span."""
        if self.failed:
            return None
        if racing or stuck or cut:
            self.fail()
            return None
        base = np.uint64(shaped.base if shaped is not None else 0)
        every_start, every_stop, write_start, write_stop = _footprint(kernel)
        if every_stop.size and int(every_stop.max()) >= ADDRESS_LIMIT:
            # The whole check's sweep clamps GM ranges there, so that ranges apart past it may meet: spans cannot
            # tell it what it would find between them.
            self.fail()
            return None
        footprint = (every_start - base, every_stop - base, write_start - base, write_stop - base)
        nodes = kernel.model.nodes
        cross = np.flatnonzero(_IS_CROSS[nodes.kind])
        crossing = None
        if cross.size:
            clock = np.full((cross.size, NPIPES), -1, dtype=np.int32)
            clock[:, nodes.active] = nodes.K[cross]
            crossing = {
                "block": nodes.block[cross], "pipe": nodes.pipe[cross], "ordinal": nodes.ordinal[cross],
                "kind": nodes.kind[cross], "sync": nodes.local[cross], "clock": clock,
            }  # fmt: skip
        proof = _Proof(footprint, crossing, span.busy, span.members)
        if shaped is not None and shaped.key not in self._alike and len(self._alike) < _ALIKE_KEPT:
            self._alike[shaped.key] = (shaped, proof)
        self._proven(span, proof, int(base))
        return proof

    def _proven(self, span: Stretch, proof: _Proof, base: int) -> None:
        self.spans += 1
        self._busy |= proof.busy
        if proof.members is not None:
            self._members.add(proof.members)
        every_start, every_stop, write_start, write_stop = (bound + np.uint64(base) for bound in proof.footprint)
        self._footprints.append((every_start, every_stop, write_start, write_stop))
        if proof.cross is not None:
            cross = dict(proof.cross)
            cross["block"] = cross["block"] + span.blocks[0]
            cross["sync"] = cross["sync"] + span.syncs[0]
            self._cross.append(cross)

    def verdict(
        self, sync_rows: Callable[[np.ndarray], Columns], block_keys: np.ndarray, need: Callable[[int, str], None],
        *, cross_free: bool,
    ) -> bool:  # fmt: skip
        """Whether the spans prove the whole kernel free of races and deadlocks (``sync_rows``: the kernel's sync
        events at the rows asked, in arrival order; ``block_keys``: its blocks in order). ``need`` is asked for what
        the cross-block waits' dependencies may take (as many as the whole check's cross-block knowledge), and
        raises to refuse."""
        if self.failed or not self.spans:
            return False
        members = _ALL_PIPES[(self._busy >> _ALL_PIPES) & 1 == 1].tobytes()
        if self._members - {members}:  # a span's nodes lack a barrier member busy elsewhere: its clocks may differ
            return False
        if _conflict(self._footprints):
            return False
        return cross_free or not self._cross or _cross_settled(self._cross, sync_rows, block_keys, need)


@dataclass(frozen=True, slots=True)
class Shape:
    """A stretch as ``alike`` compares it: a key (its sizes, where its blocks start, its events' kinds) that
    names the proven stretch to compare it with, and its GM base (its lowest GM address)."""

    stretch: Stretch
    key: bytes
    base: int


def shape(held: HeldColumns, stretch: Stretch) -> Shape | None:
    """The stretch's shape; None where a GM range may reach the addresses the sweep clamps (ADDRESS_LIMIT), which
    an offset would not move alike."""
    events, accesses, _ = held.rows_of(stretch)
    h = hashlib.sha256(np.array([events.size, accesses.size, stretch.syncs[1] - stretch.syncs[0]], dtype=np.int64))
    key = events["block_key"]
    h.update(np.flatnonzero(key[1:] != key[:-1]))
    h.update(np.ascontiguousarray(events["kind"]))
    base = 0
    gm = accesses["space"] == Space.GM
    if gm.any():
        address = accesses["address"][gm]
        base = int(address.min())
        if int(ends(address, accesses["ext"][gm]).max()) >= ADDRESS_LIMIT:
            return None
    return Shape(stretch, h.digest(), base)


def alike(held: HeldColumns, a: Shape, b: Shape) -> bool:
    """Whether two stretches are the same to a check of each alone, up to a GM offset and a serial offset:
    every field the check reads, GM addresses less their stretch's base and serials less its first, compared
    exactly. SPMD blocks run one program on their own GM tiles; an offset moves every GM range alike (below
    ADDRESS_LIMIT), so the overlaps inside a stretch are the same, and one's proof stands for the other's.
    Where the accesses sit among the nodes, and the nodes, follow from what is compared (kinds in order, pipes,
    serials, extents), so a stretch alike is neither placed nor made."""
    if a.key != b.key:
        return False
    (events_a, acc_a, sync_a), (events_b, acc_b, sync_b) = (held.rows_of(x.stretch) for x in (a, b))
    if not np.array_equal(events_a["kind"], events_b["kind"]):
        return False
    key_a, key_b = events_a["block_key"], events_b["block_key"]
    if not np.array_equal(key_a[1:] != key_a[:-1], key_b[1:] != key_b[:-1]):
        return False
    if acc_a.size:
        for name in _COMPARED_ACCESS_FIELDS:
            if not np.array_equal(acc_a[name], acc_b[name]):
                return False
        gm = acc_a["space"] == Space.GM  # the same in both: space was compared
        offset = np.where(gm, np.uint64((b.base - a.base) % (1 << 64)), np.uint64(0))  # differences wrap round
        if not np.array_equal(acc_b["address"] - acc_a["address"], offset):
            return False
        serial_a, serial_b = acc_a["serial"], acc_b["serial"]
        shift = np.uint64((int(serial_b[0]) - int(serial_a[0])) % (1 << 64))
        if not np.array_equal(serial_b - serial_a, np.full(serial_a.size, shift)):
            return False
    return all(np.array_equal(sync_a[name], sync_b[name]) for name in _COMPARED_SYNC_FIELDS)


def _footprint(kernel: Kernel) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The span's GM accesses as disjoint byte intervals: of all of them (start, stop), and of its writes. The
    ranges are those the pair search listed, where it kept them."""
    access, ext, write = kernel.access, kernel.ext, kernel.write
    owner, start, stop = kernel.listed if kernel.listed is not None else ranges(access, ext, None, kernel.native)
    gm = np.flatnonzero(access["space"][owner] == Space.GM)  # rows, then takes: a mask per array is slower
    owner, start, stop = owner[gm], start[gm], stop[gm]
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


def _conflict(footprints: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]) -> bool:
    """Whether a write interval of one span meets an interval of another. Each span's intervals are disjoint, and
    each of its write intervals lies in one of its own, so a write interval meets another span's exactly when it
    meets more than one interval in all. Intervals meeting [s, e): those starting before e, less those ending at
    or before s (which all start before e)."""
    if len(footprints) < 2:
        return False
    starts = np.sort(np.concatenate([f[0] for f in footprints]))
    stops = np.sort(np.concatenate([f[1] for f in footprints]))
    w_start = np.concatenate([f[2] for f in footprints])
    w_stop = np.concatenate([f[3] for f in footprints])
    if not w_start.size:
        return False
    meets = np.searchsorted(starts, w_stop, side="left") - np.searchsorted(stops, w_start, side="right")
    return bool((meets > 1).any())


def _cross_settled(
    parts: list[dict[str, np.ndarray]], sync_rows: Callable[[np.ndarray], Columns], block_keys: np.ndarray,
    need: Callable[[int, str], None],
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
    syncs = sync_rows(at)
    matched = match_cross(
        rows, nodes.kind[rows], syncs["block_type"], syncs["block_id"], syncs["event_id"].astype(np.int64),
        syncs["mode"], syncs["block_num"], syncs["address"], pipe[rows] == _S, present,
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
