"""initcheck driven directly (reference §2.1): which reads see bytes nothing wrote, in program order."""

from __future__ import annotations

import itertools
from unittest.mock import patch

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from client_shim.events import EventKind, Pipe, Space, accesses, make_events
from sanitizerd.detectors import initcheck as initcheck_module
from sanitizerd.detectors.initcheck import Initcheck
from sanitizerd_protocol.messages import HostOp
from sanitizerd_protocol.model import Finding
from tests.detector_helpers import make_detector, run_kernel, stream

READ, WRITE = EventKind.READ, EventKind.WRITE
GM = 0x12C0_C000_0000


def initcheck() -> Initcheck:
    detector = make_detector("initcheck")
    assert isinstance(detector, Initcheck)
    return detector


def kernel(detector: Initcheck, *batches: np.ndarray) -> list[Finding]:
    return run_kernel(detector, *batches, name="k")


def summary(findings: list[Finding]) -> list[tuple[str, str, int, int, dict[str, list[int]]]]:
    return [(f.kind, f.space, f.address, f.size, f.blocks) for f in findings]


class TestGlobalMemory:
    def test_read_of_unwritten_gm(self) -> None:
        """A kernel read of GM nothing wrote is an uninitialized read of all its bytes, at its start."""
        found = kernel(initcheck(), stream(accesses(READ, Space.GM, GM, 32, block_num=7)))
        assert summary(found) == [("uninitialized_read", "GM", GM, 224, {"aiv": [0]})]
        assert found[0].severity == "error"

    def test_host_store_defines(self) -> None:
        """Bytes the host copied in (a store) are defined for kernels."""
        detector = initcheck()
        detector.host_op(HostOp(op="malloc", address=GM, size=256))
        detector.host_op(HostOp(op="store", address=GM, size=256))
        assert kernel(detector, stream(accesses(READ, Space.GM, GM, 32, block_num=8))) == []

    def test_partly_written(self) -> None:
        """Only the bytes nothing wrote are counted."""
        detector = initcheck()
        detector.host_op(HostOp(op="memset", address=GM, size=40))
        assert summary(kernel(detector, stream(accesses(READ, Space.GM, GM, 64)))) == [
            ("uninitialized_read", "GM", GM, 24, {"aiv": [0]})
        ]

    def test_gm_survives_kernels(self) -> None:
        """GM written by one kernel is defined for the next."""
        detector = initcheck()
        assert kernel(detector, stream(accesses(WRITE, Space.GM, GM, 32, block_id=1))) == []
        assert kernel(detector, stream(accesses(READ, Space.GM, GM, 32))) == []

    def test_freeing_an_extra_annotation_leaves_the_buffer_defined(self) -> None:
        """A framework's tensor annotation (source "extra") at a written buffer's address, then freed: the buffer
        and its bytes live on (msSanitizer's EXTRA free only clears owner ids). A MANUAL one undefines."""
        detector = initcheck()
        detector.host_op(HostOp(op="malloc", address=GM, size=64))
        detector.host_op(HostOp(op="store", address=GM, size=64))
        detector.host_op(HostOp(op="malloc", address=GM, size=64, source="extra"))
        detector.host_op(HostOp(op="free", address=GM, source="extra"))
        assert kernel(detector, stream(accesses(READ, Space.GM, GM, 64))) == []
        detector.host_op(HostOp(op="malloc", address=GM, size=32, source="manual"))
        detector.host_op(HostOp(op="free", address=GM, source="manual"))
        assert summary(kernel(detector, stream(accesses(READ, Space.GM, GM, 64)))) == [
            ("uninitialized_read", "GM", GM, 32, {"aiv": [0]})
        ]

    def test_free_undefines(self) -> None:
        """After a free, memory allocated again at the same address starts undefined."""
        detector = initcheck()
        detector.host_op(HostOp(op="malloc", address=GM, size=64))
        detector.host_op(HostOp(op="store", address=GM, size=64))
        detector.host_op(HostOp(op="free", address=GM))
        detector.host_op(HostOp(op="malloc", address=GM, size=64))
        assert [f.size for f in kernel(detector, stream(accesses(READ, Space.GM, GM, 64)))] == [64]


class TestProgramOrder:
    def test_write_then_read_in_one_batch(self) -> None:
        """A read after a write of the same bytes in the same batch is clean."""
        events = stream(accesses(WRITE, Space.UB, 0, 32, block_num=8, pipe=Pipe.MTE2), accesses(READ, Space.UB, 0, 256))
        assert kernel(initcheck(), events) == []

    def test_read_then_write_in_one_batch(self) -> None:
        """A read before the write that defines its bytes is still uninitialized."""
        events = stream(accesses(READ, Space.UB, 0, 256), accesses(WRITE, Space.UB, 0, 32, block_num=8))
        assert summary(kernel(initcheck(), events)) == [("uninitialized_read", "UB", 0, 256, {"aiv": [0]})]

    def test_write_in_an_earlier_batch(self) -> None:
        """Bytes written in an earlier batch of the kernel are defined."""
        write = stream(accesses(WRITE, Space.UB, 0x100, 32))
        read = stream(accesses(READ, Space.UB, 0x100, 32))
        assert kernel(initcheck(), write, read) == []

    def test_strided_read_of_written_blocks(self) -> None:
        """A strided read touches only its blocks: unwritten gaps between them do not count."""
        events = stream(
            accesses(WRITE, Space.UB, [0, 64, 128], 32),
            accesses(READ, Space.UB, 0, 32, block_num=3, block_stride=2),
        )
        assert kernel(initcheck(), events) == []


