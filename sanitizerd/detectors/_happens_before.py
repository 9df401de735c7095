"""The happens-before model of one kernel launch, for racecheck (reference §1.8, §2.2; docs/design.md).

Each (block, pipe) is a thread: the pipe runs its instructions in order, and PIPE_S issues every instruction
to its pipe in program order. Only sync instructions (*nodes*) carry knowledge between threads, so clocks are
kept per node, never per memory access: ``K[n, p]`` is the ordinal of the latest node of pipe ``p`` of the same
block that node ``n`` knows has completed, learned through flags (``-1``: none). An access is known to have
completed once any node after it on its pipe is known, because a set_flag publishes only after the work before
it on its pipe is done. This is the epoch idea of FastTrack: a memory access is named by (pipe, the ordinal of
the next node on its pipe), and compared with one clock component of the other access.

Knowledge reaches a node along its pipe (in order), from the node that released it (set_flag -> wait_flag,
matched FIFO per (block, source pipe, destination pipe, event id)), and from PIPE_S at issue (everything issued
after a wait on PIPE_S knows what that wait learned). The clocks are the least fixpoint of these rules,
computed for all nodes at once with numpy: each round pulls along every edge and takes a running maximum along
every pipe, until nothing changes (rounds ~ the longest chain of hand-overs that carries fresh knowledge, a
handful for real kernels).

Cross-block knowledge (FFTS flags, soft syncs, mstx flags) enters only at cross-block waits, which are few: for
each, ``G[x]`` is its knowledge of every block's pipes, the join of what its releasing nodes knew (their own
block's clocks and the cross-block waits they knew of). What ``G[x]`` says about x's own block feeds back into
``K[x]`` (a SyncAll also orders a block's own pipes), and the fixpoint is rerun until that settles.

Deadlock: a wait nothing releases, and every node that needs it (knows it, or a later node of its pipe), cannot
be placed; nor can the nodes of a cycle (a node that would have to know its own pipe at or past itself).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from sanitizerd.detectors._rendezvous import match_cross
from sanitizerd_protocol.records import EventKind, Pipe

NPIPES = 12
_S, _S_CAL, _ALL = int(Pipe.S), int(Pipe.S_CAL), int(Pipe.ALL)
# pipe_barrier(PIPE_ALL): PIPE_S waits for every pipe (msSanitizer models it as set/wait p -> S for each).
_ALL_PIPES = np.array([p for p in range(1, NPIPES) if p != _ALL], dtype=np.int64)
POS_BITS = 36  # node and access keys: chain << POS_BITS | position in the block's program
_NONE = -1

_K = EventKind
_FLAG_SETS = (_K.SET_FLAG, _K.HSET_FLAG)
_FLAG_WAITS = (_K.WAIT_FLAG, _K.HWAIT_FLAG)
_CROSS_SETS = (_K.CROSS_SET, _K.SOFT_SET, _K.MSTX_CROSS_SET)
_CROSS_WAITS = (_K.CROSS_WAIT, _K.SOFT_WAIT, _K.MSTX_CROSS_WAIT)
_PUBLISH_ON_OWN_PIPE = (*_FLAG_SETS, _K.CROSS_SET, _K.MSTX_CROSS_SET, _K.RLS_BUF)
_WAIT_ON_OWN_PIPE = (*_CROSS_WAITS, _K.GET_BUF)


def _table(*kinds: int) -> np.ndarray:
    table = np.zeros(256, dtype=bool)
    table[list(kinds)] = True
    return table


_IS_FLAG_SET, _IS_FLAG_WAIT = _table(*_FLAG_SETS), _table(*_FLAG_WAITS)
_IS_H = _table(_K.HSET_FLAG, _K.HWAIT_FLAG)
_IS_ONE_NODE = _table(*_PUBLISH_ON_OWN_PIPE, *_WAIT_ON_OWN_PIPE, *_FLAG_WAITS, _K.SOFT_SET)
_IS_OWN_PIPE_WAIT = _table(*_WAIT_ON_OWN_PIPE)
_IS_CROSS = _table(*_CROSS_SETS, *_CROSS_WAITS, _K.SOFT_SYNC_ALL)


def scalar_to_cal(pipe: np.ndarray) -> np.ndarray:
    """msSanitizer's renaming: work and sets issued from PIPE_S run on the scalar-compute pipe (PIPE_S_CAL);
    PIPE_S itself is the issuer, which only waits."""
    return np.where(pipe == _S, _S_CAL, pipe)


@dataclass(slots=True)
class Nodes:
    """Sync nodes sorted by (block, pipe, position): each pipe's nodes are contiguous and in order."""

    block: np.ndarray  # block index
    pipe: np.ndarray
    pos: np.ndarray  # 2 * position in the block's program order (+1 for the waiting half of a pair)
    ordinal: np.ndarray  # rank among its pipe's nodes
    event: np.ndarray  # index of the event it came from (block-sorted order)
    local: np.ndarray  # index of that event among the sync events given to ``build``
    kind: np.ndarray
    key: np.ndarray  # chain * 2**36 + pos: sorted
    chain: np.ndarray  # block * NPIPES + pipe
    # The clocks, one column per pipe that has nodes (``active``); ``column[pipe]`` is its column or -1.
    K: np.ndarray = field(default_factory=lambda: np.empty((0, 0), dtype=np.int32))
    active: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    column: np.ndarray = field(default_factory=lambda: np.full(NPIPES, -1, dtype=np.int64))

    @property
    def size(self) -> int:
        return int(self.block.size)

    def clock(self, rows: np.ndarray, pipe: int | np.ndarray) -> np.ndarray:
        """``K[rows, pipe]``: the latest node of ``pipe`` that nodes ``rows`` know of (-1 for pipes without nodes)."""
        col = self.column[pipe]
        if np.ndim(col) == 0:
            if col < 0:
                return np.full(np.size(rows), _NONE, dtype=np.int64)
            return self.K[rows, col].astype(np.int64)
        out = self.K[rows, np.maximum(col, 0)].astype(np.int64)
        return np.where(col >= 0, out, _NONE)

    def published(self, rows: np.ndarray) -> np.ndarray:
        """What nodes ``rows`` tell the nodes they release, over all pipes: their knowledge, and their own pipe up
        to themselves."""
        out = np.full((rows.size, NPIPES), _NONE, dtype=np.int32)
        out[:, self.active] = self.K[rows]
        own = self.pipe[rows]
        out[np.arange(rows.size), own] = np.maximum(out[np.arange(rows.size), own], self.ordinal[rows])
        return out


