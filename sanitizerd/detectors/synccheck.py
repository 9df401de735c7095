"""synccheck: unpaired set_flag, redundant set_flag / wait_flag (reference §2.3).

Two deliberate departures from msSanitizer (docs/design.md): state is kept per block and block type (its
redundancy table is shared by all cores, so interleaved cores overwrite each other's slots), and event ids are
compared whole (it masks them to 4 bits, so ids 0 and 16 pair).

Both checks are vectorised. Pairing is order-independent multiset matching in which a wait consumes the
oldest pending set, so the sets left unpaired at the end are always the last ``sets - waits`` of their key.
Redundancy compares each sync event with the previous event that touched the same (block, pipe) slot; a
batch is checked with one sort, and each slot's last event is carried into the next batch.
"""

from __future__ import annotations

import numpy as np

from sanitizerd.detectors._lockup import PipeQueues, instruction_name
from sanitizerd.detectors._simt import SimtSections, divergence_findings
from sanitizerd.detectors._sites import MAX_KERNEL_FINDINGS, fold_capped, left_out_text
from sanitizerd.detectors.base import KernelLaunch, SessionContext
from sanitizerd.detectors.registry import register
from sanitizerd_protocol.messages import HostOp
from sanitizerd_protocol.model import Finding
from sanitizerd_protocol.records import BlockType, EventKind, block_type_name, pipe_name

SYNC_ROW = np.dtype(
    [
        ("seq", "<u8"),  # order of arrival within the kernel
        ("kind", "u1"),
        ("block_type", "u1"),
        ("block_id", "<u2"),
        ("slot", "u1"),  # the pipe whose slot the event touches
        ("src", "u1"),
        ("dst", "u1"),
        ("event_id", "<u2"),
        ("serial", "<u8"),
        ("pc", "<u8"),
        ("location", "<u4"),
    ]
)
_SET, _WAIT = EventKind.SET_FLAG, EventKind.WAIT_FLAG


def _given_blocks(launch: KernelLaunch | None) -> dict[int, int]:
    """Blocks of each type a launch was given, all of which take part in an FFTS mode-0 round; a mix launch's
    vector count depends on its sub-blocks, so only the blocks that send records count there."""
    if launch is None or launch.kernel_type not in ("aiv", "aic"):
        return {}
    return {int(BlockType.AIC if launch.kernel_type == "aic" else BlockType.AIV): launch.block_dim}


def _rows(events: np.ndarray, index: np.ndarray, seq: np.ndarray) -> np.ndarray:
    """Rows for ``events[index]``, gathered field by field (a structured selection copies far more slowly)."""
    rows = np.empty(index.size, dtype=SYNC_ROW)
    kind = events["kind"][index]
    rows["seq"] = seq[index]
    rows["kind"] = kind
    rows["block_type"] = events["block_type"][index]
    rows["block_id"] = events["block_id"][index]
    # A set occupies its source pipe's slot, a wait its destination's; anything else the pipe it runs on.
    rows["src"] = events["pipe"][index]
    rows["dst"] = events["dst_pipe"][index]
    rows["slot"] = np.where(kind == _WAIT, rows["dst"], rows["src"])
    rows["event_id"] = events["event_id"][index]
    rows["serial"] = events["serial"][index]
    rows["pc"] = events["pc"][index]
    rows["location"] = events["location"][index]
    return rows


# A slot's key and an event's order packed in one u64, so one sort orders events by slot, then time:
# block type (2 bits) | block id (16) | pipe (8) | sequence number within the kernel (37 bits).
_SEQ_BITS = np.uint64(37)
_SEQ_MASK = np.uint64((1 << 37) - 1)


def _slot_keys(block_type: np.ndarray, block_id: np.ndarray, pipe: np.ndarray, seq: np.ndarray) -> np.ndarray:
    slot = (block_type.astype(np.uint64) << np.uint64(24)) | (block_id.astype(np.uint64) << np.uint64(8))
    slot |= pipe.astype(np.uint64) & np.uint64(0xFF)
    return (slot << _SEQ_BITS) | (seq & _SEQ_MASK)


