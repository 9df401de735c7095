"""memcheck driven directly: a SessionContext, hand-built event arrays, host operations (reference §2.1, §1.5,
§1.6). No session, no event loop."""

from __future__ import annotations

import numpy as np
import pytest

from client_shim.events import BlockType, EventKind, Pipe, Space, accesses, make_events, syncs
from sanitizerd.chips import chip_named
from sanitizerd.detectors import DETECTORS, create_detectors
from sanitizerd.detectors.base import KernelLaunch, SessionContext
from sanitizerd.detectors.memcheck import Memcheck
from sanitizerd_protocol.messages import Config, HostOp, Location
from sanitizerd_protocol.model import Finding, Frame

KiB = 1024
READ, WRITE = EventKind.READ, EventKind.WRITE
GM_BASE = 0x12C0_C001_0000


def context(chip: str = "910B1", **config: object) -> SessionContext:
    return SessionContext(
        job="demo",
        session=7,
        pid=1234,
        device=1,
        chip=chip_named(chip),
        config=Config(**config),  # type: ignore[arg-type]
    )


def memcheck(chip: str = "910B1", **config: object) -> Memcheck:
    return Memcheck(context(chip, **config))


def malloc(mc: Memcheck, address: int, size: int, source: str = "acl", serial: int = 0, **kw: object) -> None:
    assert mc.host_op(HostOp(op="malloc", address=address, size=size, source=source, serial=serial, **kw)) == []  # type: ignore[arg-type]


def run_kernel(mc: Memcheck, *batches: np.ndarray, name: str = "add_custom") -> list[Finding]:
    """One kernel launch: begin, every batch, end; the kernel's findings."""
    mc.kernel_begin(KernelLaunch(kernel=1, name=name, block_dim=8, kernel_type="aiv"))
    for batch in batches:
        mc.check(batch)
    return mc.kernel_end()


def only(findings: list[Finding]) -> Finding:
    assert len(findings) == 1, findings
    return findings[0]


def summary(finding: Finding) -> tuple[str, str, int, int]:
    return finding.kind, finding.space, finding.address, finding.size


class TestRegistration:
    def test_registered_and_created_by_config(self) -> None:
        """memcheck is registered under its name and created when the config's tools name it."""
        assert DETECTORS["memcheck"] is Memcheck
        assert [type(d) for d in create_detectors(context(tools=["memcheck"]))] == [Memcheck]
        assert not any(type(d) is Memcheck for d in create_detectors(context(tools=["racecheck"])))


class TestGmBounds:
    @pytest.fixture
    def mc(self) -> Memcheck:
        checker = memcheck()
        malloc(checker, GM_BASE, 0x100)
        return checker

    def test_in_bounds_access_is_silent(self, mc: Memcheck) -> None:
        """Reads and writes wholly inside an allocation produce no finding."""
        events = np.concatenate(
            [
                accesses(READ, Space.GM, GM_BASE, 0x100),
                accesses(WRITE, Space.GM, GM_BASE + 0x80, 32, block_num=4),
                accesses(READ, Space.GM, GM_BASE + 0xFF, 1),
            ]
        )
        assert run_kernel(mc, events) == []

    def test_read_past_the_end(self, mc: Memcheck) -> None:
        """A read running past an allocation's end is illegal_read of the bad bytes, at the access start."""
        finding = only(run_kernel(mc, accesses(READ, Space.GM, GM_BASE + 0xF0, 0x40, serial=10, pc=0x77C)))
        assert summary(finding) == ("illegal_read", "GM", GM_BASE + 0xF0, 0x30)
        assert finding.severity == "error"
        assert finding.kernel == "add_custom"
        assert finding.serial == 10 and finding.pc == 0x77C
        assert finding.job == "demo" and finding.session == 7 and finding.pid == 1234 and finding.device == 1

    def test_write_past_the_end(self, mc: Memcheck) -> None:
        """A write running past an allocation's end is illegal_write."""
        finding = only(run_kernel(mc, accesses(WRITE, Space.GM, GM_BASE + 0xFF, 2)))
        assert summary(finding) == ("illegal_write", "GM", GM_BASE + 0xFF, 1)

    def test_read_before_the_start(self, mc: Memcheck) -> None:
        """An access starting before an allocation counts only the bytes before it."""
        finding = only(run_kernel(mc, accesses(READ, Space.GM, GM_BASE - 8, 16)))
        assert summary(finding) == ("illegal_read", "GM", GM_BASE - 8, 8)

    def test_access_fully_outside(self, mc: Memcheck) -> None:
        """An access touching no allocation reports all its bytes."""
        finding = only(run_kernel(mc, accesses(WRITE, Space.GM, GM_BASE + 0x1000, 224)))
        assert summary(finding) == ("illegal_write", "GM", GM_BASE + 0x1000, 224)

    def test_no_allocation_at_all(self) -> None:
        """With an empty heap every GM access is illegal."""
        finding = only(run_kernel(memcheck(), accesses(READ, Space.GM, 0x1000, 64)))
        assert summary(finding) == ("illegal_read", "GM", 0x1000, 64)

    def test_spanning_two_adjacent_allocations_is_legal(self, mc: Memcheck) -> None:
        """An access crossing the boundary of two touching allocations is legal."""
        malloc(mc, GM_BASE + 0x100, 0x100)
        assert run_kernel(mc, accesses(READ, Space.GM, GM_BASE + 0xC0, 0x80)) == []

    def test_spanning_a_gap_counts_the_gap(self, mc: Memcheck) -> None:
        """An access crossing a gap between two allocations reports exactly the gap's bytes."""
        malloc(mc, GM_BASE + 0x140, 0x100)
        finding = only(run_kernel(mc, accesses(READ, Space.GM, GM_BASE + 0xC0, 0x100)))
        assert summary(finding) == ("illegal_read", "GM", GM_BASE + 0xC0, 0x40)

    def test_strided_gaps_outside_allocations_are_legal(self) -> None:
        """A strided pattern whose blocks are all inside allocations is legal even though its gaps are not."""
        mc = memcheck()
        for k in range(4):
            malloc(mc, GM_BASE + k * 0x100, 0x40)
        events = accesses(READ, Space.GM, GM_BASE, 0x40, block_num=4, block_stride=4)
        events2 = accesses(WRITE, Space.GM, GM_BASE, 32, block_num=2, repeat=4, repeat_stride=8)
        assert run_kernel(mc, events, events2) == []

    def test_strided_one_block_outside(self) -> None:
        """A strided pattern with one block outside counts only that block's bytes, at that block."""
        mc = memcheck()
        for k in range(3):
            malloc(mc, GM_BASE + k * 0x100, 0x40)
        events = accesses(READ, Space.GM, GM_BASE, 0x40, block_num=4, block_stride=4, serial=3)
        finding = only(run_kernel(mc, events))
        assert summary(finding) == ("illegal_read", "GM", GM_BASE + 0x300, 0x40)

    def test_strided_repeats_outside(self) -> None:
        """Repeats of a contiguous row that fall outside count only their rows' bytes."""
        mc = memcheck()
        malloc(mc, GM_BASE, 0x100)
        events = accesses(WRITE, Space.GM, GM_BASE, 32, block_num=2, repeat=4, repeat_stride=4)
        finding = only(run_kernel(mc, events))
        # Rows at +0, +0x80, +0x100, +0x180: the last two (64 bytes each) are outside.
        assert summary(finding) == ("illegal_write", "GM", GM_BASE + 0x100, 128)

    def test_stride_zero_blocks_are_counted_once(self) -> None:
        """Blocks repeated at the same address (stride 0) count their bytes once."""
        events = accesses(READ, Space.GM, 0x5000, 16, block_num=8, block_stride=0, repeat=5, repeat_stride=0)
        finding = only(run_kernel(memcheck(), events))
        assert summary(finding) == ("illegal_read", "GM", 0x5000, 16)

    def test_free_makes_memory_illegal_again(self, mc: Memcheck) -> None:
        """After a free, accesses to the freed range are illegal."""
        assert mc.host_op(HostOp(op="free", address=GM_BASE)) == []
        finding = only(run_kernel(mc, accesses(READ, Space.GM, GM_BASE, 0x10)))
        assert summary(finding) == ("illegal_read", "GM", GM_BASE, 0x10)

    def test_one_bad_access_among_many(self, mc: Memcheck) -> None:
        """In a batch of legal accesses, only the bad one is reported, with its own serial and block."""
        n = 100
        events = accesses(
            READ, Space.GM, GM_BASE + np.arange(n, dtype=np.uint64) % 0x80, 16, serial=np.arange(n), block_id=7
        )
        events[42]["address"] = GM_BASE + 0xF8
        finding = only(run_kernel(mc, events))
        assert summary(finding) == ("illegal_read", "GM", GM_BASE + 0xF8, 8)
        assert finding.serial == 42
        assert finding.blocks == {"aiv": [7]}

    def test_wild_64_bit_address_is_reported_as_itself(self) -> None:
        """An access at an address above the 48-bit GM space is reported at its real address, whole."""
        address = 0xFFFF_8000_0000_0000
        finding = only(run_kernel(memcheck(), accesses(READ, Space.GM, address, 32)))
        assert summary(finding) == ("illegal_read", "GM", address, 32)


