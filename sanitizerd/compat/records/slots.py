"""msSanitizer's device record buffer, one sub-block slot at a time: heads, the record walk, and conversion.

A KERNEL_RECORD packet (reference §1.4, §1.9) is ``[RecordGlobalHead][RecordBlockHead][records]``; the records are
``[u32 RecordType][payload]`` back to back with no padding, ``writeOffset`` bytes and ``recordWriteCount`` records.

The walk is vectorised. Every payload size is a multiple of 4 (``record_types``), so records start at multiples of
4 and the region can be read as u32 words. The region is cut into segments that are walked in lockstep, each from a
speculative start (its first word): one gather per step over all segments, the type word giving the step through a
lookup table, a word that is no known type advancing by one. Walks that meet stay together (they follow the same
``next`` function), so once the true path from offset 0 enters a segment at a node of that segment's speculative
walk, the rest of that walk is the true path; where it does not (rare), that segment is walked again from its true
entry. Records are then grouped by type, each group's payloads gathered into a structured array, converted by the
family's converter, and the events merged back into program order by serial. Where the compiled loops are built, a
window whose every record is in a usual case of its converter is converted straight from the words into program
order instead (``direct_compiled``; docs/design.md, "Windows converted straight"), giving the same events.
"""

from __future__ import annotations

import dataclasses
import functools
import heapq
from dataclasses import dataclass

import numpy as np

from sanitizerd import native
from sanitizerd.compat import wire
from sanitizerd.compat.records import simt as simt_areas
from sanitizerd.compat.records import simt_entry, simt_place
from sanitizerd.compat.records.convert import base  # the package import registers every family's converters
from sanitizerd.compat.records.convert.bounds import SIMT_UNPLACED
from sanitizerd.compat.records.convert.instructions import name_instructions
from sanitizerd.compat.records.numbering import RecordTable, record_table
from sanitizerd.compat.records.types import MEMTYPE_TO_SPACE, PIPE_OF_PAIR, RecordType
from sanitizerd_protocol import messages as m
from sanitizerd_protocol.records import BLOCK_RECORDS_ENDED, EVENT_DTYPE, FLAG_SIMT_ENTRY, EventKind, empty_events

SECURITY_VALUE = 0x5A5A5A5A5A5A5A5A
SECURITY_TEXT = "The record address has been changed by the user program, and the detection result is unreliable."

TYPE_SIZE = 4  # the u32 RecordType before each payload

# Segments: about this many per walk (each lockstep step costs a few numpy calls whatever its width), each at least
# MIN_SEGMENT_WORDS long: a speculative walk meets the true path within a few hundred words on real record mixes,
# so long segments rarely need the (scalar) repair.
TARGET_SEGMENTS = 1024
MIN_SEGMENT_WORDS = 256
WINDOW_BYTES = 8 << 20  # a connection feeds 1-4 MiB (plus a record tail): one window per feed
MAX_UNCONVERTED_LINES = 64

# The walk, the numbering and grouping, the gathers and the merge compiled (sanitizerd/native/_records.c), or None:
# numpy's (the functions below, the reference the compiled loops are tested against). Chosen once per process
# (sanitizerd.native); tests set it to None to run numpy's beside it.
compiled = native.load("_records")


class RecordBufferError(Exception):
    """The slot's heads cannot be read (too short); the text says why."""


@dataclass(frozen=True, slots=True)
class SlotHeads:
    security_ok: bool
    cache_size_mb: int
    check_block_id: int
    total_block_dim: int
    kernel_type: int
    block_id: int
    block_type: int
    vec_sub_block_dim: int
    record_count: int
    record_write_count: int
    offset: int
    write_offset: int
    host_memory_num: int = 0  # HostMemoryInfo entries that follow the block head on the device (not sent)
    block_head_size: int | None = None  # ProtocolOffsetInfo.blockHeadSize, where the release has it
    support_simt: bool = False  # a SIMT chip: the SIMT part follows the SIMD records in the slot
    simt_thread_bytes: int = 0  # ProtocolOffsetInfo.simtErrorInfo.size: one SIMT thread area's records


@functools.cache
def _head_dtypes(layout: wire.WireLayout) -> tuple[np.dtype, np.dtype]:
    """The global and block heads' fields that are read, as dtypes of the layout's head sizes."""
    return (
        layout.global_head.view("RecordGlobalHead", wire.GLOBAL_HEAD_FIELDS).dtype,
        layout.block_head.view("RecordBlockHead", wire.BLOCK_HEAD_FIELDS).dtype,
    )


def read_heads(data: memoryview | bytes, layout: wire.WireLayout) -> SlotHeads:
    """The global and block heads at the start of a slot's bytes, read as ``layout``'s release lays them out."""
    heads_size = layout.heads_size
    if len(data) < heads_size:
        raise RecordBufferError(
            f"record buffer of {len(data)} bytes is shorter than its heads ({heads_size} bytes): no records decoded"
        )
    global_dtype, block_dtype = _head_dtypes(layout)
    g = np.frombuffer(data, dtype=global_dtype, count=1)[0]
    b = np.frombuffer(data, dtype=block_dtype, count=1, offset=layout.global_head.size)[0]
    has = set(global_dtype.names or ())
    return SlotHeads(
        security_ok=int(g["security"]) == SECURITY_VALUE,
        cache_size_mb=int(g["cache_size"]),
        check_block_id=int(g["check_block_id"]),
        total_block_dim=int(g["total_block_dim"]),
        kernel_type=int(g["kernel_type"]),
        block_id=int(b["block_id"]),
        block_type=int(b["block_type"]),
        vec_sub_block_dim=int(b["vec_sub_block_dim"]),
        record_count=int(b["record_count"]),
        record_write_count=int(b["record_write_count"]),
        offset=int(b["offset"]),
        write_offset=int(b["write_offset"]),
        host_memory_num=int(b["host_memory_num"]),
        block_head_size=int(g["block_head_size"]) if "block_head_size" in has else None,
        support_simt=bool(g["support_simt"]) if "support_simt" in has else False,
        simt_thread_bytes=int(g["simt_thread_bytes"]) if "simt_thread_bytes" in has else 0,
    )


