"""The heap's legal GM, kept up to date per malloc and free, against a model rebuilt from the live allocations."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from sanitizerd.detectors._heap import Allocation, Heap

SOURCES = ["acl", "hal", "extra", "manual", "mstx_heap", "mstx_region"]
TABLE = {"acl": "device", "hal": "device", "extra": "annotation", "manual": "annotation", "mstx_heap": "heap",
         "mstx_region": "region"}  # fmt: skip


def model_legal(live: dict[tuple[str, int], Allocation]) -> set[int]:
    def table(name: str) -> set[int]:
        return {b for (t, _), a in live.items() if t == name for b in range(a.address, a.end)}

    return ((table("device") | table("annotation")) - table("heap")) | table("region")


steps = st.lists(
    st.tuples(st.sampled_from(["malloc", "free"]), st.sampled_from(SOURCES), st.integers(0, 40), st.integers(0, 24)),
    min_size=1,
    max_size=80,
)


class TestLegalAgainstModel:
    @settings(max_examples=300, deadline=None, database=None)
    @given(steps=steps, with_pools=st.booleans())
    def test_legal_bytes_match_the_live_allocations(
        self, steps: list[tuple[str, str, int, int]], with_pools: bool
    ) -> None:
        """Overlapping allocations, annotations inside device memory, frees in any order: legal GM is always the
        union the live allocations make (device memory and annotations, minus MSTX heaps, plus regions)."""
        heap, live = Heap(), {}
        for op, source, slot, size in steps:
            if not with_pools and source.startswith("mstx"):
                source = "acl"
            address = 0x100 + slot * 8
            key = (TABLE[source], address)
            if op == "malloc":
                if heap.malloc(Allocation(address, size, source, 0, 0, -1)):
                    live[key] = Allocation(address, size, source, 0, 0, -1)
            else:
                freed = heap.free(address, source)
                assert (freed is not None) == (key in live)
                gone = live.pop(key, None)
                if gone is not None and TABLE[source] == "device":
                    for pool in ("heap", "region"):  # freeing device memory drops the pools inside it
                        for k in [k for k in live if k[0] == pool and gone.address <= k[1] < gone.end]:
                            del live[k]
            legal = heap.legal
            assert {
                b for s, e in zip(legal.starts.tolist(), legal.ends.tolist(), strict=True) for b in range(s, e)
            } == (model_legal(live))


class TestRoots:
    def test_unregistering_a_heap_drops_the_regions_carved_from_it(self) -> None:
        heap = Heap()
        heap.malloc(Allocation(0x1000, 0x1000, "acl", 1, 0, -1))
        heap.malloc(Allocation(0x1400, 0x800, "mstx_heap", 2, 0, -1))
        heap.malloc(Allocation(0x1400, 0x100, "mstx_region", 3, 0, -1, root=0x1400))
        heap.malloc(Allocation(0x1500, 0x100, "mstx_region", 4, 0, -1, root=0x1400))
        heap.malloc(Allocation(0x1E00, 0x100, "mstx_region", 5, 0, -1))  # no root heap
        assert heap.free(0x1400, "mstx_heap") is not None
        assert heap.free(0x1400, "mstx_region") is None  # illegal free: dropped with its heap
        assert heap.free(0x1500, "mstx_region") is None
        assert heap.free(0x1E00, "mstx_region") is not None
        assert heap.regions_of == {}

    def test_freeing_device_memory_drops_its_heaps_and_their_regions(self) -> None:
        heap = Heap()
        heap.malloc(Allocation(0x1000, 0x1000, "acl", 1, 0, -1))
        heap.malloc(Allocation(0x1400, 0x800, "mstx_heap", 2, 0, -1))
        heap.malloc(
            Allocation(0x3000, 0x100, "mstx_region", 3, 0, -1, root=0x1400)
        )  # regions are not checked to lie inside
        assert heap.free(0x1000, "acl") is not None
        assert heap.free(0x3000, "mstx_region") is None
        assert heap.regions_of == {}