class TestOnChipBounds:
    @pytest.mark.parametrize(
        ("chip", "space", "size"),
        [
            ("910B1", Space.UB, 192 * KiB),
            ("Ascend910B4", Space.UB, 192 * KiB),
            ("310P", Space.UB, 256 * KiB),
            ("910B1", Space.L0A, 64 * KiB),
            ("910B1", Space.L0B, 64 * KiB),
            ("910B1", Space.L0C, 128 * KiB),
            ("310P", Space.L0C, 256 * KiB),
            ("910B1", Space.L1, 512 * KiB),
            ("310P", Space.L1, 1024 * KiB),
            ("910_premium_a", Space.L1, 1024 * KiB),
            ("910B1", Space.PRIVATE, 75 * 32 * KiB),
            ("310P", Space.PRIVATE, 18 * 32 * KiB),
        ],
    )
    def test_limit_is_exact(self, chip: str, space: Space, size: int) -> None:
        """An access ending exactly at the chip's size of the space is legal; one byte further is not."""
        mc = memcheck(chip)
        at_limit = accesses(READ, space, size - 1024, 1024, serial=1)
        assert run_kernel(mc, at_limit) == []
        past = accesses(WRITE, space, size - 1024, 1025, serial=2, align=1)
        finding = only(run_kernel(mc, past))
        assert summary(finding) == ("illegal_write", space.name, size - 1024, 1)

    def test_ub_size_depends_on_chip(self) -> None:
        """The same UB access is legal on 310P (256 KiB) and illegal on 910B1 (192 KiB)."""
        events = accesses(READ, Space.UB, 192 * KiB, 32)
        assert run_kernel(memcheck("310P"), events) == []
        assert summary(only(run_kernel(memcheck("910B1"), events))) == ("illegal_read", "UB", 192 * KiB, 32)

    def test_access_wholly_past_the_space(self) -> None:
        """An on-chip access wholly past the space reports all its bytes at its start."""
        finding = only(run_kernel(memcheck(), accesses(READ, Space.L0A, 64 * KiB, 512, block_num=2)))
        assert summary(finding) == ("illegal_read", "L0A", 64 * KiB, 1024)

    @pytest.mark.parametrize("space", [Space.BT, Space.FB])
    def test_bt_and_fb_are_unchecked(self, space: Space) -> None:
        """BT and FB accesses are never out of bounds nor misaligned."""
        events = accesses(WRITE, space, 0x7FFF_FFFF + 3, 4096, repeat=8, repeat_stride=1)
        assert run_kernel(memcheck(), events) == []

    def test_on_chip_spaces_ignore_the_gm_heap(self) -> None:
        """An on-chip access is not judged by GM allocations, and a GM access not by chip sizes."""
        mc = memcheck()
        malloc(mc, 0, 0x100)
        assert run_kernel(mc, accesses(READ, Space.UB, 0x1000, 32)) == []
        finding = only(run_kernel(mc, accesses(READ, Space.GM, 0x1000, 32)))
        assert summary(finding) == ("illegal_read", "GM", 0x1000, 32)