@dataclass(slots=True)
class Stuck:
    node: int
    event: int  # block-sorted event index of the wait


@dataclass(slots=True)
class Model:
    nodes: Nodes
    start: np.ndarray  # per chain: the ordinal of its first node that cannot be placed (huge when none)
    cross_waits: np.ndarray  # node ids of cross-block waits, index = row of G
    G: np.ndarray  # (cross waits, blocks * NPIPES): what each cross-block wait knows of every block
    lamport: np.ndarray  # per cross-block wait: a Lamport clock over the cross-block waits
    chains_with_cross: dict[int, tuple[np.ndarray, np.ndarray]]  # chain -> (ordinals, rows of G), sorted
    stuck: list[Stuck]
    barriers: np.ndarray  # sorted keys (chain * 2**36 + pos) of pipe_barrier(p) markers
    nonforward: np.ndarray  # blocks where a wait is released by a node issued after it
    rank: np.ndarray  # per node: a topological rank within its block (its pos where pos is one already)
    rounds: int = 0
    # The clocks as knowledge() reads them, built on first use (``_padded``).
    padded: tuple[np.ndarray, np.ndarray] | None = None

    def knowledge(self, prev: np.ndarray, issuer: np.ndarray, comp: np.ndarray) -> np.ndarray:
        """Column ``comp`` of the knowledge of accesses whose last node on their pipe is ``prev`` and whose issue
        followed PIPE_S node ``issuer`` (``-1`` = none)."""
        table, column = self.clock_table()
        col = column[comp]
        return np.maximum(table[prev, col], table[issuer, col])

    def clock_table(self) -> tuple[np.ndarray, np.ndarray]:
        """The clocks as knowledge() reads them (``_padded``): the table, and each pipe's column in it."""
        return self.padded or self._padded()

    def _padded(self) -> tuple[np.ndarray, np.ndarray]:
        """The clocks with a last row and a last column of -1 (``-1`` indexes them: no node, a pipe without
        nodes), so that knowledge() is two gathers and a maximum, with no mask; and a PIPE_S node's own pipe
        known up to itself, as its issue publishes it. An access's last node on its pipe is never on PIPE_S (its
        work runs on PIPE_S_CAL), so the row serves both."""
        nodes = self.nodes
        n, width = nodes.K.shape
        table = np.full((n + 1, width + 1), _NONE, dtype=np.int32)
        table[:n, :width] = nodes.K
        s_col = int(nodes.column[_S])
        if s_col >= 0:
            on_s = np.flatnonzero(nodes.pipe == _S)
            table[on_s, s_col] = np.maximum(table[on_s, s_col], nodes.ordinal[on_s])
        self.padded = table, np.where(nodes.column >= 0, nodes.column, width)
        return self.padded


@dataclass(slots=True)
class BlockParts:
    """What a block's own sync events make: its nodes, and the edges between them (flag and buffer hand-overs,
    PIPE_S's issue, pipe_barrier(PIPE_ALL)'s waits) and the waits none releases. Blocks' parts joined in block
    order are the kernel's (``build``)."""

    nodes: Nodes
    edges: tuple[tuple[np.ndarray, np.ndarray], ...]  # flag hand-overs, buffer hand-overs, issue
    multi: tuple[tuple[np.ndarray, np.ndarray], ...]  # pipe_barrier(PIPE_ALL): none, or one list
    stuck: tuple[np.ndarray, ...]  # unreleased flag waits, unreleased buffer gets


