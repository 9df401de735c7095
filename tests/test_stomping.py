"""Multi-core stomping through memcheck (reference §2.1): two blocks of one kernel writing the same GM bytes."""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from client_shim.events import EventKind, Space, accesses, syncs
from sanitizerd.detectors.memcheck import Memcheck
from sanitizerd.findings.model import Finding
from sanitizerd.findings.render import render_text
from sanitizerd.protocol.messages import HostOp
from tests.detector_helpers import make_detector, run_kernel, stream

WRITE = EventKind.WRITE
GM = 0x12C0_C000_0000


def memcheck() -> Memcheck:
    detector = make_detector("memcheck")
    assert isinstance(detector, Memcheck)
    detector.host_op(HostOp(op="malloc", address=GM, size=1 << 20))
    return detector


def kernel(detector: Memcheck, *batches: np.ndarray) -> list[Finding]:
    return run_kernel(detector, *batches, name="add_custom_kernel")


def stomps(findings: list[Finding]) -> list[tuple[int, int, dict[str, list[int]]]]:
    return [(f.address, f.size, f.blocks) for f in findings if f.kind == "out_of_bounds"]


class TestStomping:
    def test_two_blocks_write_the_same_bytes(self) -> None:
        """The second block to write bytes the first wrote is reported, with the bytes it overlapped."""
        events = stream(
            accesses(WRITE, Space.GM, GM, 256, block_id=0), accesses(WRITE, Space.GM, GM + 0xC0, 256, block_id=1)
        )
        found = kernel(memcheck(), events)
        assert stomps(found) == [(GM + 0xC0, 64, {"aiv": [1]})]
        assert found[0].severity == "warning"

    def test_one_block_rewriting_its_own_bytes_is_fine(self) -> None:
        """A block writing its own bytes again is not stomping."""
        events = stream(accesses(WRITE, Space.GM, GM, 256, block_id=3), accesses(WRITE, Space.GM, GM, 256, block_id=3))
        assert stomps(kernel(memcheck(), events)) == []

    def test_across_batches(self) -> None:
        """Ownership carries across the batches of one kernel."""
        first = stream(accesses(WRITE, Space.GM, GM, 32, block_id=0))
        second = stream(accesses(WRITE, Space.GM, GM, 32, block_id=2))
        assert stomps(kernel(memcheck(), first, second)) == [(GM, 32, {"aiv": [2]})]

    def test_reported_once(self) -> None:
        """Stomped bytes are not reported again when a third block writes them too."""
        events = stream(*(accesses(WRITE, Space.GM, GM, 64, block_id=b, pc=0x10 * (b + 1)) for b in range(3)))
        assert stomps(kernel(memcheck(), events)) == [(GM, 64, {"aiv": [1]})]

    def test_not_across_kernels(self) -> None:
        """Ownership is per kernel: another kernel's block writing the bytes is not stomping."""
        detector = memcheck()
        assert stomps(kernel(detector, stream(accesses(WRITE, Space.GM, GM, 32, block_id=0)))) == []
        assert stomps(kernel(detector, stream(accesses(WRITE, Space.GM, GM, 32, block_id=1)))) == []

    def test_on_chip_writes_are_per_block(self) -> None:
        """Each block has its own UB: the same UB address written by two blocks is not stomping."""
        events = stream(accesses(WRITE, Space.UB, 0, 32, block_id=0), accesses(WRITE, Space.UB, 0, 32, block_id=1))
        assert stomps(kernel(memcheck(), events)) == []

    def test_block_ids_do_not_alias(self) -> None:
        """Blocks 63 and 0, or 5 and 4101, are different writers (msSanitizer's 6-bit core ids alias at 63)."""
        for a, b in ((0, 63), (5, 4101), (1, 65535)):
            events = stream(
                accesses(WRITE, Space.GM, GM, 32, block_id=a), accesses(WRITE, Space.GM, GM, 32, block_id=b)
            )
            assert stomps(kernel(memcheck(), events)) == [(GM, 32, {"aiv": [b]})]

    def test_atomic_flag_exempts(self) -> None:
        """Writes made in atomic mode (the event's flag) are legitimate sharing."""
        events = stream(
            accesses(WRITE, Space.GM, GM, 32, block_id=0, atomic=True),
            accesses(WRITE, Space.GM, GM, 32, block_id=1, atomic=True),
        )
        assert stomps(kernel(memcheck(), events)) == []

    def test_set_atomic_switches_a_block(self) -> None:
        """set_atomic on exempts the block's later writes, until set_atomic off; the state carries across batches."""
        on = syncs(EventKind.SET_ATOMIC, 0, 0, block_id=1, mode=1)
        off = syncs(EventKind.SET_ATOMIC, 0, 0, block_id=1, mode=0)
        first = stream(accesses(WRITE, Space.GM, GM, 32, block_id=0), on, accesses(WRITE, Space.GM, GM, 32, block_id=1))
        second = stream(accesses(WRITE, Space.GM, GM + 32, 32, block_id=0))
        third = stream(
            accesses(WRITE, Space.GM, GM + 32, 32, block_id=1),
            off,
            accesses(WRITE, Space.GM, GM + 32, 32, block_id=1, pc=8),
        )
        assert stomps(kernel(memcheck(), first, second, third)) == [(GM + 32, 32, {"aiv": [1]})]

    def test_report_text(self) -> None:
        """The report is msSanitizer's warning block, "when writing data"."""
        events = stream(
            accesses(WRITE, Space.GM, GM, 256, block_id=0), accesses(WRITE, Space.GM, GM, 256, block_id=9, pc=0x7B8)
        )
        text = render_text([f for f in kernel(memcheck(), events) if f.kind == "out_of_bounds"])
        assert text.splitlines()[:4] == [
            "====== WARNING: out of bounds of size 256",
            f"======    at {GM:#x} on GM when writing data in add_custom_kernel",
            "======    in block aiv(9) on device 0",
            "======    code in pc current 0x7b8 (serialNo:2)",
        ]


