"""Which pipes of a running kernel launch are locked up (msSanitizer's 算子卡死 check, its master of Aug 2026), from
the records received so far.

Each (block, pipe) runs its instructions in the order its records came (the order the block issued them), so an
instruction behind a wait that is never released never ran, and a set_flag queued there releases nothing. The
launch's waits and what releases them are *replayed* as the records come, per pipe:

- ``wait_flag`` is released by the ``set_flag`` of its (block, src, dst, event id), the k-th wait by the k-th set;
- ``GET_BUF`` of a (block, buffer) by that block's ``RLS_BUF`` of it, the first GET_BUF of each buffer freely (the
  k-th needs k releases that ran); a non-blocking one (GET_BUF_NONBLOCK) waits for nothing and is not counted;
- ``IB_WAIT`` (SOFT_WAIT) by the ``IB_SET`` of the block it names, FIFO;
- an mstx cross-core wait by the mstx cross-core set of its (address, flag), FIFO; an "is more" wait never blocks;
- ``wait_flag_dev`` / ``wait_intra_block`` (CROSS_WAIT) by the rounds of FFTS sets that target its block, by the
  mode rules of detectors/_rendezvous.py (mode 0: every block of the setter's type sets once per round; 1: the
  vector pair; 2 and 4: the AI core's cube and vector sub-blocks), counting only sets that ran;
- SyncAll (SOFT_SYNC_ALL; msSanitizer's mstx cross-core barrier converts to one) in rounds: a block's k-th SyncAll
  of a group (its block type and ``address``, the blocks taking part: the first ``address`` of the type, 0 = every
  block of the type the launch was given or that sent records) goes once every member has run its k-th or stands
  at it (a block held before it never arrives, one that finished or whose records ended without it never will);
- the cross-NPU barrier (NPU_BARRIER) as a round of every block of the launch (this device's share, as msSanitizer's
  replay decays it to a core barrier), and, its partners being on other devices, only once the block's own later
  records (or its records' end with the kernel's) show it opened. One every block here reached but that nothing
  shows open is reported, when the session ends, as waiting on another device (``ANOTHER_DEVICE_MODE``).

Each replay step takes the pending rows in arrival order and lets a wait go when the sets that ran before, plus
the sets that arrived before it and are not themselves queued behind a blocked wait, cover it (a few passes to
a fixpoint, all numpy); a barrier likewise counts, within a step, the arrivals that came before it (so that what a
barrier lets go cannot have let the barrier go), the rest in later steps; what ran is folded into per-key counts
and dropped. A program-ordered stream settles in
one or two steps per batch; only a wait whose releaser arrives after it costs a step more.

What is left pending once the replay settles begins, on each pipe, with a wait that nothing ran can release: the
pipe is *stuck*. A stuck pipe may still be released by a record yet to come; it is *locked* for certain when it
waits on a wait_flag whose source pipe is itself stuck on a wait_flag (directly or along a chain into a cycle):
nothing left in the block can set its flag. ``PipeQueues.locked`` finds those (reported while the kernel runs);
``PipeQueues.stuck`` is every stuck pipe, reported when the launch's session ends without the kernel ending.

msSanitizer's hooks send a block's records once the kernel stopped, whether it ran to its end or its runtime's
timeout killed it, and end them with a BLOCK_FINISH of their own: such a block (``BLOCK_RECORDS_ENDED``) has not
finished here, and ``PipeQueues.stuck_at_end`` is its stuck pipes, locked up at the kernel's end as msSanitizer's
replay finds them at KERNEL_FINISH (a pipe that ran to its end cannot have stopped on a wait nothing set).

Not replayed (they never hold a pipe here): hset/hwait flags (msSanitizer's replay lets them pass too). Bounds:
pending rows MAX_PENDING_ROWS, counted keys and blocks MAX_LOCKUP_KEYS each, barrier groups MAX_BARRIER_GROUPS, and
the replay's work per batch and at the session's end; past any, the launch's lock-up check stops, said so.
"""

from __future__ import annotations

import numpy as np

from sanitizerd_protocol.records import (
    BLOCK_RECORDS_ENDED,
    GET_BUF_NONBLOCK,
    SYNC_ALL_MSTX_BARRIER,
    BlockType,
    EventKind,
    Pipe,
    block_keys,
)

_K = EventKind
# plain ints: numpy compares an IntEnum through Python's enum machinery, on every batch
_WAIT, _SET, _FINISH = int(_K.WAIT_FLAG), int(_K.SET_FLAG), int(_K.BLOCK_FINISH)
_CROSS_WAIT, _CROSS_SET = int(_K.CROSS_WAIT), int(_K.CROSS_SET)
_SOFT_WAIT, _SOFT_SET = int(_K.SOFT_WAIT), int(_K.SOFT_SET)
_MSTX_WAIT, _MSTX_SET = int(_K.MSTX_CROSS_WAIT), int(_K.MSTX_CROSS_SET)
_GET_BUF, _RLS_BUF = int(_K.GET_BUF), int(_K.RLS_BUF)
_SYNC_ALL, _NPU_BARRIER = int(_K.SOFT_SYNC_ALL), int(_K.NPU_BARRIER)
_AIV, _AIC = int(BlockType.AIV), int(BlockType.AIC)
_S = int(Pipe.S)

