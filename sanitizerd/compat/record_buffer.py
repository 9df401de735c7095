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
family's converter, and the events merged back into program order by serial.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from sanitizerd.compat.convert import base  # the package import registers every family's converters
from sanitizerd.compat.record_types import PAYLOAD_SIZE, RecordType
from sanitizerd.protocol import messages as m
from sanitizerd.protocol.records import EVENT_DTYPE, EventKind

SECURITY_VALUE = 0x5A5A5A5A5A5A5A5A
SECURITY_TEXT = "The record address has been changed by the user program, and the detection result is unreliable."

GLOBAL_HEAD_SIZE = 38_528
BLOCK_HEAD_SIZE = 128
HEADS_SIZE = GLOBAL_HEAD_SIZE + BLOCK_HEAD_SIZE
TYPE_SIZE = 4  # the u32 RecordType before each payload

# RecordGlobalHead: the fields sanitizerd reads (offsets from the probe of msSanitizer's headers; the rest is the
# per-core register shadow, which registercheck does not need: it sees the SET_* records themselves).
GLOBAL_HEAD_DTYPE = np.dtype(
    {
        "names": ["security", "cache_size", "check_block_id", "total_block_dim", "total_cache_size", "kernel_type"],
        "formats": ["<u8", "<u4", "<i2", "<u8", "<u8", "u1"],
        "offsets": [0, 8, 12, 24, 32, 44],
        "itemsize": GLOBAL_HEAD_SIZE,
    }
)
BLOCK_HEAD_DTYPE = np.dtype(
    {
        "names": [
            "record_count", "record_write_count", "offset", "write_offset", "block_id", "block_type",
            "vec_sub_block_dim",
        ],
        "formats": ["<u8", "<u8", "<u8", "<u8", "<u2", "u1", "u1"],
        "offsets": [0, 8, 16, 24, 40, 48, 49],
        "itemsize": BLOCK_HEAD_SIZE,
    }
)  # fmt: skip

# The step (in u32 words, type word included) of each record type; 0 = not a type this release can walk.
_TABLE_LEN = max(PAYLOAD_SIZE) + 2
STEP_WORDS = np.zeros(_TABLE_LEN, dtype=np.int64)
for _type, _size in PAYLOAD_SIZE.items():
    STEP_WORDS[_type] = (TYPE_SIZE + _size) // 4

SEGMENT_WORDS = 512  # 2 KiB per speculative segment: ~30 records of the usual 56-104 byte payloads
MAX_UNCONVERTED_LINES = 64


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


def read_heads(data: memoryview | bytes) -> SlotHeads:
    """The global and block heads at the start of a slot's bytes."""
    if len(data) < HEADS_SIZE:
        raise RecordBufferError(
            f"record buffer of {len(data)} bytes is shorter than its heads ({HEADS_SIZE} bytes): no records decoded"
        )
    g = np.frombuffer(data, dtype=GLOBAL_HEAD_DTYPE, count=1)[0]
    b = np.frombuffer(data, dtype=BLOCK_HEAD_DTYPE, count=1, offset=GLOBAL_HEAD_SIZE)[0]
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
    )


def _type_name(value: int) -> str:
    try:
        return RecordType(value).name
    except ValueError:
        return str(value)


def _step_of(words: np.ndarray, at: np.ndarray | int, n: int) -> np.ndarray:
    t = words[np.minimum(at, n - 1)]
    return STEP_WORDS[np.minimum(t, _TABLE_LEN - 1)]


