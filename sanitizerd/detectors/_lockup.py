"""Which pipes of a running kernel launch are locked up on a wait_flag (msSanitizer's 算子卡死 check, its master of
Aug 2026), from the records received so far.

A pipe is *stuck* when its last record is a ``wait_flag`` that no record received sets (over the launch, its
``(block, src, dst, event id)`` has more waits than sets), in a block that has not finished. A stuck pipe may still
be released later, by a set its source pipe has yet to issue; it is *locked* for certain when that source pipe is
itself stuck, waiting (directly or along a chain) on a pipe that is stuck too: nothing left in the block can set
the flag. ``PipeTails.locked`` finds those (the daemon reports them while the kernel runs); ``PipeTails.stuck`` is
every stuck pipe, reported when the launch's session ends without the kernel ending (Ctrl-C, a killed program).

msSanitizer's hooks send a block's records once the kernel stopped, whether it ran to its end or its runtime's
timeout killed it, and end them with a BLOCK_FINISH of their own: such a block (``BLOCK_RECORDS_ENDED``) has not
finished here, and ``PipeTails.stuck_at_end`` is its stuck pipes, locked up at the kernel's end as msSanitizer's
replay finds them at KERNEL_FINISH (a pipe that ran to its end cannot have stopped on a wait nothing set).

State per launch: the last record of each (block, pipe) and the balance of sets and waits per flag, both sorted
key arrays updated per batch without a Python step per record, each bounded by MAX_LOCKUP_KEYS entries.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from sanitizerd_protocol.records import BLOCK_RECORDS_ENDED, EventKind

# plain ints: numpy compares an IntEnum through Python's enum machinery, on every batch
_WAIT, _SET, _FINISH = int(EventKind.WAIT_FLAG), int(EventKind.SET_FLAG), int(EventKind.BLOCK_FINISH)
_RECORDS_ENDED = BLOCK_RECORDS_ENDED
# (block, pipe) tails and (block, src, dst, event id) flags one launch may track: a block id is 16 bits and a pipe
# 8, so a hostile client could name millions of each; past this many the launch's lock-up check stops, said so.
MAX_LOCKUP_KEYS = 1 << 20


def pipe_keys(block_type: np.ndarray, block_id: np.ndarray, pipe: np.ndarray) -> np.ndarray:
    """One u64 per (block type, block id, pipe)."""
    key = (block_type.astype(np.uint64) << np.uint64(24)) | (block_id.astype(np.uint64) << np.uint64(8))
    return key | (pipe.astype(np.uint64) & np.uint64(0xFF))


def flag_keys(rows: np.ndarray) -> np.ndarray:
    """One u64 per (block type, block id, src pipe, dst pipe, event id): what a wait_flag pairs with."""
    key = (rows["block_type"].astype(np.uint64) << np.uint64(48)) | (
        rows["block_id"].astype(np.uint64) << np.uint64(32)
    )
    key |= (rows["src"].astype(np.uint64) << np.uint64(24)) | (rows["dst"].astype(np.uint64) << np.uint64(16))
    return key | rows["event_id"].astype(np.uint64)


def _merge(
    keys: np.ndarray, values: np.ndarray, new_keys: np.ndarray, new_values: np.ndarray, *, add: bool
) -> tuple[np.ndarray, np.ndarray]:
    """Sorted ``keys`` with ``new_keys`` (sorted, unique) merged in: an existing key's value replaced (or added to,
    ``add``), a new one inserted in order."""
    at = np.searchsorted(keys, new_keys)
    found = at < keys.size
    found[found] = keys[at[found]] == new_keys[found]
    if add:
        values[at[found]] += new_values[found]
    else:
        values[at[found]] = new_values[found]
    fresh = ~found
    if not fresh.any():  # the common case once a launch's pipes have all been seen
        return keys, values
    return np.insert(keys, at[fresh], new_keys[fresh]), np.insert(values, at[fresh], new_values[fresh])


class PipeTails:
    """The lock-up state of one launch, in synccheck's rows (SYNC_ROW: ``slot`` the pipe a record holds)."""

    def __init__(self, row_dtype: np.dtype) -> None:
        self.tail_keys = np.empty(0, dtype=np.uint64)
        self.tails = np.empty(0, dtype=row_dtype)
        self.flag_keys = np.empty(0, dtype=np.uint64)
        self.balance = np.empty(0, dtype=np.int64)  # sets minus waits of each flag
        self.finished = np.empty(0, dtype=np.uint64)  # (block type, block id) of blocks that finished
        self.records_ended = np.empty(0, dtype=np.uint64)  # blocks whose records all came, run to their end or not
        self.reported = np.empty(0, dtype=np.uint64)  # pipe keys already reported locked
        self.stopped = ""  # why the check stopped for this launch ("" while it runs)

    def add(self, events: np.ndarray, syncs: np.ndarray, rows_of: Callable[[np.ndarray], np.ndarray]) -> bool:
        """A batch: its ``events``, synccheck's rows of its set_flag/wait_flag (``syncs``), and ``rows_of`` making
        the rows of chosen events (only each pipe's last is made: most records are not syncs). Whether a pipe may
        have become stuck: only a pipe whose last record is now a wait can, and a pipe waiting on it can become
        locked only then too."""
        if self.stopped or not events.size:
            return False
        kind = events["kind"]
        finish = kind == _FINISH
        if finish.any():
            ends = (events["block_type"][finish].astype(np.uint64) << np.uint64(16)) | events["block_id"][finish]
            ended = events["mode"][finish] == _RECORDS_ENDED
            self.finished = np.union1d(self.finished, ends[~ended])
            self.records_ended = np.union1d(self.records_ended, ends[ended])
        slot = np.where(kind == _WAIT, events["dst_pipe"], events["pipe"])  # a wait holds its destination pipe
        keys = pipe_keys(events["block_type"], events["block_id"], slot)
        # the last record of each (block, pipe) in the batch: unique over the batch reversed takes the last
        last_keys, last_from_end = np.unique(keys[::-1], return_index=True)
        last_rows = rows_of(events.size - 1 - last_from_end)
        self.tail_keys, self.tails = _merge(self.tail_keys, self.tails, last_keys, last_rows, add=False)
        if syncs.size:
            synced = syncs
            new_keys, inverse = np.unique(flag_keys(synced), return_inverse=True)
            weight = np.where(synced["kind"] == _SET, 1, -1)
            sums = np.bincount(inverse, weights=weight, minlength=new_keys.size).astype(np.int64)
            self.flag_keys, self.balance = _merge(self.flag_keys, self.balance, new_keys, sums, add=True)
        if max(self.tail_keys.size, self.flag_keys.size) > MAX_LOCKUP_KEYS:
            self.stopped = f"more than {MAX_LOCKUP_KEYS} distinct (block, pipe) or (block, flag) pairs"
            self.tail_keys, self.tails = self.tail_keys[:0], self.tails[:0]
            self.flag_keys, self.balance = self.flag_keys[:0], self.balance[:0]
            return False
        return bool((last_rows["kind"] == _WAIT).any())

    def stuck(self) -> np.ndarray:
        """The last record of every stuck pipe: a wait_flag nothing received sets, in a block not finished."""
        waits = self.tails[self.tails["kind"] == _WAIT]
        if not waits.size:
            return waits
        blocks = (waits["block_type"].astype(np.uint64) << np.uint64(16)) | waits["block_id"]
        waits = waits[~np.isin(blocks, self.finished)]
        at = np.searchsorted(self.flag_keys, flag_keys(waits))
        # every wait counted its own flag, so its key is there
        return waits[self.balance[at] < 0]

    def stuck_at_end(self) -> np.ndarray:
        """At the kernel's end: the stuck pipes of blocks whose records ended without saying the block ran to its end
        (``BLOCK_RECORDS_ENDED``). A block that said it finished, or said nothing, is left to the unpaired check."""
        held = self.stuck()
        if not held.size:
            return held
        blocks = (held["block_type"].astype(np.uint64) << np.uint64(16)) | held["block_id"]
        return held[np.isin(blocks, self.records_ended)]

    def locked(self) -> np.ndarray:
        """The stuck pipes whose flag nothing left can set: each waits on a pipe of its block that is locked too."""
        held = self.stuck()
        while held.size:
            waiting = pipe_keys(held["block_type"], held["block_id"], held["slot"])
            setter = pipe_keys(held["block_type"], held["block_id"], held["src"])
            keep = np.isin(setter, waiting)
            if keep.all():
                break
            held = held[keep]
        return held

    def unreported(self, rows: np.ndarray) -> np.ndarray:
        """Of ``rows`` (stuck tails), those not reported yet; they count as reported from now on."""
        keys = pipe_keys(rows["block_type"], rows["block_id"], rows["slot"])
        new = ~np.isin(keys, self.reported)
        self.reported = np.union1d(self.reported, keys[new])
        return rows[new]
