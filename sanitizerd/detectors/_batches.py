"""A kernel's event batches as received, read column by column: no copy of whole records.

racecheck keeps a kernel's events until the kernel ends. Joining the batches into one array of 56-byte
records costs a full copy (and the page faults of a fresh allocation) only to read a few fields of each
event; this reads just the fields asked for, of just the events asked for. Here too: a batch cut by the pieces a
detector walks (``split_by_pieces``).
"""

from __future__ import annotations

import numpy as np

from sanitizerd import native
from sanitizerd.detectors.base import ALL_PIECES, BATCH_PIECES, GM_WRITES, WIDE_ACCESS_PIECES
from sanitizerd_protocol.records import EVENT_DTYPE, FLAG_CLAIM, EventKind, Space

_compiled = native.load("_ingest")


class Batches:
    def __init__(self, parts: list[np.ndarray]) -> None:
        self.parts = [p for p in parts if p.size]
        self.offsets = np.cumsum([0] + [p.size for p in self.parts])
        self.size = int(self.offsets[-1])

    def column(self, name: str) -> np.ndarray:
        """Field ``name`` of every event, in arrival order."""
        if not self.parts:
            return np.empty(0)
        return np.concatenate([p[name] for p in self.parts])

    def take(self, name: str, index: np.ndarray) -> np.ndarray:
        """Field ``name`` of the events at arrival positions ``index``."""
        if not index.size:
            return np.empty(0, dtype=self.parts[0].dtype[name] if self.parts else np.uint8)
        if index.size < 2 or bool((index[1:] >= index[:-1]).all()):
            cuts = np.searchsorted(index, self.offsets)
            pieces = [
                p[name][index[cuts[i] : cuts[i + 1]] - self.offsets[i]]
                for i, p in enumerate(self.parts)
                if cuts[i + 1] > cuts[i]
            ]
            return np.concatenate(pieces)
        part = np.searchsorted(self.offsets, index, side="right") - 1
        out = np.empty(index.size, dtype=self.parts[0].dtype[name])
        for i in np.unique(part):
            sel = part == i
            out[sel] = self.parts[i][name][index[sel] - self.offsets[i]]
        return out

    def take_fields(self, names: tuple[str, ...], index: np.ndarray) -> Columns:
        return Columns({name: self.take(name, index) for name in names})


class Columns(dict[str, np.ndarray]):
    """Some fields of some events, one array per field, indexed like a structured array: ``c["address"]`` is a
    field, ``c[rows]`` the same fields of ``rows``. The pattern arithmetic (``_patterns``) takes either."""

    @property
    def size(self) -> int:
        return len(next(iter(self.values()))) if self else 0

    def __getitem__(self, key: object) -> np.ndarray:  # type: ignore[override]
        if isinstance(key, str):
            return dict.__getitem__(self, key)
        return Columns({name: column[key] for name, column in self.items()})  # type: ignore[return-value]


class BatchFields:
    """One batch's records, read like the structured array, each field copied out of the records the first time
    it is asked for: a detector's checks read the same few fields several times over, and every read of a field
    in place is a strided walk over all of the batch's 56-byte records. ``b[rows]`` selects whole records, as on
    the array. (Copying whole 8-byte words and taking several fields from each measured slower on the standard
    stream: more bytes copied for the fields that are read once.)"""

    __slots__ = ("_fields", "_highest_kind", "records", "size")

    def __init__(self, records: np.ndarray) -> None:
        self.records = records
        self.size = int(records.size)
        self._fields: dict[str, np.ndarray] = {}
        self._highest_kind: int | None = None

    def preload(self, name: str, field: np.ndarray) -> None:
        """Field ``name`` as a compiled pass copied it out already (the same values as ``records[name]``)."""
        self._fields[name] = field

    def preload_highest_kind(self, kind: int) -> None:
        """``highest_kind`` as a compiled pass found it already."""
        self._highest_kind = kind

    def highest_kind(self) -> int:
        """The batch's largest event kind (-1 for no record), found once: the checks of kinds most streams never
        send (block tensors, SIMT sections) are each settled by it."""
        if self._highest_kind is None:
            self._highest_kind = int(self["kind"].max()) if self.size else -1
        return self._highest_kind

    def __getitem__(self, key: object) -> np.ndarray:
        if isinstance(key, str):
            field = self._fields.get(key)
            if field is None:
                field = self._fields[key] = np.ascontiguousarray(self.records[key])
            return field
        return self.records[key]  # type: ignore[index]


