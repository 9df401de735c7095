"""The session's device allocations as host hooks reported them (reference §2.1 "Heap block manager")."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sanitizerd.detectors._intervals import IntervalSet

# Sources whose allocations are real device memory and so can leak. EXTRA/MANUAL are annotations of tensors
# inside real allocations (msSanitizer's DFX table), and never leak.
LEAKABLE_SOURCES = frozenset({"bypass", "hal", "rt", "acl"})


@dataclass(frozen=True, slots=True)
class Allocation:
    address: int
    size: int
    source: str
    serial: int
    location: int
    module: int


class Heap:
    """Live allocations by address, and the GM ranges they make legal."""

    __slots__ = ("_legal", "blocks")

    def __init__(self) -> None:
        self.blocks: dict[int, Allocation] = {}
        self._legal: IntervalSet | None = IntervalSet()

    def malloc(self, allocation: Allocation) -> bool:
        """Record an allocation; False if one already starts there (msSanitizer ignores a double malloc)."""
        if allocation.address in self.blocks:
            return False
        self.blocks[allocation.address] = allocation
        self._legal = None
        return True

    def free(self, address: int) -> Allocation | None:
        """Forget an allocation; None when nothing was allocated at ``address`` (an illegal free)."""
        allocation = self.blocks.pop(address, None)
        if allocation is not None:
            self._legal = None
        return allocation

    @property
    def legal(self) -> IntervalSet:
        """Union of live allocations, rebuilt once after the heap changed rather than on every host op."""
        if self._legal is None:
            blocks = self.blocks.values()
            starts = np.fromiter((b.address for b in blocks), dtype=np.uint64, count=len(self.blocks))
            sizes = np.fromiter((b.size for b in blocks), dtype=np.uint64, count=len(self.blocks))
            self._legal = IntervalSet(starts, starts + sizes)
        return self._legal

    def leaks(self) -> list[Allocation]:
        return sorted(
            (b for b in self.blocks.values() if b.source in LEAKABLE_SOURCES),
            key=lambda b: (b.serial, b.address),
        )