_TRACKED = np.zeros(256, dtype=bool)
_TRACKED[[_WAIT, _SET, _CROSS_WAIT, _CROSS_SET, _SOFT_WAIT, _SOFT_SET, _MSTX_WAIT, _MSTX_SET, _GET_BUF, _RLS_BUF]] = 1
_TRACKED[[_SYNC_ALL, _NPU_BARRIER]] = 1
# Barriers: each is its block's arrival (counted as a set of its (group, block) key once it ran) and its wait for
# the round (released when every member of its group has arrived, see PipeQueues._barriers_blocked).
_BARRIERS = np.zeros(256, dtype=bool)
_BARRIERS[[_SYNC_ALL, _NPU_BARRIER]] = True
_WAITS = np.zeros(256, dtype=bool)
_WAITS[[_WAIT, _CROSS_WAIT, _SOFT_WAIT, _MSTX_WAIT, _GET_BUF]] = True

# (block, pipe) pairs, flag keys and blocks one launch may count: a block id is 16 bits and a pipe 8, so a hostile
# client could name millions of each; past this many the launch's lock-up check stops, said so.
MAX_LOCKUP_KEYS = 1 << 20
# (mode, flag, block) of FFTS sets, read in Python by each replay step that has a cross-core wait to judge.
MAX_FFTS_SET_KEYS = 1 << 16
# Barrier groups (SyncAll's block type and count of blocks, the cross-NPU barrier) of one launch, each judged in
# Python by each replay step that has a barrier pending: a kernel has a few; a hostile client could name 2^17 counts.
MAX_BARRIER_GROUPS = 1 << 10
# Sync rows waiting behind blocked waits (or for their releaser to arrive): about 64 bytes each.
MAX_PENDING_ROWS = 1 << 18
# Replay work (pending rows visited) per batch: a batch left unsettled is settled further with the next one.
BATCH_STEPS, BATCH_PASSES = 8, 8
# Replay work when the session ends with the launch open: past it the launch is not judged, said so.
FINAL_WORK = 1 << 27

LOCK_ROW = np.dtype(
    [
        ("seq", "<u8"),  # order of arrival within the launch
        ("key", "<u8"),  # what releases it, or what it releases (see _keys)
        ("serial", "<u8"),
        ("pc", "<u8"),
        ("location", "<u4"),
        ("block_id", "<u2"),
        ("event_id", "<u2"),
        ("kind", "u1"),
        ("block_type", "u1"),
        ("src", "u1"),  # wait_flag: the pipe that sets its flag; anything else: the pipe it runs on
        ("dst", "u1"),  # the pipe it runs on (a wait_flag's destination): the pipe it holds
        ("mode", "u1"),
        ("free", "u1"),  # releases it needs none of: 1 for GET_BUF, ALWAYS for an "is more" mstx wait
    ]
)
ALWAYS = 255

_S60 = np.uint64(60)
_SPACE_FLAG, _SPACE_BUF, _SPACE_SOFT, _SPACE_MSTX = (np.uint64(n) << _S60 for n in (1, 2, 3, 4))
_SPACE_FFTS_WAIT, _SPACE_FFTS_SET, _SPACE_NEVER = (np.uint64(n) << _S60 for n in (5, 6, 15))
_SPACE_SYNC_ALL, _SPACE_NPU, _SPACE_NONBLOCKING = (np.uint64(n) << _S60 for n in (7, 8, 9))
# A barrier's key: its group above bit 24, the member (the block; with its type for the cross-NPU barrier) below.
_MEMBER_MASK = np.uint64((1 << 24) - 1)
# SyncAll's count of blocks taking part, clamped: past 2^16 + 1 no launch has enough blocks, and the round never
# completes whatever the count.
_MAX_USED = (1 << 16) + 1
# NPU_BARRIER rows reported with this mode: every block of this device is at the barrier, so what holds them is
# another device of the job, not this session's records.
ANOTHER_DEVICE_MODE = 1
_S60_MASK = np.uint64(0xF) << _S60
_MSTX_ADDRESS_MASK = np.uint64((1 << 44) - 1)  # GM addresses fit; two flags differing above bit 44 would share


def instruction_name(kind: int, mode: int) -> str:
    """The stuck instruction as msSanitizer's report names it (its SyncType)."""
    if kind == _CROSS_WAIT:
        return "WAIT_INTRA_BLOCK" if mode == 4 else "WAIT_FLAG_DEV"
    if kind == _SYNC_ALL:
        return "MSTX_CROSS_CORE_BARRIER" if mode == SYNC_ALL_MSTX_BARRIER else "SYNC_ALL"
    if kind == _NPU_BARRIER:
        return "MSTX_CROSS_NPU_BARRIER" + (" (waiting on another device)" if mode == ANOTHER_DEVICE_MODE else "")
    return {_SOFT_WAIT: "IB_WAIT", _MSTX_WAIT: "MSTX_WAIT_CROSS", _GET_BUF: "GET_BUF"}.get(kind, "WAIT_FLAG")


