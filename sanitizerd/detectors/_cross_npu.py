"""A job's accesses to memory its devices share, and the comparison that finds cross-NPU races among them.

One ``JobAccesses`` per job lives where the job's sessions meet (``sessions/jobs.py:Job``); each session's
cross-NPU detector (``crossnpu.py``) adds its kernel's accesses when the kernel ends and is answered with the races
they make with accesses of other devices already held. Sessions run on detector threads of their own, so the
state is behind a lock, and compare-then-add is one step: of two racing kernels, the second to end reports. It
also knows the job's kernels in flight (``running``): a verdict may wait for them (``crossnpu.py``), and is then
judged anew (``judge_again``) against the same held accesses, ``held[:prefix]``, in the order the signals give by
then.

Memory is named across sessions by (owner, address): owner 0 is symmetric memory (a region marked shared, at the
same address on every device, as msSanitizer compares its shared spans), owner s an IPC export of session s at
its address there (an importer's access is translated into the exporter's addresses).

Order (docs/mssanitizer-later.md): an access's epoch is how many cross-NPU barriers its block had passed in the
session when it ran. Every device of the job passes every barrier, so accesses of different epochs are ordered;
two accesses of one epoch on two devices are not, and race when one writes and not both are atomic, unless signals
order them (``SignalOrder``, ``SignalClosure``): a path from a signal issued after one access (later in its block,
or in a later launch of its session) to a signal issued before the other (earlier in its block, or in an earlier
launch), along set-wait edges (``signal_edges``: a wait and the first set of each setter block that satisfies it)
and program order (within a block by position; a session's later launch after all of its earlier one), through any
sessions and blocks: A writes and sets s1, B waits for s1 and sets s2, C waits for s2 and reads is ordered. Barriers
need nothing more: epochs already order what lies on either side of one, and a path through a barrier cannot lead to
an access of the epoch it started in (its block would have to pass that barrier first).
"""

from __future__ import annotations

import heapq
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from sanitizerd_protocol.model import Frame

# Accesses to shared memory a job holds for comparison; past it (or past the host's bound below), a kernel's further
# accesses are not held (its verdict says so). About 80 bytes each: 5 MiB a job.
MAX_SHARED_ACCESSES = 1 << 16
# Accesses all jobs of the daemon (or of one worker) hold together: about 320 MiB.
MAX_HOST_SHARED_ACCESSES = 1 << 22
# Access pairs one kernel's comparison may test; past it the rest are not compared (said as for the cap above).
MAX_PAIR_TESTS = 1 << 26
# Distinct racing site pairs one kernel reports; further pairs fold into the last report's count.
MAX_REPORTS = 256
# Signal events (sets and waits) a job holds; past it a kernel's further signals are not held and order nothing
# (possible extra reports, never hidden ones; its verdict says so). 48 bytes each: 192 KiB a job.
MAX_SIGNALS = 4096
# (wait, setter block) edges a job's signals give (56 bytes each: 14 MiB at most; more only where thousands of blocks
# set one address that thousands of waits await); past it the rest order nothing, said as above.
MAX_SIGNAL_EDGES = 1 << 18
# Racing pairs one kernel's comparison tests for order by signals; past it the rest are reported.
MAX_ORDER_TESTS = 1 << 26
# Bytes the closure of a job's signal order may OR (rows gathered along edges, and down a block's program order),
# each time the job's signals grew: about 0.4 s on one core (benchmarks/signal_closure.py). Past it the closure stops
# where it got to: the order it found is used, and the pairs it leaves racing are said to be not fully tested. 4 096
# signals with 2^18 set-wait edges between few sessions need about 2^27; a chain or ring of 4 096, 2^23 to 2^25.
MAX_CLOSURE_WORK = 1 << 27
# Edges gathered in one step of the closure: bounds that step's memory (rows of up to 1.5 KiB).
_CLOSURE_STEP = 1 << 12
# Positions and launch ordinals are keyed in 32 bits (a block's signal events and a session's launches stay below)
_LOW = (1 << 32) - 1
# (wait, set) pairs of one address looked at in one step while the edges are found: bounds that step's memory.
_MATCH_STEP = 1 << 18
# What a kernel's check left out at the bounds above, by reason (the label of sanitizerd_cross_npu_cut): accesses
# not held past the job's MAX_SHARED_ACCESSES (job_accesses) or the host's MAX_HOST_SHARED_ACCESSES (host_accesses),
# access pair tests not made past MAX_PAIR_TESTS (pair_tests), signal events not held past MAX_SIGNALS (signals), and
# racing pairs not fully tested for order past MAX_SIGNAL_EDGES (signal_edges) or MAX_ORDER_TESTS (order_tests).
CUT_REASONS = ("job_accesses", "host_accesses", "pair_tests", "signals", "signal_edges", "order_tests")