# A kernel's syncs are held until it ends, to pair them; every COMPACT_SYNCS more, the pairs already matched are
# dropped (what is left pairs exactly as the whole would). What remains unmatched is bounded by MAX_HELD_SYNCS rows,
# and the redundant ones by as many: past that the kernel's check stops, and a finding says so.
COMPACT_SYNCS = 1 << 20
MAX_HELD_SYNCS = 1 << 22


def _pairing(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Rows in program order, paired per (block, pipes, event id): (order, is_set in that order, each row's group,
    sets minus waits per group). Waits consume the oldest pending sets, whatever came first."""
    # The pairing key packed in one u64 (block type 2 bits, block 16, pipes 8 each, event id 16); a stable sort
    # groups each key's sets and waits and keeps them in program order.
    key = (rows["block_type"].astype(np.uint64) << np.uint64(48)) | (
        rows["block_id"].astype(np.uint64) << np.uint64(32)
    )
    key |= (rows["src"].astype(np.uint64) << np.uint64(24)) | (rows["dst"].astype(np.uint64) << np.uint64(16))
    key |= rows["event_id"].astype(np.uint64)
    order = np.argsort(key, kind="stable")
    key, is_set = key[order], rows["kind"][order] == _SET
    change = np.ones(key.size, dtype=bool)
    change[1:] = key[1:] != key[:-1]
    group = np.cumsum(change) - 1
    balance = np.bincount(group, weights=is_set).astype(np.int64) - np.bincount(group, weights=~is_set).astype(np.int64)
    return order, is_set, group, balance


def _last_of_each(group: np.ndarray, chosen: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """Of the ``chosen`` rows (grouped, in program order within each group), the last ``keep[group]`` of each."""
    through = np.cumsum(chosen)  # chosen rows up to and including each row
    change = np.ones(group.size, dtype=bool)
    change[1:] = group[1:] != group[:-1]
    before_group = (through - chosen)[np.flatnonzero(change)][group]
    total = np.bincount(group, weights=chosen).astype(np.int64)
    after = total[group] - (through - before_group)
    return chosen & (after < keep[group])


def _same(rows: np.ndarray, a: np.ndarray, b: np.ndarray, fields: tuple[str, ...]) -> np.ndarray:
    same = np.ones(a.size, dtype=bool)
    for name in fields:
        same &= rows[name][a] == rows[name][b]
    return same


@register("synccheck")
class Synccheck:
    name = "synccheck"

    def __init__(self, context: SessionContext) -> None:
        self.context = context
        self.kernel: KernelLaunch | None = None
        self._reset()

    def _reset(self) -> None:
        self.seen = 0
        self.pairs: list[np.ndarray] = []  # the kernel's sets and waits not yet known to pair
        self.held = 0  # rows in pairs
        self.compact_at = COMPACT_SYNCS
        self.slots = np.empty(0, dtype=SYNC_ROW)  # last event per (block, slot) so far
        self.redundant: list[np.ndarray] = []
        self.redundant_held = 0
        self.stopped = ""  # why this kernel's check stopped ("" while it runs)
        self._room = MAX_KERNEL_FINDINGS  # sites the kernel's report may still give
        self._left_out = [0, 0]  # sites, and their occurrences, past that
        self.tails = PipeQueues(_given_blocks(self.kernel))  # the launch's waits replayed per pipe: lock-ups
        self.early: list[Finding] = []  # lock-ups found while the kernel runs, for the session to report at once
        self.simt = SimtSections()  # the launch's SIMT sections, for their __syncthreads() (detectors/_simt.py)

    def kernel_begin(self, launch: KernelLaunch) -> None:
        self.kernel = launch
        self._reset()

    def check(self, events: np.ndarray) -> None:
        self.simt.feed(events)
        if self.stopped:
            return
        kind = events["kind"]
        is_sync = (kind == _SET) | (kind == _WAIT)
        seq = np.arange(self.seen, self.seen + events.size, dtype=np.uint64)
        self.seen += events.size
        syncs = _rows(events, np.flatnonzero(is_sync), seq) if is_sync.any() else self.slots[:0]
        if self.tails.add(events, seq):
            self._lockups(self.tails.locked())
        if syncs.size:
            self.pairs.append(syncs)
            self.held += syncs.size
            if self.held >= self.compact_at:
                self._compact_pairs()
        if not (syncs.size or self.slots.size):
            return  # nothing to be redundant with: the erasers in this batch cannot matter
        erase = (kind <= EventKind.WRITE) | (kind == EventKind.CROSS_SET) | (kind == EventKind.CROSS_WAIT)
        erasers = np.sort(
            _slot_keys(events["block_type"][erase], events["block_id"][erase], events["pipe"][erase], seq[erase])
        )
        self._find_redundant(np.concatenate((self.slots, syncs)), erasers)

    def _find_redundant(self, rows: np.ndarray, erasers: np.ndarray) -> None:
        """Each sync against the previous sync of its (block, slot); redundant when identical and no eraser of
        that slot came between. Only sync rows are sorted: erasers are sorted keys, searched per sync."""
        keys = _slot_keys(rows["block_type"], rows["block_id"], rows["slot"], rows["seq"])
        order = np.argsort(keys)
        rows, keys = rows[order], keys[order]
        group = keys >> _SEQ_BITS
        erasers_before = np.searchsorted(erasers, keys)
        here, before = np.arange(1, rows.size), np.arange(0, rows.size - 1)
        nothing_between = erasers_before[here] == erasers_before[before]
        repeat = (group[here] == group[before]) & nothing_between
        repeat &= _same(rows, here, before, ("kind", "src", "dst", "event_id"))
        hit = np.zeros(rows.size, dtype=bool)
        hit[here[repeat]] = True
        hit[before[repeat]] = True  # may be a row carried from the last batch; kernel_end dedupes by seq
        if hit.any():
            self.redundant.append(rows[hit])
            self.redundant_held += int(hit.sum())
            if self.redundant_held > MAX_HELD_SYNCS:
                self._stop(f"more than {MAX_HELD_SYNCS} redundant set_flag/wait_flag rows")
                return
        # Carry each slot's last sync into the next batch, unless work on that slot followed it here.
        last = np.ones(rows.size, dtype=bool)
        last[:-1] = group[1:] != group[:-1]
        end_of_slot = np.searchsorted(erasers, (group << _SEQ_BITS) | _SEQ_MASK)
        self.slots = rows[last & (end_of_slot == erasers_before)]

    def take_early(self) -> list[Finding]:
        """Findings made while the kernel runs (a lock-up), handed over once: the session reports them at once."""
        early, self.early = self.early, []
        return early

    def _lockups(self, locked: np.ndarray) -> None:
        """A report of the locked pipes not reported yet (msSanitizer's ``kernel locked up at`` block, one finding
        per site: ``dst_pipe`` the locked pipe, ``pipe`` the one whose set_flag it waits for (a wait of another
        kind: the locked pipe too), ``detail`` the stuck instruction's name)."""
        rows = self.tails.unreported(locked)
        if not rows.size:
            return
        room, left_out = self._room, self._left_out
        self._room, self._left_out = MAX_KERNEL_FINDINGS, [0, 0]
        found = self._findings("kernel_locked_up", rows, named=True)
        if self._left_out[0]:
            found.append(self._kernel_error(left_out_text("synccheck", *self._left_out)))
        self._room, self._left_out = room, left_out
        found.sort(key=lambda f: f.serial)
        self.early.extend(found)

    def _kernel_error(self, detail: str) -> Finding:
        """An internal_error of the running kernel: what synccheck could not check of it, and why."""
        launch = self.kernel
        return self.context.finding("internal_error", kernel=launch.name if launch else None, space="", detail=detail)

    def _at_end_lockups(self) -> list[Finding]:
        self._lockups(self.tails.stuck_at_end())
        return self.take_early()

    def _cut_short(self) -> list[Finding]:
        """The session ended while its kernel ran (Ctrl-C, the program killed or crashed) with pipes stuck on a
        wait: each is reported locked up, from the records received, as msSanitizer reports them once the
        kernel is killed. Whether sets are unpaired cannot be judged of a kernel that never reached its end."""
        self._lockups(self.tails.stuck())
        found = self.take_early()
        self.kernel = None
        self._reset()
        return found

    def kernel_end(self) -> list[Finding]:
        simt = divergence_findings(self.context, self.kernel.name if self.kernel else None, self.simt)
        if self.stopped:
            findings = [
                self._kernel_error(
                    f"synccheck stopped checking this kernel after {self.seen} events: {self.stopped}; its "
                    "set_flag/wait_flag pairs are not reported"
                )
            ]
        else:
            # A kernel of msSanitizer's hooks may have ended by its runtime's timeout: its stuck pipes are locked up.
            locked_up = [] if self.tails.stopped else self._at_end_lockups()
            self._room, self._left_out = MAX_KERNEL_FINDINGS, [0, 0]
            findings = locked_up + self._unpaired() + self._redundant()
            findings.sort(key=lambda f: f.serial)
            if self._left_out[0]:
                findings.append(self._kernel_error(left_out_text("synccheck", *self._left_out)))
        self.kernel = None
        self._reset()
        return findings + simt

    def _stop(self, why: str) -> None:
        self.stopped = why
        self.pairs, self.redundant, self.slots = [], [], self.slots[:0]
        self.held = self.redundant_held = 0

    def _compact_pairs(self) -> None:
        """Keep what may still be left unpaired: per key, the last (sets - waits) sets, or (waits - sets) waits.
        Later rows then pair with these exactly as with the whole history."""
        rows = np.concatenate(self.pairs)
        order, is_set, group, balance = _pairing(rows)
        keep = _last_of_each(group, is_set, np.maximum(balance, 0)) | _last_of_each(
            group, ~is_set, np.maximum(-balance, 0)
        )
        kept = rows[np.sort(order[keep])]  # back in program order
        self.pairs, self.held = [kept], kept.size
        self.compact_at = max(COMPACT_SYNCS, 2 * kept.size)
        if kept.size > MAX_HELD_SYNCS:
            self._stop(f"more than {MAX_HELD_SYNCS} set_flag/wait_flag left unpaired at once")

    def _unpaired(self) -> list[Finding]:
        if not self.pairs:
            return []
        rows = np.concatenate(self.pairs)  # in program order
        order, is_set, group, balance = _pairing(rows)
        # Waits consume the oldest pending sets, so the sets left over are the last (sets - waits) of each key.
        left = order[_last_of_each(group, is_set, np.maximum(balance, 0))]
        return self._findings("unpaired_set_flag", rows[left])

    def _redundant(self) -> list[Finding]:
        if not self.redundant:
            return []
        rows = np.concatenate(self.redundant)
        rows = rows[np.unique(rows["seq"], return_index=True)[1]]
        sets = rows["kind"] == _SET
        return self._findings("redundant_set_flag", rows[sets]) + self._findings("redundant_wait_flag", rows[~sets])

    def _findings(self, kind: str, rows: np.ndarray, *, named: bool = False) -> list[Finding]:
        """One finding per site; ``named``: lock-up rows (detectors/_lockup.py's LOCK_ROW), whose instruction's
        name is the finding's detail."""
        launch = self.kernel
        key = (
            ("kind", "mode", "src", "dst", "event_id", "pc", "location")
            if named
            else ("kind", "src", "dst", "event_id", "pc", "location")
        )
        sites, left_out, occurrences = fold_capped(rows, key, self._room)
        self._room -= len(sites)
        self._left_out[0] += left_out
        self._left_out[1] += occurrences
        return [
            self.context.finding(
                kind,
                kernel=launch.name if launch else None,
                location=int(site.head["location"]),
                blocks={block_type_name(t): ids for t, ids in site.blocks.items()},
                space="",
                serial=site.serial,
                pc=int(site.head["pc"]),
                count=site.count,
                pipe=pipe_name(int(site.head["src"])),
                dst_pipe=pipe_name(int(site.head["dst"])),
                event_id=int(site.head["event_id"]),
                **({"detail": instruction_name(int(site.head["kind"]), int(site.head["mode"]))} if named else {}),
            )
            for site in sites
        ]

    def host_op(self, op: HostOp) -> list[Finding]:
        return []

    def finish(self) -> list[Finding]:
        if self.kernel is None:
            return []
        if self.stopped:  # it said why at its stop; nothing of the kernel is held
            return self.kernel_end()
        stuck = self.tails.stuck()  # settles the replay first, which may stop it
        if self.tails.stopped:  # a launch not looked at for lock-ups must not read as free of them
            why = self.tails.stopped
            unlooked = self._kernel_error(f"synccheck stopped looking for locked pipes in this kernel: {why}")
            return [*self.kernel_end(), unlooked]
        return self._cut_short() if stuck.size else self.kernel_end()