def pipe_keys(block_type: np.ndarray, block_id: np.ndarray, pipe: np.ndarray) -> np.ndarray:
    """One u64 per (block type, block id, pipe)."""
    key = (block_type.astype(np.uint64) << np.uint64(24)) | (block_id.astype(np.uint64) << np.uint64(8))
    return key | (pipe.astype(np.uint64) & np.uint64(0xFF))


def _block_keys(rows: np.ndarray) -> np.ndarray:
    """records.block_keys of events or LOCK_ROW rows, widened to the u64 the replay's key arrays hold."""
    return block_keys(rows).astype(np.uint64)


def _keys(kind: np.ndarray, bt: np.ndarray, bid: np.ndarray, events: np.ndarray, index: np.ndarray) -> np.ndarray:
    """Each tracked record's key: a wait's names what releases it, a set's what it releases, in one space per
    protocol (top 4 bits), so that one sorted count array serves them all."""
    u = np.uint64
    pipe, dst = events["pipe"][index].astype(u), events["dst_pipe"][index].astype(u)
    eid, mode = events["event_id"][index].astype(u), events["mode"][index]
    address = events["address"][index]
    b, t = bid.astype(u), bt.astype(u)
    flag = _SPACE_FLAG | (t << u(48)) | (b << u(32)) | (pipe << u(24)) | (dst << u(16)) | eid
    buf = _SPACE_BUF | (t << u(48)) | (b << u(32)) | eid
    # a non-blocking GET_BUF waits for nothing and takes no release: not one of the buffer's gets
    buf = np.where((kind == _GET_BUF) & (mode == GET_BUF_NONBLOCK), _SPACE_NONBLOCKING | (buf & ~_S60_MASK), buf)
    soft_set = _SPACE_SOFT | (t << u(48)) | (b << u(32)) | eid
    # IB_WAIT names the block whose IB_SET it awaits; one past 16 bits names no block, and nothing releases it
    named = address & u(0xFFFF)
    soft_wait = np.where(address > 0xFFFF, _SPACE_NEVER, _SPACE_SOFT | (t << u(48)) | (named << u(32)) | eid)
    mstx = _SPACE_MSTX | ((address & _MSTX_ADDRESS_MASK) << u(16)) | eid
    intra = (mode == 4).astype(u)
    ffts_wait = _SPACE_FFTS_WAIT | (intra << u(56)) | (eid << u(32)) | (t << u(16)) | b
    sub = np.where(events["block_num"][index] >= 2, 2, 1).astype(u)
    ffts_set = _SPACE_FFTS_SET | (mode.astype(u) << u(52)) | (sub << u(48)) | (eid << u(32)) | (t << u(16)) | b
    used = np.minimum(address, u(_MAX_USED))
    sync_all = _SPACE_SYNC_ALL | (t << u(48)) | (used << u(24)) | b
    npu = _SPACE_NPU | (t << u(16)) | b
    return np.select(
        [
            kind == _SYNC_ALL,
            kind == _NPU_BARRIER,
            (kind == _WAIT) | (kind == _SET),
            (kind == _GET_BUF) | (kind == _RLS_BUF),
            kind == _SOFT_SET,
            kind == _SOFT_WAIT,
            (kind == _MSTX_SET) | (kind == _MSTX_WAIT),
            kind == _CROSS_WAIT,
        ],
        [sync_all, npu, flag, buf, soft_set, soft_wait, mstx, ffts_wait],
        ffts_set,
    ).astype(u)


def lock_rows(events: np.ndarray, index: np.ndarray, seq: np.ndarray) -> np.ndarray:
    """LOCK_ROWs of ``events[index]`` (tracked kinds only), gathered field by field."""
    rows = np.empty(index.size, dtype=LOCK_ROW)
    kind = events["kind"][index]
    bt, bid = events["block_type"][index], events["block_id"][index]
    rows["seq"] = seq[index]
    rows["kind"], rows["block_type"], rows["block_id"] = kind, bt, bid
    rows["serial"], rows["pc"], rows["location"] = (
        events["serial"][index],
        events["pc"][index],
        events["location"][index],
    )
    rows["event_id"] = events["event_id"][index]
    rows["mode"] = np.where(kind == _NPU_BARRIER, 0, events["mode"][index])  # its mode marks a report (see above)
    pipe = events["pipe"][index]
    rows["src"] = pipe
    rows["dst"] = np.where(kind == _WAIT, events["dst_pipe"][index], pipe)  # a wait_flag holds its destination
    rows["key"] = _keys(kind, bt, bid, events, index)
    more = (kind == _MSTX_WAIT) & ((rows["mode"] & 1) == 1)
    more |= (kind == _GET_BUF) & (rows["mode"] == GET_BUF_NONBLOCK)
    rows["free"] = np.where(more, ALWAYS, (kind == _GET_BUF).astype(np.uint8))
    return rows


