"""The session's device allocations as host hooks reported them (reference §2.1 "Heap block manager").

Like msSanitizer, allocations live in separate tables by where they were reported: real device memory
(HAL/RT/ACL, and BYPASS), framework tensor annotations (EXTRA, MANUAL), MSTX heaps (memory handed to a
pool) and MSTX regions (pieces carved out of a pool). A free only touches the table of its own source, so a
tensor annotation at a buffer's address never frees the buffer.

Legal GM, as msSanitizer's MSTX semantics have it: device memory and annotations, minus registered heaps
(pool memory is not to be touched until a region is carved out of it), plus regions. Unlike msSanitizer, this
is one table rather than a RUNTIME or DFX "current scope" switched by each host record (docs/design.md).
Regions are indexed by their root heap (msSanitizer's rootAddr): unregistering a heap drops the regions carved
from it, so a later free of one of them is an illegal free.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sanitizerd.detectors._intervals import IntervalSet, difference

TABLE_OF_SOURCE = {
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
    root: int = 0  # an MSTX region's heap (rootAddr); 0: none

    @property
    def end(self) -> int:
        return self.address + self.size


def _ranges(blocks: list[Allocation]) -> IntervalSet:
    starts = np.fromiter((b.address for b in blocks), dtype=np.uint64, count=len(blocks))
    sizes = np.fromiter((b.size for b in blocks), dtype=np.uint64, count=len(blocks))
    return IntervalSet(starts, starts + sizes)


class _Union:
    """The bytes one table's allocations cover, kept up to date per malloc and free instead of rebuilt from every
    allocation each time (which made alternating mallocs and stores quadratic). A free is taken out directly
    while no two allocations of the table overlap; otherwise the union is rebuilt, once, when next read."""

    __slots__ = ("_set", "_sized", "table")

    def __init__(self, table: dict[int, Allocation]) -> None:
        self.table = table
        self._set: IntervalSet | None = IntervalSet()
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
            self._set = _ranges(list(self.table.values()))
        return self._set

    def within(self, start: int, end: int) -> tuple[np.ndarray, np.ndarray]:
        """The union's bytes inside ``[start, end)``."""
        s = self.set
        lo = int(np.searchsorted(s.ends, np.uint64(start), side="right"))
        hi = int(np.searchsorted(s.starts, np.uint64(end), side="left"))
        return np.maximum(s.starts[lo:hi], np.uint64(start)), np.minimum(s.ends[lo:hi], np.uint64(end))


class Heap:
    """Live allocations by table and address, and the GM ranges they make legal."""

    __slots__ = ("_legal", "_memory", "regions_of", "tables", "unions")

    def __init__(self) -> None:
        self.tables: dict[str, dict[int, Allocation]] = {"device": {}, "annotation": {}, "heap": {}, "region": {}}
        self.unions = {name: _Union(self.tables[name]) for name in ("device", "annotation")}
        self._memory = IntervalSet()  # device memory and annotations: legal GM without MSTX pools
        self._legal: IntervalSet | None = None  # with MSTX heaps or regions: rebuilt after each change
        self.regions_of: dict[int, set[int]] = {}  # root heap -> addresses of the regions carved from it

    def _table(self, source: str) -> dict[int, Allocation]:
        return self.tables[TABLE_OF_SOURCE.get(source, LEAKING_TABLE)]

    def malloc(self, allocation: Allocation) -> bool:
        """Record an allocation; False if its table already has one there (msSanitizer ignores a double malloc)."""
        table = self._table(allocation.source)
        if allocation.address in table:
            return False
        table[allocation.address] = allocation
        if allocation.source == "mstx_region":
            self.regions_of.setdefault(allocation.root, set()).add(allocation.address)
        union = self.unions.get(TABLE_OF_SOURCE.get(allocation.source, LEAKING_TABLE))
        if union is not None:
            union.add(allocation)
            self._memory.add(np.array([allocation.address], np.uint64), np.array([allocation.end], np.uint64))
        self._legal = None
        return True

    def free(self, address: int, source: str) -> Allocation | None:
        """Forget an allocation; None when its table has nothing at ``address`` (an illegal free). Freeing
        real device memory also drops the MSTX heaps and regions inside it, as msSanitizer does."""
        allocation = self._table(source).pop(address, None)
        if allocation is None:
            return None
        union = self.unions.get(TABLE_OF_SOURCE.get(source, LEAKING_TABLE))
        if union is not None:
            union.remove(allocation)
            # Take the range out, then give back what the tables' other allocations still cover there (an
            # annotation inside a freed buffer stays legal): a few ranges, not a rebuild over every allocation.
            self._memory.remove(allocation.address, allocation.end)
            for other in self.unions.values():
                starts, ends = other.within(allocation.address, allocation.end)
                if starts.size:
                    self._memory.add(starts, ends)
        table = TABLE_OF_SOURCE.get(source, LEAKING_TABLE)
        if table == "region":
            self._forget_region(allocation)
        elif table == "heap":  # unregistering a heap drops the regions carved from it
            self._drop_regions_of(allocation.address)
        elif table == LEAKING_TABLE:
            heaps = self.tables["heap"]
            for inside in [a for a in heaps if allocation.address <= a < allocation.end]:
                del heaps[inside]
                self._drop_regions_of(inside)
            regions = self.tables["region"]
            for inside in [a for a in regions if allocation.address <= a < allocation.end]:
                self._forget_region(regions.pop(inside))
        self._legal = None
        return allocation

    def _forget_region(self, region: Allocation) -> None:
        carved = self.regions_of.get(region.root)
        if carved is not None:
            carved.discard(region.address)
            if not carved:
                del self.regions_of[region.root]

    def _drop_regions_of(self, root: int) -> None:
        regions = self.tables["region"]
        for address in self.regions_of.pop(root, ()):
            regions.pop(address, None)

    def heap_registered(self, root: int) -> bool:
        return root in self.tables["heap"]

    def in_heap(self, start: int, end: int) -> bool:
        """Whether ``[start, end)`` meets a registered MSTX heap (memory that only its regions make legal)."""
        return any(h.address < end and start < h.end for h in self.tables["heap"].values())

    @property
    def annotations(self) -> IntervalSet:
        """The GM that framework and user annotations (EXTRA, MANUAL: msSanitizer's DFX table) cover."""
        return self.unions["annotation"].set

    def in_device_memory(self, address: int) -> bool:
        """Whether ``address`` lies in a live device allocation (where an MSTX heap must start)."""
        device = self.unions["device"].set
        return bool(device.covered(np.array([address], np.uint64), np.array([address + 1], np.uint64))[0])

    def live(self) -> list[Allocation]:
        return sorted((a for t in self.tables.values() for a in t.values()), key=lambda a: (a.serial, a.address))

    @property
    def legal(self) -> IntervalSet:
        """Legal GM: device memory and annotations, kept up to date per host op; with MSTX heaps or regions,
        rebuilt once after the heap changed rather than on every host op."""
        if not self.tables["heap"] and not self.tables["region"]:
            return self._memory
        if self._legal is None:
            base = self._memory
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