@st.composite
def writes(draw: st.DrawFn) -> list[tuple[int, int, int]]:
    """Small kernels of (block, start, length) GM writes."""
    return draw(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 64), st.integers(1, 24)), min_size=1, max_size=25))


class TestAgainstAByteModel:
    @settings(max_examples=150, deadline=None, database=None)
    @given(program=writes(), cuts=st.lists(st.integers(0, 25), max_size=3))
    def test_matches_a_byte_model(self, program: list[tuple[int, int, int]], cuts: list[int]) -> None:
        """Stomped bytes per write match a byte-by-byte model that takes each batch block by block."""
        events = stream(*(accesses(WRITE, Space.GM, GM + s, n, block_id=b) for b, s, n in program))
        events["pc"] = events["serial"]  # one site per write, so nothing folds
        bounds = sorted({0, events.size, *(c for c in cuts if c <= events.size)})
        batches = [(lo, hi) for lo, hi in itertools.pairwise(bounds) if hi > lo]
        owner: dict[int, int] = {}
        stomped: set[int] = set()
        expected: dict[int, int] = {}
        for lo, hi in batches:
            for block in sorted({program[i][0] for i in range(lo, hi)}):
                mine = [i for i in range(lo, hi) if program[i][0] == block]
                before = dict(owner)
                for i in mine:
                    _, start, length = program[i]
                    foreign = {x for x in range(start, start + length) if before.get(x, block) != block} - stomped
                    if foreign:
                        expected[i + 1] = len(foreign)
                for i in mine:
                    _, start, length = program[i]
                    for x in range(start, start + length):
                        if x in stomped:
                            continue
                        if before.get(x, block) != block:
                            stomped.add(x)
                            owner.pop(x, None)
                        else:
                            owner[x] = block
        found = kernel(memcheck(), *(events[lo:hi] for lo, hi in batches))
        assert {f.serial: f.size for f in found if f.kind == "out_of_bounds"} == expected