def _merge(
    keys: np.ndarray, values: np.ndarray, new_keys: np.ndarray, new_values: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Sorted ``keys`` with ``new_keys`` (sorted, unique) added in: an existing key's value added to, a new one
    inserted in order."""
    at = np.searchsorted(keys, new_keys)
    found = at < keys.size
    found[found] = keys[at[found]] == new_keys[found]
    values[at[found]] += new_values[found]
    fresh = ~found
    if not fresh.any():  # the common case once a launch's flags have all been seen
        return keys, values
    return np.insert(keys, at[fresh], new_keys[fresh]), np.insert(values, at[fresh], new_values[fresh])


def _lookup(keys: np.ndarray, values: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """The value of each ``wanted`` key in sorted ``keys``, 0 where absent."""
    if not keys.size:
        return np.zeros(wanted.size, dtype=np.int64)
    at = np.minimum(np.searchsorted(keys, wanted), keys.size - 1)
    return np.where(keys[at] == wanted, values[at], 0).astype(np.int64)


def _exclusive_group_sums(x: np.ndarray, start: np.ndarray, group: np.ndarray) -> np.ndarray:
    """For rows sorted into groups (``group`` each row's, ``start`` each group's first row): the sum of ``x`` over
    the rows of its group before it."""
    through = np.cumsum(x, dtype=np.int64)
    return through - x - (through[start] - x[start])[group]


def _behind(held: np.ndarray, queue: np.ndarray, seq: np.ndarray, *, strictly: bool = False) -> np.ndarray:
    """Rows (in arrival order, ``queue`` each one's queue key) at or after the first ``held`` row of their queue
    (``strictly``: after it)."""
    if not held.any():
        return np.zeros(seq.size, dtype=bool)
    # rows are in arrival order, so a queue's first held row is its first in a unique's index
    queues, first = np.unique(queue[held], return_index=True)
    first_seq = seq[held][first]
    at = np.minimum(np.searchsorted(queues, queue), queues.size - 1)
    return (queues[at] == queue) & ((seq > first_seq[at]) if strictly else (seq >= first_seq[at]))


def _ranks(key: np.ndarray, seq: np.ndarray) -> np.ndarray:
    """Each row's place among the rows of its key, in arrival order."""
    order = np.lexsort((seq, key))
    sorted_key = key[order]
    start = np.ones(order.size, dtype=bool)
    start[1:] = sorted_key[1:] != sorted_key[:-1]
    index = np.arange(order.size)
    rank = np.empty(order.size, dtype=np.int64)
    rank[order] = index - np.maximum.accumulate(np.where(start, index, 0))
    return rank


class PipeQueues:
    """The lock-up replay of one launch. ``members``: blocks of each type the launch was given (its block_dim), who
    take part in an FFTS mode-0 round beside those that sent records (a mix launch: those that sent only)."""

    def __init__(self, members: dict[int, int] | None = None) -> None:
        self.members = members or {}
        self.pending = np.empty(0, dtype=LOCK_ROW)  # in arrival order
        self.set_keys = np.empty(0, dtype=np.uint64)  # sets that ran, per key
        self.set_counts = np.empty(0, dtype=np.int64)
        self.wait_keys = np.empty(0, dtype=np.uint64)  # waits that ran, per key
        self.wait_counts = np.empty(0, dtype=np.int64)
        self.present = np.empty(0, dtype=np.uint64)  # (block type, block id) of blocks that sent records
        self.last_seq = np.empty(0, dtype=np.uint64)  # of each present block, its last record's
        self.finished = np.empty(0, dtype=np.uint64)  # of blocks that finished
        self.records_ended = np.empty(0, dtype=np.uint64)  # of blocks whose records all came, run to their end or not
        self.settled = True  # nothing pending could run given what was received
        self.reported = np.empty(0, dtype=np.uint64)  # pipe keys already reported locked
        self.stopped = ""  # why the check stopped for this launch ("" while it runs)

    def add(self, events: np.ndarray, seq: np.ndarray) -> bool:
        """A batch of the launch's events (``seq`` their order of arrival). Whether some pipe may be locked now:
        the replay settled with a wait_flag holding a pipe."""
        if self.stopped or not events.size:
            return False
        self._saw(_block_keys(events), seq)
        finish = events["kind"] == _FINISH
        if finish.any():
            ends = _block_keys(events[finish])
            ended = events["mode"][finish] == BLOCK_RECORDS_ENDED
            self.finished = np.union1d(self.finished, ends[~ended])
            self.records_ended = np.union1d(self.records_ended, ends[ended])
        tracked = np.flatnonzero(_TRACKED[events["kind"]])
        if tracked.size:
            self.pending = np.concatenate((self.pending, lock_rows(events, tracked, seq)))
        if finish.any() or tracked.size:
            self._run_finished()
            self.settled = False
        elif self.settled and (self.pending["kind"] == _NPU_BARRIER).any():
            self.settled = False  # a block's later records show its cross-NPU barrier opened (_unproven_npu)
        if not self.settled:
            self.settled = self._settle(BATCH_STEPS, BATCH_PASSES)
        why = self._over_bounds()
        if why:
            self._stop(why)
            return False
        return self.settled and bool((self.pending["kind"] == _WAIT).any())

    def _saw(self, blocks: np.ndarray, seq: np.ndarray) -> None:
        """Blocks that sent records, each with its latest record's place in arrival order."""
        latest, at = np.unique(blocks[::-1], return_index=True)
        keys = np.concatenate((self.present, latest))
        last = np.concatenate((self.last_seq, seq[::-1][at]))
        order = np.lexsort((last, keys))
        keys, last = keys[order], last[order]
        final = np.ones(keys.size, dtype=bool)
        final[:-1] = keys[1:] != keys[:-1]
        self.present, self.last_seq = keys[final], last[final]

    def _over_bounds(self) -> str:
        if self.pending.size > MAX_PENDING_ROWS:
            return f"more than {MAX_PENDING_ROWS} set/wait records queued behind waits"
        if max(self.set_keys.size, self.wait_keys.size, self.present.size) > MAX_LOCKUP_KEYS:
            return f"more than {MAX_LOCKUP_KEYS} distinct blocks or sync keys"
        if int(((self.set_keys >> _S60) == (_SPACE_FFTS_SET >> _S60)).sum()) > MAX_FFTS_SET_KEYS:
            return f"more than {MAX_FFTS_SET_KEYS} distinct cross-core (FFTS) flags set by block"
        if self._barrier_groups() > MAX_BARRIER_GROUPS:
            return f"more than {MAX_BARRIER_GROUPS} distinct SyncAll block counts"
        return ""

    def _barrier_groups(self) -> int:
        space = self.set_keys >> _S60
        ran = self.set_keys[(space == _SPACE_SYNC_ALL >> _S60) | (space == _SPACE_NPU >> _S60)]
        waiting = self.pending["key"][_BARRIERS[self.pending["kind"]]]
        return np.unique(np.concatenate((ran, waiting)) & ~_MEMBER_MASK).size

    def _stop(self, why: str) -> None:
        self.stopped = why
        self.pending = self.pending[:0]
        self.set_keys, self.set_counts = self.set_keys[:0], self.set_counts[:0]
        self.wait_keys, self.wait_counts = self.wait_keys[:0], self.wait_counts[:0]
        self.present, self.last_seq = self.present[:0], self.last_seq[:0]

    def _run_finished(self) -> None:
        """A block that finished ran every instruction it sent, released or not by what we saw."""
        if not self.finished.size or not self.pending.size:
            return
        done = np.isin(_block_keys(self.pending), self.finished)
        if done.any():
            self._ran(done)

    def _ran(self, run: np.ndarray) -> None:
        rows, self.pending = self.pending[run], self.pending[~run]
        waits = _WAITS[rows["kind"]]
        for chosen, is_wait in ((rows[~waits], False), (rows[waits], True)):
            if not chosen.size:
                continue
            keys, counts = np.unique(chosen["key"], return_counts=True)
            if is_wait:
                self.wait_keys, self.wait_counts = _merge(self.wait_keys, self.wait_counts, keys, counts)
            else:
                self.set_keys, self.set_counts = _merge(self.set_keys, self.set_counts, keys, counts)

    def _settle(self, steps: int, passes: int) -> bool:
        """Run what can run, up to ``steps`` replay steps of up to ``passes`` passes each; whether it settled."""
        for _ in range(steps):
            if not self.pending.size:
                return True
            run = self._runnable(passes)
            if run is None:
                return False
            if not run.any():
                return True
            self._ran(run)
        return False

    def _runnable(self, passes: int) -> np.ndarray | None:
        """The pending rows that run now: each not behind a blocked wait of its pipe. A wait is blocked unless the
        sets of its key that ran, plus those that arrived before it and run, cover its place among its key's
        waits. None when the passes ran out before the fixpoint (nothing is taken to have run then)."""
        p = self.pending
        is_wait = _WAITS[p["kind"]]
        key = p["key"]
        base = _lookup(self.set_keys, self.set_counts, key) + np.where(
            p["free"] == ALWAYS, 1 << 40, p["free"].astype(np.int64)
        )
        ffts = is_wait & (p["kind"] == _CROSS_WAIT)
        if ffts.any():
            base[ffts] = self._ffts_rounds(key[ffts])
        done_waits = _lookup(self.wait_keys, self.wait_counts, key)
        order = np.lexsort((p["seq"], key))
        sorted_key = key[order]
        start_mask = np.ones(order.size, dtype=bool)
        start_mask[1:] = sorted_key[1:] != sorted_key[:-1]
        group = np.cumsum(start_mask) - 1
        start = np.flatnonzero(start_mask)
        pipes = pipe_keys(p["block_type"], p["block_id"], p["dst"])
        blocks = _block_keys(p)
        seq = p["seq"]
        barriers = np.flatnonzero(_BARRIERS[p["kind"]])
        rounds = _BarrierRounds(self, p[barriers]) if barriers.size else None
        unproven = self._unproven_npu(p[barriers]) if barriers.size else None
        excluded = np.zeros(p.size, dtype=bool)
        after_held = np.zeros(p.size, dtype=bool)  # strictly behind a held row: never reaches its barrier
        for _ in range(passes):
            counted_sets = (~is_wait & ~excluded)[order].astype(np.int64)
            counted_waits = (is_wait & ~excluded)[order].astype(np.int64)
            have = np.empty(p.size, dtype=np.int64)
            place = np.empty(p.size, dtype=np.int64)
            have[order] = _exclusive_group_sums(counted_sets, start, group)
            place[order] = _exclusive_group_sums(counted_waits, start, group)
            blocked = is_wait & (done_waits + place >= base + have)
            if rounds is not None and unproven is not None:
                blocked[barriers] = rounds.blocked(~after_held[barriers], in_order=True) | unproven
            now = _behind(blocked, pipes, seq)
            scalar = blocked & (p["dst"] == _S)
            if scalar.any():  # PIPE_S issues the block's every instruction: held, it holds them all
                now |= _behind(scalar, blocks, seq)
            if np.array_equal(now, excluded):
                return ~excluded
            excluded = now
            if rounds is not None:
                after_held = _behind(blocked, pipes, seq, strictly=True) | _behind(scalar, blocks, seq, strictly=True)
        return None

    def _unproven_npu(self, rows: np.ndarray) -> np.ndarray:
        """Cross-NPU barriers (of barrier ``rows``) not known to have opened: its partners are on other devices, so
        only the block's own later records (or its records ending with the kernel's, as msSanitizer's replay lets
        the barrier go once this device's blocks are there) show that it did."""
        npu = rows["kind"] == _NPU_BARRIER
        if not npu.any():
            return npu
        blocks = _block_keys(rows)
        at = np.minimum(np.searchsorted(self.present, blocks), max(self.present.size - 1, 0))
        later = (self.present[at] == blocks) & (self.last_seq[at] > rows["seq"])
        return npu & ~later & ~np.isin(blocks, self.records_ended)

    def group_size(self, group: int) -> tuple[int, int | None]:
        """How many blocks a barrier group needs each round, and the block ids below which a block of it takes part
        (None: any). SyncAll: its first ``used`` blocks, or every block of its type the launch was given or that
        sent records; the cross-NPU barrier: this device's share, every block of the launch."""
        given = self.members
        if (group >> 60) == int(_SPACE_SYNC_ALL >> _S60):
            block_type, used = (group >> 48) & 0xFF, (group >> 24) & 0x1FFFF
            if used:
                return used, used
            of_type = self.present[(self.present >> np.uint64(16)) == block_type] & np.uint64(0xFFFF)
            return given.get(block_type, 0) + int((of_type >= given.get(block_type, 0)).sum()), None
        types, ids = self.present >> np.uint64(16), self.present & np.uint64(0xFFFF)
        beyond = sum(int(((types == t) & (ids >= given.get(t, 0))).sum()) for t in np.unique(types).tolist())
        return sum(given.values()) + beyond, None

    def _ffts_rounds(self, wait_keys: np.ndarray) -> np.ndarray:
        """Rounds of FFTS sets that ran targeting each CROSS_WAIT key's block (detectors/_rendezvous.py's rules).
        Plain Python over the distinct keys and the FFTS set keys (at most MAX_FFTS_SET_KEYS): cross-core syncs
        are few."""
        in_space = (self.set_keys >> _S60) == (_SPACE_FFTS_SET >> _S60)
        counts: dict[tuple[int, int, int, int, int], int] = {}  # (mode, sub, flag, type, id) -> sets that ran
        mode0: dict[tuple[int, int], dict[int, int]] = {}  # (flag, type) -> mode-0 sets that ran per block
        for k, n in zip(self.set_keys[in_space].tolist(), self.set_counts[in_space].tolist(), strict=True):
            mode, flag, bt, bid = (k >> 52) & 0xFF, (k >> 32) & 0xFFFF, (k >> 16) & 0xFFFF, k & 0xFFFF
            counts[(mode, (k >> 48) & 0xF, flag, bt, bid)] = n
            if mode == 0:
                per_block = mode0.setdefault((flag, bt), {})
                per_block[bid] = per_block.get(bid, 0) + n
        unique, inverse = np.unique(wait_keys, return_inverse=True)
        rounds = [self._ffts_round(int(k), counts, mode0) for k in unique.tolist()]
        return np.array(rounds, dtype=np.int64)[inverse]

    def _ffts_round(
        self,
        key: int,
        counts: dict[tuple[int, int, int, int, int], int],
        mode0: dict[tuple[int, int], dict[int, int]],
    ) -> int:
        intra, flag, bt, bid = (key >> 56) & 1, (key >> 32) & 0xFFFF, (key >> 16) & 0xFFFF, key & 0xFFFF

        def sets(mode: int, sub: int, block_type: int, block: int) -> int:
            return counts.get((mode, sub, flag, block_type, block), 0)

        total = 0
        if not intra:
            # a mode-0 round: every member of the type set once more; the members are the blocks of the type the
            # launch was given and any other that sent records, so the setters must number as many
            given = self.members.get(bt, 0)
            of_type = self.present[(self.present >> np.uint64(16)) == bt] & np.uint64(0xFFFF)
            members = given + int((of_type >= given).sum())
            per_block = mode0.get((flag, bt), {})
            if members and len(per_block) >= members:
                total += min(per_block.values())
            first = bid - bid % 2
            sent = self.present == np.array([(bt << 16) | first, (bt << 16) | first + 1], dtype=np.uint64)[:, None]
            pair = [b for b, there in zip((first, first + 1), sent.any(axis=1).tolist(), strict=True) if there] or [bid]
            total += min(sets(1, 2, bt, b) for b in pair) + sets(1, 1, bt, bid)
        for mode in (4,) if intra else (2,):
            if bt == _AIV:  # released by its AI core's cube
                total += sets(mode, 2, _AIC, bid // 2) + sets(mode, 1, _AIC, bid)
            elif bt == _AIC:  # released once each of its vector sub-blocks has set
                total += min(sets(mode, 2, _AIV, 2 * bid), sets(mode, 2, _AIV, 2 * bid + 1)) + sets(mode, 1, _AIV, bid)
        return total

    def fronts(self) -> np.ndarray:
        """The wait holding each held pipe, in arrival order: each pipe's first pending row, unless it came after
        its block's PIPE_S was held (the scalar never issued it: the pipe is not stuck on its own)."""
        p = self.pending
        if not p.size:
            return p
        _, first = np.unique(pipe_keys(p["block_type"], p["block_id"], p["dst"]), return_index=True)
        front = p[np.sort(first)]
        scalar = front["dst"] == _S
        if scalar.any():
            blocks = _block_keys(front)
            front = front[~(_behind(scalar, blocks, front["seq"]) & ~scalar)]
        return front

    def stuck(self) -> np.ndarray:
        """The wait holding each stuck pipe, once the replay has settled over everything received (the launch's
        session ended). If it cannot settle within FINAL_WORK, the check stops, said so, and nothing is stuck."""
        if self.stopped:
            return self.pending[:0]
        if not self.settled:
            steps = max(1, FINAL_WORK // max(self.pending.size * 16, 1))
            self.settled = self._settle(steps, 16)
            if not self.settled:
                self._stop(f"its set/wait replay did not settle within {FINAL_WORK} steps")
                return self.pending[:0]
        return self._another_device(self.fronts())

    def _another_device(self, front: np.ndarray) -> np.ndarray:
        """``front`` with each cross-NPU barrier that every block of this launch has reached marked
        ANOTHER_DEVICE_MODE: what holds it is another device of the job, not this session's records."""
        npu = front["kind"] == _NPU_BARRIER
        if not npu.any():
            return front
        p = self.pending
        barriers = p[_BARRIERS[p["kind"]]]
        there = np.isin(barriers["seq"], front["seq"])
        complete = ~_BarrierRounds(self, barriers).blocked(there, in_order=False)
        remote = np.isin(front["seq"], barriers["seq"][complete & (barriers["kind"] == _NPU_BARRIER)])
        front = front.copy()
        front["mode"][remote] = ANOTHER_DEVICE_MODE
        return front

    def stuck_at_end(self) -> np.ndarray:
        """At the kernel's end: the stuck pipes of blocks whose records ended without saying the block ran to its end
        (``BLOCK_RECORDS_ENDED``). A block that said it finished, or said nothing, is left to the unpaired check."""
        held = self.stuck()
        if not held.size:
            return held
        return held[np.isin(_block_keys(held), self.records_ended)]

    def locked(self) -> np.ndarray:
        """Pipes held by a wait_flag whose setter pipe is held by a wait_flag too, to a fixpoint: what remains
        waits on itself, on a cycle, or on a chain into one, and nothing left in the block can set its flag."""
        held = self.fronts()
        held = held[held["kind"] == _WAIT]
        while held.size:
            waiting = pipe_keys(held["block_type"], held["block_id"], held["dst"])
            setter = pipe_keys(held["block_type"], held["block_id"], held["src"])
            keep = np.isin(setter, waiting)
            if keep.all():
                break
            held = held[keep]
        return held

    def unreported(self, rows: np.ndarray) -> np.ndarray:
        """Of ``rows`` (waits holding pipes), those not reported yet; they count as reported from now on."""
        keys = pipe_keys(rows["block_type"], rows["block_id"], rows["dst"])
        new = ~np.isin(keys, self.reported)
        self.reported = np.union1d(self.reported, keys[new])
        return rows[new]


class _BarrierRounds:
    """The rounds of the pending barrier rows of one replay step: a block's k-th barrier of a group (counting
    those that ran) waits for the group's k-th round, which completes once every member has run its k-th barrier
    of the group or stands at it. Rounds whose every member's barriers of it lead its PIPE_S queue (or ran) complete
    in the step whatever the order they came in: a block-by-block stream settles its SyncAlls in one step."""

    def __init__(self, queues: PipeQueues, rows: np.ndarray) -> None:
        lead_keys, lead_counts = _leading_barriers(queues.pending)
        key = rows["key"]
        self.seq = rows["seq"]
        self.round = _lookup(queues.set_keys, queues.set_counts, key) + _ranks(key, self.seq)
        groups, self.group = np.unique(key & ~_MEMBER_MASK, return_inverse=True)
        member = key & _MEMBER_MASK
        self.needed = np.empty(groups.size, dtype=np.int64)
        self.ran = np.zeros(rows.size, dtype=np.int64)  # members of the row's group that ran past its round
        self.takes_part = np.ones(rows.size, dtype=bool)
        self.settled = np.zeros(groups.size, dtype=np.int64)  # rounds of each group complete in this step for sure
        for i, g in enumerate(groups.tolist()):  # per group: a launch has a few
            self.needed[i], below = queues.group_size(g)
            in_group = self.group == i
            ran_keys, counts = _in_group(queues.set_keys, queues.set_counts, g, below)
            if below is not None:
                self.takes_part[in_group] = member[in_group] < np.uint64(below)
            leading = _in_group(lead_keys, lead_counts, g, below)
            self.settled[i] = _settled_rounds(ran_keys, counts, *leading, int(self.needed[i]))
            counts = np.sort(counts)
            self.ran[in_group] = counts.size - np.searchsorted(counts, self.round[in_group], side="right")
        self.group_round = self.group.astype(np.int64) * (int(self.round.max()) + 1) + self.round

    def blocked(self, arrived: np.ndarray, *, in_order: bool) -> np.ndarray:
        """Rows whose round has not completed, given the rows that stand at their barrier (``arrived``);
        ``in_order``: a member's arrival counts for rows that came after it only (within one replay step, so that
        what a barrier releases cannot have released the barrier itself; a later step counts it as run)."""
        at_barrier = arrived & self.takes_part
        # a sentinel round no row has, so that every row finds one
        rounds, index = np.unique(np.append(self.group_round[at_barrier], -1), return_inverse=True)
        latest = np.zeros(rounds.size, dtype=np.uint64)
        np.maximum.at(latest, index[:-1], self.seq[at_barrier])
        count = np.bincount(index[:-1], minlength=rounds.size)
        at = np.searchsorted(rounds, self.group_round)
        at = np.where((at < rounds.size) & (rounds[np.minimum(at, rounds.size - 1)] == self.group_round), at, 0)
        complete = self.ran + count[at] >= self.needed[self.group]
        ahead = self.round < self.settled[self.group]
        if in_order:
            complete &= latest[at] <= self.seq
        return ~(complete | ahead)


def _in_group(keys: np.ndarray, values: np.ndarray, group: int, below: int | None) -> tuple[np.ndarray, np.ndarray]:
    """Of sorted barrier ``keys`` (and their ``values``), those of ``group`` whose member takes part (its id below
    ``below``, if given)."""
    lo = int(np.searchsorted(keys, np.uint64(group), "left"))
    hi = int(np.searchsorted(keys, np.uint64(group | int(_MEMBER_MASK)), "right"))
    keys, values = keys[lo:hi], values[lo:hi]
    if below is not None:
        part = (keys & _MEMBER_MASK) < np.uint64(below)
        keys, values = keys[part], values[part]
    return keys, values


def _leading_barriers(pending: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per block whose PIPE_S queue begins with a barrier: that barrier's key and how many barriers of the same key
    lead the queue (sorted by key). Each of them is reached once the rounds before it complete."""
    scalar = pending[pending["dst"] == _S]  # in arrival order
    blocks = _block_keys(scalar)
    order = np.argsort(blocks, kind="stable")
    blocks, key, kind = blocks[order], scalar["key"][order], scalar["kind"][order]
    first = np.ones(blocks.size, dtype=bool)
    first[1:] = blocks[1:] != blocks[:-1]
    index = np.arange(blocks.size)
    head = np.maximum.accumulate(np.where(first, index, 0))
    other = ~(_BARRIERS[kind] & (key == key[head]))  # not a barrier of the key the block's queue begins with
    through = np.cumsum(other)
    leading = through == (through - other)[head]  # no other row from the block's first up to this one
    counts = np.bincount(np.cumsum(first)[leading] - 1, minlength=int(first.sum()))
    keys = key[first]
    keep = counts > 0
    order = np.argsort(keys[keep])
    return keys[keep][order], counts[keep][order].astype(np.int64)


def _settled_rounds(ran_keys: np.ndarray, ran: np.ndarray, lead_keys: np.ndarray, lead: np.ndarray, needed: int) -> int:
    """Rounds of a group complete for sure: each member has run or leads its queue with that many barriers of it."""
    members, index = np.unique(np.concatenate((ran_keys, lead_keys)), return_inverse=True)
    if members.size < needed or not members.size:
        return 0
    return int(np.bincount(index, weights=np.concatenate((ran, lead)).astype(np.float64)).min())