ACCESS_DTYPE = np.dtype(
    [
        ("owner", "<i8"),  # 0: symmetric memory; s: session s's IPC export
        ("lo", "<u8"),  # the access's bytes in the owner's addresses
        ("hi", "<u8"),
        ("address", "<u8"),  # its start as the device saw it (what the report prints)
        ("epoch", "<u8"),
        ("signals", "<i8"),  # signal events its block had issued in the kernel before it
        ("ordinal", "<i8"),  # the session's kernel launches before this one
        ("block", "<u4"),  # block_keys' block_type << 16 | block_id
        ("device", "<i8"),  # the device; -1 - session where the session named none
        ("session", "<i8"),
        ("launch", "<i8"),
        ("serial", "<u8"),
        ("pc", "<u8"),
        ("location", "<u4"),
        ("block_id", "<u2"),
        ("block_type", "u1"),
        ("pipe", "u1"),
        ("write", "?"),
        ("atomic", "?"),
    ]
)


# One signal event of a session's kernel: where it stands in its block's program order, and what it stores or
# awaits. ``value`` is the set's value or the wait's cmpValue, ``op`` the wait's CompareOp.
SIGNAL_DTYPE = np.dtype(
    [
        ("session", "<i8"),
        ("ordinal", "<i8"),  # as ACCESS_DTYPE's
        ("position", "<i8"),  # signal events the block had issued in the kernel before this one
        ("address", "<u8"),
        ("value", "<i8"),
        ("block", "<u4"),
        ("op", "u1"),
        ("wait", "?"),
    ]
)


# One edge of the signal order: a set (its session, launch ordinal, block, place among the block's signals) that
# satisfies a wait (the same of the waiter), the first of its block's sets to do so.
EDGE_DTYPE = np.dtype(
    [
        ("set_session", "<i8"),
        ("set_ordinal", "<i8"),
        ("set_position", "<i8"),
        ("wait_session", "<i8"),
        ("wait_ordinal", "<i8"),
        ("wait_position", "<i8"),
        ("set_block", "<u4"),
        ("wait_block", "<u4"),
    ]
)


@dataclass(frozen=True, slots=True)
class Judgment:
    """One comparison of a kernel's accesses with the job's held ones: its races, the rows of the kernel that race
    (``racing``: only those can race again when it is judged anew), and ``prefix``, how many held accesses it was
    compared with (the job's held ones only grow by appending, so ``held[:prefix]`` is the same rows later)."""

    pairs: list[RacePair]
    racing: np.ndarray
    prefix: int
    job_not_held: int = 0  # accesses of the kernel not held: past MAX_SHARED_ACCESSES
    host_not_held: int = 0  # accesses of the kernel not held: past MAX_HOST_SHARED_ACCESSES
    untested: int = 0  # access pair tests not made: past MAX_PAIR_TESTS
    unsure_edges: int = 0  # racing pairs not fully tested for order: edges cut, or the closure stopped at its bound
    unsure_tests: int = 0  # racing pairs not fully tested for order: past MAX_ORDER_TESTS
    signals: int = 0  # the job's held signals it was judged with (judged anew only once they grew)

    @property
    def left_out(self) -> int:
        return self.job_not_held + self.host_not_held

    @property
    def unsure(self) -> int:
        return self.unsure_edges + self.unsure_tests


@dataclass(frozen=True, slots=True)
class RacePair:
    """Two racing accesses (rows of ACCESS_DTYPE): the one already held and the new one, and how many pairs of
    the same two sites they stand for."""

    held: np.void
    new: np.void
    count: int


class _HostHeld:
    """The accesses every job holds: a flood of jobs cannot hold more than MAX_HOST_SHARED_ACCESSES together."""

    def __init__(self) -> None:
        self.held = 0
        self.lock = threading.Lock()

    def take(self, wanted: int) -> int:
        with self.lock:
            granted = max(min(wanted, MAX_HOST_SHARED_ACCESSES - self.held), 0)
            self.held += granted
            return granted

    def give_back(self, count: int) -> None:
        with self.lock:
            self.held -= count


HOST_HELD = _HostHeld()


