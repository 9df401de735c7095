"""The session's device allocations as host hooks reported them (reference §2.1 "Heap block manager").

Like msSanitizer, allocations live in separate tables by where they were reported: real device memory
(HAL/RT/ACL, and BYPASS), framework tensor annotations (EXTRA, MANUAL), and MSTX pools. A free only
touches the table of its own source, so a tensor annotation at a buffer's address never frees the buffer.
Unlike msSanitizer, legality is the union of all tables rather than one "current scope" (docs/design.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sanitizerd.detectors._intervals import IntervalSet

_TABLE_OF_SOURCE = {
    "bypass": "device",
    "hal": "device",
    "rt": "device",
    "acl": "device",
    "extra": "annotation",
    "manual": "annotation",
    "mstx_heap": "mstx",
    "mstx_region": "mstx",
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


class Heap:
    """Live allocations by table and address, and the GM ranges they make legal."""

    __slots__ = ("_legal", "tables")

    def __init__(self) -> None:
        self.tables: dict[str, dict[int, Allocation]] = {"device": {}, "annotation": {}, "mstx": {}}
        self._legal: IntervalSet | None = IntervalSet()

    def _table(self, source: str) -> dict[int, Allocation]:
        return self.tables[_TABLE_OF_SOURCE.get(source, LEAKING_TABLE)]

    def malloc(self, allocation: Allocation) -> bool:
        """Record an allocation; False if its table already has one there (msSanitizer ignores a double malloc)."""
        table = self._table(allocation.source)
        if allocation.address in table:
            return False
        table[allocation.address] = allocation
        self._legal = None
        return True

    def free(self, address: int, source: str) -> Allocation | None:
        """Forget an allocation; None when its table has nothing at ``address`` (an illegal free)."""
        allocation = self._table(source).pop(address, None)
        if allocation is not None:
            self._legal = None
        return allocation

    def live(self) -> list[Allocation]:
        return sorted((a for t in self.tables.values() for a in t.values()), key=lambda a: (a.serial, a.address))

    @property
    def legal(self) -> IntervalSet:
        """Union of live allocations, rebuilt once after the heap changed rather than on every host op."""
        if self._legal is None:
            blocks = [a for table in self.tables.values() for a in table.values()]
            starts = np.fromiter((b.address for b in blocks), dtype=np.uint64, count=len(blocks))
            sizes = np.fromiter((b.size for b in blocks), dtype=np.uint64, count=len(blocks))
            self._legal = IntervalSet(starts, starts + sizes)
        return self._legal

    def leaks(self) -> list[Allocation]:
        return sorted(self.tables[LEAKING_TABLE].values(), key=lambda b: (b.serial, b.address))