def block_edges(
    nodes: Nodes, pipe: np.ndarray, dst_pipe: np.ndarray, event_id: np.ndarray, all_pipes: np.ndarray,
    native: object | None = None,
) -> BlockParts:  # fmt: skip
    """The edges inside blocks (``pipe``, ``dst_pipe``, ``event_id``: of the sync events ``nodes.local`` indexes).
    ``native``: the compiled module (its ``fifo_match``), or None: numpy's."""
    node_kind = nodes.kind
    n = nodes.size
    edges: list[tuple[np.ndarray, np.ndarray]] = []
    multi: list[tuple[np.ndarray, np.ndarray]] = []
    stuck_nodes: list[np.ndarray] = []

    ev = nodes.local
    flag_src = scalar_to_cal(pipe[ev])
    is_h = _IS_H[node_kind]
    flag_key = (((nodes.block.astype(np.int64) * 2 + is_h) * 16 + flag_src) * 16 + dst_pipe[ev]) * 65536
    flag_key += event_id[ev]
    set_rows = np.flatnonzero(_IS_FLAG_SET[node_kind])
    wait_rows = np.flatnonzero(_IS_FLAG_WAIT[node_kind])
    src, dst, unmatched = _fifo_match(flag_key, nodes.pos, set_rows, wait_rows, native=native)
    edges.append((src, dst))
    stuck_nodes.append(unmatched)

    # GET_BUF k (k >= 1) waits for RLS_BUF k-1 of the same (block, buffer); the first GET is free.
    buf_key = nodes.block.astype(np.int64) * 65536 + event_id[ev]
    rls = np.flatnonzero(node_kind == _K.RLS_BUF)
    get = np.flatnonzero(node_kind == _K.GET_BUF)
    src, dst, unmatched = _fifo_match(buf_key, nodes.pos, rls, get, skip_first_wait=True, native=native)
    edges.append((src, dst))
    stuck_nodes.append(unmatched)

    # pipe_barrier(PIPE_ALL): its PIPE_S half waits for the publishing half on every other pipe.
    all_waits = np.flatnonzero((node_kind == _K.PIPE_BARRIER) & (nodes.pipe == _S))
    if all_waits.size:
        group = nodes.event[all_waits]
        members = np.flatnonzero((node_kind == _K.PIPE_BARRIER) & (nodes.pipe != _S))
        order = np.argsort(nodes.event[members], kind="stable")
        members = members[order]
        first = np.searchsorted(nodes.event[members], group)
        src = (first[:, None] + np.arange(all_pipes.size)[None, :]).ravel()
        multi.append((members[src], np.repeat(all_waits, all_pipes.size)))

    # Every node off PIPE_S knows what PIPE_S knew when it was issued.
    # (Only the first node of a pipe after each PIPE_S node needs the edge: the pipe's order carries it on.)
    issuer = issuer_of(nodes, nodes.block, nodes.pos, native)
    first_after = np.ones(n, dtype=bool)
    first_after[1:] = (issuer[1:] != issuer[:-1]) | (nodes.chain[1:] != nodes.chain[:-1])
    off_s = np.flatnonzero((nodes.pipe != _S) & (issuer >= 0) & first_after)
    edges.append((issuer[off_s], off_s))

    return BlockParts(nodes, tuple(edges), tuple(multi), tuple(stuck_nodes))


def build(
    kind: np.ndarray,
    pipe: np.ndarray,
    dst_pipe: np.ndarray,
    event_id: np.ndarray,
    mode: np.ndarray,
    block_num: np.ndarray,
    address: np.ndarray,
    block: np.ndarray,
    block_type: np.ndarray,
    block_id: np.ndarray,
    arrival: np.ndarray,
    seq: np.ndarray,
    present: set[tuple[int, int]],
    work_pipes: np.ndarray,
    n_blocks: int,
    *,
    cross_free: bool,
    truncated: bool = False,
    need: Callable[[int, str], None] = lambda nbytes, what: None,
    made: Callable[[np.ndarray], BlockParts | None] = lambda all_pipes: None,
    native: object | None = None,
    members: np.ndarray | None = None,
) -> Model:
    """The model of a kernel from its sync events, given in block-sorted program order (``block`` ascending,
    then program order). ``seq`` is each one's index among all the kernel's events in that order, ``arrival``
    its index in the order the client sent them; ``present`` the (block type, block id) pairs of the kernel.
    ``cross_free`` makes cross-block waits release themselves (when other blocks' events were filtered out by
    ``--block-id``). ``truncated``: the kernel's later events were not kept, so a wait without its set is not
    taken for a deadlock. ``work_pipes`` are the pipes the kernel's memory accesses ran on, ``n_blocks`` the
    number of blocks of the kernel (some may have no sync event at all). ``need`` is told of the bytes the
    cross-block knowledge takes (cross waits x blocks, quadratic) before they are allocated, and raises to refuse.
    ``made`` gives the nodes and their edges already made (block by block, as blocks completed) if they were
    made with these members of pipe_barrier(PIPE_ALL), or None. ``native``: the compiled module
    (sanitizerd/native/_racecheck.c), whose fixpoint of the clocks is this module's (``_fixpoint``). ``members``:
    the members of pipe_barrier(PIPE_ALL), where the caller found them already (``barrier_members`` of these)."""
    all_pipes = barrier_members(kind, pipe, dst_pipe, work_pipes) if members is None else members
    parts = made(all_pipes)
    nodes = make_nodes(kind, pipe, dst_pipe, block, seq, all_pipes, native) if parts is None else parts.nodes
    node_kind = nodes.kind
    n = nodes.size
    nodes.active = small_unique(nodes.pipe)
    nodes.column[nodes.active] = np.arange(nodes.active.size)
    nodes.K = np.full((n, nodes.active.size), _NONE, dtype=np.int32)
    if parts is None:
        parts = block_edges(nodes, pipe, dst_pipe, event_id, all_pipes, native)
    edges, multi, stuck_nodes = list(parts.edges), list(parts.multi), list(parts.stuck)

    cross = np.flatnonzero(_IS_CROSS[node_kind])
    sources: dict[int, list[int]] = {}
    if cross.size:
        cross = cross[np.argsort(arrival[nodes.local[cross]], kind="stable")]
        cev = nodes.local[cross]
        matched = match_cross(
            cross, node_kind[cross], block_type[cev], block_id[cev], event_id[cev], mode[cev], block_num[cev],
            address[cev], nodes.pipe[cross] == _S, present,
        )  # fmt: skip
        if cross_free:
            matched.stuck.clear()
            matched.sources.clear()
        sources = matched.sources
        stuck_nodes.append(np.array(matched.stuck, dtype=np.int64))

    model = Model(
        nodes=nodes,
        start=np.empty(0, dtype=np.int64),
        cross_waits=np.array(sorted(sources), dtype=np.int64),
        G=np.empty((0, 0), dtype=np.int32),
        lamport=np.empty(0, dtype=np.int64),
        chains_with_cross={},
        stuck=[],
        barriers=_barrier_keys(kind, pipe, block, seq),
        nonforward=np.empty(0, dtype=np.int64),
        rank=nodes.pos.copy(),
    )
    if model.cross_waits.size:  # G, the one being built beside it, and a row's join over its sources
        width = n_blocks * NPIPES * np.dtype(np.int32).itemsize
        need(3 * model.cross_waits.size * width, f"{model.cross_waits.size} cross-block waits across {n_blocks} blocks")
    _solve(model, edges, multi, sources, n_blocks, native)
    stuck = np.unique(np.concatenate(stuck_nodes)) if stuck_nodes and not truncated else np.empty(0, dtype=np.int64)
    _place(model, stuck, sources, n_blocks)
    model.nonforward = _nonforward_blocks(model, edges, multi, sources)
    if model.nonforward.size:
        _rank_nonforward(model, edges, multi, sources)
    return model