@dataclass(slots=True)
class JobAccesses:
    """The job's held accesses to shared memory, the places and kernel names their reports need, and what the cap
    left out."""

    held: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=ACCESS_DTYPE))
    places: dict[tuple[int, int], tuple[Frame | None, list[Frame]]] = field(default_factory=dict)
    kernels: dict[tuple[int, int], str] = field(default_factory=dict)
    dropped: int = 0  # accesses not held: past MAX_SHARED_ACCESSES
    signals: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=SIGNAL_DTYPE))
    signals_dropped: int = 0  # signal events not held: past MAX_SIGNALS
    # the signal order's closure, for the table of this many signals (it only grows)
    closure: tuple[int, SignalClosure] | None = None
    # the job's kernels in flight (begun, not ended): session -> the launch ordinal it runs (one at a time)
    running: dict[int, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def kernel_began(self, session: int, ordinal: int) -> None:
        with self.lock:
            self.running[session] = ordinal

    def kernel_ended(self, session: int) -> set[tuple[int, int]]:
        """The session's kernel is over (ended, or its session is); the other kernels of the job still in flight,
        as (session, launch ordinal)."""
        with self.lock:
            self.running.pop(session, None)
            return set(self.running.items())

    def still_running(self, kernels: set[tuple[int, int]]) -> set[tuple[int, int]]:
        """Of ``kernels`` (session, launch ordinal), those not ended yet."""
        with self.lock:
            return {(session, ordinal) for session, ordinal in kernels if self.running.get(session) == ordinal}

    def hold_signals(self, signals: np.ndarray) -> int:
        """Holds one kernel's signal events (SIGNAL_DTYPE, in program order per block) as far as MAX_SIGNALS
        allows, before its accesses are compared, so that its own waits and sets order them; returns how many were
        not held. Those cut are each block's last, so a block's held sets stay a prefix of its own: the first set
        satisfying a wait is never one held in place of an earlier one cut."""
        with self.lock:
            room = max(MAX_SIGNALS - self.signals.size, 0)
            kept = signals[:room]
            if kept.size:
                self.signals = np.concatenate((self.signals, kept))
            left_out = signals.size - kept.size
            self.signals_dropped += left_out
            return left_out

    def compare_and_add(self, new: np.ndarray) -> Judgment:
        """The races ``new`` (one kernel of one session) makes with held accesses of other devices; then ``new`` is
        held, as far as the job's and the host's caps allow. Also what the bounds left out: accesses of ``new`` not
        held, pair tests not made, and racing pairs not fully tested for order by signals (past MAX_SIGNAL_EDGES,
        MAX_CLOSURE_WORK or MAX_ORDER_TESTS)."""
        with self.lock:
            prefix = self.held.size
            order = SignalOrder(self._signal_closure)
            pairs, untested, racing = _races(self.held, new, order)
            room = min(max(MAX_SHARED_ACCESSES - self.held.size, 0), new.size)
            granted = HOST_HELD.take(room)
            kept = new[:granted]
            if kept.size:
                self.held = np.concatenate((self.held, kept))
            self.dropped += new.size - granted
            return Judgment(pairs, new[racing], prefix, new.size - room, room - granted, untested, order.unsure_edges,
                            order.unsure_tests, self.signals.size)  # fmt: skip

    def judge_again(self, racing: np.ndarray, prefix: int) -> Judgment:
        """A kernel's racing accesses compared anew with the held accesses it was first compared with, in the
        order the job's signals give now (it only grows: a pair ordered once stays ordered). Adds nothing."""
        with self.lock:
            order = SignalOrder(self._signal_closure)
            pairs, untested, still = _races(self.held[:prefix], racing, order)
            return Judgment(pairs, racing[still], prefix, untested=untested, unsure_edges=order.unsure_edges,
                            unsure_tests=order.unsure_tests, signals=self.signals.size)  # fmt: skip

    def _signal_closure(self) -> SignalClosure:
        """The held signals' order (``signal_edges``, then ``SignalClosure``), found again only when signals were
        added since."""
        if self.closure is None or self.closure[0] != self.signals.size:
            self.closure = (self.signals.size, SignalClosure(self.signals, *signal_edges(self.signals)))
        return self.closure[1]

    def release(self) -> None:
        """The job is gone: what it held goes back to the host's bound."""
        with self.lock:
            HOST_HELD.give_back(self.held.size)
            self.held = np.zeros(0, dtype=ACCESS_DTYPE)
            self.signals = np.zeros(0, dtype=SIGNAL_DTYPE)
            self.closure = None
            self.running.clear()
            self.places.clear()
            self.kernels.clear()


def _races(
    held: np.ndarray, new: np.ndarray, order: SignalOrder | None = None
) -> tuple[list[RacePair], int, np.ndarray]:
    """Racing pairs, folded by site pair (session, pc, location, pipe, access of each side), first pair each; pair
    tests left undone past MAX_PAIR_TESTS; and the rows of ``new`` in a racing pair. Work is per (owner, epoch)
    group, tested as blocks of a broadcast, never a Python loop over accesses; conflicting pairs a signal orders
    are left out before folding."""
    none = np.zeros(0, dtype=np.intp)
    if not held.size or not new.size:
        return [], 0, none
    held_groups = np.stack((held["owner"].astype(np.int64), held["epoch"].astype(np.int64)), axis=1)
    new_groups = np.stack((new["owner"].astype(np.int64), new["epoch"].astype(np.int64)), axis=1)
    groups = np.unique(new_groups, axis=0)
    tests = 0
    untested = 0
    found_held: list[np.ndarray] = []
    found_new: list[np.ndarray] = []
    for owner, epoch in groups.tolist():  # one per (owner, epoch) the kernel touched, not per access
        hi_rows = np.flatnonzero((held_groups[:, 0] == owner) & (held_groups[:, 1] == epoch))
        new_rows = np.flatnonzero((new_groups[:, 0] == owner) & (new_groups[:, 1] == epoch))
        if not hi_rows.size:
            continue
        if tests + hi_rows.size * new_rows.size > MAX_PAIR_TESTS:
            untested += hi_rows.size * new_rows.size
            continue
        tests += hi_rows.size * new_rows.size
        h, n = held[hi_rows], new[new_rows]
        conflict = (
            (h["lo"][:, None] < n["hi"][None, :])
            & (n["lo"][None, :] < h["hi"][:, None])
            & (h["device"][:, None] != n["device"][None, :])
            & (h["write"][:, None] | n["write"][None, :])
            & ~(h["atomic"][:, None] & n["atomic"][None, :])
        )
        hit_h, hit_n = np.nonzero(conflict)
        found_held.append(hi_rows[hit_h])
        found_new.append(new_rows[hit_n])
    if not found_held:
        return [], untested, none
    rows_h = np.concatenate(found_held)
    rows_n = np.concatenate(found_new)
    if rows_h.size and order is not None:
        unordered = ~order.ordered(held[rows_h], new[rows_n])
        rows_h, rows_n = rows_h[unordered], rows_n[unordered]
    if not rows_h.size:
        return [], untested, none
    site = ("session", "pc", "location", "pipe", "write")
    keys = np.zeros(rows_h.size, dtype=[(f"h_{f}", ACCESS_DTYPE[f]) for f in site] + [
        (f"n_{f}", ACCESS_DTYPE[f]) for f in site])  # fmt: skip
    for f in site:
        keys[f"h_{f}"] = held[f][rows_h]
        keys[f"n_{f}"] = new[f][rows_n]
    _, first, counts = np.unique(keys, return_index=True, return_counts=True)
    order = np.argsort(first, kind="stable")
    pairs = [
        RacePair(held[rows_h[first[i]]], new[rows_n[first[i]]], int(counts[i])) for i in order[:MAX_REPORTS].tolist()
    ]
    if order.size > MAX_REPORTS and pairs:
        rest = int(counts[order[MAX_REPORTS:]].sum())
        last = pairs[-1]
        pairs[-1] = RacePair(last.held, last.new, last.count + rest)
    return pairs, untested, np.unique(rows_n)


def block_epochs(keys: np.ndarray, barrier: np.ndarray, passed: dict[int, int]) -> np.ndarray:
    """Each event's count of cross-NPU barriers its block passed before it in this kernel: ``passed`` (block key ->
    barriers of earlier batches) plus those of this batch before it; ``passed`` is brought up to date."""
    blocks, inverse = np.unique(keys, return_inverse=True)
    earlier = np.array([passed.get(int(b), 0) for b in blocks.tolist()], dtype=np.int64)  # per block, not event
    order = np.argsort(inverse, kind="stable")
    sorted_barrier = barrier[order].astype(np.int64)
    before = np.cumsum(sorted_barrier) - sorted_barrier  # barriers before each event, over all blocks
    starts = np.searchsorted(inverse[order], np.arange(blocks.size))
    own_before = before - before[starts][inverse[order]]
    counts = np.empty(keys.size, dtype=np.int64)
    counts[order] = own_before + earlier[inverse[order]]
    totals = np.bincount(inverse, weights=barrier, minlength=blocks.size).astype(np.int64)
    for block, total in zip(blocks.tolist(), totals.tolist(), strict=True):
        if total:
            passed[block] = passed.get(block, 0) + total
    return counts


# Each CompareOp (records.CompareOp, by number) as msSanitizer's SignalDatabase::Wait compares: stored <op> cmpValue,
# both signed.
_COMPARE = (np.equal, np.not_equal, np.greater, np.greater_equal, np.less, np.less_equal)


def signal_edges(signals: np.ndarray) -> tuple[np.ndarray, bool]:
    """The signal order's edges (EDGE_DTYPE): for each wait and each setter block (session, launch, block), that
    block's first set to the wait's address whose value satisfies it (msSanitizer's wait passes on the first set that
    satisfies it; a later one of the same block orders no more); and whether MAX_SIGNAL_EDGES cut any. The
    (wait, set) pairs of one address are looked at in steps of a bounded size, never one by one."""
    wait = signals["wait"]
    sets, waits = signals[~wait], signals[wait]
    if not sets.size or not waits.size:
        return np.zeros(0, dtype=EDGE_DTYPE), False
    sets = sets[np.argsort(sets["address"], kind="stable")]
    setter = np.unique(np.stack([sets[f].astype(np.int64) for f in ("session", "ordinal", "block")], axis=1),
                       axis=0, return_inverse=True)[1].reshape(-1)  # fmt: skip
    lo = np.searchsorted(sets["address"], waits["address"], side="left")
    counts = np.searchsorted(sets["address"], waits["address"], side="right") - lo
    parts: list[np.ndarray] = []
    kept = 0
    ends = np.cumsum(counts)
    start = 0
    while start < waits.size:  # per step of up to _MATCH_STEP pairs (a wait's sets are never split)
        stop = max(int(np.searchsorted(ends, (ends[start - 1] if start else 0) + _MATCH_STEP, side="right")), start + 1)
        edges = _edges_of(sets, setter, waits, np.arange(start, stop), lo[start:stop], counts[start:stop])
        room = MAX_SIGNAL_EDGES - kept
        if edges.size > room:  # the rest are not looked for: their order is not used
            parts.append(edges[:room].copy())
            return np.concatenate(parts), True
        parts.append(edges)
        kept += edges.size
        start = stop
    return np.concatenate(parts), False


def _edges_of(sets: np.ndarray, setter: np.ndarray, waits: np.ndarray, wait_rows: np.ndarray, lo: np.ndarray,
              counts: np.ndarray) -> np.ndarray:  # fmt: skip
    """``signal_edges`` for the waits ``wait_rows``, whose sets of their address are ``counts`` from ``lo``."""
    w = np.repeat(wait_rows, counts)
    s = np.arange(w.size) - np.repeat(np.cumsum(counts) - counts, counts) + np.repeat(lo, counts)
    stored, compared, op = sets["value"][s], waits["value"][w], waits["op"][w]
    satisfied = np.zeros(w.size, dtype=bool)
    for code, compare in enumerate(_COMPARE):  # per CompareOp, not per pair
        pick = op == code
        satisfied[pick] = compare(stored[pick], compared[pick])
    w, s = w[satisfied], s[satisfied]
    order = np.lexsort((sets["position"][s], setter[s], w))
    w, s = w[order], s[order]
    first = np.ones(w.size, dtype=bool)
    first[1:] = (w[1:] != w[:-1]) | (setter[s][1:] != setter[s][:-1])
    w, s = w[first], s[first]
    edges = np.zeros(w.size, dtype=EDGE_DTYPE)
    for side, rows, table in (("set", s, sets), ("wait", w, waits)):
        for name in ("session", "ordinal", "position", "block"):
            edges[f"{side}_{name}"] = table[name][rows]
    return edges


class SignalClosure:
    """What the job's signals order: a graph whose nodes are the held signal events and, per session, a boundary
    before its first launch with signals and one after each (so a launch's blocks come after everything of the
    session's earlier launches without an edge per pair of blocks); its edges are program order (each signal to
    the next of its block, a block's last to the boundary after its launch, the boundary before a launch to each of
    its blocks' first) and the set-wait edges. ``reach`` is the graph's transitive closure, one bit row per node
    (``np.packbits``, little bit order): chains of signals through any sessions and blocks are followed.

    It is found block by block (a block's signals are one step: the rows its edges lead to, then one suffix OR down
    its program order), in an order that brings the blocks a block leads to up to date first (a DAG's blocks once
    each); a cycle (hostile signals, or a wait matched with a set of a later launch of a flag reused across
    launches) is iterated until nothing changes: its members reach one another, as each of their edges says. Past
    MAX_CLOSURE_WORK the closure stops where it got to: what it found is order, the rest is not used (``unsure``)."""

    def __init__(self, signals: np.ndarray, edges: np.ndarray, cut: bool) -> None:
        table = signals[np.lexsort((signals["position"], signals["block"], signals["ordinal"], signals["session"]))]
        self.signals = table.size
        self.sessions = np.unique(table["session"])
        rank = np.searchsorted(self.sessions, table["session"]).astype(np.int64)
        self.launch_keys, launch_of = np.unique(_launch_key(rank, table["ordinal"]), return_inverse=True)
        launch_of = launch_of.reshape(-1).astype(np.int64)
        self.chain_keys, chain_of = np.unique(_chain_key(launch_of, table["block"]), return_inverse=True)
        self.chain_of = chain_of.reshape(-1).astype(np.int64)
        self.node_keys = _chain_key(self.chain_of, np.minimum(table["position"], _LOW))
        # per launch, its session's rank: boundaries follow the signals, the session's before its launches', so the
        # one after launch g (a global index) is node signals + g + rank + 1
        self.launch_rank = self.launch_keys >> 32
        size = table.size + self.launch_keys.size + self.sessions.size
        self.reach = np.zeros((size, (size + 7) // 8), dtype=np.uint8)
        self.reach[np.arange(size), np.arange(size) >> 3] = (1 << (np.arange(size) & 7)).astype(np.uint8)
        self.unsure = cut
        self.work = 0
        if size:
            self._close(table, edges, launch_of)

    # --- lookups: an access's place among the nodes ----------------------------------------------------------------

    def _places(self, session: np.ndarray, ordinal: np.ndarray, block: np.ndarray) -> tuple[np.ndarray, ...]:
        """Per (session, launch ordinal, block): the session's rank (-1: it holds no signals), the block's chain (-1:
        it holds none in that launch) and the launch key the boundaries are found by."""
        rank = _find(self.sessions, session)
        key = _launch_key(np.maximum(rank, 0), ordinal)
        launch = np.where(rank >= 0, _find(self.launch_keys, key), -1)
        chain = np.where(launch >= 0, _find(self.chain_keys, _chain_key(np.maximum(launch, 0), block)), -1)
        return rank, chain, key

    def starts(self, rows: np.ndarray) -> np.ndarray:
        """The first node each access precedes: its block's first held signal at or past its place, else the
        boundary after its launch (-1: its session holds no signals)."""
        rank, chain, key = self._places(rows["session"], rows["ordinal"], rows["block"])
        node = np.searchsorted(self.node_keys, _chain_key(np.maximum(chain, 0), np.minimum(rows["signals"], _LOW)))
        inside = (chain >= 0) & (node < self.signals)
        inside[inside] = self.chain_of[node[inside]] == chain[inside]
        boundary = self._boundary(rank, np.searchsorted(self.launch_keys, key, side="right"))
        return np.where(inside, node, np.where(rank >= 0, boundary, -1))

    def ends(self, rows: np.ndarray) -> np.ndarray:
        """The last node each access follows: its block's last held signal before it, else the boundary before its
        launch (-1: its session holds no signals)."""
        rank, chain, key = self._places(rows["session"], rows["ordinal"], rows["block"])
        node = np.searchsorted(self.node_keys, _chain_key(np.maximum(chain, 0), np.minimum(rows["signals"], _LOW))) - 1
        inside = (chain >= 0) & (node >= 0)
        inside[inside] = self.chain_of[node[inside]] == chain[inside]
        boundary = self._boundary(rank, np.searchsorted(self.launch_keys, key, side="left"))
        return np.where(inside, node, np.where(rank >= 0, boundary, -1))

    def _boundary(self, rank: np.ndarray, launches_before: np.ndarray) -> np.ndarray:
        """The boundary after the session's launches below ``launches_before`` (a global launch index)."""
        return self.signals + launches_before + np.maximum(rank, 0)

    def reaches(self, start: np.ndarray, end: np.ndarray) -> np.ndarray:
        """Per pair of nodes: does a path lead from ``start`` to ``end`` (False where either is -1)?"""
        known = (start >= 0) & (end >= 0)
        found = np.zeros(start.size, dtype=bool)
        s, e = start[known], end[known]
        found[known] = ((self.reach[s, e >> 3] >> (e & 7).astype(np.uint8)) & 1).astype(bool)
        return found

    # --- the closure ------------------------------------------------------------------------------------------------

    def _close(self, table: np.ndarray, edges: np.ndarray, launch_of: np.ndarray) -> None:
        n = table.size
        chains = self.chain_keys.size
        chain_start = np.searchsorted(self.chain_of, np.arange(chains))
        chain_stop = np.append(chain_start[1:], n).astype(np.int64)
        chain_launch = launch_of[chain_start]
        before = n + chain_launch + self.launch_rank[chain_launch]  # each chain's launch's boundaries
        src = [before, chain_stop - 1]
        dst = [chain_start.astype(np.int64), before + 1]
        if edges.size:
            sets, waits = self._edge_nodes(edges, "set"), self._edge_nodes(edges, "wait")
            kept = (sets >= 0) & (waits >= 0)
            src.append(sets[kept])
            dst.append(waits[kept])
        src_all, dst_all = np.concatenate(src), np.concatenate(dst)
        # units: a chain (a block's signals in one launch; a path into it at a node reaches its rest) or a boundary
        size = self.reach.shape[0]
        unit_of = np.concatenate((self.chain_of, chains + np.arange(size - n)))
        unit_lo = np.concatenate((chain_start, np.arange(n, size))).astype(np.int64)
        unit_hi = np.concatenate((chain_stop, np.arange(n, size) + 1)).astype(np.int64)
        # of a node's edges into one unit only the earliest node counts: it reaches the rest
        order = np.argsort(src_all * size + dst_all)  # by source, then target (a unit's nodes are contiguous)
        src_all, dst_all = src_all[order], dst_all[order]
        first = np.ones(src_all.size, dtype=bool)
        first[1:] = (src_all[1:] != src_all[:-1]) | (unit_of[dst_all][1:] != unit_of[dst_all][:-1])
        self._solve(unit_of, unit_lo, unit_hi, src_all[first], dst_all[first])

    def _edge_nodes(self, edges: np.ndarray, side: str) -> np.ndarray:
        _, chain, _ = self._places(edges[f"{side}_session"], edges[f"{side}_ordinal"], edges[f"{side}_block"])
        node = _find(self.node_keys, _chain_key(np.maximum(chain, 0), np.minimum(edges[f"{side}_position"], _LOW)))
        return np.where(chain >= 0, node, -1)

    def _solve(self, unit_of: np.ndarray, unit_lo: np.ndarray, unit_hi: np.ndarray, src: np.ndarray,
               dst: np.ndarray) -> None:  # fmt: skip
        """The closure over the edges ``src`` -> ``dst`` (sorted by ``src``) of units ``unit_lo``..``unit_hi``."""
        units = unit_lo.size
        src_unit, dst_unit = unit_of[src], unit_of[dst]
        looped = np.zeros(units, dtype=bool)
        looped[src_unit[src_unit == dst_unit]] = True  # a wait satisfied by a later set of its own block
        rank, pred_at, pred = _sink_first(units, src_unit, dst_unit)
        edge_at = np.searchsorted(src, unit_lo)
        edge_to = np.searchsorted(src, unit_hi)
        heap = [(int(r), u) for u, r in enumerate(rank.tolist())]
        heapq.heapify(heap)
        queued = np.ones(units, dtype=bool)
        while heap:  # per block (or boundary) brought up to date, not per signal
            _, unit = heapq.heappop(heap)
            queued[unit] = False
            grew = True
            while grew:  # once, or until its own cycle adds nothing
                if self.work > MAX_CLOSURE_WORK:
                    self.unsure = True
                    return
                edges = slice(int(edge_at[unit]), int(edge_to[unit]))
                grew = self._step(int(unit_lo[unit]), int(unit_hi[unit]), src[edges], dst[edges])
                if grew:
                    for p in pred[pred_at[unit] : pred_at[unit + 1]].tolist():
                        if not queued[p]:
                            queued[p] = True
                            heapq.heappush(heap, (int(rank[p]), p))
                grew &= bool(looped[unit])

    def _step(self, lo: int, hi: int, sources: np.ndarray, targets: np.ndarray) -> bool:
        """One unit's rows (nodes ``lo``..``hi``) from the rows its edges lead to, then down its program order;
        whether they grew. Its work is the bytes it ORs."""
        rows = self.reach[lo:hi].copy()
        width = rows.shape[1]
        for at in range(0, sources.size, _CLOSURE_STEP):  # bounded gathers: a unit may have many edges
            src, dst = sources[at : at + _CLOSURE_STEP], targets[at : at + _CLOSURE_STEP]
            groups = np.flatnonzero(np.concatenate(([True], src[1:] != src[:-1])))
            rows[src[groups] - lo] |= np.bitwise_or.reduceat(self.reach[dst], groups, axis=0)
            self.work += src.size * width
        if hi - lo > 1:
            rows = np.bitwise_or.accumulate(rows[::-1], axis=0)[::-1]
            self.work += (hi - lo) * width
        if np.array_equal(rows, self.reach[lo:hi]):
            return False
        self.reach[lo:hi] = rows
        return True


def _sink_first(units: int, src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A rank per unit that puts every unit after those it leads to (Kahn's levels from the sinks, one vectorised
    step per level); where a cycle stalls it, the unit left with the fewest edges into units not ranked yet is
    taken next, so that a cycle is ranked along its length and its closure goes round it a few times, not once per
    member. Also each unit's predecessors (other units with an edge into it): ``pred[pred_at[u]:pred_at[u + 1]]``."""
    between = src != dst
    pairs = np.unique(src[between].astype(np.int64) * units + dst[between])
    src, dst = pairs // units, pairs % units
    waiting = np.bincount(src, minlength=units)
    by_dst = np.argsort(dst, kind="stable")
    pred_at = np.searchsorted(dst[by_dst], np.arange(units + 1))
    pred = src[by_dst]
    rank = np.full(units, -1, dtype=np.int64)
    ready = np.flatnonzero(waiting == 0)
    level = 0
    while level < units:  # per level of the unit graph, or per cycle broken
        if not ready.size:
            left = np.flatnonzero(rank < 0)
            ready = left[[int(np.argmin(waiting[left]))]]
        rank[ready] = level
        level += ready.size
        leads = np.concatenate([pred[pred_at[u] : pred_at[u + 1]] for u in ready.tolist()])
        np.subtract.at(waiting, leads, 1)
        touched = np.unique(leads)
        ready = touched[(waiting[touched] == 0) & (rank[touched] < 0)]
    return rank, pred_at, pred


def _launch_key(rank: np.ndarray, ordinal: np.ndarray) -> np.ndarray:
    return (rank.astype(np.int64) << 32) | np.clip(ordinal, 0, _LOW).astype(np.int64)


def _chain_key(high: np.ndarray, low: np.ndarray) -> np.ndarray:
    return (high.astype(np.int64) << 32) | low.astype(np.int64)


def _find(keys: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """Each wanted key's index in the sorted ``keys``; -1 where absent."""
    if not keys.size:
        return np.full(wanted.size, -1, dtype=np.int64)
    at = np.minimum(np.searchsorted(keys, wanted), keys.size - 1)
    return np.where(keys[at] == wanted, at, -1).astype(np.int64)


class SignalOrder:
    """Which racing pairs signals order, for one comparison: the job's closure (found only if a pair needs it), and
    how many pairs could not be fully tested (``unsure_edges``: edges cut or the closure stopped;
    ``unsure_tests``: pairs past MAX_ORDER_TESTS)."""

    def __init__(self, closure: Callable[[], SignalClosure]) -> None:
        self._closure = closure
        self.unsure_edges = 0  # racing pairs the closure could not settle: edges cut, or it stopped at its bound
        self.unsure_tests = 0  # racing pairs past MAX_ORDER_TESTS
        self.tests = 0

    def ordered(self, held: np.ndarray, new: np.ndarray) -> np.ndarray:
        """Of the pairs (``held[i]``, ``new[i]``, ACCESS_DTYPE), those a chain of signals orders, either way
        round: a path from the first node one access precedes to the last node the other follows."""
        ordered = np.zeros(held.size, dtype=bool)
        room = max(min(MAX_ORDER_TESTS - self.tests, held.size), 0)
        self.tests += room
        closure = self._closure()
        if room and closure.signals:
            h, n = held[:room], new[:room]
            ordered[:room] = closure.reaches(closure.starts(h), closure.ends(n)) | closure.reaches(
                closure.starts(n), closure.ends(h)
            )
        self.unsure_tests += held.size - room
        if closure.unsure:  # a cut edge or an unfinished closure might have ordered any pair still racing
            self.unsure_edges += int(np.count_nonzero(~ordered[:room]))
        return ordered
