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

    def compare_and_add(self, new: np.ndarray) -> tuple[list[RacePair], int, int]:
        """The races ``new`` (one kernel of one session) makes with held accesses of other devices; then ``new`` is
        held, as far as the cap allows. Also: accesses of ``new`` not held, and pair tests not made."""
        with self.lock:
            pairs, untested = _races(self.held, new, self.signals)
            room = HOST_HELD.take(min(max(MAX_SHARED_ACCESSES - self.held.size, 0), new.size))
            kept = new[:room]
            if kept.size:
                self.held = np.concatenate((self.held, kept))
            left_out = new.size - kept.size
            self.dropped += left_out
            return pairs, left_out, untested

    def release(self) -> None:
        """The job is gone: what it held goes back to the host's bound."""
        with self.lock:
            HOST_HELD.give_back(self.held.size)
            self.held = np.zeros(0, dtype=ACCESS_DTYPE)
            self.signals = np.zeros(0, dtype=SIGNAL_DTYPE)
            self.places.clear()
            self.kernels.clear()


def _races(held: np.ndarray, new: np.ndarray, signals: np.ndarray | None = None) -> tuple[list[RacePair], int]:
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
    if rows_h.size and signals is not None and signals.size:
        unordered = ~_signal_ordered(held[rows_h], new[rows_n], signals)
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


def signal_matches(signals: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The signal order's edges: for each wait and each setter block (session, launch, block), that block's first
    set to the wait's address whose value satisfies it (msSanitizer's wait passes on the first set that satisfies
    it; a later one of the same block orders no more). Returned as the sets and the waits, row for row."""
    empty = np.zeros(0, dtype=SIGNAL_DTYPE)
    wait = signals["wait"]
    sets, waits = signals[~wait], signals[wait]
    if not sets.size or not waits.size:
        return empty, empty
    sets = sets[np.argsort(sets["address"], kind="stable")]
    lo = np.searchsorted(sets["address"], waits["address"], side="left")
    counts = np.searchsorted(sets["address"], waits["address"], side="right") - lo
    w = np.repeat(np.arange(waits.size), counts)  # each wait against each set of its address, no Python loop
    s = np.arange(w.size) - np.repeat(np.cumsum(counts) - counts, counts) + np.repeat(lo, counts)
    stored, compared, op = sets["value"][s], waits["value"][w], waits["op"][w]
    satisfied = np.zeros(w.size, dtype=bool)
    for code, compare in enumerate(_COMPARE):  # per CompareOp, not per pair
        pick = op == code
        satisfied[pick] = compare(stored[pick], compared[pick])
    w, s = w[satisfied], s[satisfied]
    setter = sets[s]
    order = np.lexsort((setter["position"], setter["block"], setter["ordinal"], setter["session"], w))
    w, setter = w[order], setter[order]
    first = np.ones(w.size, dtype=bool)
    first[1:] = (
        (w[1:] != w[:-1])
        | (setter["session"][1:] != setter["session"][:-1])
        | (setter["ordinal"][1:] != setter["ordinal"][:-1])
        | (setter["block"][1:] != setter["block"][:-1])
    )
    return setter[first], waits[w[first]]


def _signal_ordered(held: np.ndarray, new: np.ndarray, signals: np.ndarray) -> np.ndarray:
    """Which access pairs (``held[i]``, ``new[i]``, ACCESS_DTYPE) a signal orders, either way round."""
    sets, waits = signal_matches(signals)
    if not sets.size:
        return np.zeros(held.size, dtype=bool)
    return _one_way(held, new, sets, waits) | _one_way(new, held, sets, waits)


def _one_way(before: np.ndarray, after: np.ndarray, sets: np.ndarray, waits: np.ndarray) -> np.ndarray:
    """Pairs with a set issued by ``before``'s session after it (later in its block, or in a later launch) that
    satisfies a wait issued by ``after``'s session before it (earlier in its block, or in an earlier launch). Work
    is per pair of blocks the pairs join, never per access pair."""
    ordered = np.zeros(before.size, dtype=bool)
    has_edge = np.isin(before["session"], sets["session"]) & np.isin(after["session"], waits["session"])
    candidate = np.flatnonzero(has_edge)
    if not candidate.size:
        return ordered
    side = ("session", "ordinal", "block")
    sides = np.stack([before[f][candidate].astype(np.int64) for f in side]
                     + [after[f][candidate].astype(np.int64) for f in side], axis=1)  # fmt: skip
    groups, inverse = np.unique(sides, axis=0, return_inverse=True)
    inverse = inverse.reshape(-1)
    by_group = np.argsort(inverse, kind="stable")
    bounds = np.searchsorted(inverse[by_group], np.arange(groups.shape[0] + 1))
    for g, (b_session, b_ordinal, b_block, a_session, a_ordinal, a_block) in enumerate(groups.tolist()):
        edge = (sets["session"] == b_session) & (waits["session"] == a_session)
        edge &= (sets["ordinal"] > b_ordinal) | ((sets["ordinal"] == b_ordinal) & (sets["block"] == b_block))
        edge &= (waits["ordinal"] < a_ordinal) | ((waits["ordinal"] == a_ordinal) & (waits["block"] == a_block))
        if not edge.any():
            continue
        # An access with s signals before it precedes its block's signals at positions >= s; a set of a later launch
        # follows it whatever s. A wait of an earlier launch precedes every access of the waiter's launch.
        latest = np.where(sets["ordinal"][edge] > b_ordinal, _NEVER, sets["position"][edge])
        earliest = np.where(waits["ordinal"][edge] < a_ordinal, -1, waits["position"][edge])
        rows = candidate[by_group[bounds[g] : bounds[g + 1]]]
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