class TestOnChip:
    def test_each_block_has_its_own_ub(self) -> None:
        """UB written by block 0 is not defined for block 1."""
        events = stream(accesses(WRITE, Space.UB, 0, 32, block_id=0), accesses(READ, Space.UB, 0, 32, block_id=1))
        assert summary(kernel(initcheck(), events)) == [("uninitialized_read", "UB", 0, 32, {"aiv": [1]})]

    def test_on_chip_forgotten_between_kernels(self) -> None:
        """UB written by one kernel is undefined again in the next."""
        detector = initcheck()
        assert kernel(detector, stream(accesses(WRITE, Space.L1, 0, 32))) == []
        assert summary(kernel(detector, stream(accesses(READ, Space.L1, 0, 32)))) == [
            ("uninitialized_read", "L1", 0, 32, {"aiv": [0]})
        ]

    def test_block_finish_forgets_that_blocks_on_chip_bytes(self) -> None:
        """After BLOCK_FINISH of block 0 its UB is undefined again; block 1's UB and GM are untouched."""
        finish = make_events(kind=EventKind.BLOCK_FINISH, block_id=0, block_size=0)
        events = stream(
            accesses(WRITE, Space.UB, 0, 32, block_id=0),
            accesses(WRITE, Space.UB, 0, 32, block_id=1),
            accesses(WRITE, Space.GM, GM, 32, block_id=0),
            finish,
            accesses(READ, Space.UB, 0, 32, block_id=0),
            accesses(READ, Space.UB, 0, 32, block_id=1),
            accesses(READ, Space.GM, GM, 32, block_id=1),
        )
        detector = initcheck()
        detector.host_op(HostOp(op="malloc", address=GM, size=64))
        # Split so the read comes in a batch after the finish, as a later launch's records would.
        assert summary(kernel(detector, events[:4], events[4:])) == [("uninitialized_read", "UB", 0, 32, {"aiv": [0]})]

    def test_same_site_in_several_blocks_folds(self) -> None:
        """One read site hitting undefined UB in four blocks is one finding naming them all."""
        events = stream(accesses(READ, Space.UB, 0, 32, block_id=np.arange(4), pc=0x40))
        [finding] = kernel(initcheck(), events)
        assert (finding.blocks, finding.count) == ({"aiv": [0, 1, 2, 3]}, 4)


@st.composite
def programs(draw: st.DrawFn) -> list[tuple[int, int, int, int]]:
    """Small programs of (kind, block, start, length) UB accesses."""
    return draw(
        st.lists(
            st.tuples(st.sampled_from([READ, WRITE]), st.integers(0, 1), st.integers(0, 96), st.integers(1, 40)),
            min_size=1,
            max_size=30,
        )
    )


class TestAgainstAByteModel:
    @settings(max_examples=200, deadline=None, database=None)
    @given(
        program=programs(),
        cuts=st.lists(st.integers(0, 30), max_size=3),
        slice_events=st.sampled_from([1, 2, 5, 2048]),
    )
    def test_matches_sequential_byte_model(
        self, program: list[tuple[int, int, int, int]], cuts: list[int], slice_events: int
    ) -> None:
        """However a program is cut into batches, and a batch into recheck slices, each read's undefined bytes
        match a byte-by-byte replay."""
        written: dict[int, set[int]] = {0: set(), 1: set()}
        expected: dict[int, int] = {}
        for serial, (kind, block, start, length) in enumerate(program, 1):
            span = set(range(start, start + length))
            if kind == WRITE:
                written[block] |= span
            elif span - written[block]:
                expected[serial] = len(span - written[block])
        events = stream(*(accesses(k, Space.UB, s, n, block_id=b) for k, b, s, n in program))
        events["pc"] = events["serial"]  # one site per access, so nothing folds
        bounds = sorted({0, events.size, *(c for c in cuts if c <= events.size)})
        batches = [events[lo:hi] for lo, hi in itertools.pairwise(bounds) if hi > lo]
        with patch.object(initcheck_module, "_SLICE", slice_events):
            found = kernel(initcheck(), *batches)
        assert {f.serial: f.size for f in found} == expected


class TestUndefinedValues:
    def test_accesses_of_an_undefined_space_or_block_type_are_left_out_and_said(self) -> None:
        """An access naming address space 200, or block type 7 (values no chip defines; its keys have no room for
        them), is not checked: one internal_error of the kernel counts them, and the rest is checked as before.
        A BLOCK_FINISH of block type 255 forgets nothing."""
        finish = make_events(kind=EventKind.BLOCK_FINISH, block_type=255)
        events = stream(
            accesses(WRITE, Space.UB, 0, 32),
            accesses(READ, 200, 0, 32),  # type: ignore[arg-type]
            accesses(READ, Space.UB, 0, 32, block_type=7),  # type: ignore[arg-type]
            finish,
            accesses(READ, Space.UB, 0, 32),
            accesses(READ, Space.GM, GM, 32),
        )
        found = kernel(initcheck(), events)
        [cut] = [f for f in found if f.kind == "internal_error"]
        assert "did not check 2 accesses of this kernel launch whose address space or block type" in cut.detail
        assert summary([f for f in found if f.kind != "internal_error"]) == [
            ("uninitialized_read", "GM", GM, 32, {"aiv": [0]})
        ]
