"""The session's device allocations as host hooks reported them (reference §2.1 "Heap block manager").

Like msSanitizer, allocations live in separate tables by where they were reported: real device memory
(HAL/RT/ACL, and BYPASS), framework tensor annotations (EXTRA, MANUAL), MSTX heaps (memory handed to a
pool) and MSTX regions (pieces carved out of a pool). A free only touches the table of its own source, so a
tensor annotation at a buffer's address never frees the buffer.

Legal GM, as msSanitizer's MSTX semantics have it: device memory and annotations, minus registered heaps
(pool memory is not to be touched until a region is carved out of it), plus regions. Unlike msSanitizer, this
is one table rather than a RUNTIME or DFX "current scope" switched by each host record (docs/design.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sanitizerd.detectors._intervals import IntervalSet, difference

_TABLE_OF_SOURCE = {
    "bypass": "device",
    "hal": "device",
    "rt": "device",
    "acl": "device",
    "extra": "annotation",
    "manual": "annotation",
    "mstx_heap": "heap",
    "mstx_region": "region",
}
# Only real device memory can leak; annotations and pools describe memory inside it.
LEAKING_TABLE = "device"


@dataclass(frozen=True, slots=True)
class Allocation:
    address: int
    size: int
    source: str
    serial: int
    location: int
    module: int

    @property
    def end(self) -> int:
        return self.address + self.size


def _ranges(blocks: list[Allocation]) -> IntervalSet:
    starts = np.fromiter((b.address for b in blocks), dtype=np.uint64, count=len(blocks))
    sizes = np.fromiter((b.size for b in blocks), dtype=np.uint64, count=len(blocks))
    return IntervalSet(starts, starts + sizes)


class _Union:
    """The bytes some tables' allocations cover, kept up to date per malloc and free instead of rebuilt from every
    allocation each time (which made alternating mallocs and stores quadratic). A free can only be taken out
    directly while no two allocations overlap; otherwise the union is rebuilt, once, when next read."""

    __slots__ = ("_set", "_sized", "tables")

    def __init__(self, *tables: dict[int, Allocation], lazy: bool = False) -> None:
        self.tables = tables
        self._set: IntervalSet | None = None if lazy else IntervalSet()  # lazy: built when first read
        self._sized = 0  # sum of the allocations' sizes: equal to the union's bytes iff none overlap

    def add(self, allocation: Allocation) -> None:
        self._sized += allocation.size
        if self._set is not None:
            self._set.add(np.array([allocation.address], np.uint64), np.array([allocation.end], np.uint64))

    def remove(self, allocation: Allocation) -> None:
        self._sized -= allocation.size
        if self._set is None:
            return
        if self._set.total == self._sized + allocation.size:
            self._set.remove(allocation.address, allocation.end)
        else:
            self._set = None

    @property
    def set(self) -> IntervalSet:
        if self._set is None:
            self._set = _ranges([a for table in self.tables for a in table.values()])
        return self._set


class Heap:
    """Live allocations by table and address, and the GM ranges they make legal."""

    __slots__ = ("_device", "_legal", "_memory", "tables")

    def __init__(self) -> None:
        self.tables: dict[str, dict[int, Allocation]] = {"device": {}, "annotation": {}, "heap": {}, "region": {}}
        self._memory = _Union(self.tables["device"], self.tables["annotation"])
        self._device = _Union(self.tables["device"], lazy=True)  # only MSTX heap mallocs ask
        self._legal: IntervalSet | None = None  # with MSTX heaps or regions: rebuilt after each change

    def _table(self, source: str) -> dict[int, Allocation]:
        return self.tables[_TABLE_OF_SOURCE.get(source, LEAKING_TABLE)]

    def _unions(self, source: str) -> tuple[_Union, ...]:
        table = _TABLE_OF_SOURCE.get(source, LEAKING_TABLE)
        return (self._memory, self._device) if table == "device" else (self._memory,) if table == "annotation" else ()

    def malloc(self, allocation: Allocation) -> bool:
        """Record an allocation; False if its table already has one there (msSanitizer ignores a double malloc)."""
        table = self._table(allocation.source)
        if allocation.address in table:
            return False
        table[allocation.address] = allocation
        for union in self._unions(allocation.source):
            union.add(allocation)
        self._legal = None
        return True

    def free(self, address: int, source: str) -> Allocation | None:
        """Forget an allocation; None when its table has nothing at ``address`` (an illegal free). Freeing
        real device memory also drops the MSTX heaps and regions inside it, as msSanitizer does."""
        allocation = self._table(source).pop(address, None)
        if allocation is None:
            return None
        for union in self._unions(source):
            union.remove(allocation)
        if _TABLE_OF_SOURCE.get(source, LEAKING_TABLE) == LEAKING_TABLE:
            for pool in (self.tables["heap"], self.tables["region"]):
                if pool:
                    for inside in [a for a, p in pool.items() if allocation.address <= a < allocation.end]:
                        del pool[inside]
        self._legal = None
        return allocation

    def in_device_memory(self, address: int) -> bool:
        """Whether ``address`` lies in a live device allocation (where an MSTX heap must start)."""
        return bool(self._device.set.covered(np.array([address], np.uint64), np.array([address + 1], np.uint64))[0])

    def live(self) -> list[Allocation]:
        return sorted((a for t in self.tables.values() for a in t.values()), key=lambda a: (a.serial, a.address))

    @property
    def legal(self) -> IntervalSet:
        """Legal GM: device memory and annotations, kept up to date per host op; with MSTX heaps or regions,
        rebuilt once after the heap changed rather than on every host op."""
        if not self.tables["heap"] and not self.tables["region"]:
            return self._memory.set
        if self._legal is None:
            base = self._memory.set
            heaps = _ranges(list(self.tables["heap"].values()))
            regions = _ranges(list(self.tables["region"].values()))
            if len(heaps):
                base = IntervalSet(*difference(base.starts, base.ends, heaps.starts, heaps.ends))
            else:
                base = IntervalSet(base.starts, base.ends)
            if len(regions):
                base.add(regions.starts, regions.ends)
            self._legal = base
        return self._legal

    def leaks(self) -> list[Allocation]:
        return sorted(self.tables[LEAKING_TABLE].values(), key=lambda b: (b.serial, b.address))