def walk(words: np.ndarray, limit_words: int) -> tuple[np.ndarray, int]:
    """Record starts (word indices) of the true path from word 0 through ``words[:limit_words]``, and where it
    stopped: the first word not walked. That is ``limit_words`` after a whole walk, the start of a record not all
    there yet, or a word that is no known type (the caller tells these apart by ``words[stop]``)."""
    n = min(limit_words, words.size)
    if n == 0:
        return np.empty(0, dtype=np.int64), 0
    nseg = -(-n // SEGMENT_WORDS)
    starts = np.arange(nseg, dtype=np.int64) * SEGMENT_WORDS
    ends = np.minimum(starts + SEGMENT_WORDS, n)
    pos = starts.copy()
    exits = np.empty(nseg, dtype=np.int64)
    rows: list[np.ndarray] = []  # per lockstep step: each segment's node, -1 once it has left its segment
    active = np.arange(nseg)
    while active.size:
        p = pos[active]
        step = _step_of(words, p, n)
        row = np.full(nseg, -1, dtype=np.int64)
        row[active] = p
        rows.append(row)
        nxt = p + np.maximum(step, 1)  # a word that is no type: the speculative walk moves on by one word
        pos[active] = nxt
        done = nxt >= ends[active]
        exits[active[done]] = nxt[done]
        active = active[~done]
    V = np.stack(rows, axis=1)  # (segments, steps): each row increasing, then -1
    # Segment j+1 is entered where segment j exits; when segment j was itself entered at one of its speculative
    # nodes, that exit is exits[j]. Check all entries at once; repair the rare misses in order below.
    entries = np.concatenate(([0], exits[:-1]))
    hit = V == entries[:, None]
    first = np.where(hit.any(axis=1), hit.argmax(axis=1), -1)
    repaired: dict[int, np.ndarray] = {}
    last_segment = nseg - 1
    misses = list(np.flatnonzero(first < 0))
    k = 0
    while k < len(misses):
        j = int(misses[k])
        k += 1
        if j > last_segment:
            break
        e = int(entries[j])
        nodes: list[int] = []
        q = e
        end = int(ends[j])
        stuck = False
        while q < end:
            nodes.append(q)
            s = int(_step_of(words, q, n))
            if s == 0:
                stuck = True
                break
            q += s
        repaired[j] = np.array(nodes, dtype=np.int64)
        if stuck or j + 1 >= nseg:
            last_segment = j
            break
        if q != exits[j]:  # the next segment is entered elsewhere than its check assumed
            entries[j + 1] = q
            found = np.flatnonzero(V[j + 1] == q)
            if found.size:
                first[j + 1] = found[0]
            elif first[j + 1] >= 0:
                first[j + 1] = -1
                misses.insert(k, j + 1)
    ok = np.flatnonzero(first[: last_segment + 1] >= 0)
    keep = np.zeros(V.shape, dtype=bool)
    keep[ok] = np.arange(V.shape[1])[None, :] >= first[ok][:, None]
    keep &= V >= 0
    if repaired:
        parts = [repaired[j] if j in repaired else V[j][keep[j]] for j in range(last_segment + 1)]
        path = np.concatenate(parts)
    else:
        path = V[keep]  # row-major: segment by segment, each in order
    steps = _step_of(words, path, n)
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


def _gather(words: np.ndarray, starts: np.ndarray, record_type: int, dtype: np.dtype) -> np.ndarray:
    """The payloads of the records starting at word ``starts`` as one structured array of ``dtype``."""
    nwords = PAYLOAD_SIZE[record_type] // 4
    block = words[(starts + 1)[:, None] + np.arange(nwords)]
    if dtype.itemsize != nwords * 4:
        raise ValueError(f"{_type_name(record_type)}: converter dtype is {dtype.itemsize} bytes, payload {nwords * 4}")
    return np.ascontiguousarray(block).view(dtype).reshape(starts.size)


class SlotDecoder:
    """Decodes one slot's record region as it arrives; see the module docstring and docs/interfaces."""

    def __init__(self, heads: SlotHeads, context: base.BlockContext, first_serial: int) -> None:
        self.heads = heads
        self.context = dataclasses.replace(context, vec_sub_block_dim=heads.vec_sub_block_dim, dropped={})
        self.first_serial = int(first_serial)
        self.records = 0  # decoded so far
        self._pos = 0  # bytes of the record region consumed
        self._stopped = not heads.security_ok  # nothing more is decoded (damage found, or the heads are not ours)
        self._problems: list[str] = []
        self._unconverted: dict[int, int] = {}
        self._finished = False
        if not heads.security_ok:
            self._problems.append(SECURITY_TEXT)

    @property
    def next_serial(self) -> int:
        return self.first_serial + self.records + (1 if self._finished else 0)

    def _where(self) -> str:
        return f"block {self.heads.block_id} ({_BLOCK_NAMES.get(self.heads.block_type, self.heads.block_type)})"

    def feed(self, data: memoryview | bytes, final: bool) -> tuple[np.ndarray, int]:
        data = memoryview(data).cast("B")
        parts: list[np.ndarray] = []
        consumed = len(data)  # unless whole records are left for later
        limit = self.heads.write_offset - self._pos
        if not self._stopped and limit > 0 and self.records < self.heads.record_write_count:
            avail = min(len(data), limit)
            words = np.frombuffer(data, dtype="<u4", count=avail // 4)
            path, stop = walk(words, words.size)
            room = self.heads.record_write_count - self.records
            if path.size > room:  # recordWriteCount ends the block before writeOffset does
                path = path[:room]
                stop = int(path[-1] + STEP_WORDS[min(int(words[path[-1]]), _TABLE_LEN - 1)])
                self._stop(
                    f"{self._where()}: {room + self.records} records (recordWriteCount) end at byte "
                    f"{self._pos + stop * 4}, but writeOffset is {self.heads.write_offset}: the rest is not decoded"
                )
            elif stop < words.size and STEP_WORDS[min(int(words[stop]), _TABLE_LEN - 1)] == 0:
                value = int(words[stop])
                self._stop(
                    f"{self._where()}: unknown record type {_type_name(value)} at byte {self._pos + stop * 4} of the "
                    f"record region; {self.heads.record_write_count - self.records - path.size} records not decoded"
                )
            if path.size:
                parts.append(self._convert(words, path))
            self.records += int(path.size)
            if not self._stopped:
                consumed = stop * 4
                if self._pos + consumed >= self.heads.write_offset:
                    consumed = len(data)
        self._pos += consumed
        if final:
            self._finish()
            parts.append(self._block_finish())
        if not parts:
            return np.empty(0, dtype=EVENT_DTYPE), consumed
        events = parts[0] if len(parts) == 1 else np.concatenate(parts)
        return events, consumed

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
        event = base.blank(1)
        event["kind"] = EventKind.BLOCK_FINISH
        event["serial"] = self.first_serial + self.records
        event["block_id"] = self.heads.block_id
        event["block_type"] = self.heads.block_type
        event["block_size"] = 0
        return event

    def _convert(self, words: np.ndarray, path: np.ndarray) -> np.ndarray:
        types = words[path]
        serials = np.arange(path.size, dtype=np.uint64) + np.uint64(self.first_serial + self.records)
        order = np.argsort(types, kind="stable")
        kinds, starts = np.unique(types[order], return_index=True)
        bounds = np.append(starts, order.size)
        out: list[np.ndarray] = []
        for i, record_type in enumerate(kinds.tolist()):
            rows = order[bounds[i] : bounds[i + 1]]
            registered = base.CONVERTERS.get(record_type)
            if registered is None:
                self._unconverted[record_type] = self._unconverted.get(record_type, 0) + rows.size
                continue
            try:
                records = _gather(words, path[rows], record_type, registered.dtype)
                out.append(registered.convert(record_type, records, serials[rows], self.context))
            except Exception as exc:  # hostile values must not end the daemon: drop these records, say so
                text = f"{_type_name(record_type)} records dropped: converter failed ({exc})"
                base.drop(self.context, text, rows.size)
        if not out:
            return np.empty(0, dtype=EVENT_DTYPE)
        if len(out) == 1:
            return out[0]
        events = np.concatenate(out)
        return events[np.argsort(events["serial"], kind="stable")]

    def problems(self) -> list[str]:
        lines = list(self._problems)
        for text, count in self.context.dropped.items():
            lines.append(f"{count} {text}")
        for record_type, count in sorted(self._unconverted.items())[:MAX_UNCONVERTED_LINES]:
            lines.append(
                f"{count} {_type_name(record_type)} records not converted (sanitizerd does not model this "
                "instruction yet)"
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


def decode_single(
    record_type: int, payload: memoryview | bytes, serial: int, context: base.BlockContext
) -> tuple[np.ndarray, str | None]:
    """One record sent alone (SANITIZER_RECORD's KERNEL_RECORD variant): its events, or a problem line."""
    empty = np.empty(0, dtype=EVENT_DTYPE)
    size = PAYLOAD_SIZE.get(int(record_type))
    if size is None:
        return empty, f"unknown record type {_type_name(int(record_type))} in a single kernel record"
    payload = memoryview(payload).cast("B")
    if len(payload) < size:
        return empty, f"{_type_name(int(record_type))} record of {len(payload)} bytes, its payload needs {size}"
    registered = base.CONVERTERS.get(int(record_type))
    if registered is None:
        return empty, (
            f"1 {_type_name(int(record_type))} records not converted (sanitizerd does not model this instruction yet)"
        )
    local = dataclasses.replace(context, dropped={})
    words = np.frombuffer(bytes(payload[:size]), dtype="<u4")
    records = words.view(registered.dtype).reshape(1)
    try:
        events = registered.convert(int(record_type), records, np.array([serial], dtype=np.uint64), local)
    except Exception as exc:
        return empty, f"{_type_name(int(record_type))} record dropped: converter failed ({exc})"
    problem = next((f"{count} {text}" for text, count in local.dropped.items()), None)
    return events, problem