def walked_pieces(events: np.ndarray, walked: str = ALL_PIECES) -> np.ndarray:
    """Each access's pieces as BATCH_PIECES counts them (int64; an upper bound: its rows, at least one, times its
    blocks, at least one, where a row scatters them; at most WIDE_ACCESS_PIECES), 0 for those a detector does not
    walk (``walked`` GM_WRITES: all but GM writes and claims)."""
    pieces = np.maximum(events["repeat"], 1).astype(np.int64)
    scattered = events["block_stride"] > 1
    pieces[scattered] *= np.maximum(events["block_num"][scattered], 1)
    np.minimum(pieces, WIDE_ACCESS_PIECES, out=pieces)
    if walked == GM_WRITES:
        writes = (events["kind"] == EventKind.WRITE) | ((events["flags"] & FLAG_CLAIM) != 0)
        pieces[~(writes & (events["space"] == Space.GM))] = 0
    return pieces


def highest_kind(events: np.ndarray) -> int:
    """A batch's largest event kind, -1 for an empty one (BatchFields remembers it; a record array is scanned)."""
    if isinstance(events, BatchFields):
        return events.highest_kind()
    kind = events["kind"]
    return int(kind.max()) if kind.size else -1


def records_of(events: object) -> np.ndarray | None:
    """A batch's records as one C-contiguous array of EVENT_DTYPE, what the compiled loops read (sanitizerd.native):
    a structured array's own, a ``BatchFields``' records; None for anything else (``Columns``), which the numpy
    path takes."""
    records = events.records if isinstance(events, BatchFields) else events
    if not isinstance(records, np.ndarray) or records.dtype != EVENT_DTYPE or records.ndim != 1:
        return None
    return np.ascontiguousarray(records)


# BATCH_PIECES and WIDE_ACCESS_PIECES (detectors/base.py) bound the pieces of each batch a detector checks; each
# detector's batches are cut by the pieces it walks (its ``pieces_walked``). The cut is made in the sessions'
# pipelines (sessions/pipeline.py) for most detectors, and by memcheck itself, which counts its pieces in its own
# first pass over a batch.


def split_by_pieces(events: np.ndarray, limit: int = BATCH_PIECES, walked: str = ALL_PIECES) -> list[np.ndarray]:
    """``events`` as consecutive batches of at most ``limit`` pieces each (an upper bound: repeat, times the
    blocks of a scattered row; ``walked`` GM_WRITES: of the GM writes and claims alone), each of at least one
    event; one batch, the same array, in the common case."""
    if events.size * WIDE_ACCESS_PIECES <= limit:  # cannot exceed: skip even the field reads
        return [events]
    if _compiled is not None and events.dtype == EVENT_DTYPE and events.flags.c_contiguous:
        cuts = _compiled.cuts(events.view(np.uint8), limit, WIDE_ACCESS_PIECES, walked == GM_WRITES)
        return np.split(events, cuts) if cuts else [events]
    return split_by_pieces_numpy(events, limit, walked)


def split_by_pieces_numpy(events: np.ndarray, limit: int = BATCH_PIECES, walked: str = ALL_PIECES) -> list[np.ndarray]:
    """``split_by_pieces`` in numpy: the reference path, and the path where ``_ingest`` was not built."""
    # Upper bounds from a field read or two settle the common batch: rows (a repeat of 0 is one row, counted as
    # two here), then blocks where some row is scattered.
    repeat = events["repeat"]
    rows = int(repeat.sum(dtype=np.int64)) + events.size
    scattered = events["block_stride"] > 1
    if rows <= limit and (not scattered.any() or rows * int(events["block_num"].max()) <= limit):
        return [events]
    total = np.cumsum(walked_pieces(events, walked))
    if int(total[-1]) <= limit:
        return [events]
    cuts: list[int] = []
    start, done = 0, 0
    while start < events.size:
        # the first event past the batch's share; at least one event a batch
        end = max(int(np.searchsorted(total, done + limit, side="right")), start + 1)
        cuts.append(end)
        done, start = int(total[end - 1]), end
    return np.split(events, cuts[:-1])
