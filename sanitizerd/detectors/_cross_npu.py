"""A job's accesses to memory its devices share, and the comparison that finds cross-NPU races among them.

One ``JobAccesses`` per job lives where the job's sessions meet (``sessions/jobs.py:Job``); each session's
cross-NPU detector (``crossnpu.py``) adds its kernel's accesses when the kernel ends and is answered with the races
they make with accesses of other devices already held. Sessions run on detector threads of their own, so the
state is behind a lock, and compare-then-add is one step: of two racing kernels, the second to end reports.

Memory is named across sessions by (owner, address): owner 0 is symmetric memory (a region marked shared, at the
same address on every device, as msSanitizer compares its shared spans), owner s an IPC export of session s at
its address there (an importer's access is translated into the exporter's addresses).

Order (docs/mssanitizer-later.md): an access's epoch is how many cross-NPU barriers its block had passed in the
session when it ran. Every device of the job passes every barrier, so accesses of different epochs are ordered;
two accesses of one epoch on two devices are not, and race when one writes and not both are atomic, unless a
signal orders them (``_signal_ordered``): a set issued by one access's session after it, and a wait issued by the
other's session before it, that the set satisfies.
"""

from __future__ import annotations

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
# Edge tests one kernel's comparison makes to order its racing pairs by signals; past it the rest are reported.
MAX_ORDER_TESTS = 1 << 26
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


@dataclass(frozen=True, slots=True)
class Comparison:
    """One kernel's accesses compared with the job's: the races, and what the bounds left out of the comparison."""

    pairs: list[RacePair]
    job_not_held: int  # accesses of the kernel not held: past MAX_SHARED_ACCESSES
    host_not_held: int  # accesses of the kernel not held: past MAX_HOST_SHARED_ACCESSES
    untested: int  # access pair tests not made: past MAX_PAIR_TESTS
    unsure_edges: int  # racing pairs not fully tested for order: the job's signal edges were cut
    unsure_tests: int  # racing pairs not fully tested for order: past MAX_ORDER_TESTS

    @property
    def not_held(self) -> int:
        return self.job_not_held + self.host_not_held

    @property
    def unsure(self) -> int:
        return self.unsure_edges + self.unsure_tests


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
    # the signal order's edges and whether MAX_SIGNAL_EDGES cut any, for the table of this many signals (it only grows)
    edges: tuple[int, np.ndarray, bool] | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

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

    def compare_and_add(self, new: np.ndarray) -> Comparison:
        """The races ``new`` (one kernel of one session) makes with held accesses of other devices; then ``new`` is
        held, as far as the job's and the host's caps allow. Also what the bounds left out: accesses of ``new`` not
        held, pair tests not made, and racing pairs not fully tested for order by signals."""
        with self.lock:
            order = SignalOrder(self._signal_edges)
            pairs, untested = _races(self.held, new, order)
            room = min(max(MAX_SHARED_ACCESSES - self.held.size, 0), new.size)
            granted = HOST_HELD.take(room)
            kept = new[:granted]
            if kept.size:
                self.held = np.concatenate((self.held, kept))
            self.dropped += new.size - granted
            return Comparison(pairs, new.size - room, room - granted, untested, order.unsure_edges, order.unsure_tests)

    def _signal_edges(self) -> tuple[np.ndarray, bool]:
        """The held signals' edges (``signal_edges``), found again only when signals were added since."""
        if self.edges is None or self.edges[0] != self.signals.size:
            self.edges = (self.signals.size, *signal_edges(self.signals))
        return self.edges[1], self.edges[2]

    def release(self) -> None:
        """The job is gone: what it held goes back to the host's bound."""
        with self.lock:
            HOST_HELD.give_back(self.held.size)
            self.held = np.zeros(0, dtype=ACCESS_DTYPE)
            self.signals = np.zeros(0, dtype=SIGNAL_DTYPE)
            self.edges = None
            self.places.clear()
            self.kernels.clear()


def _races(held: np.ndarray, new: np.ndarray, order: SignalOrder | None = None) -> tuple[list[RacePair], int]:
    """Racing pairs, folded by site pair (session, pc, location, pipe, access of each side), first pair each; and
    pair tests left undone past MAX_PAIR_TESTS. Work is per (owner, epoch) group, tested as blocks of a
    broadcast, never a Python loop over accesses; conflicting pairs a signal orders are left out before folding."""
    if not held.size or not new.size:
        return [], 0
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
        return [], untested
    rows_h = np.concatenate(found_held)
    rows_n = np.concatenate(found_new)
    if rows_h.size and order is not None:
        unordered = ~order.ordered(held[rows_h], new[rows_n])
        rows_h, rows_n = rows_h[unordered], rows_n[unordered]
    if not rows_h.size:
        return [], untested
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
    return pairs, untested


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
_NEVER = np.iinfo(np.int64).max  # a set of a later launch follows every access of the setter's earlier launches


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


