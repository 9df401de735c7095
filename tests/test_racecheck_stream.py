"""racecheck gathers what its check reads as batches arrive (issue 13): the findings of a kernel must not depend on
how its events were cut into batches, nor on how its blocks' events interleave on the way.

Random multi-block kernels (tests/test_racecheck_model's generator, racy ones included) are checked whole, in one
batch with blocks one after the other, and streamed: cut into batches of random sizes, blocks interleaved at
random (each block's own events in program order). Both must give the same findings, field for field."""

from __future__ import annotations

import random
from collections.abc import Callable

import numpy as np
import pytest

from client_shim.events import EventKind, Pipe, Space, accesses, syncs
from sanitizerd.detectors import racecheck
from sanitizerd.detectors._happens_before import BlockParts, barrier_members, block_edges, build, make_nodes
from sanitizerd.detectors._race_pairs import _by_rank
from sanitizerd.detectors.racecheck import Kernel, _stable_order
from tests.detector_helpers import make_detector, run_kernel
from tests.test_racecheck_model import random_kernel, to_events


def merged(events: np.ndarray, rng: random.Random) -> np.ndarray:
    """The events with blocks merged at random, each block's own order kept."""
    queues = [list(np.flatnonzero(events["block_id"] == b)) for b in np.unique(events["block_id"]).tolist()]
    out: list[int] = []
    while any(queues):
        queue = rng.choice([q for q in queues if q])
        take = rng.randint(1, 4)
        out.extend(queue[:take])
        del queue[:take]
    return events[np.array(out, dtype=np.int64)]


def batches(events: np.ndarray, rng: random.Random) -> list[np.ndarray]:
    cuts = sorted(rng.sample(range(1, events.size), min(rng.randint(0, 6), events.size - 1))) if events.size > 1 else []
    return np.split(events, cuts)


def check(*parts: np.ndarray) -> list[object]:
    detector = make_detector("racecheck")
    return run_kernel(detector, *parts)


@pytest.mark.parametrize("seed", range(120))
def test_streamed_and_whole_kernels_give_the_same_findings(seed: int) -> None:
    rng = random.Random(seed)
    spmd = rng.random() < 0.4
    program = random_kernel(rng, blocks=rng.choice((2, 3, 4)), spmd=spmd)
    events, _ = to_events(program)
    whole = check(events)
    assert check(*batches(events, rng)) == whole  # blocks one after the other, batches cut anywhere
    assert check(*batches(merged(events, rng), rng)) == whole  # and blocks interleaved


def test_races_found_in_a_streamed_kernel_whose_blocks_interleave() -> None:
    """Not only equal: a racing GM pair between two blocks, and a racing pair of pipes inside one, found when
    the blocks' events arrive interleaved one by one in single-event batches."""
    a = accesses(EventKind.WRITE, Space.GM, 0x1000, 64, pipe=Pipe.MTE3, block_id=0, serial=1)
    b = accesses(EventKind.READ, Space.GM, 0x1020, 64, pipe=Pipe.MTE2, block_id=1, serial=2)
    c = accesses(EventKind.WRITE, Space.UB, 0x0, 32, pipe=Pipe.MTE2, block_id=1, serial=3)
    d = accesses(EventKind.READ, Space.UB, 0x0, 32, pipe=Pipe.V, block_id=1, serial=4)
    e = syncs(EventKind.SET_FLAG, Pipe.MTE2, Pipe.V, 0, block_id=0, serial=5)
    f = syncs(EventKind.WAIT_FLAG, Pipe.MTE2, Pipe.V, 0, block_id=0, serial=6)
    events = np.concatenate((b, a, e, c, f, d))
    findings = check(*(events[i : i + 1] for i in range(events.size)))
    kinds = sorted((x.kind, x.space, sorted(acc.serial for acc in x.accesses)) for x in findings)
    assert kinds == [("race_raw", "GM", [1, 2]), ("race_raw", "UB", [3, 4])], kinds


def random_events(rng: random.Random, blocks: int) -> np.ndarray:
    """Any sync kind on any pipe, among accesses: not a kernel that makes sense (waits go unreleased), but every
    rule by which a sync event makes nodes, and an access finds its place among them."""
    pipes = (Pipe.S, Pipe.V, Pipe.M, Pipe.MTE2, Pipe.MTE3, Pipe.ALL, Pipe.S_CAL)
    kinds = [k for k in EventKind if k >= EventKind.SET_FLAG and k not in (EventKind.SET_REGISTER,
             EventKind.BLOCK_FINISH)]  # fmt: skip
    parts, serial = [], 0
    for block in range(blocks):
        for _ in range(rng.randint(0, 40)):
            serial += rng.randint(0, 1)  # an instruction's events share its serial now and then
            if rng.random() < 0.5:
                pipe = rng.choice([p for p in pipes if p != Pipe.ALL])
                kind = rng.choice((EventKind.READ, EventKind.WRITE))
                ev = accesses(kind, Space.UB, 0x20 * rng.randint(0, 8), 32, pipe=pipe, block_id=block, serial=serial)
            else:
                kind, pipe = rng.choice(kinds), rng.choice(pipes)
                ev = syncs(kind, pipe, rng.choice(pipes), rng.randint(0, 1), block_id=block, serial=serial)
            parts.append(ev)
    return np.concatenate(parts) if parts else accesses(EventKind.READ, Space.UB, 0, 32, pipe=Pipe.V)


