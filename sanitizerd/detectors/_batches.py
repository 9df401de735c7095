"""A kernel's event batches as received, read column by column: no copy of whole records.

racecheck keeps a kernel's events until the kernel ends. Joining the batches into one array of 56-byte
records costs a full copy (and the page faults of a fresh allocation) only to read a few fields of each
event; this reads just the fields asked for, of just the events asked for.
"""

from __future__ import annotations

import numpy as np

from sanitizerd_protocol.records import EVENT_DTYPE


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