def small_unique(values: np.ndarray) -> np.ndarray:
    """``np.unique`` of int64 values, counted where they are small non-negative ints (pipes), sorted otherwise."""
    if values.size and 0 <= int(values.min()) and int(values.max()) < 1 << 12:
        return np.flatnonzero(np.bincount(values)).astype(values.dtype, copy=False)
    return np.unique(values)


def barrier_members(kind: np.ndarray, pipe: np.ndarray, dst_pipe: np.ndarray, work_pipes: np.ndarray) -> np.ndarray:
    """The pipes pipe_barrier(PIPE_ALL) waits on: only those that do something (the others have nothing to
    publish), given the sync events and the pipes the accesses ran on."""
    busy = np.zeros(NPIPES, dtype=bool)  # marked by a mask per source: np.isin would sort them all
    for values in (work_pipes, scalar_to_cal(pipe[kind != _K.PIPE_BARRIER]), dst_pipe[_IS_FLAG_WAIT[kind]]):
        busy[values[(values >= 0) & (values < NPIPES)]] = True  # pipes past the defined ones are no member
    return _ALL_PIPES[busy[_ALL_PIPES]]


def make_nodes(
    kind: np.ndarray, pipe: np.ndarray, dst_pipe: np.ndarray, block: np.ndarray, seq: np.ndarray, all_pipes: np.ndarray,
    native: object | None = None,
) -> Nodes:  # fmt: skip
    """One node per sync instruction; pipe_barrier(PIPE_ALL) makes one per pipe plus PIPE_S's wait, a soft
    SyncAll a set on PIPE_S_CAL and a wait on PIPE_S. ``native``: the compiled module, which makes them with a
    count by chain where the events come in program order (``_racecheck.make_nodes``); None: numpy."""
    is_all = (kind == _K.PIPE_BARRIER) & (pipe == _ALL)
    count = np.zeros(kind.size, dtype=np.int64)
    count[_IS_ONE_NODE[kind]] = 1
    count[kind == _K.SOFT_SYNC_ALL] = 2
    count[is_all] = all_pipes.size + 1
    if native is not None and kind.dtype == np.uint8:
        nodes = _make_nodes_native(native, kind, pipe, dst_pipe, block, seq, all_pipes, int(count.sum()))
        if nodes is not None:
            return nodes
    event = np.repeat(np.arange(kind.size), count)
    part = np.arange(event.size) - np.repeat(np.cumsum(count) - count, count)
    k = kind[event]
    node_pipe = scalar_to_cal(pipe[event])
    node_pipe = np.where(_IS_FLAG_WAIT[k], dst_pipe[event], node_pipe)
    node_pipe = np.where(_IS_OWN_PIPE_WAIT[k], pipe[event], node_pipe)
    node_pipe = np.where(k == _K.SOFT_SET, _S_CAL, node_pipe)
    sync_all = k == _K.SOFT_SYNC_ALL
    node_pipe = np.where(sync_all, np.where(part == 0, _S_CAL, _S), node_pipe)
    barrier = k == _K.PIPE_BARRIER
    if all_pipes.size:
        half = np.where(part < all_pipes.size, all_pipes[np.minimum(part, all_pipes.size - 1)], _S)
    else:
        half = np.full(part.size, _S)
    node_pipe = np.where(barrier, half, node_pipe)
    waiting_half = (sync_all & (part == 1)) | (barrier & (part == all_pipes.size))
    pos = 2 * seq[event] + waiting_half
    node_block = block[event].astype(np.int64)
    key = ((node_block * NPIPES + node_pipe) << POS_BITS) + pos
    order = np.argsort(key, kind="stable")
    key = key[order]
    chain = key >> POS_BITS
    change = np.ones(key.size, dtype=bool)
    change[1:] = chain[1:] != chain[:-1]
    starts = np.flatnonzero(change)
    ordinal = np.arange(key.size) - np.repeat(starts, np.diff(np.append(starts, key.size)))
    nodes = Nodes(
        block=node_block[order], pipe=node_pipe[order].astype(np.int64), pos=pos[order], ordinal=ordinal,
        event=seq[event[order]], local=event[order], kind=k[order], key=key, chain=chain,
    )  # fmt: skip
    return nodes


_NODE_FIELDS = ("block", "pipe", "pos", "ordinal", "event", "local", "kind", "key", "chain")
_NODE_TABLES = np.concatenate((_IS_ONE_NODE, _IS_FLAG_WAIT, _IS_OWN_PIPE_WAIT)).view(np.uint8)
_NODE_CONSTANTS = np.array(
    [_K.PIPE_BARRIER, _K.SOFT_SYNC_ALL, _K.SOFT_SET, _ALL, _S, _S_CAL, NPIPES, POS_BITS], dtype=np.int64
)