class TestAlignment:
    @pytest.mark.parametrize(
        ("space", "alignment"),
        [(Space.UB, 32), (Space.L1, 32), (Space.L0A, 512), (Space.L0B, 512), (Space.L0C, 512)],
    )
    def test_default_alignment_by_space(self, space: Space, alignment: int) -> None:
        """Each on-chip space has its default alignment: a start off it is misaligned_access."""
        mc = memcheck()
        assert run_kernel(mc, accesses(READ, space, alignment * 3, 32)) == []
        finding = only(run_kernel(mc, accesses(READ, space, alignment * 3 + alignment // 2, 32, serial=33)))
        assert summary(finding) == ("misaligned_access", space.name, alignment * 3 + alignment // 2, 32)
        assert finding.severity == "error" and finding.serial == 33

    @pytest.mark.parametrize("space", [Space.GM, Space.PRIVATE])
    def test_gm_and_private_never_misaligned(self, space: Space) -> None:
        """GM and PRIVATE accesses are never misaligned, whatever the address."""
        mc = memcheck()
        malloc(mc, 0x1001, 0x100)
        assert run_kernel(mc, accesses(READ, space, 0x1003, 13, block_num=2, repeat=2, repeat_stride=5)) == []

    def test_size_reported_is_block_size(self) -> None:
        """The misaligned size is the block size, not the extent (msSanitizer's example: size 13 at 0x6)."""
        finding = only(run_kernel(memcheck(), accesses(READ, Space.UB, 0x6, 13, block_num=4, repeat=2)))
        assert summary(finding) == ("misaligned_access", "UB", 0x6, 13)

    def test_misaligned_block_stride(self) -> None:
        """An aligned start whose block stride puts the second block off is reported at that block."""
        finding = only(run_kernel(memcheck(), accesses(WRITE, Space.UB, 0x100, 48, block_num=3)))
        assert summary(finding) == ("misaligned_access", "UB", 0x100 + 48, 48)

    def test_misaligned_repeat_stride(self) -> None:
        """Aligned blocks whose repeat stride puts the second repeat off are reported at that repeat."""
        events = accesses(READ, Space.UB, 0x200, 16, block_num=2, block_stride=2, repeat=2, repeat_stride=5)
        finding = only(run_kernel(memcheck(), events))
        assert summary(finding) == ("misaligned_access", "UB", 0x200 + 5 * 16, 16)

    def test_misaligned_l0_block_stride(self) -> None:
        """On L0A a 256-byte block stride breaks the 512-byte rule at the second block."""
        finding = only(run_kernel(memcheck(), accesses(READ, Space.L0A, 1024, 256, block_num=2)))
        assert summary(finding) == ("misaligned_access", "L0A", 1024 + 256, 256)

    def test_align_override_tightens(self) -> None:
        """An align field on a GM access demands that alignment (e.g. a scalar 8-byte load)."""
        mc = memcheck()
        malloc(mc, 0x1000, 0x100)
        assert run_kernel(mc, accesses(READ, Space.GM, 0x1008, 8, align=8)) == []
        finding = only(run_kernel(mc, accesses(READ, Space.GM, 0x1004, 8, align=8)))
        assert summary(finding) == ("misaligned_access", "GM", 0x1004, 8)

    def test_align_override_relaxes(self) -> None:
        """An align field smaller than the space's default replaces it."""
        assert run_kernel(memcheck(), accesses(READ, Space.UB, 0x104, 4, align=4)) == []
        finding = only(run_kernel(memcheck(), accesses(READ, Space.UB, 0x102, 4, align=4)))
        assert summary(finding) == ("misaligned_access", "UB", 0x102, 4)

    def test_misaligned_and_out_of_bounds_both_reported(self) -> None:
        """One access can be both misaligned and out of bounds: two findings, in serial order."""
        findings = run_kernel(memcheck(), accesses(READ, Space.UB, 192 * KiB - 16, 32, serial=4))
        assert sorted(f.kind for f in findings) == ["illegal_read", "misaligned_access"]

    def test_empty_access_is_not_checked(self) -> None:
        """An access with repeat 0 is neither misaligned nor out of bounds."""
        events = accesses(READ, Space.UB, 3, 32, repeat=0)
        assert run_kernel(memcheck(), events) == []


class TestKernelFolding:
    def test_same_site_from_several_blocks(self) -> None:
        """The same error from several blocks is one finding listing the blocks and the smallest serial."""
        events = accesses(READ, Space.GM, 0x5000, 64, block_id=[3, 0, 1, 0], serial=[30, 12, 20, 40], pc=0x77C)
        finding = only(run_kernel(memcheck(), events))
        assert finding.blocks == {"aiv": [0, 1, 3]}
        assert finding.serial == 12
        assert finding.count == 4

    def test_same_site_across_batches_and_block_types(self) -> None:
        """Folding spans batches and keeps aiv and aic blocks apart."""
        aiv = accesses(READ, Space.GM, 0x5000, 64, block_id=[2, 1], serial=[9, 8])
        aic = accesses(READ, Space.GM, 0x5000, 64, block_id=[0], block_type=BlockType.AIC, serial=[5])
        finding = only(run_kernel(memcheck(), aiv, aic))
        assert finding.blocks == {"aiv": [1, 2], "aic": [0]}
        assert finding.serial == 5
        assert finding.count == 3

    def test_different_sites_are_separate_and_ordered_by_serial(self) -> None:
        """Different addresses, pcs or kinds are separate findings, ordered by serial number."""
        events = np.concatenate(
            [
                accesses(WRITE, Space.GM, 0x6000, 8, serial=50),
                accesses(READ, Space.GM, 0x5000, 8, serial=30, pc=0x10),
                accesses(READ, Space.GM, 0x5000, 8, serial=20, pc=0x20),
                accesses(READ, Space.UB, 0x3, 32, serial=10),
            ]
        )
        findings = run_kernel(memcheck(), events)
        assert [(f.kind, f.serial) for f in findings] == [
            ("misaligned_access", 10),
            ("illegal_read", 20),
            ("illegal_read", 30),
            ("illegal_write", 50),
        ]

    def test_findings_reset_between_kernels(self) -> None:
        """Each kernel reports its own findings: the same site is reported again in the next kernel."""
        mc = memcheck()
        first = only(run_kernel(mc, accesses(READ, Space.GM, 0x5000, 8, serial=1), name="k1"))
        assert first.kernel == "k1"
        assert run_kernel(mc, accesses(READ, Space.UB, 0, 32), name="k2") == []
        again = only(run_kernel(mc, accesses(READ, Space.GM, 0x5000, 8, serial=2, block_id=4), name="k3"))
        assert again.kernel == "k3"
        assert again.blocks == {"aiv": [4]} and again.serial == 2 and again.count == 1

    def test_many_events_of_one_site(self) -> None:
        """Tens of thousands of hits of one site from many blocks fold into one finding with their count."""
        n = 70_000
        events = accesses(READ, Space.GM, 0x5000, 4, block_id=np.arange(n) % 40, serial=np.arange(n) + 100)
        finding = only(run_kernel(memcheck(), events[: n // 2], events[n // 2 :]))
        assert finding.count == n
        assert finding.blocks == {"aiv": list(range(40))}
        assert finding.serial == 100

    def test_location_becomes_stack(self) -> None:
        """A finding's location id resolves to its frame and callers through the session's table."""
        ctx = context()
        ctx.locations[1] = Location(id=1, file="impl.h", line=58, column=9, function="copy", callers=[2])
        ctx.locations[2] = Location(id=2, file="add_custom.cpp", line=18, column=5)
        mc = Memcheck(ctx)
        finding = only(run_kernel(mc, accesses(READ, Space.GM, 0x5000, 8, location=1)))
        assert finding.location == Frame(file="impl.h", line=58, column=9, function="copy")
        assert finding.stack == [finding.location, Frame(file="add_custom.cpp", line=18, column=5)]


class TestIgnoredEvents:
    def test_repeat_zero_events_are_ignored(self) -> None:
        """Accesses with repeat 0 touch nothing, wherever they point."""
        events = accesses(WRITE, Space.GM, [0x5000, 0xFFFF_FFFF_0000], 64, block_num=4, repeat=0)
        assert run_kernel(memcheck(), events) == []

    def test_zero_blocks_or_zero_size_are_ignored(self) -> None:
        """Accesses with no blocks or zero-byte blocks touch nothing."""
        events = np.concatenate([accesses(READ, Space.GM, 0x5000, 64, block_num=0), accesses(READ, Space.UB, 3, 0)])
        assert run_kernel(memcheck(), events) == []

    def test_sync_events_are_ignored(self) -> None:
        """Sync events are not memory accesses, even when their unused fields look like a bad access."""
        events = np.concatenate(
            [
                syncs(EventKind.SET_FLAG, Pipe.MTE2, Pipe.V, 1),
                syncs(EventKind.WAIT_FLAG, Pipe.MTE2, Pipe.V, 1),
                syncs(EventKind.PIPE_BARRIER, Pipe.ALL),
                syncs(EventKind.CROSS_SET, Pipe.MTE3, event_id=3, mode=2),
                syncs(EventKind.CROSS_WAIT, Pipe.S, event_id=3),
                syncs(EventKind.SET_ATOMIC, Pipe.S, mode=1),
            ]
        )
        events["address"] = 0x3
        events["block_size"] = 4096
        events["space"] = Space.UB
        assert run_kernel(memcheck(), events) == []

    def test_sync_events_mixed_with_memory(self) -> None:
        """Among sync events, the bad memory access is still found, with its own serial."""
        sync = make_events(kind=EventKind.SET_FLAG, address=0x3, block_size=64, space=Space.UB, serial=1)
        bad = accesses(READ, Space.GM, 0x5000, 8, serial=2)
        finding = only(run_kernel(memcheck(), np.concatenate([sync, bad, sync])))
        assert summary(finding) == ("illegal_read", "GM", 0x5000, 8)
        assert finding.serial == 2


class TestHostOps:
    def test_illegal_free_of_unknown_address(self) -> None:
        """Freeing an address never allocated is illegal_free at that address, host-side (no kernel)."""
        ctx = context()
        ctx.locations[4] = Location(id=4, file="add_custom.cpp", line=84)
        finding = only(Memcheck(ctx).host_op(HostOp(op="free", address=0x1240_8001_3000, serial=63, location=4)))
        assert finding.kind == "illegal_free" and finding.severity == "error"
        assert finding.address == 0x1240_8001_3000 and finding.serial == 63
        assert finding.kernel is None and finding.blocks == {}
        assert finding.location == Frame(file="add_custom.cpp", line=84)

    def test_double_free(self) -> None:
        """The second free of one allocation is illegal_free."""
        mc = memcheck()
        malloc(mc, 0x1000, 64)
        assert mc.host_op(HostOp(op="free", address=0x1000)) == []
        finding = only(mc.host_op(HostOp(op="free", address=0x1000, serial=9)))
        assert (finding.kind, finding.address, finding.serial) == ("illegal_free", 0x1000, 9)

    def test_free_inside_an_allocation_is_illegal(self) -> None:
        """Freeing an address inside (not at the start of) an allocation is illegal_free."""
        mc = memcheck()
        malloc(mc, 0x1000, 64)
        assert only(mc.host_op(HostOp(op="free", address=0x1010))).kind == "illegal_free"

    @pytest.mark.parametrize(
        ("op", "kind"), [("load", "illegal_read"), ("store", "illegal_write"), ("memset", "illegal_write")]
    )
    def test_host_access_bounds(self, op: str, kind: str) -> None:
        """Host loads, stores and memsets past an allocation report their bad bytes at the address."""
        mc = memcheck()
        malloc(mc, 0x1000, 0x100)
        assert mc.host_op(HostOp(op=op, address=0x1000, size=0x100)) == []  # type: ignore[arg-type]
        finding = only(mc.host_op(HostOp(op=op, address=0x10C0, size=0x80, serial=5)))  # type: ignore[arg-type]
        assert (finding.kind, finding.address, finding.size, finding.serial) == (kind, 0x10C0, 0x40, 5)
        assert finding.kernel is None

    def test_host_memcpy_checks_both_sides(self) -> None:
        """memcpy reads its source and writes its destination; each side reports its own bad bytes."""
        mc = memcheck()
        malloc(mc, 0x1000, 0x100)
        malloc(mc, 0x2000, 0x100)
        assert mc.host_op(HostOp(op="memcpy", address=0x2000, src=0x1000, size=0x100)) == []
        findings = mc.host_op(HostOp(op="memcpy", address=0x20F0, src=0x10E0, size=0x40))
        assert sorted((f.kind, f.address, f.size) for f in findings) == [
            ("illegal_read", 0x10E0, 0x20),
            ("illegal_write", 0x20F0, 0x30),
        ]

    def test_zero_size_host_access_checks_the_address(self) -> None:
        """A zero-size host access is legal inside an allocation and reports size 1 outside."""
        mc = memcheck()
        malloc(mc, 0x1000, 0x100)
        assert mc.host_op(HostOp(op="load", address=0x1000, size=0)) == []
        finding = only(mc.host_op(HostOp(op="load", address=0x1100, size=0)))
        assert (finding.address, finding.size) == (0x1100, 1)

    def test_double_malloc_is_ignored(self) -> None:
        """A second malloc at a live address is ignored: the first size stays in force."""
        mc = memcheck()
        malloc(mc, 0x1000, 0x10)
        malloc(mc, 0x1000, 0x100)
        assert only(run_kernel(mc, accesses(READ, Space.GM, 0x1000, 0x20))).size == 0x10

    def test_extra_record_does_not_replace_runtime_block(self) -> None:
        """Freeing an extra (tensor) record made at a live acl block's address leaves the acl block allocated."""
        mc = memcheck()
        malloc(mc, 0x1000, 0x100, source="acl")
        malloc(mc, 0x1000, 0x40, source="extra")
        assert mc.host_op(HostOp(op="free", address=0x1000, source="extra")) == []
        assert mc.host_op(HostOp(op="load", address=0x1000, size=0x100)) == []
        assert mc.host_op(HostOp(op="free", address=0x1000, source="acl")) == []


class TestLeaks:
    def test_no_leak_report_without_leak_check(self) -> None:
        """Live allocations are not reported when leak_check is off."""
        mc = memcheck()
        malloc(mc, 0x1000, 100)
        assert mc.finish() == []

    def test_leaks_of_runtime_sources_only(self) -> None:
        """With leak_check, live hal/rt/acl/bypass blocks leak in serial order; extra/manual ones never do."""
        mc = memcheck(leak_check=True)
        for k, source in enumerate(["extra", "acl", "manual", "rt", "bypass", "hal"]):
            malloc(mc, 0x10000 * (k + 1), 100 + k, source=source, serial=60 - k)
        malloc(mc, 0x900000, 7, source="acl", serial=1)
        assert mc.host_op(HostOp(op="free", address=0x900000)) == []
        findings = mc.finish()
        assert [(f.kind, f.address, f.size, f.serial) for f in findings] == [
            ("memory_leak", 0x60000, 105, 55),
            ("memory_leak", 0x50000, 104, 56),
            ("memory_leak", 0x40000, 103, 57),
            ("memory_leak", 0x20000, 101, 59),
        ]
        assert all(f.severity == "error" and f.kernel is None for f in findings)  # printed as ERROR: LeakCheck

    def test_leak_keeps_allocation_site_and_module(self) -> None:
        """A leak names the allocation's location and its module."""
        ctx = context(leak_check=True)
        ctx.locations[3] = Location(id=3, file="add_custom.cpp", line=14)
        mc = Memcheck(ctx)
        malloc(mc, 0x1240_8001_3000, 100, serial=37, location=3, module=2)
        finding = only(mc.finish())
        assert finding.location == Frame(file="add_custom.cpp", line=14)
        assert finding.module == 2


class TestUnusedMemory:
    def test_off_by_default(self) -> None:
        """Without check_unused_memory, never-written blocks are not reported."""
        mc = memcheck()
        malloc(mc, 0x1000, 0x100)
        assert mc.host_op(HostOp(op="free", address=0x1000)) == []
        malloc(mc, 0x2000, 0x100)
        assert mc.finish() == []

    def test_counts_bytes_never_written(self) -> None:
        """Unused bytes are those not written by kernel GM writes, host stores, memsets or memcpy targets."""
        mc = memcheck(check_unused_memory=True)
        malloc(mc, 0x1000, 0x400, serial=69)
        malloc(mc, 0x8000, 0x100)
        kernel = np.concatenate(
            [
                accesses(WRITE, Space.GM, 0x1000, 32, block_num=2, repeat=2, repeat_stride=4),  # 0x80 bytes
                accesses(READ, Space.GM, 0x1200, 0x100),  # reads don't count
                accesses(WRITE, Space.UB, 0x1300, 0x100),  # nor on-chip writes at GM-like addresses
                accesses(WRITE, Space.GM, 0x1000, 0x80, repeat=0),  # nor empty ones
            ]
        )
        assert run_kernel(mc, kernel) == []
        assert mc.host_op(HostOp(op="store", address=0x1100, size=0x40)) == []
        assert mc.host_op(HostOp(op="memset", address=0x1180, size=0x40)) == []
        assert mc.host_op(HostOp(op="memcpy", address=0x1200, src=0x8000, size=0x40)) == []
        assert mc.host_op(HostOp(op="load", address=0x1300, size=0x40)) == []
        finding = only(mc.host_op(HostOp(op="free", address=0x1000)))
        assert finding.kind == "unused_memory" and finding.severity == "warning"
        assert (finding.address, finding.size, finding.serial) == (0x1000, 0x400 - 0x80 - 0x40 * 3, 69)

    def test_fully_written_block_is_not_reported(self) -> None:
        """A block written in full is not unused."""
        mc = memcheck(check_unused_memory=True)
        malloc(mc, 0x1000, 0x100)
        run_kernel(mc, accesses(WRITE, Space.GM, 0x1000, 0x80), accesses(WRITE, Space.GM, 0x1080, 0x80))
        assert mc.host_op(HostOp(op="free", address=0x1000)) == []

    def test_reported_at_finish_for_live_blocks(self) -> None:
        """Blocks still live at the end are reported with their unused bytes; freed ones are not repeated."""
        mc = memcheck(check_unused_memory=True)
        malloc(mc, 0x1000, 0x100, serial=2)
        malloc(mc, 0x2000, 0x100, serial=1)
        malloc(mc, 0x3000, 0x100, serial=3)
        assert mc.host_op(HostOp(op="store", address=0x2000, size=0x10)) == []
        assert only(mc.host_op(HostOp(op="free", address=0x3000))).size == 0x100
        findings = mc.finish()
        assert [(f.kind, f.address, f.size) for f in findings] == [
            ("unused_memory", 0x2000, 0xF0),
            ("unused_memory", 0x1000, 0x100),
        ]

    def test_unused_and_leak_together(self) -> None:
        """With both options a live, never-written block is reported as unused and as leaked."""
        mc = memcheck(check_unused_memory=True, leak_check=True)
        malloc(mc, 0x1000, 0x100)
        assert sorted(f.kind for f in mc.finish()) == ["memory_leak", "unused_memory"]

    def test_reallocated_block_starts_unwritten(self) -> None:
        """Writes to a freed block do not count for a later allocation at the same address."""
        mc = memcheck(check_unused_memory=True)
        malloc(mc, 0x1000, 0x100)
        assert mc.host_op(HostOp(op="memset", address=0x1000, size=0x100)) == []
        assert mc.host_op(HostOp(op="free", address=0x1000)) == []
        malloc(mc, 0x1000, 0x100, serial=5)
        finding = only(mc.host_op(HostOp(op="free", address=0x1000)))
        assert (finding.kind, finding.address, finding.size, finding.serial) == ("unused_memory", 0x1000, 0x100, 5)


class TestBacktrace:
    def _finding(self, full_backtrace: bool) -> Finding:
        ctx = context(full_backtrace=full_backtrace)
        ctx.locations[1] = Location(id=1, file="add_custom.cpp", line=18, column=5)
        ctx.locations[2] = Location(
            id=2, file="${ASCEND_HOME_PATH}/compiler/tikcpp/tikcfw/impl/kernel_operator_data_copy_impl.h",
            line=58, column=9, callers=[1],
        )  # fmt: skip
        mc = Memcheck(ctx)
        return only(run_kernel(mc, accesses(READ, Space.GM, GM_BASE, 32, location=2)))

    def test_library_frames_hidden_by_default(self) -> None:
        """Without --full-backtrace the AscendC library frame is left out: the stack starts at the user's line."""
        finding = self._finding(full_backtrace=False)
        assert [(f.file, f.line) for f in finding.stack] == [("add_custom.cpp", 18)]
        assert finding.location == Frame(file="add_custom.cpp", line=18, column=5)

    def test_full_backtrace_keeps_them(self) -> None:
        """--full-backtrace yes keeps every frame, innermost (the library's) first."""
        finding = self._finding(full_backtrace=True)
        assert [f.line for f in finding.stack] == [58, 18]

    def test_only_library_frames_are_kept(self) -> None:
        """A stack with nothing but library frames is shown as it is rather than emptied."""
        ctx = context()
        ctx.locations[2] = Location(id=2, file="/opt/ascend-toolkit/latest/kernel_operator.h", line=7)
        finding = only(run_kernel(Memcheck(ctx), accesses(READ, Space.GM, GM_BASE, 32, location=2)))
        assert [f.line for f in finding.stack] == [7]


class TestMstxPools:
    BASE = GM_BASE

    def _memcheck(self) -> Memcheck:
        mc = memcheck()
        malloc(mc, self.BASE, 4096, serial=1)
        return mc

    def _reads(self, mc: Memcheck, *addresses: int) -> list[int]:
        """Which of these 32-byte reads memcheck reports as illegal."""
        events = accesses(READ, Space.GM, np.array(addresses, dtype=np.uint64), 32)
        events["pc"] = np.arange(events.size) + 1  # one site per read
        return sorted(f.address for f in run_kernel(mc, events) if f.kind == "illegal_read")

    def test_registered_heap_is_off_limits(self) -> None:
        """Memory handed to an MSTX heap is illegal to touch until a region is carved out of it."""
        mc = self._memcheck()
        malloc(mc, self.BASE + 1024, 2048, source="mstx_heap")
        assert self._reads(mc, self.BASE, self.BASE + 1024, self.BASE + 3072) == [self.BASE + 1024]

    def test_regions_carve_legal_memory_out_of_the_heap(self) -> None:
        """A region of the heap is legal; the rest of the heap stays illegal."""
        mc = self._memcheck()
        malloc(mc, self.BASE + 1024, 2048, source="mstx_heap")
        malloc(mc, self.BASE + 1024, 256, source="mstx_region")
        assert self._reads(mc, self.BASE + 1024, self.BASE + 1280) == [self.BASE + 1280]

    def test_unregistering_the_heap_gives_it_back(self) -> None:
        """Freeing the heap (its MSTX source) makes its memory legal again."""
        mc = self._memcheck()
        malloc(mc, self.BASE + 1024, 2048, source="mstx_heap")
        assert mc.host_op(HostOp(op="free", address=self.BASE + 1024, source="mstx_heap")) == []
        assert self._reads(mc, self.BASE + 1024) == []

    def test_freeing_device_memory_drops_its_pools(self) -> None:
        """Freeing the real allocation drops the heaps and regions inside it."""
        mc = self._memcheck()
        malloc(mc, self.BASE + 1024, 2048, source="mstx_heap")
        assert mc.host_op(HostOp(op="free", address=self.BASE)) == []
        malloc(mc, self.BASE, 4096)
        assert self._reads(mc, self.BASE + 1024) == []

    def test_heap_outside_device_memory_is_reported(self) -> None:
        """A heap that does not start in device memory is refused with msSanitizer's message."""
        mc = memcheck()
        found = mc.host_op(HostOp(op="malloc", address=0x7000, size=64, source="mstx_heap", serial=4))
        assert [(f.kind, f.detail) for f in found] == [
            ("internal_error", "heap is not in malloc range, heap addr: 0x7000 size: 64")
        ]


class TestMstxRoots:
    """Regions are keyed by the heap they are carved from (msSanitizer's rootAddr, HostOp.root)."""

    BASE = 0x12C0_C000_0000

    def _memcheck(self) -> Memcheck:
        mc = memcheck()
        malloc(mc, self.BASE, 4096, serial=1)
        malloc(mc, self.BASE + 1024, 2048, source="mstx_heap", serial=2)
        malloc(mc, self.BASE + 1024, 256, source="mstx_region", serial=3, root=self.BASE + 1024)
        return mc

    def test_unregistering_a_heap_drops_its_regions_and_a_later_region_free_is_illegal(self) -> None:
        mc = self._memcheck()
        assert mc.host_op(HostOp(op="free", address=self.BASE + 1024, source="mstx_heap", serial=4)) == []
        finding = only(mc.host_op(HostOp(op="free", address=self.BASE + 1024, source="mstx_region", serial=5)))
        assert (finding.kind, finding.address, finding.serial, finding.table) == (
            "illegal_free", self.BASE + 1024, 5, "mstx",
        )  # fmt: skip
        assert "MSTX region" in finding.detail

    def test_regions_of_another_heap_stay(self) -> None:
        """Unregistering one heap leaves the regions of another heap (and rootless ones) alone."""
        mc = self._memcheck()
        malloc(mc, self.BASE + 3072, 512, source="mstx_heap", serial=6)
        malloc(mc, self.BASE + 3072, 128, source="mstx_region", serial=7, root=self.BASE + 3072)
        malloc(mc, self.BASE + 3584, 64, source="mstx_region", serial=8)  # root 0: no heap
        assert mc.host_op(HostOp(op="free", address=self.BASE + 1024, source="mstx_heap")) == []
        assert mc.host_op(HostOp(op="free", address=self.BASE + 3072, source="mstx_region")) == []
        assert mc.host_op(HostOp(op="free", address=self.BASE + 3584, source="mstx_region")) == []

    def test_a_region_of_an_unregistered_heap_is_refused_with_mssanitizers_words(self) -> None:
        mc = memcheck()
        malloc(mc, self.BASE, 4096)
        found = mc.host_op(
            HostOp(op="malloc", address=self.BASE + 64, size=32, source="mstx_region", root=0x2000, serial=3)
        )
        assert [(f.kind, f.detail, f.table) for f in found] == [
            ("internal_error", "add regions error, heap is not registered, addr:2000 size: 32", "mstx")
        ]
        assert only(mc.host_op(HostOp(op="free", address=self.BASE + 64, source="mstx_region"))).kind == (
            "illegal_free"
        )


class TestHostSources:
    """Host loads and stores carry their memory source (MemInfoSrc); the finding says which table judged."""

    BASE = 0x12C0_C000_0000

    def test_a_runtime_store_past_its_buffer_is_judged_by_the_runtime_table(self) -> None:
        mc = memcheck()
        malloc(mc, self.BASE, 0x100)
        finding = only(mc.host_op(HostOp(op="store", address=self.BASE + 0xC0, size=0x80, source="acl")))
        assert (finding.kind, finding.size, finding.table) == ("illegal_write", 0x40, "runtime")

    def test_an_annotated_store_is_judged_by_the_annotations(self) -> None:
        """A MANUAL store that leaves its annotated tensor is reported, though the bytes are device memory (the
        precise per-tensor view, msSanitizer's DFX scope); the same store from the runtime is legal."""
        mc = memcheck()
        malloc(mc, self.BASE, 0x1000)
        malloc(mc, self.BASE, 0x100, source="manual")
        finding = only(mc.host_op(HostOp(op="store", address=self.BASE + 0xC0, size=0x80, source="manual")))
        assert (finding.kind, finding.address, finding.size, finding.table) == (
            "illegal_write", self.BASE + 0xC0, 0x40, "dfx",
        )  # fmt: skip
        assert mc.host_op(HostOp(op="store", address=self.BASE + 0xC0, size=0x80, source="acl")) == []

    def test_with_no_annotation_at_all_the_one_table_judges(self) -> None:
        """msSanitizer would judge an EXTRA load or a BYPASS store by an empty DFX table and report every byte
        (reference §6.2); sanitizerd judges them by the one table: a load inside a live buffer is legal."""
        mc = memcheck()
        malloc(mc, self.BASE, 0x1000)
        assert mc.host_op(HostOp(op="load", address=self.BASE, size=0x100, source="extra")) == []
        assert mc.host_op(HostOp(op="store", address=self.BASE, size=0x100, source="bypass")) == []
        finding = only(mc.host_op(HostOp(op="load", address=self.BASE + 0xFF0, size=0x20, source="extra")))
        assert (finding.kind, finding.size, finding.table) == ("illegal_read", 0x10, "runtime")

    def test_a_store_into_a_registered_heap_is_the_heaps(self) -> None:
        """Pool memory outside any region: the MSTX heap table made it illegal; inside a region, legal."""
        mc = memcheck()
        malloc(mc, self.BASE, 0x1000)
        malloc(mc, self.BASE + 0x400, 0x800, source="mstx_heap")
        malloc(mc, self.BASE + 0x400, 0x100, source="mstx_region", root=self.BASE + 0x400)
        assert mc.host_op(HostOp(op="store", address=self.BASE + 0x400, size=0x100)) == []
        finding = only(mc.host_op(HostOp(op="store", address=self.BASE + 0x500, size=0x40)))
        assert (finding.kind, finding.size, finding.table) == ("illegal_write", 0x40, "mstx")

    def test_the_table_is_in_the_json_and_the_text_is_unchanged(self) -> None:
        import msgspec

        from sanitizerd.findings.render import render_text

        mc = memcheck()
        malloc(mc, self.BASE, 0x1000)
        malloc(mc, self.BASE, 0x100, source="manual")
        finding = only(mc.host_op(HostOp(op="store", address=self.BASE + 0xC0, size=0x80, source="manual")))
        assert msgspec.json.decode(msgspec.json.encode(finding))["table"] == "dfx"
        assert render_text([finding]) == render_text([msgspec.structs.replace(finding, table="")])
        free = only(mc.host_op(HostOp(op="free", address=0x4000, source="extra")))
        assert (free.kind, free.table) == ("illegal_free", "dfx")


class TestSitesBound:
    def test_a_kernels_report_keeps_its_first_sites_and_says_how_many_more(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Every event an illegal read at its own address: past MAX_SITE_ROWS sites the earliest by serial are
        reported, and one internal_error counts the rest; the next kernel starts afresh."""
        from sanitizerd.detectors import _sites

        monkeypatch.setattr(_sites, "MAX_SITE_ROWS", 10)
        monkeypatch.setattr(_sites, "_COMPACT_AT", 10)
        mc = memcheck()
        reads = accesses(EventKind.READ, Space.GM, 0x100000 + 64 * np.arange(25), 32)
        reads["serial"] = np.arange(1, 26)
        findings = run_kernel(mc, reads[:12], reads[12:])
        reported = [f for f in findings if f.kind == "illegal_read"]
        assert sorted(f.serial for f in reported) == list(range(1, 11))
        [cut] = [f for f in findings if f.kind == "internal_error"]
        assert "15 error(s) at 15 more site(s)" in cut.detail and "first 10" in cut.detail
        again = run_kernel(mc, reads[:3])
        assert [f.kind for f in again] == ["illegal_read"] * 3


def test_an_access_to_a_space_no_chip_defines_is_reported_under_its_number() -> None:
    """A read of address space 13 (a hostile or newer client's) that its own alignment (64 B) says is misaligned:
    reported under "13" and rendered, not a failure of the check (memcheck knows no bounds of such a space)."""
    from client_shim.events import accesses
    from sanitizerd.findings.render import render_text
    from sanitizerd_protocol.records import EventKind
    from tests.detector_helpers import make_detector, run_kernel

    detector = make_detector("memcheck")
    [finding] = run_kernel(detector, accesses(EventKind.READ, 13, 0x20, 32, align=64))  # type: ignore[arg-type]
    assert (finding.kind, finding.space) == ("misaligned_access", "13")
    assert "13" in render_text([finding])


class TestBatchesTooWide:
    """memcheck counts its own pieces in its first pass over a batch (the pipeline gives it each batch whole):
    a batch past BATCH_PIECES of its GM writes' pieces is refused before anything changes, and checked in parts."""

    @staticmethod
    def _writes(kind: EventKind) -> np.ndarray:
        # 4 096 accesses of 64 rows of 8 scattered 32-byte blocks (2**21 pieces), four blocks writing across one
        # another's bytes (stomping)
        n = 4_096
        return accesses(kind, Space.GM, 0x10_0000 + np.arange(n, dtype=np.uint64) * 1_024, 32, block_num=8,
                        block_stride=2, repeat=64, repeat_stride=16, block_id=np.arange(n) % 4)  # fmt: skip

    @staticmethod
    def _memcheck() -> Memcheck:
        memcheck = Memcheck(_context(["memcheck"]))
        memcheck.host_op(HostOp(op="malloc", address=0x10_0000, size=8 << 20))
        memcheck.kernel_begin(KernelLaunch(kernel=1, name="wide", block_dim=4, kernel_type="aiv"))
        return memcheck

    def test_a_batch_too_wide_is_refused_unchanged_and_checked_in_parts(self) -> None:
        from sanitizerd.detectors._batches import split_by_pieces
        from sanitizerd.detectors.base import GM_WRITES, BatchTooWide

        events = self._writes(EventKind.WRITE)
        refused = self._memcheck()
        with pytest.raises(BatchTooWide):
            refused.check_within_bound(events)
        refused.check(events)  # after the refusal, as if it had never been asked: parts, in order
        by_parts = self._memcheck()
        parts = split_by_pieces(events, walked=GM_WRITES)
        assert len(parts) == 2
        for part in parts:
            by_parts.check_within_bound(part)
        found, expected = refused.kernel_end(), by_parts.kernel_end()
        assert [f.kind for f in found] and [(f.kind, f.address, f.size) for f in found] == [
            (f.kind, f.address, f.size) for f in expected
        ]

    def test_wide_reads_are_checked_whole(self) -> None:
        memcheck = self._memcheck()
        memcheck.check_within_bound(self._writes(EventKind.READ))  # no GM write: nothing walked, nothing refused
        assert not memcheck.kernel_end()


def _context(tools: list[str]) -> SessionContext:
    return SessionContext(job="j", session=1, pid=2, device=0, chip=chip_named("910B1"), config=Config(tools=tools))