@pytest.mark.parametrize("seed", range(60))
def test_places_counted_per_block_are_the_places_searched_among_all_nodes(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where each access sits (its last node on its pipe, its issuer, its segment, and, compared within a
    (block, pipe), its barriers and pipeSerialNo) is the same counted per block as blocks complete as searched
    among all the kernel's nodes at kernel_end."""
    rng = random.Random(seed)
    events = random_events(rng, rng.randint(1, 4))
    compared = []

    def both(kernel: Kernel) -> None:
        assert kernel.placed_in_blocks  # the blocks arrived one after the other
        kernel._placed_in_blocks()
        counted = (kernel.prev, kernel.seg, kernel.issuer, kernel.barrier_no, kernel.pipe_index)
        kernel._search_places()
        assert np.array_equal(counted[0], kernel.prev)
        assert np.array_equal(counted[1], kernel.seg)
        assert np.array_equal(counted[2], kernel.issuer)
        chain = kernel.mblock * 16 + kernel.pipe
        for mine, searched in ((counted[3], kernel.barrier_no), (counted[4], kernel.pipe_index)):
            by = np.argsort(chain, kind="stable")
            within = same_chain(chain[by])
            assert np.array_equal(np.diff(mine[by])[within], np.diff(searched[by])[within])
        kernel.placed = kernel._placed()
        kernel.cross_rows = kernel._cross_rows()
        compared.append(kernel.mem.size)

    monkeypatch.setattr(Kernel, "_place_accesses", both)
    check(*batches(events, rng))
    assert compared


def same_chain(chain: np.ndarray) -> np.ndarray:
    return chain[1:] == chain[:-1]


def test_nodes_and_edges_made_per_block_are_those_made_for_the_whole_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    """The sync nodes made as blocks complete are field for field the ones made from the whole kernel at its end,
    and so are the edges between them and the waits none releases (the blocks' own checks', as they complete,
    too); where a block's pipe_barrier(PIPE_ALL) was made with other member pipes than the kernel's (a pipe busy only in
    a later block), they are made again at the end."""
    outcomes = []

    def compared(*args: object, made: Callable[[np.ndarray], BlockParts | None], **kwargs: object) -> object:
        kind, pipe, dst_pipe, event_id, _, _, _, block, _, _, _, seq, _, work_pipes, _ = args
        members = barrier_members(kind, pipe, dst_pipe, work_pipes)
        streamed = made(members)
        whole = block_edges(make_nodes(kind, pipe, dst_pipe, block, seq, members), pipe, dst_pipe, event_id, members)
        outcomes.append(streamed is not None)
        if streamed is not None:
            for name in ("block", "pipe", "pos", "ordinal", "event", "local", "kind", "key", "chain"):
                assert np.array_equal(getattr(streamed.nodes, name), getattr(whole.nodes, name)), name
            for mine, theirs in zip((*streamed.edges, *streamed.multi), (*whole.edges, *whole.multi), strict=True):
                assert np.array_equal(mine[0], theirs[0]) and np.array_equal(mine[1], theirs[1])
            for mine, theirs in zip(streamed.stuck, whole.stuck, strict=True):
                assert np.array_equal(mine, theirs)
        return build(*args, made=made, **kwargs)

    monkeypatch.setattr(racecheck, "build", compared)
    for seed in range(80):
        rng = random.Random(seed)
        check(*batches(random_events(rng, rng.randint(1, 4)), rng))
    assert all(outcomes)
    # Block 0's barrier waits on V, the only pipe busy in it; the kernel's waits on MTE2 too, busy in block 1.
    first = np.concatenate((
        accesses(EventKind.WRITE, Space.UB, 0, 32, pipe=Pipe.V, block_id=0, serial=1),
        syncs(EventKind.PIPE_BARRIER, Pipe.ALL, block_id=0, serial=2),
        accesses(EventKind.READ, Space.UB, 0, 32, pipe=Pipe.V, block_id=0, serial=3),
    ))  # fmt: skip
    second = accesses(EventKind.WRITE, Space.UB, 0, 32, pipe=Pipe.MTE2, block_id=1, serial=4)

    def whole_kernel_only(*parts: np.ndarray) -> list[object]:
        detector = make_detector("racecheck")
        detector.prove_blocks = False  # the blocks' own checks build their models too
        return run_kernel(detector, *parts)

    assert whole_kernel_only(first, second) == whole_kernel_only(np.concatenate((first, second)))
    assert outcomes[-2:] == [False, False]  # made again at the end, both times


@pytest.mark.parametrize("seed", range(20))
def test_the_sweeps_shortcut_orders_are_the_stable_sorts_they_stand_for(seed: int) -> None:
    """The ordering shortcuts kernel_end takes (a permutation's inverse, a radix sort of a few Lamport values) give
    exactly the stable argsort they replace, ties included."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 200))
    for rank in (rng.permutation(n), rng.integers(0, max(n, 1), n), np.repeat(np.arange(n // 2), 2)):
        assert np.array_equal(_by_rank(rank), np.argsort(rank, kind="stable"))
    for values in (rng.integers(-1, 4, n), np.full(n, -1), rng.integers(-1, 1 << 20, n)):
        assert np.array_equal(_stable_order(values), np.argsort(values, kind="stable"))


def test_deadlocks_read_back_from_the_columns_whichever_way_blocks_arrive() -> None:
    """A stuck wait's fields are read back from the sync events' columns (the records are let go at kernel_end):
    kernels of unreleased waits give the same findings, deadlocks included, with blocks in order or interleaved."""
    deadlocked = 0
    for seed in range(40):
        rng = random.Random(seed)
        events = random_events(rng, rng.randint(2, 4))
        cross = np.isin(events["kind"], [k for k in EventKind if "CROSS" in k.name or "SOFT" in k.name])
        events = events[~cross]  # cross-block syncs pair in arrival order: interleaving may rightly change them
        whole = check(events)
        assert check(*batches(merged(events, rng), rng)) == whole
        deadlocked += any(f.kind == "deadlock" for f in whole)
    assert deadlocked > 20