class SignalOrder:
    """Which racing pairs signals order, for one comparison: the job's edges (found only if a pair needs them), and
    how many pairs could not be fully tested (``unsure_edges``: edges cut; ``unsure_tests``: tests past
    MAX_ORDER_TESTS)."""

    def __init__(self, edges: Callable[[], tuple[np.ndarray, bool]]) -> None:
        self._edges = edges
        self.unsure_edges = 0
        self.unsure_tests = 0
        self.tests = 0

    def ordered(self, held: np.ndarray, new: np.ndarray) -> np.ndarray:
        """Of the pairs (``held[i]``, ``new[i]``, ACCESS_DTYPE), those a signal orders, either way round."""
        edges, cut = self._edges()
        if not edges.size:
            ordered = np.zeros(held.size, dtype=bool)
        else:
            ordered = self._one_way(held, new, edges) | self._one_way(new, held, edges)
        if cut:  # an edge cut might have ordered any pair still racing
            self.unsure_edges += int(np.count_nonzero(~ordered))
        return ordered

    def _one_way(self, before: np.ndarray, after: np.ndarray, edges: np.ndarray) -> np.ndarray:
        """Pairs with a set issued by ``before``'s session after it (later in its block, or in a later launch) that
        satisfies a wait issued by ``after``'s session before it (earlier in its block, or in an earlier launch).
        Work is per pair of blocks the pairs join, over the edges between their two sessions, never per access
        pair."""
        ordered = np.zeros(before.size, dtype=bool)
        candidate = np.flatnonzero(
            np.isin(before["session"], edges["set_session"]) & np.isin(after["session"], edges["wait_session"])
        )
        if not candidate.size:
            return ordered
        side = ("session", "ordinal", "block")
        sides = np.stack([before[f][candidate].astype(np.int64) for f in side]
                         + [after[f][candidate].astype(np.int64) for f in side], axis=1)  # fmt: skip
        groups, inverse = np.unique(sides, axis=0, return_inverse=True)
        inverse = inverse.reshape(-1)
        by_group = np.argsort(inverse, kind="stable")
        bounds = np.searchsorted(inverse[by_group], np.arange(groups.shape[0] + 1))
        between: dict[tuple[int, int], np.ndarray] = {}
        for g, (b_session, b_ordinal, b_block, a_session, a_ordinal, a_block) in enumerate(groups.tolist()):
            rows = candidate[by_group[bounds[g] : bounds[g + 1]]]
            e = between.get((b_session, a_session))
            if e is None:
                pick = (edges["set_session"] == b_session) & (edges["wait_session"] == a_session)
                e = between[b_session, a_session] = edges[pick]
            if self.tests + e.size > MAX_ORDER_TESTS:
                self.unsure_tests += rows.size
                continue
            self.tests += e.size
            edge = (e["set_ordinal"] > b_ordinal) | ((e["set_ordinal"] == b_ordinal) & (e["set_block"] == b_block))
            edge &= (e["wait_ordinal"] < a_ordinal) | ((e["wait_ordinal"] == a_ordinal) & (e["wait_block"] == a_block))
            if not edge.any():
                continue
            # An access with s signals before it precedes its block's signals at positions >= s; a set of a later
            # launch follows it whatever s. A wait of an earlier launch precedes every access of the waiter's launch.
            e = e[edge]
            latest = np.where(e["set_ordinal"] > b_ordinal, _NEVER, e["set_position"])
            earliest = np.where(e["wait_ordinal"] < a_ordinal, -1, e["wait_position"])
            ordered[rows] = _covered(before["signals"][rows], after["signals"][rows], latest, earliest)
        return ordered


def _covered(x: np.ndarray, y: np.ndarray, latest: np.ndarray, earliest: np.ndarray) -> np.ndarray:
    """For each (x[i], y[i]): is there an edge e with x[i] <= latest[e] and y[i] > earliest[e]? The edges sorted by
    ``latest``, the least ``earliest`` of those at or past each, one search per pair."""
    order = np.argsort(latest, kind="stable")
    latest, earliest = latest[order], earliest[order]
    least_after = np.minimum.accumulate(earliest[::-1])[::-1]
    at = np.searchsorted(latest, x, side="left")
    found = at < latest.size
    covered = np.zeros(x.size, dtype=bool)
    covered[found] = y[found] > least_after[at[found]]
    return covered