def wire_mismatch(heads: SlotHeads, layout: wire.WireLayout, length: int) -> str:
    """Why a slot of ``length`` bytes whose heads read as ``heads`` cannot be ``layout``'s ("" when it can).

    Checked only on a slot whose security value holds (one whose head the user program overwrote is that
    kernel's problem, said as msSanitizer says it). The injection library sends a slot as its two heads and the
    ``writeOffset`` bytes of records written after them, then, on a SIMT chip only (``supportSimt``), the SIMT
    part; and from 2026-04-21 the global head's ProtocolOffsetInfo says how long each block's head is on the device:
    the block head and its ``hostMemoryNum`` HostMemoryInfo entries, rounded up to 64 bytes. Heads read at another
    release's offsets do not add up on one of these."""
    records = length - layout.heads_size
    if heads.block_head_size is not None:
        host_memory = layout.structs["HostMemoryInfo"].size
        expected = -(-(layout.block_head.size + heads.host_memory_num * host_memory) // 64) * 64
        if heads.block_head_size != expected:
            return (
                f"ProtocolOffsetInfo.blockHeadSize is {heads.block_head_size}, but a {layout.block_head.size}-byte "
                f"RecordBlockHead with {heads.host_memory_num} HostMemoryInfo of {host_memory} bytes makes {expected}"
            )
    if heads.support_simt and heads.write_offset <= records:
        return ""
    if heads.write_offset != records:
        return f"the slot holds {records} bytes after its heads, but its writeOffset says {heads.write_offset}"
    return ""


def _type_name(value: int) -> str:
    try:
        return RecordType(value).name
    except ValueError:
        return str(value)


def _step_of(table: RecordTable, words: np.ndarray, at: np.ndarray, n: int) -> np.ndarray:
    t = words[np.minimum(at, n - 1)]
    return table.step_words[np.minimum(t, table.table_len - 1)]


# Loops: a kernel's records mostly repeat one tile's sequence of types. A scalar walk of a few records finds the
# period; the rest of the window is then predicted (a cumulative sum of the period's steps) and checked (each
# predicted start holds the predicted type: by induction the path is then exact) in a few passes over the records,
# not the words. Where the prediction breaks, a new sample is taken from the true record there; after a few short
# runs the window's rest goes to the lockstep walk, which assumes nothing.
PERIOD_SAMPLE = 256  # records walked one by one to find a period
MAX_PERIOD = 64  # records in one period
LOOP_ATTEMPTS = 4  # samples that may find no period, or one that breaks before 4 samples' worth of records


def walk(table: RecordTable, words: np.ndarray, limit_words: int) -> tuple[np.ndarray, int]:
    """Record starts (word indices) of the true path from word 0 through ``words[:limit_words]``, and where it
    stopped: the first word not walked. That is ``limit_words`` after a whole walk, the start of a record not all
    there yet, or a word that is no known type (the caller tells these apart by ``words[stop]``)."""
    n = min(limit_words, words.size)
    parts: list[np.ndarray] = []
    at = 0
    misses = 0
    while at < n and misses < LOOP_ATTEMPTS:
        sample, stop = _scalar_walk(table, words, at, n, PERIOD_SAMPLE)
        parts.append(sample)
        if sample.size < PERIOD_SAMPLE:  # the walk ended (end of window, a record not all there, no type)
            return _joined(parts), stop
        period = _period(words[sample])
        if period == 0:
            misses += 1
            at = stop
            continue
        run, at = _predicted(table, words, sample[-period:], stop, n)
        parts.append(run)
        if run.size < 4 * PERIOD_SAMPLE:
            misses += 1
    if at >= n:
        return _joined(parts), at
    rest, stop = _lockstep_walk(table, words[at:], n - at)
    parts.append(rest + at)
    return _joined(parts), stop + at


def _joined(parts: list[np.ndarray]) -> np.ndarray:
    if not parts:
        return np.empty(0, dtype=np.int64)
    return np.concatenate(parts) if len(parts) > 1 else parts[0]


def _scalar_walk(table: RecordTable, words: np.ndarray, at: int, n: int, most: int) -> tuple[np.ndarray, int]:
    """Up to ``most`` records from the true record start ``at``, one by one; stops as ``walk`` does."""
    starts = []
    steps = table.step_list
    top = table.table_len
    for _ in range(most):
        if at >= n:
            break
        word = int(words[at])
        step = steps[word] if word < top else 0
        if step == 0 or at + step > n:
            break
        starts.append(at)
        at += step
    return np.array(starts, dtype=np.int64), at


def _period(types: np.ndarray) -> int:
    """The smallest period (in records) of a sample's types that holds over the whole sample; 0 if none."""
    for p in range(1, MAX_PERIOD + 1):
        if np.array_equal(types[p:], types[:-p]):
            return p
    return 0


def _predicted(table: RecordTable, words: np.ndarray, last: np.ndarray, at: int, n: int) -> tuple[np.ndarray, int]:
    """Records from ``at`` (a true record start) predicted to repeat the period whose records started at ``last``,
    checked: the starts that hold their predicted types, and the true start where the prediction first fails (or
    the end: ``n``, or the start of a record not all there)."""
    types = words[last]
    steps = table.step_words[types]
    period_words = int(steps.sum())
    count = ((n - at) // period_words + 1) * len(last)
    periods = -(-count // len(last))  # np.tile, not np.resize: resize concatenates one copy per period
    tiled = np.tile(steps, periods)[:count]
    ends = np.cumsum(tiled)
    ends += at
    starts = ends - tiled
    held = (ends <= n) & (words[np.minimum(starts, n - 1)] == np.tile(types, periods)[:count])
    fails = np.flatnonzero(~held)
    good = int(fails[0]) if fails.size else count
    run = starts[:good]
    return run, (int(starts[good]) if good < count else int(ends[-1]))


def _lockstep_walk(table: RecordTable, words: np.ndarray, limit_words: int) -> tuple[np.ndarray, int]:
    """Record starts (word indices) of the true path from word 0 through ``words[:limit_words]``, and where it
    stopped: the first word not walked. That is ``limit_words`` after a whole walk, the start of a record not all
    there yet, or a word that is no known type (the caller tells these apart by ``words[stop]``)."""
    n = min(limit_words, words.size)
    if n == 0:
        return np.empty(0, dtype=np.int64), 0
    # A segment is never shorter than the longest record, so a record never steps over a whole segment.
    seg = max(MIN_SEGMENT_WORDS, -(-n // TARGET_SEGMENTS), table.max_step)
    nseg = -(-n // seg)
    starts = np.arange(nseg, dtype=np.int64) * seg
    ends = np.minimum(starts + seg, n)
    exits, nodes, row_start = _lockstep(table, words, starts, ends, n)
    # Segment j+1 is entered where segment j exits; when segment j was itself entered at one of its speculative
    # nodes, that exit is exits[j]. Check every entry at once.
    keys = np.repeat(np.arange(nseg, dtype=np.int64) << 32, np.diff(row_start)) + nodes  # sorted
    entries = np.concatenate(([0], exits[:-1]))
    start_at = _find(keys, np.arange(nseg, dtype=np.int64), entries)  # flat index where the true path joins, -1
    # Repair the misses: walk them from their entries (all at once) until they meet their speculative walk. One
    # that leaves its segment elsewhere moves the next segment's entry, which is then checked again: rounds.
    walked: dict[int, np.ndarray] = {}  # per repaired segment: the nodes its walk from the true entry added
    stuck_at: dict[int, int] = {}  # per repaired segment whose walk met a word that is no type: that word
    left: dict[int, int] = {}  # per repaired segment that left without meeting its speculative walk: its exit
    pending = np.flatnonzero(start_at < 0).tolist()
    while pending:
        # A segment whose entry is not known yet (-1: the walk before it found no record) waits for the repair
        # of the segment before, which then moves its entry.
        segs = np.array(sorted(j for j in pending if entries[j] >= 0), dtype=np.int64)
        if not segs.size:
            break
        extra, joined, leave, stuck = _repair(table, words, keys, segs, entries[segs], ends[segs], n)
        work = segs.tolist()
        for i, j in enumerate(work):
            walked[j] = extra[i]
            if joined[i] >= 0:
                start_at[j] = joined[i]
            elif stuck[i] >= 0:
                stuck_at[j] = int(stuck[i])
            else:
                left[j] = int(leave[i])
        # Propagate exits forward: a segment whose exit is not the entry the next one was checked with moves that
        # entry; the next is then either on its speculative walk (its exit may move the one after) or pending.
        heapq.heapify(work)
        pending = []
        while work:
            j = heapq.heappop(work)
            if j + 1 >= nseg or j in stuck_at:
                continue
            if start_at[j] >= 0:
                e = int(exits[j])
            elif j in left:
                e = left[j]
            else:
                continue  # pending itself
            if e == entries[j + 1]:
                continue
            entries[j + 1] = e
            walked.pop(j + 1, None)
            stuck_at.pop(j + 1, None)
            left.pop(j + 1, None)
            start_at[j + 1] = _find(keys, np.array([j + 1]), np.array([e]))[0]
            if start_at[j + 1] >= 0:
                heapq.heappush(work, j + 1)
            else:
                pending.append(j + 1)
    # The true path: each segment's speculative nodes from where the path joins them, plus the repaired walks.
    mark = np.zeros(keys.size + 1, dtype=np.int64)
    joins = np.flatnonzero(start_at >= 0)
    np.add.at(mark, start_at[joins], 1)
    np.add.at(mark, row_start[joins + 1], -1)
    path = nodes[np.cumsum(mark[:-1]) > 0]
    if walked:
        path = np.sort(np.concatenate([path, *walked.values()]))
    if stuck_at:
        path = path[path <= stuck_at[min(stuck_at)]]
    steps = _step_of(table, words, path, n)
    # Safety net: the path must be one chain; anything else is a bug, and stopping there is the honest answer.
    if path.size > 1:
        broken = np.flatnonzero((path[:-1] + steps[:-1] != path[1:]) & (steps[:-1] != 0))
        if broken.size:
            path = path[: int(broken[0]) + 1]
            steps = steps[: path.size]
    bad = np.flatnonzero(steps == 0)
    if bad.size:
        b = int(bad[0])
        return path[:b], int(path[b])
    if path.size == 0:
        return path, 0
    stop = int(path[-1] + steps[-1])
    if stop > n:  # the last record is not all there yet
        return path[:-1], int(path[-1])
    return path, stop


def _lockstep(
    table: RecordTable, words: np.ndarray, starts: np.ndarray, ends: np.ndarray, n: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Walk every segment from its first word, all in lockstep: (exits, nodes of all segments in order, the index
    in ``nodes`` where each segment's nodes begin, with one more entry for the end).

    A walk first searches, a word at a time, for a word that is a record type outside the scalar range (0-13):
    payloads are full of zeros and small counts, which read as LOAD/STORE and would lead a walk astray, while a
    type of 100 or more is seldom anything else. From there it follows the records exactly; only those nodes
    count (an exact walk from a true record start is the true path). A walk that finds no such word within
    SEARCH_WORDS follows the records from the first known type after that; one that never does has no exit (-1)."""
    nseg = starts.size
    exits = np.full(nseg, -1, dtype=np.int64)
    V = np.full((64, nseg), -1, dtype=np.int64)  # (steps, segments): each walk's nodes in order, -1 elsewhere
    k = 0
    active = np.arange(nseg)
    pos = starts.copy()
    end = ends.copy()
    exact = np.zeros(nseg, dtype=bool)
    patient = starts + table.search_words
    searching = True
    while active.size:
        if k == V.shape[0]:
            V = np.concatenate([V, np.full_like(V, -1)])
        t = words[pos]
        if searching:
            step = np.take(table.step_words, t, mode="clip")  # clip: a word past the table reads as no type
            exact |= np.take(table.strong, t, mode="clip") | ((pos >= patient) & (step > 0))
            searching = not exact.all()
            V[k, active[exact]] = pos[exact]
            pos = pos + np.where(exact, np.maximum(step, 1), 1)
        else:
            V[k, active] = pos
            pos += np.take(table.step_at_least_1, t, mode="clip")  # a word that is no type: on by one word
        k += 1
        done = pos >= end
        if done.any():
            exits[active[done]] = np.where(exact[done], pos[done], -1)
            keep = ~done
            active, pos, end, exact, patient = active[keep], pos[keep], end[keep], exact[keep], patient[keep]
    V = V[:k].T  # a step is a row while walking (a contiguous write); nodes are wanted segment by segment
    valid = V >= 0
    nodes = V[valid]  # row-major: segment by segment, each in walk order
    row_start = np.concatenate(([0], np.cumsum(valid.sum(axis=1))))
    return exits, nodes, row_start


def _find(keys: np.ndarray, segs: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """Flat index of node ``positions`` of segments ``segs`` in ``keys``, -1 where it is no node there."""
    want = (segs << 32) + positions
    if keys.size == 0:
        return np.full(want.size, -1, dtype=np.int64)
    at = np.minimum(np.searchsorted(keys, want), keys.size - 1)
    return np.where(keys[at] == want, at, -1)


def _repair(
    table: RecordTable,
    words: np.ndarray,
    keys: np.ndarray,
    segs: np.ndarray,
    entries: np.ndarray,
    ends: np.ndarray,
    n: int,
) -> tuple[list[np.ndarray], np.ndarray, np.ndarray, np.ndarray]:
    """Walk segments ``segs`` from their true ``entries`` in lockstep, each until it reaches a node of its own
    speculative walk (joined: the flat index), leaves its segment (leave: the exit), or meets a word that is no
    type (stuck: its position). Returns the nodes each walked before that, and joined / leave / stuck (-1 = no)."""
    m = segs.size
    joined = np.full(m, -1, dtype=np.int64)
    leave = np.full(m, -1, dtype=np.int64)
    stuck = np.full(m, -1, dtype=np.int64)
    who: list[np.ndarray] = []
    where: list[np.ndarray] = []
    active = np.arange(m)
    pos = entries.astype(np.int64)
    top = table.table_len - 1
    while active.size:
        out = pos >= ends[active]
        if out.any():
            leave[active[out]] = pos[out]
            active, pos = active[~out], pos[~out]
            if not active.size:
                break
        hit = _find(keys, segs[active], pos)
        met = hit >= 0
        if met.any():
            joined[active[met]] = hit[met]
            active, pos = active[~met], pos[~met]
            if not active.size:
                break
        who.append(active)
        where.append(pos)
        step = table.step_words[np.minimum(words[pos], top)]
        bad = step == 0
        if bad.any():
            stuck[active[bad]] = pos[bad]
            active, pos, step = active[~bad], pos[~bad], step[~bad]
        pos = pos + step
    if who:
        w = np.concatenate(who)
        p = np.concatenate(where)
        order = np.argsort(w, kind="stable")
        w, p = w[order], p[order]
        bounds = np.searchsorted(w, np.arange(m + 1))
        extra = [p[bounds[i] : bounds[i + 1]] for i in range(m)]
    else:
        extra = [np.empty(0, dtype=np.int64) for _ in range(m)]
    return extra, joined, leave, stuck


def _gather(words: np.ndarray, starts: np.ndarray, size: int, record_type: int, dtype: np.dtype) -> np.ndarray:
    """The payloads (of ``size`` bytes) of the records starting at word ``starts`` as one structured array of
    ``dtype``: a take from an overlapping view of the words (item i = the payload bytes after word i), one copy
    per record."""
    if dtype.itemsize != size:
        raise ValueError(f"{_type_name(record_type)}: converter dtype is {dtype.itemsize} bytes, payload {size}")
    window = np.ndarray(shape=(words.size - size // 4,), dtype=f"V{size}", buffer=words, offset=4, strides=(4,))
    return window[starts].view(dtype)


# --- the compiled loops' wrappers: each checks what it hands to C (dtypes, contiguity), and gives what its numpy
# counterpart above gives ------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _CompiledTable:
    """A ``RecordTable`` as the compiled loops read it: plain contiguous arrays of the dtypes the C code takes."""

    steps: np.ndarray  # int64 by wire type: words a record of that type takes, 0 for none
    codes: np.ndarray  # intp by wire type: its group code (table.type_code)
    rule_records: np.ndarray  # uint32 by wire type: bit r set where the type is among merge rule r's records
    rule_after: np.ndarray  # uint32 by wire type: bit r set where the type is among the types rule r follows
    ncodes: int
    min_step: int  # the fewest words a record takes: bounds the records in a window


@functools.cache
def _compiled_table(table: RecordTable) -> _CompiledTable | None:
    """None where the compiled loops cannot number this table's records (more merge rules than 32 bits)."""
    if len(table.merges) > 32:
        return None
    top = table.table_len
    rule_records = np.zeros(top, dtype=np.uint32)
    rule_after = np.zeros(top, dtype=np.uint32)
    for r, (records, after) in enumerate(table.merges):
        for bits, values in ((rule_records, records), (rule_after, after)):
            values = np.asarray(values, dtype=np.int64)
            bits[values[(values >= 0) & (values < top)]] |= np.uint32(1 << r)
    steps = np.ascontiguousarray(table.step_words, dtype=np.int64)
    known = steps[steps > 0]
    return _CompiledTable(
        steps,
        np.ascontiguousarray(table.type_code, dtype=np.intp),
        rule_records,
        rule_after,
        len(table.code_type),
        int(known.min()) if known.size else 1,
    )


def _words_for_c(words: np.ndarray) -> np.ndarray:
    if words.dtype != np.dtype("<u4") or words.ndim != 1:
        raise ValueError("the record region must be read as little-endian u32 words")
    return np.ascontiguousarray(words)


def walk_compiled(table: RecordTable, words: np.ndarray, limit_words: int, most: int = -1) -> tuple[np.ndarray, int]:
    """``walk``, compiled: the same record starts and stop; with ``most`` >= 0, at most that many records (the stop
    is then after the last of them)."""
    assert compiled is not None
    shape = _compiled_table(table)
    assert shape is not None
    words = _words_for_c(words)
    n = max(min(int(limit_words), words.size), 0)
    room = n // shape.min_step + 1  # more than the records n words can hold
    if most >= 0:
        room = min(room, most)
    starts = np.empty(room, dtype=np.int64)
    count, stop = compiled.walk(words, n, shape.steps, starts)
    return starts[:count], stop


def group_compiled(
    table: RecordTable, words: np.ndarray, path: np.ndarray, last_type: int, next_serial: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``record_serials`` of the records at ``path`` (each a start of a type the table steps over, as the walk
    gives), and the records grouped by type code: (serials, the record indices code by code, each group in record
    order, and where each code's group begins in them: ``ncodes + 1`` offsets)."""
    assert compiled is not None
    shape = _compiled_table(table)
    assert shape is not None
    words = _words_for_c(words)
    path = np.ascontiguousarray(path, dtype=np.int64)
    serials = np.empty(path.size, dtype=np.uint64)
    order = np.empty(path.size, dtype=np.int64)
    offsets = np.empty(shape.ncodes + 1, dtype=np.int64)
    compiled.group(
        words, path, path.size, shape.codes, shape.rule_records, shape.rule_after, int(last_type), int(next_serial),
        serials, order, offsets,
    )  # fmt: skip
    return serials, order, offsets


def gather_compiled(words: np.ndarray, starts: np.ndarray, size: int, record_type: int, dtype: np.dtype) -> np.ndarray:
    """``_gather``, compiled: one copy of each record's payload into a fresh structured array."""
    assert compiled is not None
    if dtype.itemsize != size:
        raise ValueError(f"{_type_name(record_type)}: converter dtype is {dtype.itemsize} bytes, payload {size}")
    out = np.empty(starts.size, dtype=dtype)
    compiled.gather(_words_for_c(words), np.ascontiguousarray(starts, dtype=np.int64), size, out.view(np.uint8))
    return out


MAX_MERGE_PARTS = 256  # the compiled merge's (_records.c, MAX_PARTS): more groups in one window are sorted by numpy


def merge_compiled(parts: list[np.ndarray], first: int, span: int) -> np.ndarray | None:
    """Events of ``parts`` (each in serial order, serials ``first`` .. ``first + span - 1``) in one array in serial
    order, stable: what a stable argsort of their concatenated serials gives. None where some event's serial is
    outside that range (the caller then sorts)."""
    assert compiled is not None
    if len(parts) > MAX_MERGE_PARTS:
        return None
    raw = []
    for events in parts:
        if events.dtype != EVENT_DTYPE:
            raise ValueError("events must be EVENT_DTYPE")
        raw.append(np.ascontiguousarray(events).view(np.uint8))
    merged = np.empty(sum(events.size for events in parts), dtype=EVENT_DTYPE)
    if not compiled.merge(raw, int(first), int(span), merged.view(np.uint8)):
        return None
    return merged


MAX_DIRECT_PLANS = 64  # _records.c's MAX_PLANS; a table has about a dozen types with a usual case


@dataclass(frozen=True, slots=True)
class DirectPlans:
    """The wire types of a table whose usual records a window converts straight from its words, in a block of one
    context (``_records.direct``; ``base.DIRECT``'s plans)."""

    plan_of: np.ndarray  # i64 by wire type: the index of its plan, -1 for none
    plans: np.ndarray  # base.PLAN_WORDS u64 per plan


@dataclass(frozen=True, slots=True)
class _PlansMade:
    plans: DirectPlans | None
    chip: object  # the context's chip they were made for (chips are compared, not hashed)
    converters: tuple[tuple[int, object], ...]  # (record type, its converter) for every type with a planner


_PLANS_MADE: dict[tuple[RecordTable, int, str], _PlansMade] = {}


def direct_plans(table: RecordTable, context: base.BlockContext) -> DirectPlans | None:
    """The plans of ``table``'s types that convert whole in ``context``'s blocks, or None (none, or not built).
    Made once per table, block type and chip (a connection starts a decoder per slot: making them took ~4 ms), and
    again where a converter they were made with is no longer the one registered (a test's)."""
    if compiled is None:
        return None
    key = (table, int(context.block_type), context.chip.name)
    made = _PLANS_MADE.get(key)
    converters = tuple((t, entry.convert) for t, entry in base.CONVERTERS.items() if t in base.DIRECT)
    if made is None or made.chip != context.chip or made.converters != converters:
        plain = base.BlockContext(block_type=context.block_type, chip=context.chip)  # what a plan may depend on
        made = _PLANS_MADE[key] = _PlansMade(_make_direct_plans(table, plain), context.chip, converters)
    return made.plans


def _make_direct_plans(table: RecordTable, context: base.BlockContext) -> DirectPlans | None:
    """Left out, so that their windows take the grouped path: a payload whose dtype is not its size (the gather
    refuses it), a record that names its instruction (``name_instructions`` adds to its events)."""
    plan_of = np.full(table.table_len, -1, dtype=np.int64)
    rows: list[np.ndarray] = []
    for wire_type in table.code_type:
        record_type = int(table.canonical[wire_type])
        dtype = table.dtypes.get(record_type)
        if record_type < 0 or dtype is None or len(rows) == MAX_DIRECT_PLANS:
            continue
        if dtype.itemsize != table.payload_size.get(record_type) or "instr" in (dtype.names or ()):
            continue
        plan = base.direct_plan(record_type, dtype, context)
        if plan is not None:
            plan_of[wire_type] = len(rows)
            rows.append(dataclasses.replace(plan, place=base.place_offsets(dtype)).words())
    if not rows:
        return None
    return DirectPlans(plan_of, np.stack(rows))


_NO_SITES = np.zeros((0, 4), dtype=np.uint64)
_LOCATION = base._PACKING["location"]


def direct_compiled(
    table: RecordTable, plans: DirectPlans, words: np.ndarray, path: np.ndarray, last_type: int, next_serial: int,
    sites: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray] | None:  # fmt: skip
    """The serials and events of the records at ``path`` (the walk's, after a record of ``last_type``, -1: none)
    converted straight from ``words``, numbered from ``next_serial`` on, their events in program order: what
    ``record_serials`` and ``_convert`` give there; with ``sites`` (``RecordPlaces.resolved_sites``), each event's
    location its record's, as ``mark_places`` gives it. None where some record has no plan, is not in its usual
    case, shares the serial of the record before (``RecordTable.merges``) or has a place not among ``sites``."""
    assert compiled is not None
    shape = _compiled_table(table)
    assert shape is not None
    serials = np.empty(path.size, dtype=np.uint64)
    raw = compiled.direct(
        _words_for_c(words), np.ascontiguousarray(path, dtype=np.int64), plans.plan_of, plans.plans, PIPE_OF_PAIR,
        MEMTYPE_TO_SPACE, shape.rule_records, shape.rule_after, int(last_type), int(next_serial), serials,
        _NO_SITES if sites is None else sites,
        None if sites is None else (_LOCATION[0], _LOCATION[1], (1 << _LOCATION[2]) - 1),
    )  # fmt: skip
    if raw is None:
        return None
    return serials, np.frombuffer(raw, dtype=EVENT_DTYPE)


@dataclass(frozen=True, slots=True)
class SimtShape:
    """How a release lays out the SIMT part of a slot (from 2026-05-06: reference §1.10, docs §6.1): 2 048 thread
    areas, each a SimtRecordBlockHead and ``simtErrorInfo.size`` bytes of records, then one SimtEntryBlockHead and
    its ``recordWriteCount`` SimtEntryRecords per SIMT_CALL of the SIMD records."""

    thread_head: int
    entry_head: int
    entry_record: int
    main_pc_at: int = -1  # SimtEntryBlockHead.mainScalarPc and .threadXDim (then Y, Z): -1 where not measured
    dims_at: int = -1
    records: simt_areas.SimtRecords | None = None  # the thread areas' records, where measured (else counted)
    entry: wire.Layout | None = None  # SimtEntryRecord, where its fields are measured (else its records are counted)
    exceed_at: int = -1  # SimtEntryBlockHead.exceedSize: bytes of records the device had no room for


SIMT_THREADS = 2048  # SIMT_THREAD_MAX_SIZE: the thread areas of every SIMT slot
MAX_SIMT_CALLS = 4096  # entry heads whose dims are kept per slot; a later call's records are refused, counted


@functools.cache
def simt_shape(layout: wire.WireLayout) -> SimtShape | None:
    """The release's SIMT part, or None where it is laid out otherwise (before 2026-05-06: counted as bytes)."""
    structs = layout.structs
    if not all(n in structs for n in ("SimtRecordBlockHead", "SimtEntryBlockHead", "SimtEntryRecord")):
        return None
    if not layout.global_head.has("offsetInfo.simtErrorInfo.size"):
        return None
    entry = structs["SimtEntryBlockHead"]
    measured = entry.has("mainScalarPc") and entry.has("threadXDim")
    return SimtShape(
        structs["SimtRecordBlockHead"].size,
        entry.size,
        structs["SimtEntryRecord"].size,
        entry.offset("mainScalarPc") if measured else -1,
        entry.offset("threadXDim") if measured else -1,
        simt_areas.simt_records(layout),
        simt_entry.entry_layout(structs["SimtEntryRecord"]),
        entry.offset("exceedSize") if entry.has("exceedSize") else -1,
    )


_U64 = np.dtype("<u8")


class SimtPart:
    """The records of a slot's SIMT part as they stream past: each thread area's ``recordWriteCount`` and each SIMT
    entry block's, counted; where the release's thread-area records are measured (``simt_areas.simt_records``), every
    whole thread area is also decoded (``simt_areas.ThreadAreas``), each entry head's dims kept and its
    SimtEntryRecords taken (``simt_entry.EntryRecords``), so that ``events`` can give the slot's SIMT sections at its
    end. A head or an entry record that straddles a feed is left for the next (``feed`` returns what it used)."""

    def __init__(self, shape: SimtShape | None, heads: SlotHeads) -> None:
        self.shape = shape
        self.area = (shape.thread_head + heads.simt_thread_bytes) if shape is not None else 0
        self.at = 0  # bytes of the SIMT part consumed
        self.threads = 0  # thread areas whose head was read
        self.thread_records = 0
        self.entry_blocks = 0
        self.entry_records = 0
        self.next_entry = SIMT_THREADS * self.area  # where the next entry block's head starts
        self.undecoded = 0  # bytes not laid out as this release's SIMT part
        self.calls: list[simt_areas.SimtCall] = []
        self.areas: simt_areas.ThreadAreas | None = None
        self.too_large = False  # thread areas too large to hold whole: counted, not converted
        self.entries: simt_entry.EntryRecords | None = None  # the calls' SimtEntryRecords, where converted
        self.entry_left = 0  # records of the current entry block not read yet
        self.entry_next = 0  # where the next of them starts
        self.entry_call = -1  # the ordinal of the call they are of (-1: its head was not kept)
        self.exceeded = self.exceeded_calls = 0  # exceedSize: bytes of entry records the device had no room for
        records = shape.records if shape is not None else None
        if shape is not None and records is not None and shape.dims_at >= 0 and self.area > shape.thread_head:
            if self.area <= simt_areas.MAX_AREA_BYTES:
                self.areas = simt_areas.ThreadAreas(records, shape.thread_head, heads.simt_thread_bytes)
                if shape.entry is not None and shape.entry.size == shape.entry_record:
                    self.entries = simt_entry.EntryRecords(shape.entry)
            else:
                self.too_large = True

    def feed(self, data: memoryview, final: bool) -> int:
        shape = self.shape
        if shape is None or self.area <= shape.thread_head:
            self.undecoded += len(data)
            self.at += len(data)
            return len(data)
        used = 0
        if self.threads < SIMT_THREADS:
            # Every area head wholly inside this feed, at once: record counts are the u64 at 8 of each head. When
            # the areas are converted, only whole areas are taken (the rest waits for the next feed).
            first = self.threads
            if self.areas is not None and not final:
                last = min(SIMT_THREADS, (self.at + len(data)) // self.area)
            else:
                last = min(SIMT_THREADS, (self.at + len(data) - 16) // self.area + 1) if len(data) >= 16 else first
            if last > first:
                offset = first * self.area - self.at + 8  # recordWriteCount of the first head in this feed
                counts = np.ndarray((last - first,), dtype=_U64, buffer=data, offset=offset, strides=(self.area,))
                self.thread_records += sum(counts.tolist())  # Python ints: hostile counts cannot overflow
                if self.areas is not None:
                    start = first * self.area - self.at
                    whole = min(last, (self.at + len(data)) // self.area)
                    self.areas.feed(data[start : start + (whole - first) * self.area], first)
                self.threads = last
            if self.threads < SIMT_THREADS:
                used = min(len(data), self.threads * self.area - self.at) if not final else len(data)
                self.at += used
                return used
        while True:
            if self.entry_left:
                if not self._take_entries(data):
                    break
                continue
            rel = self.next_entry - self.at
            if rel + shape.entry_head > len(data):
                break
            (count,) = np.frombuffer(data, dtype=_U64, count=1, offset=rel + 8)
            kept = self.areas is not None and len(self.calls) < MAX_SIMT_CALLS
            if kept:
                (main_pc,) = np.frombuffer(data, dtype=_U64, count=1, offset=rel + shape.main_pc_at)
                x, y, z = np.frombuffer(data, dtype="<u2", count=3, offset=rel + shape.dims_at).tolist()
                self.calls.append(simt_areas.SimtCall(int(main_pc), (x, y, z)))
            if shape.exceed_at >= 0:
                (exceeded,) = np.frombuffer(data, dtype=_U64, count=1, offset=rel + shape.exceed_at)
                self.exceeded += int(exceeded)
                self.exceeded_calls += 1 if exceeded else 0
            self.entry_blocks += 1
            self.entry_records += int(count)
            if self.entries is not None:
                self.entry_left = int(count)
                self.entry_next = self.next_entry + shape.entry_head
                self.entry_call = len(self.calls) - 1 if kept else -1
            self.next_entry += shape.entry_head + int(count) * shape.entry_record
        # A record not all here waits for the next feed; past the last head, the rest is taken as it comes.
        until = self.entry_next if self.entry_left else self.next_entry
        used = len(data) if final or until - self.at >= len(data) else max(until - self.at, 0)
        if final and self.entry_left and self.entries is not None:
            self.entries.refuse("SIMT entry records past the end of the slot", self.entry_left)
            self.entry_left = 0
        self.at += used
        return used

    def _take_entries(self, data: memoryview) -> bool:
        """The current entry block's records wholly in ``data``; whether all of them were."""
        assert self.entries is not None and self.shape is not None
        size = self.shape.entry_record
        rel = self.entry_next - self.at
        whole = max((len(data) - rel) // size, 0)
        count = min(self.entry_left, whole)
        if count:
            self.entries.take(data, rel, count, self.entry_call)
            self.entry_next += count * size
            self.entry_left -= count
        return not self.entry_left

    def events(self, block_id: int, block_type: int, first_serial: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The slot's SIMT sections once the whole part was fed: first each call's entry records
        (``simt_entry.EntryRecords.sections``), then the threads' (``simt_areas.section_events``); each event's row of
        ``self.areas.rows`` (-1: none); and each section's call ordinal (-1: placed by its mainScalarPc)."""
        none = np.zeros(0, dtype=np.int64)
        if self.areas is None:
            return empty_events(0), none, none
        areas = self.areas
        entries, ordinals = empty_events(0), none
        if self.entries is not None:
            entries, ordinals = self.entries.sections(self.calls, block_id, block_type, first_serial)
        first_serial += entries.size
        events, rows, refused = simt_areas.section_events(areas.rows, self.calls, block_id, block_type, first_serial)
        for reason, count in refused.items():
            self.areas.refuse(reason, count)
        threads = np.full(int(np.count_nonzero(events["kind"] == EventKind.SIMT_START)), -1, dtype=np.int64)
        return (
            np.concatenate([entries, events]),
            np.concatenate([np.full(entries.size, -1, dtype=np.int64), rows]),
            np.concatenate([ordinals, threads]),
        )

    def problems(self) -> list[str]:
        lines = []
        if self.areas is not None:
            lines += [f"{count} {reason}" for reason, count in sorted(self.areas.refused.items())]
            if self.areas.online_errors:
                lines.append(
                    f"{self.areas.online_errors} SIMT ONLINE_ERROR records (msSanitizer's device findings) not "
                    "checked (the record they carry is not a SIMT access, barrier or thread end of its size)"
                )
        elif self.thread_records:
            why = (
                f"its thread areas of {self.area} bytes are larger than the {simt_areas.MAX_AREA_BYTES} sanitizerd "
                "converts"
                if self.too_large
                else "sanitizerd does not convert this release's SIMT records"
            )
            lines.append(f"{self.thread_records} SIMT records of {self.threads} SIMT threads not checked ({why})")
        if self.entries is not None:
            lines += [f"{count} {reason}" for reason, count in sorted(self.entries.refused.items())]
        elif self.entry_records:
            why = (
                "sanitizerd converts them with the thread areas, which are not"
                if self.areas is None
                else "sanitizerd does not convert this release's SimtEntryRecord"
            )
            calls = f"{self.entry_blocks} SIMT calls"
            lines.append(f"{self.entry_records} SIMT entry records of {calls} not checked ({why})")
        if self.exceeded:
            lines.append(
                f"{self.exceeded} bytes of SIMT entry records of {self.exceeded_calls} SIMT calls not checked (the "
                "device had no room for them: exceedSize)"
            )
        if self.undecoded:
            lines.append(f"{self.undecoded} bytes of SIMT records not decoded (this release's SIMT part)")
        elif self.at and self.threads < SIMT_THREADS:
            lines.append(f"the SIMT part ends after {self.threads} of {SIMT_THREADS} thread areas")
        return lines


class SlotDecoder:
    """Decodes one slot's record region as it arrives; see the module docstring and docs/interfaces."""

    def __init__(
        self,
        heads: SlotHeads,
        context: base.BlockContext,
        first_serial: int,
        table: RecordTable | None = None,
        simt: SimtShape | None = None,  # the release's (simt_shape); None: its SIMT part is counted as bytes
    ) -> None:
        self.heads = heads
        self.table = table if table is not None else record_table(wire.MSSANITIZER_4A419F05)
        # The compiled walk, numbering and gathers where built (and able to number this table), else numpy's
        self._compiled_table = _compiled_table(self.table) if compiled is not None else None
        # A SIMT chip sends its SIMT part after the SIMD records: its thread areas become SIMT sections at the
        # slot's end where the release's records are measured, and are counted where not
        self._simt = SimtPart(simt, heads) if heads.support_simt else None
        # Where the SIMT part is converted, the SIMD events from the first SIMT_CALL on wait for it (simt_place)
        converting = self._simt is not None and self._simt.areas is not None
        self._held = simt_place.HeldEvents(
            simt_place.simt_call_types(self.table) if converting else np.empty(0, dtype=np.uint32)
        )
        self._unplaced = 0  # sections whose SIMT_CALL was not among the SIMD records
        self._simt_events = 0  # serials the SIMT sections took (after the SIMD records, before BLOCK_FINISH)
        self._finished_simt = False
        self.context = dataclasses.replace(
            context,
            block_type=heads.block_type,
            vec_sub_block_dim=heads.vec_sub_block_dim or context.vec_sub_block_dim,
            dropped={},
            state={},
        )
        # The types whose usual records a window converts straight from its words, where compiled (direct_plans)
        self._direct = direct_plans(self.table, self.context) if self._compiled_table is not None else None
        self.first_serial = int(first_serial)
        self.records = 0  # decoded so far
        self._serials = 0  # serial numbers the records took (records of one instruction share one: record_serials)
        self._last_type = -1  # the wire type of the last record decoded, across feeds (-1: none yet)
        self._pos = 0  # bytes of the record region consumed
        self._stopped = not heads.security_ok  # nothing more is decoded (damage found, or the heads are not ours)
        self._problems: list[str] = []
        self._unconverted: dict[str, int] = {}  # the release's name of a type not converted -> records
        self._finished = False
        if not heads.security_ok:
            self._problems.append(SECURITY_TEXT)

    @property
    def next_serial(self) -> int:
        return self.first_serial + self._serials + self._simt_events + (1 if self._finished else 0)

    def _where(self) -> str:
        return f"block {self.heads.block_id} ({_BLOCK_NAMES.get(self.heads.block_type, self.heads.block_type)})"

    def feed(self, data: memoryview | bytes, final: bool) -> tuple[np.ndarray, int]:
        data = memoryview(data).cast("B")
        h = self.heads
        parts: list[np.ndarray] = []
        at = 0  # bytes of ``data`` decoded
        # Windows of at most WINDOW_BYTES: the walk's and the converters' arrays then stay in the core's cache.
        while not self._stopped and h.write_offset - self._pos - at > 0:
            room = h.record_write_count - self.records
            if room <= 0:
                self._stop(
                    f"{self._where()}: {h.record_write_count} records (recordWriteCount) end at byte "
                    f"{self._pos + at}, but writeOffset is {h.write_offset}: the rest is not decoded"
                )
                break
            rest = min(len(data) - at, h.write_offset - self._pos - at)
            avail = min(rest, WINDOW_BYTES)
            words = np.frombuffer(data, dtype="<u4", count=avail // 4, offset=at)
            fast = self._compiled_table is not None
            if fast:  # no more than one record past the room: the check below needs to know there is one
                path, stop = walk_compiled(self.table, words, words.size, room + 1)
            else:
                path, stop = walk(self.table, words, words.size)
            if path.size > room:  # recordWriteCount ends the block before writeOffset does
                path = path[:room]
                stop = int(path[-1] + self.table.step(int(words[path[-1]])))
                self._stop(
                    f"{self._where()}: {h.record_write_count} records (recordWriteCount) end at byte "
                    f"{self._pos + at + stop * 4}, but writeOffset is {h.write_offset}: the rest is not decoded"
                )
            elif stop < words.size and self.table.step(int(words[stop])) == 0:
                self._stop(
                    f"{self._where()}: unknown record type {self.table.name(int(words[stop]))} at byte "
                    f"{self._pos + at + stop * 4} of the record region; "
                    f"{h.record_write_count - self.records - path.size} records not decoded"
                )
            if path.size:
                next_serial = self.first_serial + self._serials
                grouped: tuple[np.ndarray, np.ndarray] | None = None
                whole = self._direct_window(words, path, next_serial) if fast else None
                if whole is not None:
                    serials, events = whole
                elif fast:
                    serials, *grouping = group_compiled(self.table, words, path, self._last_type, next_serial)
                    grouped = (grouping[0], grouping[1])
                else:
                    serials = record_serials(self.table, words[path], self._last_type, next_serial)
                self._serials = int(serials[-1]) + 1 - self.first_serial
                self._last_type = int(words[path[-1]])
                if whole is None:
                    events = self._convert(words, path, serials, grouped)
                held_before = self._held.let_go
                parts.append(self._held.route(events, words, path, serials))
                if self._held.let_go and not held_before:  # counted once, where the metric's reasons are
                    budget = self.context.budget.counts
                    budget[SIMT_UNPLACED] = budget.get(SIMT_UNPLACED, 0) + self._held.let_go
                self.records += int(path.size)
            at += stop * 4
            # Another window when this one ended before the data did; else what is left is a record not all here.
            if avail == rest or not path.size:
                break
        # Once decoding has stopped the rest of the slot is dropped; past writeOffset lies what a SIMT chip sends
        # after the SIMD records (counted, not checked), or nothing that is a record.
        if self._stopped:
            consumed = len(data)
        elif self._pos + at >= h.write_offset:
            rest = data[at:]
            consumed = at + (self._simt.feed(rest, final) if self._simt is not None else len(rest))
        else:
            consumed = at
        self._pos += consumed
        if final:
            self._finish()
            parts.append(self._simt_sections())
            parts.append(self._block_finish())
        return base.cat(parts), consumed

    def _simt_sections(self) -> np.ndarray:
        """The slot's SIMT sections, each at its SIMT_CALL among the SIMD events held since the first one
        (``simt_place``), everything from there renumbered in stream order."""
        sections, ordinals = self._simt_section_events()
        placed, self._unplaced = self._held.place(sections, self.first_serial + self._serials - 1, ordinals)
        return placed

    def _simt_section_events(self) -> tuple[np.ndarray, np.ndarray]:
        """The slot's SIMT sections, numbered after its SIMD records, and each one's call ordinal (-1: by pc)."""
        none = np.zeros(0, dtype=np.int64)
        if self._simt is None or self._finished_simt:
            return empty_events(0), none
        self._finished_simt = True
        h = self.heads
        events, rows, ordinals = self._simt.events(h.block_id, h.block_type, self.first_serial + self._serials)
        areas = self._simt.areas
        budget = self.context.budget
        if events.size > budget.events_left:
            if areas is not None:
                areas.refuse("SIMT records past the kernel's expansion limit", int((rows >= 0).sum()))
                entries = int(np.count_nonzero((events["flags"] & FLAG_SIMT_ENTRY) != 0))
                areas.refuse("SIMT entry records past the kernel's expansion limit", entries)
            return empty_events(0), none
        budget.events_left -= events.size
        places = self.context.places
        if events.size and areas is not None and places is not None and places.resolve is not None:
            inner = rows >= 0
            pc, file_no, line_no = (areas.rows.column(name)[rows[inner]] for name in ("pc", "file_no", "line_no"))
            events["location"][inner] = places.locations(pc, file_no, line_no)
        self._simt_events = int(events.size)
        return events, ordinals

    def _stop(self, text: str) -> None:
        self._stopped = True
        self._problems.append(text)

    def _finish(self) -> None:
        if self._finished:
            return
        h = self.heads
        if not self._stopped:
            if self._pos < h.write_offset:
                self._problems.append(
                    f"{self._where()}: the record region ends after {self._pos} bytes, but writeOffset is "
                    f"{h.write_offset}; {max(h.record_write_count - self.records, 0)} records not decoded"
                )
            elif self.records < h.record_write_count:
                self._problems.append(
                    f"{self._where()}: recordWriteCount is {h.record_write_count}, but the {h.write_offset} bytes "
                    f"of writeOffset hold {self.records} records"
                )
        self._finished = True

    def _block_finish(self) -> np.ndarray:
        event = empty_events(1)
        event["kind"] = EventKind.BLOCK_FINISH
        event["mode"] = BLOCK_RECORDS_ENDED  # the slot's end is its records' end, not the block's (a hung kernel's too)
        event["serial"] = self.first_serial + self._serials + self._simt_events
        event["block_id"] = self.heads.block_id
        event["block_type"] = self.heads.block_type
        event["block_size"] = 0
        return event

    def _direct_window(
        self, words: np.ndarray, path: np.ndarray, next_serial: int
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """The window's serials and events converted straight from its words (``direct_compiled``), where that gives
        what ``_convert`` would: the launch's budget not exhausted (``convert_bounded`` would refuse the records)
        and, where places are marked (``mark_places``), every record's place already resolved. None: the grouped
        path."""
        if self._direct is None or self.context.budget.exhausted:
            return None
        places = self.context.places
        sites = None
        if places is not None and places.resolve is not None:
            sites = places.resolved_sites()
            if not sites.size:
                return None
        return direct_compiled(self.table, self._direct, words, path, self._last_type, next_serial, sites)

    def _convert(
        self,
        words: np.ndarray,
        path: np.ndarray,
        serials: np.ndarray,
        grouped: tuple[np.ndarray, np.ndarray] | None = None,  # group_compiled's (order, offsets), where it ran
    ) -> np.ndarray:
        table = self.table
        if grouped is None:
            codes = table.type_code[words[path]]  # every type on the path is known (the walk stopped before any other)
            present = np.flatnonzero(np.bincount(codes, minlength=len(table.code_type))).tolist()
        else:
            order, offsets = grouped
            present = np.flatnonzero(np.diff(offsets)).tolist()
        gather = gather_compiled if grouped is not None else _gather
        groups: list[tuple[np.ndarray, np.ndarray]] = []  # (record indices, their events)
        for code in present:
            wire_type = table.code_type[code]
            record_type = int(table.canonical[wire_type])
            rows = np.flatnonzero(codes == code) if grouped is None else order[offsets[code] : offsets[code + 1]]
            registered = base.CONVERTERS.get(record_type)
            dtype = table.dtypes.get(record_type)
            if registered is None or dtype is None:
                if record_type == RecordType.SIMT_CALL and self._held.call_types.size:
                    continue  # it places the call's SIMT section (simt_place), converted with the SIMT part
                name = table.name(wire_type)
                self._unconverted[name] = self._unconverted.get(name, 0) + rows.size
                continue
            try:
                records = gather(words, path[rows], table.payload_size[record_type], record_type, dtype)
                events = base.convert_bounded(
                    registered, record_type, _type_name(record_type), records, serials[rows], self.context
                )
                events = base.mark_places(events, records, serials[rows], self.context)
                events = name_instructions(events, records, serials[rows], self.context)
                groups.append((rows, events))
            except Exception as exc:  # hostile values must not end the daemon: drop these records, say so
                text = f"{_type_name(record_type)} records dropped: converter failed ({exc})"
                base.drop(self.context, text, rows.size)
        out = [events for _, events in groups]
        if len(out) <= 1:
            return base.cat(out)
        # Each group is in record order: a stable sort of the serials merges a few sorted runs (timsort), cheaply;
        # each group is then put straight in its places (one copy of the events, not a concatenation and a take).
        # Where records of two types share a serial (record_serials), each event is keyed by its record instead.
        if int(serials[-1] - serials[0]) + 1 == serials.size:
            if grouped is not None:
                merged = merge_compiled(out, int(serials[0]), serials.size)
                if merged is not None:
                    return merged
            keys = [events["serial"] for events in out]
        else:
            keys = [rows[np.searchsorted(serials[rows], events["serial"])] for rows, events in groups]
        order = np.argsort(np.concatenate(keys), kind="stable")
        place = np.empty_like(order)
        place[order] = np.arange(order.size)
        merged = np.empty(order.size, dtype=EVENT_DTYPE)
        raw = merged.view("V56")
        at = 0
        for events in out:
            raw[place[at : at + events.size]] = np.ascontiguousarray(events).view("V56")
            at += events.size
        return merged

    def problems(self) -> list[str]:
        lines = list(self._problems)
        for text, count in sorted(self.context.dropped.items()):
            lines.append(f"{count} {text}")
        for name, count in sorted(self._unconverted.items())[:MAX_UNCONVERTED_LINES]:
            lines.append(f"{count} {name} records not converted (sanitizerd does not model this instruction yet)")
        if self._simt is not None:
            lines += self._simt.problems()
        if self._held.let_go:
            lines.append(
                f"SIMT calls of {self._where()} placed after its SIMD records, not at their SIMT_CALL: the "
                f"{self._held.let_go} SIMD events and calls after its first SIMT_CALL are past the "
                f"{simt_place.MAX_HELD_ROWS} sanitizerd holds back, so the main scalar is not compared with the threads"
            )
        if self._unplaced:
            lines.append(
                f"{self._unplaced} SIMT calls of {self._where()} with no SIMT_CALL record of their mainScalarPc among "
                "its SIMD records: placed after them, so the main scalar is not compared with their threads"
            )
        return lines

    def loss(self) -> m.BlockLoss | None:
        h = self.heads
        if not h.security_ok or h.record_write_count >= h.record_count:
            return None
        return m.BlockLoss(
            block_type=h.block_type,
            block_id=h.block_id,
            records=h.record_count - h.record_write_count,
            bytes=max(h.offset - h.write_offset, 0),
        )


_BLOCK_NAMES = {0: "aiv", 1: "aic", 2: "aicore"}


def record_serials(table: RecordTable, types: np.ndarray, last_type: int, next_serial: int) -> np.ndarray:
    """The serial numbers of records ``types`` (wire types, in order) that follow a record of ``last_type`` (-1:
    none) in their block, from ``next_serial`` on: a record the tool takes for part of the instruction of the record
    before it (``RecordTable.merges``: a vgather's ELEMENTs, a vsel's VSEL_OP, an mstx annotation's instruction)
    takes that record's number, so that racecheck never sees one instruction racing with itself."""
    new = np.ones(types.size, dtype=bool)
    if table.merges and types.size:
        before = np.empty(types.size, dtype=np.int64)
        before[0] = last_type
        before[1:] = types[:-1]
        for records, after in table.merges:
            new &= ~(np.isin(types, records) & np.isin(before, after))
    return (np.cumsum(new, dtype=np.int64) + (next_serial - 1)).astype(np.uint64)


def decode_single(
    wire_type: int, payload: memoryview | bytes, serial: int, context: base.BlockContext, table: RecordTable
) -> tuple[np.ndarray, str | None]:
    """One record sent alone (SANITIZER_RECORD's KERNEL_RECORD variant), numbered as ``table``'s release numbers
    it: its events, or a problem line."""
    empty = np.empty(0, dtype=EVENT_DTYPE)
    name = table.name(int(wire_type))
    record_type = int(table.canonical[wire_type]) if 0 <= wire_type < table.table_len else -1
    size = table.payload_size.get(record_type)
    if size is None:
        return empty, f"unknown record type {name} in a single kernel record"
    payload = memoryview(payload).cast("B")
    if len(payload) < size:
        return empty, f"{name} record of {len(payload)} bytes, its payload needs {size}"
    registered = base.CONVERTERS.get(record_type)
    dtype = table.dtypes.get(record_type)
    if registered is None or dtype is None:
        return empty, f"1 {name} records not converted (sanitizerd does not model this instruction yet)"
    local = dataclasses.replace(context, dropped={}, state={})
    words = np.frombuffer(bytes(payload[:size]), dtype="<u4")
    records = words.view(dtype).reshape(1)
    try:
        serials = np.array([serial], dtype=np.uint64)
        events = base.convert_bounded(registered, record_type, _type_name(record_type), records, serials, local)
        events = base.mark_places(events, records, serials, local)
        events = name_instructions(events, records, serials, local)
    except Exception as exc:
        return empty, f"{name} record dropped: converter failed ({exc})"
    problem = next((f"{count} {text}" for text, count in local.dropped.items()), None)
    return events, problem