def _make_nodes_native(
    native: object, kind: np.ndarray, pipe: np.ndarray, dst_pipe: np.ndarray, block: np.ndarray, seq: np.ndarray,
    all_pipes: np.ndarray, n: int,
) -> Nodes | None:  # fmt: skip
    """``make_nodes``' ``n`` nodes made in one compiled pass; None where their keys are not in program order
    within each chain (numpy's sort decides then)."""
    out = {name: np.empty(n, dtype=np.uint8 if name == "kind" else np.int64) for name in _NODE_FIELDS}
    as64 = [np.ascontiguousarray(x, dtype=np.int64) for x in (pipe, dst_pipe, block, seq, all_pipes)]
    made = native.make_nodes(  # type: ignore[attr-defined]
        np.ascontiguousarray(kind), *as64, _NODE_TABLES, _NODE_CONSTANTS, *out.values()
    )
    return Nodes(**out) if made else None


def issuer_of(nodes: Nodes, block: np.ndarray, pos: np.ndarray, native: object | None = None) -> np.ndarray:
    """For program positions ``pos`` of blocks ``block``: the last PIPE_S node issued before each (``-1``).
    ``native``: the compiled module, whose ``issuer`` searches on from one answer to the next; None: numpy's."""
    s_rows = np.flatnonzero(nodes.pipe == _S)
    if not s_rows.size:
        return np.full(block.size, _NONE, dtype=np.int64)
    s_key = nodes.key[s_rows]
    if native is not None and s_key.dtype == np.int64:
        out = np.empty(block.size, dtype=np.int64)
        as64 = (np.ascontiguousarray(x, dtype=np.int64) for x in (s_key, s_rows, block, pos))
        native.issuer(*as64, NPIPES, _S, POS_BITS, out)  # type: ignore[attr-defined]
        return out
    want = ((block.astype(np.int64) * NPIPES + _S) << POS_BITS) + pos
    at = np.searchsorted(s_key, want, side="left") - 1
    ok = at >= 0
    ok[ok] = (s_key[at[ok]] >> POS_BITS) == (want[ok] >> POS_BITS)
    return np.where(ok, s_rows[np.maximum(at, 0)], _NONE)


def _fifo_match(
    key: np.ndarray, pos: np.ndarray, sets: np.ndarray, waits: np.ndarray, *, skip_first_wait: bool = False,
    native: object | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
    """The k-th wait of each key is released by the k-th set of that key (program order): (set, wait) pairs
    and the waits no set releases. With ``skip_first_wait`` the first wait of a key needs no set and the k-th
    takes the (k-1)-th set. ``native``: the compiled module, whose ``fifo_match`` is this, its sorts radix sorts."""
    empty = np.empty(0, dtype=np.int64)
    if not waits.size:
        return empty, empty, empty
    if native is not None and key.dtype == pos.dtype == np.int64:
        out = np.empty((3, waits.size), dtype=np.int64)
        pairs, unmatched = native.fifo_match(  # type: ignore[attr-defined]
            np.ascontiguousarray(key), np.ascontiguousarray(pos), np.ascontiguousarray(sets, dtype=np.int64),
            np.ascontiguousarray(waits, dtype=np.int64), skip_first_wait, out,
        )  # fmt: skip
        return out[0, :pairs], out[1, :pairs], out[2, :unmatched]
    sets = sets[np.lexsort((pos[sets], key[sets]))]
    waits = waits[np.lexsort((pos[waits], key[waits]))]
    wkey = key[waits]
    first = np.ones(waits.size, dtype=bool)
    first[1:] = wkey[1:] != wkey[:-1]
    starts = np.flatnonzero(first)
    rank = np.arange(waits.size) - np.repeat(starts, np.diff(np.append(starts, waits.size)))
    if skip_first_wait:
        keep = rank > 0
        waits, wkey, rank = waits[keep], wkey[keep], rank[keep] - 1
    skey = key[sets]
    at = np.searchsorted(skey, wkey, side="left") + rank
    ok = at < sets.size
    ok[ok] = skey[at[ok]] == wkey[ok]
    return sets[at[ok]], waits[ok], waits[~ok]


def _barrier_keys(kind: np.ndarray, pipe: np.ndarray, block: np.ndarray, seq: np.ndarray) -> np.ndarray:
    """pipe_barrier(p) and the barrier msSanitizer puts after a cross-core set, as sorted (chain, pos) keys."""
    marks = np.flatnonzero(((kind == _K.PIPE_BARRIER) & (pipe != _ALL)) | (kind == _K.CROSS_SET))
    chain = block[marks].astype(np.int64) * NPIPES + scalar_to_cal(pipe[marks])
    return np.sort((chain << POS_BITS) + 2 * seq[marks].astype(np.int64))


def _chain_cummax(K: np.ndarray, chain: np.ndarray, span: int) -> np.ndarray:
    """Running maximum down each column within each chain (rows sorted by chain): each chain is lifted above
    the one before it so that one running maximum over all rows never crosses a chain boundary."""
    wide = np.int32 if (int(chain[-1]) + 1) * span < np.iinfo(np.int32).max else np.int64
    offset = (chain.astype(wide) * span)[:, None]
    lifted = K.astype(wide) + offset
    np.maximum.accumulate(lifted, axis=0, out=lifted)
    lifted -= offset
    return lifted.astype(np.int32, copy=False)


def _solve(
    model: Model,
    edges: list[tuple[np.ndarray, np.ndarray]],
    multi: list[tuple[np.ndarray, np.ndarray]],
    sources: dict[int, list[int]],
    n_blocks: int,
    native: object | None = None,
) -> None:
    """The least fixpoint of the clocks, on the pipes that have nodes only (a vector kernel never touches the
    cube's pipes, and their columns would stay -1), and once per block skeleton (``_Skeletons``)."""
    nodes = model.nodes
    if not nodes.size:
        return
    active = nodes.active
    own_col = nodes.column[nodes.pipe]
    span = int(nodes.ordinal.max()) + 2
    x = model.cross_waits
    inj = np.full((x.size, active.size), _NONE, dtype=np.int32)
    shared = _Skeletons(nodes, edges, multi, n_blocks)
    shared.bind(x)
    K = nodes.K
    for _ in range(64):  # the cross-block feedback settles in a step or two; the bound only guards against bugs
        if shared.whole:  # every block solved: the nodes as they are (the rounds may write K: it is replaced)
            solved, rounds = _fixpoint(
                K, nodes.chain, nodes.ordinal, own_col, span, shared.edges, shared.multi, x, inj, native
            )
        else:
            rows = shared.rows
            solved, rounds = _fixpoint(
                K[rows], nodes.chain[rows], nodes.ordinal[rows], own_col[rows], span, shared.edges, shared.multi,
                shared.new[x[shared.solved_x]], inj[shared.solved_x], native,
            )  # fmt: skip
            solved = solved[shared.expand]
        model.rounds += rounds
        K = nodes.K = solved
        if not x.size:
            return
        _cross_knowledge(model, sources, n_blocks)
        own = model.G.reshape(x.size, n_blocks, NPIPES)[np.arange(x.size), nodes.block[x]][:, active]
        if np.all(own <= K[x]):
            return
        inj = np.maximum(inj, own)
        if not shared.same_for_all(x, inj):  # blocks alike in their syncs but not in what they learn
            shared = _Skeletons(nodes, edges, multi, n_blocks, share=False)
            shared.bind(x)


def _fixpoint(
    K: np.ndarray,
    chain: np.ndarray,
    ordinal: np.ndarray,
    own_col: np.ndarray,
    span: int,
    edges: list[tuple[np.ndarray, np.ndarray]],
    multi: list[tuple[np.ndarray, np.ndarray]],
    x: np.ndarray,
    inj: np.ndarray,
    native: object | None = None,
) -> tuple[np.ndarray, int]:
    """Rounds of pulling along every edge and a running maximum down every chain, until nothing changes.
    ``native``: the compiled module, which runs the same rounds in place (where its checks of the rows pass)."""
    if native is not None:
        solved = _fixpoint_native(native, K, chain, ordinal, own_col, edges, multi, x, inj)
        if solved is not None:
            return solved

    def published(rows: np.ndarray) -> np.ndarray:
        out = K[rows]
        r = np.arange(rows.size)
        out[r, own_col[rows]] = np.maximum(out[r, own_col[rows]], ordinal[rows])
        return out

    rounds = 0
    while True:
        before = K.copy()
        for src, dst in edges:
            if src.size:
                K[dst] = np.maximum(K[dst], published(src))
        for src, dst in multi:
            np.maximum.at(K, dst, published(src))
        if x.size:
            K[x] = np.maximum(K[x], inj)
        K = _chain_cummax(K, chain, span)
        rounds += 1
        if np.array_equal(before, K):
            return K, rounds


def _flat(lists: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Edge lists as one (src, dst) and where each list ends."""
    if not lists:
        empty = np.empty(0, dtype=np.int64)
        return empty, empty, empty
    src = np.concatenate([np.asarray(s, dtype=np.int64) for s, _ in lists])
    dst = np.concatenate([np.asarray(d, dtype=np.int64) for _, d in lists])
    return src, dst, np.cumsum([np.size(s) for s, _ in lists]).astype(np.int64)


def _fixpoint_native(
    native: object,
    K: np.ndarray,
    chain: np.ndarray,
    ordinal: np.ndarray,
    own_col: np.ndarray,
    edges: list[tuple[np.ndarray, np.ndarray]],
    multi: list[tuple[np.ndarray, np.ndarray]],
    x: np.ndarray,
    inj: np.ndarray,
) -> tuple[np.ndarray, int] | None:
    """``_fixpoint`` by the compiled loop, or None where it refuses its input (a row or column out of range,
    chains out of order: not the model's, and then numpy's rounds run, as they would have)."""
    width = K.shape[1] if K.ndim == 2 else -1
    int64 = np.dtype(np.int64)
    if (
        width < 0 or inj.shape != (x.size, width) or K.dtype != np.int32 or inj.dtype != np.int32
        or any(a.dtype != int64 for a in (chain, ordinal, own_col, x))
        or any(np.asarray(a).dtype != int64 for pair in (*edges, *multi) for a in pair)
    ):  # fmt: skip
        return None  # not the model's arrays: numpy's rounds, never a cast
    solved = np.array(K, order="C")  # a copy: the caller's rows are not written
    src, dst, ends = _flat(edges)
    msrc, mdst, mends = _flat(multi)
    try:
        rounds = native.fixpoint(  # type: ignore[attr-defined]
            solved, width, *(np.ascontiguousarray(a) for a in (chain, ordinal, own_col)),
            src, dst, ends, msrc, mdst, mends, np.ascontiguousarray(x), np.ascontiguousarray(inj),
        )  # fmt: skip
    except ValueError:
        return None
    return solved, rounds


class _Skeletons:
    """Blocks of an SPMD kernel run the same code: the same sync instructions in the same order, so the same
    nodes and edges relative to the block's first node, and the same clocks. The fixpoint is solved for one
    block of each skeleton and copied to the others (``expand``). ``share=False`` solves every block. Where every
    block is solved (``whole``: one block, as a block proven alone, or none alike), the nodes are solved as they
    are, with no rows picked or copied back."""

    def __init__(
        self,
        nodes: Nodes,
        edges: list[tuple[np.ndarray, np.ndarray]],
        multi: list[tuple[np.ndarray, np.ndarray]],
        n_blocks: int,
        *,
        share: bool = True,
    ) -> None:
        lo = np.searchsorted(nodes.block, np.arange(n_blocks), side="left")
        hi = np.searchsorted(nodes.block, np.arange(n_blocks), side="right")
        rep = np.arange(n_blocks)
        if share and n_blocks > 1:
            rep = _representatives(nodes, [*edges, *multi], lo, hi)
        reps = np.unique(rep)
        self.whole = reps.size == n_blocks and int((hi - lo).sum()) == nodes.size
        self.solved_x = np.empty(0, dtype=np.int64)  # which cross-block waits are among the solved nodes
        if self.whole:
            self.edges, self.multi = edges, multi
            return
        self.rows = np.concatenate([np.arange(lo[r], hi[r]) for r in reps])
        self.new = np.full(nodes.size, -1, dtype=np.int64)
        self.new[self.rows] = np.arange(self.rows.size)
        block = nodes.block
        self.expand = self.new[lo[rep[block]] + (np.arange(nodes.size) - lo[block])]
        self.edges = [self._reduce(src, dst) for src, dst in edges]
        self.multi = [self._reduce(src, dst) for src, dst in multi]

    def _reduce(self, src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        keep = self.new[dst] >= 0
        return self.new[src[keep]], self.new[dst[keep]]

    def bind(self, x: np.ndarray) -> None:
        self.solved_x = np.arange(x.size) if self.whole else np.flatnonzero(self.new[x] >= 0)

    def same_for_all(self, x: np.ndarray, inj: np.ndarray) -> bool:
        """Whether every block learns through cross-block waits what its skeleton's solved block learns."""
        if self.whole:
            return True
        twin = self.expand[x]
        order = np.argsort(twin, kind="stable")
        same_twin = twin[order][1:] == twin[order][:-1]
        rows = inj[order]
        return bool(np.all(~same_twin[:, None] | (rows[1:] == rows[:-1])))


def _representatives(
    nodes: Nodes, edge_lists: list[tuple[np.ndarray, np.ndarray]], lo: np.ndarray, hi: np.ndarray
) -> np.ndarray:
    """For each block, the first block with the same skeleton: node pipes and kinds, and every edge list's
    edges relative to the block's first node (edges are built in an order that is the same for alike blocks)."""
    per_list = []
    for src, dst in edge_lists:
        by_block = np.argsort(nodes.block[dst], kind="stable")
        src, dst = src[by_block], dst[by_block]
        bounds = np.searchsorted(nodes.block[dst], np.arange(lo.size + 1))
        per_list.append((src, dst, bounds))
    first: dict[tuple[bytes, ...], int] = {}
    rep = np.empty(lo.size, dtype=np.int64)
    for b in range(lo.size):
        key = [nodes.pipe[lo[b] : hi[b]].tobytes(), nodes.kind[lo[b] : hi[b]].tobytes()]
        for src, dst, bounds in per_list:
            key.append((src[bounds[b] : bounds[b + 1]] - lo[b]).tobytes())
            key.append((dst[bounds[b] : bounds[b + 1]] - lo[b]).tobytes())
        rep[b] = first.setdefault(tuple(key), b)
    return rep


def known_ordinal(nodes: Nodes, rows: np.ndarray, pipe: int | np.ndarray) -> np.ndarray:
    """The latest node of ``pipe`` (same block) that nodes ``rows`` know: by flags, or by being after it."""
    value = nodes.clock(rows, pipe)
    same = nodes.pipe[rows] == pipe
    return np.where(same, np.maximum(value, nodes.ordinal[rows] - 1), value)


def _cross_knowledge(model: Model, sources: dict[int, list[int]], n_blocks: int) -> None:
    """G and the Lamport clock of every cross-block wait, in an order where each wait comes after the cross
    waits its releasers knew of."""
    nodes = model.nodes
    waits = model.cross_waits
    deps = cross_deps(model, sources)
    G = np.full((waits.size, n_blocks * NPIPES), _NONE, dtype=np.int32)
    lamport = np.zeros(waits.size, dtype=np.int64)
    for row in _topological(deps):
        x = int(waits[row])
        srcs = np.array(sources[x], dtype=np.int64)
        pub = nodes.published(srcs)
        for s_block, vec in zip(nodes.block[srcs], pub, strict=True):
            sl = slice(int(s_block) * NPIPES, int(s_block + 1) * NPIPES)
            G[row, sl] = np.maximum(G[row, sl], vec)
        if deps[row]:
            dep = np.fromiter(deps[row], dtype=np.int64)
            G[row] = np.maximum(G[row], G[dep].max(axis=0))
            lamport[row] = lamport[dep].max() + 1
    model.G, model.lamport = G, lamport


def cross_deps(model: Model, sources: dict[int, list[int]]) -> dict[int, set[int]]:
    """Per cross-block wait (its row), the rows of the cross-block waits that happen before it: those it knows,
    and those its releasers know, the latest on each pipe with any (an earlier one on that pipe comes before the
    latest one, which knows it). Sets ``model.chains_with_cross``."""
    nodes = model.nodes
    waits = model.cross_waits
    row_of = {int(x): i for i, x in enumerate(waits)}
    by_chain: dict[int, list[int]] = {}
    for x in waits:
        by_chain.setdefault(int(nodes.chain[x]), []).append(int(x))
    model.chains_with_cross = {
        c: (nodes.ordinal[np.array(xs)], np.array([row_of[x] for x in xs])) for c, xs in by_chain.items()
    }
    # Which cross-block waits each wait and each releasing node knows of: the latest on each pipe with any.
    query = np.unique(np.concatenate([waits, *(np.asarray(v, dtype=np.int64) for v in sources.values())]))
    knows: dict[int, list[int]] = {int(q): [] for q in query}
    q_block = nodes.block[query]
    for c, (ords, rows) in model.chains_with_cross.items():
        q = query[q_block == c // NPIPES]
        if not q.size:
            continue
        at = np.searchsorted(ords, known_ordinal(nodes, q, c % NPIPES), side="right") - 1
        for node, a in zip(q.tolist(), at.tolist(), strict=True):
            if a >= 0 and rows[a] != row_of.get(node, -1):
                knows[node].append(int(rows[a]))

    deps = {row_of[int(x)]: set(knows[int(x)]) for x in waits}
    for x in waits:
        for src in sources[int(x)]:
            deps[row_of[int(x)]].update(knows[src])
    return deps


def acyclic(deps: dict[int, set[int]]) -> bool:
    """Whether Kahn's order takes every row before any cycle's."""
    return len(_topological(deps, cycles=False)) == len(deps)


def _topological(deps: dict[int, set[int]], *, cycles: bool = True) -> list[int]:
    """Kahn's order; rows on a cycle (a deadlock, found later) come last in any order (``cycles=False``: are
    left out)."""
    waiting = {row: set(d) for row, d in deps.items()}
    users: dict[int, list[int]] = {}
    for row, d in waiting.items():
        for dep in d:
            users.setdefault(dep, []).append(row)
    ready = [row for row, d in waiting.items() if not d]
    out: list[int] = []
    while ready:
        row = ready.pop()
        out.append(row)
        for user in users.get(row, ()):
            waiting[user].discard(row)
            if not waiting[user]:
                ready.append(user)
    if cycles:
        placed = set(out)
        out.extend(row for row in deps if row not in placed)
    return out


def _place(model: Model, stuck: np.ndarray, sources: dict[int, list[int]], n_blocks: int) -> None:
    """Which nodes cannot run: stuck waits, cycles, and everything that needs them."""
    nodes = model.nodes
    huge = np.iinfo(np.int64).max
    start = np.full(max(n_blocks * NPIPES, 1), huge, dtype=np.int64)
    if not nodes.size:
        model.start = start
        return
    rows = np.arange(nodes.size)
    cycle = nodes.clock(rows, nodes.pipe) >= nodes.ordinal
    first = np.concatenate((stuck.astype(np.int64), np.flatnonzero(cycle)))
    if not first.size:  # nothing stuck: nothing blocked (every pipe's start stays past its last node)
        model.start, model.stuck = start, []
        return
    blocked = np.zeros(nodes.size, dtype=bool)
    while True:
        np.minimum.at(start, nodes.chain[first], nodes.ordinal[first])
        blocked = blocked_nodes(nodes, start)
        more = [x for x in sources if not blocked[x] and blocked[np.array(sources[x])].any()]
        if not more:
            break
        first = np.array(more, dtype=np.int64)
    model.start = start
    model.stuck = [Stuck(int(x), int(nodes.event[x])) for x in np.flatnonzero(blocked) if _is_first(nodes, start, x)]


def _is_first(nodes: Nodes, start: np.ndarray, x: int) -> bool:
    return int(nodes.ordinal[x]) == int(start[int(nodes.chain[x])]) and int(nodes.kind[x]) not in (
        *_FLAG_SETS,
        *_CROSS_SETS,
        _K.RLS_BUF,
    )


def blocked_nodes(nodes: Nodes, start: np.ndarray) -> np.ndarray:
    """Nodes that cannot run: at or after their pipe's first stuck node, or knowing a stuck node."""
    blocked = nodes.ordinal >= start[nodes.chain]
    base = nodes.block * NPIPES
    for col, p in enumerate(nodes.active):
        blocked |= nodes.K[:, col] >= start[base + p]
    return blocked


def _nonforward_blocks(
    model: Model,
    edges: list[tuple[np.ndarray, np.ndarray]],
    multi: list[tuple[np.ndarray, np.ndarray]],
    sources: dict[int, list[int]],
) -> np.ndarray:
    """Blocks where some node is released by one issued after it: there program order is not an order in
    which the block can run, and the race sweep needs a topological one."""
    pos, block = model.nodes.pos, model.nodes.block
    late = [block[dst[pos[src] > pos[dst]]] for src, dst in (*edges, *multi)]
    late.append(np.array([block[x] for x, s in sources.items() for y in s if block[y] == block[x] and pos[y] > pos[x]]))
    return np.unique(np.concatenate(late).astype(np.int64)) if late else np.empty(0, dtype=np.int64)


def _rank_nonforward(
    model: Model,
    edges: list[tuple[np.ndarray, np.ndarray]],
    multi: list[tuple[np.ndarray, np.ndarray]],
    sources: dict[int, list[int]],
) -> None:
    """Kahn's order of the nodes of the blocks listed in ``model.nonforward`` (rare: plain Python)."""
    nodes = model.nodes
    mine = np.isin(nodes.block, model.nonforward)
    preds: dict[int, list[int]] = {int(x): [] for x in np.flatnonzero(mine)}
    for src, dst in (*edges, *multi):
        for s, d in zip(src.tolist(), dst.tolist(), strict=True):
            if d in preds and nodes.block[s] == nodes.block[d]:
                preds[d].append(s)
    for x, srcs in sources.items():
        if x in preds:
            preds[x].extend(s for s in srcs if nodes.block[s] == nodes.block[x])
    chain = nodes.chain
    for x in preds:
        if x > 0 and chain[x - 1] == chain[x]:
            preds[x].append(x - 1)
    order = _topological({x: set(p) - {x} for x, p in preds.items()})
    for rank, x in enumerate(order):
        model.rank[x] = rank
