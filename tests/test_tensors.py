"""Local tensors in memcheck (issue 26, item 1): a block's tensors judge its on-chip accesses that start inside them,
and an annotated instruction's operand tensors judge its TENSOR_READ/TENSOR_WRITE accesses, as msSanitizer's mstx
local-tensor check does (reference §2.1, "Bounds check"). Driven directly, with hand-built events; the byte model
below is the reference the closed forms are compared with."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from client_shim.events import (
    TENSOR_OPERAND_READ,
    TENSOR_OPERAND_WRITE,
    BlockType,
    EventKind,
    Pipe,
    Space,
    accesses,
    make_events,
    tensors,
)
from sanitizerd.detectors._patterns import extents, ranges
from sanitizerd.detectors._tensors import MAX_OPERANDS, MAX_TENSORS_PER_BLOCK
from sanitizerd_protocol.messages import Location
from tests.test_memcheck import memcheck, only, run_kernel, summary

READ, WRITE = EventKind.READ, EventKind.WRITE
UB_SIZE = 192 * 1024  # 910B1


def finish(block: int = 0, block_type: BlockType = BlockType.AIV) -> np.ndarray:
    return make_events(kind=EventKind.BLOCK_FINISH, block_id=block, block_type=block_type, block_size=0)


class TestBlockTensors:
    def test_sample_memcheck_overrun(self) -> None:
        """msSanitizer's sample_memcheck: DataCopy of 256 floats (1 024 bytes) into a 64-float UB tensor at 0 is an
        illegal write of 768 bytes at 0x0 on UB, though every byte lies inside UB; the tensor is named."""
        mc = memcheck(tools=["memcheck"])
        mc.context.locations[3] = Location(id=3, file="memcheck.asc", line=31)
        findings = run_kernel(
            mc,
            np.concatenate([
                tensors(Space.UB, 0, 64 * 4, serial=1, location=3),
                accesses(WRITE, Space.UB, 0, 32, block_num=32, repeat_stride=32, pipe=Pipe.MTE2, serial=2),
            ]),
        )  # fmt: skip
        finding = only(findings)
        assert summary(finding) == ("illegal_write", "UB", 0, 768)
        assert finding.blocks == {"aiv": [0]}
        assert finding.tensor is not None
        assert (finding.tensor.space, finding.tensor.address, finding.tensor.size) == ("UB", 0, 256)
        assert finding.tensor.serial == 1
        assert finding.tensor.location is not None and finding.tensor.location.line == 31

    def test_fixed_sample_is_clean(self) -> None:
        mc = memcheck(tools=["memcheck"])
        assert run_kernel(mc, np.concatenate([
            tensors(Space.UB, 0, 256 * 4, serial=1),
            accesses(WRITE, Space.UB, 0, 32, block_num=32, repeat_stride=32, pipe=Pipe.MTE2, serial=2),
        ])) == []  # fmt: skip

    def test_read_past_an_l1_tensor(self) -> None:
        """sample_memcheck_advanced's l1-oob-read on a cube block: 256 floats read from a 64-float L1 tensor."""
        mc = memcheck(tools=["memcheck"])
        aic = {"block_type": BlockType.AIC}
        finding = only(run_kernel(mc, np.concatenate([
            tensors(Space.L1, 0x100, 256, serial=1, **aic),
            accesses(WRITE, Space.L1, 0x100, 32, block_num=8, repeat_stride=8, pipe=Pipe.MTE2, serial=2, **aic),
            accesses(READ, Space.L1, 0x100, 32, block_num=32, repeat_stride=32, pipe=Pipe.MTE3, serial=3, **aic),
        ])))  # fmt: skip
        assert summary(finding) == ("illegal_read", "L1", 0x100, 768)
        assert finding.blocks == {"aic": [0]}

    def test_access_outside_every_tensor_is_judged_by_the_space(self) -> None:
        """Where nothing is declared, the whole space as before: a write past UB's end only."""
        mc = memcheck(tools=["memcheck"])
        finding = only(run_kernel(mc, np.concatenate([
            tensors(Space.UB, 0, 256, serial=1),
            accesses(WRITE, Space.UB, 0x1000, 1024),
            accesses(WRITE, Space.UB, UB_SIZE - 32, 64),
        ])))  # fmt: skip
        assert summary(finding) == ("illegal_write", "UB", UB_SIZE - 32, 32)
        assert finding.tensor is None

    def test_tensors_are_per_block(self) -> None:
        """Block 1 declared nothing: its write is judged by the space; block 0's by its tensor."""
        mc = memcheck(tools=["memcheck"])
        finding = only(run_kernel(mc, np.concatenate([
            tensors(Space.UB, 0, 256, block_id=0),
            accesses(WRITE, Space.UB, 0, 512, block_id=1),
            accesses(WRITE, Space.UB, 0, 512, block_id=0),
        ])))  # fmt: skip
        assert summary(finding) == ("illegal_write", "UB", 0, 256)
        assert finding.blocks == {"aiv": [0]}

    def test_order_in_the_batch(self) -> None:
        """An access before the declaration is judged by the space; one after a tensor that overlaps the first is
        judged by the new one; after BLOCK_FINISH the block's tensors are gone."""
        mc = memcheck(tools=["memcheck"])
        findings = run_kernel(mc, np.concatenate([
            accesses(WRITE, Space.UB, 0, 512, serial=1),  # no tensor yet: fine
            tensors(Space.UB, 0, 512, serial=2),
            accesses(WRITE, Space.UB, 0, 512, serial=3),  # fits
            tensors(Space.UB, 256, 512, serial=4),  # overlaps [0, 512): that one is gone
            accesses(WRITE, Space.UB, 0, 512, serial=5),  # in no tensor: judged by the space, fine
            accesses(WRITE, Space.UB, 256, 1024, serial=6),  # 512 bytes past [256, 768)
            finish(),
            accesses(WRITE, Space.UB, 256, 1024, serial=8),  # the block's tensors are gone: fine
        ]))  # fmt: skip
        finding = only(findings)
        assert summary(finding) == ("illegal_write", "UB", 256, 512)
        assert finding.serial == 6 and finding.tensor is not None and finding.tensor.serial == 4

    def test_the_same_tensor_again_changes_nothing(self) -> None:
        mc = memcheck(tools=["memcheck"])
        parts = []
        for i in range(50):  # a queue handing the same buffer out per tile
            parts += [tensors(Space.UB, 0, 256, serial=2 * i), accesses(WRITE, Space.UB, 0, 256, serial=2 * i + 1)]
        parts.append(accesses(WRITE, Space.UB, 0, 288, serial=1000))
        finding = only(run_kernel(mc, np.concatenate(parts)))
        assert summary(finding) == ("illegal_write", "UB", 0, 32)
        assert finding.tensor is not None and finding.tensor.serial == 0  # the first declaration is in force

    def test_across_batches(self) -> None:
        mc = memcheck(tools=["memcheck"])
        finding = only(run_kernel(mc, tensors(Space.L0A, 0, 512), accesses(WRITE, Space.L0A, 0, 1024)))
        assert summary(finding) == ("illegal_write", "L0A", 0, 512)

    def test_strided_access_counts_only_bytes_outside(self) -> None:
        """Four 32-byte blocks 64 bytes apart from 0 against [0, 160): the last block (192..224) is outside."""
        mc = memcheck(tools=["memcheck"])
        finding = only(run_kernel(mc, np.concatenate([
            tensors(Space.UB, 0, 160),
            accesses(READ, Space.UB, 0, 32, block_num=4, block_stride=2, pipe=Pipe.V),
        ])))  # fmt: skip
        assert summary(finding) == ("illegal_read", "UB", 192, 32)

    def test_misaligned_still_reported_inside_a_tensor(self) -> None:
        mc = memcheck(tools=["memcheck"])
        finding = only(run_kernel(mc, np.concatenate([tensors(Space.UB, 0, 2048), accesses(WRITE, Space.UB, 4, 1024)])))
        assert finding.kind == "misaligned_access"


class TestBounds:
    def test_too_many_tensors_in_a_block_are_refused_and_said(self) -> None:
        mc = memcheck(tools=["memcheck"])
        n = MAX_TENSORS_PER_BLOCK + 5
        decl = tensors(Space.UB, np.arange(n) * 32, 32, serial=np.arange(n))
        findings = run_kernel(mc, decl, accesses(WRITE, Space.UB, 32 * (n - 1), 64, serial=n + 1))
        notice = only([f for f in findings if f.kind == "internal_error"])
        assert notice.detail.startswith("tensors_refused: 5 local tensor declaration(s)")
        assert f"more than {MAX_TENSORS_PER_BLOCK} live tensors in one block" in notice.detail
        # the refused tensor was not kept: its access is judged by the space, and is fine
        assert [f for f in findings if f.kind != "internal_error"] == []

    def test_hostile_declarations(self) -> None:
        """GM, BT, empty, past the space, a 2^64-1 address, an undefined mode: refused and counted, never raised."""
        mc = memcheck(tools=["memcheck"])
        findings = run_kernel(mc, np.concatenate([
            tensors(Space.GM, 0x1000, 256),
            tensors(Space.BT, 0, 256),
            tensors(Space.UB, 0, 0),
            tensors(Space.UB, UB_SIZE - 32, 64),
            tensors(Space.UB, 2**64 - 1, 2**32 - 1),
            tensors(Space.UB, 0, 64, mode=9),
            make_events(kind=EventKind.TENSOR, space=200, address=5, block_size=5),
            accesses(WRITE, Space.UB, 0, 64),
            make_events(kind=EventKind.TENSOR_WRITE, space=Space.UB, address=2**64 - 64, block_size=64),
        ]))  # fmt: skip
        notice = only([f for f in findings if f.kind == "internal_error"])
        assert "not in L1, L0A, L0B, L0C or UB" in notice.detail and "past the end of its space" in notice.detail
        assert "of size 0" in notice.detail and "neither a block's tensor nor an operand" in notice.detail
        # the operand access with no operand: every byte is outside its (absent) operands
        assert [summary(f) for f in findings if f.kind != "internal_error"] == [
            ("illegal_write", "UB", 2**64 - 64, 64)
        ]

    def test_refusals_are_per_kernel(self) -> None:
        mc = memcheck(tools=["memcheck"])
        assert len(run_kernel(mc, tensors(Space.GM, 0, 8))) == 1
        assert run_kernel(mc, accesses(WRITE, Space.UB, 0, 64)) == []


def operand_instruction(serial: int, *parts: np.ndarray) -> np.ndarray:
    events = np.concatenate(parts)
    events["serial"] = serial
    return events


class TestOperands:
    def test_data_copy_annotation(self) -> None:
        """msSanitizer's DATA_COPY annotation: the UB write against the dst operand, the GM read unchecked."""
        mc = memcheck(tools=["memcheck"])
        finding = only(run_kernel(mc, operand_instruction(
            12,
            tensors(Space.UB, 0, 256, mode=TENSOR_OPERAND_WRITE),
            make_events(kind=EventKind.TENSOR_READ, space=Space.GM, address=0x1000, block_size=32, block_num=32,
                        repeat_stride=32),
            make_events(kind=EventKind.TENSOR_WRITE, space=Space.UB, address=0, block_size=32, block_num=32,
                        repeat_stride=32),
        )))  # fmt: skip
        assert summary(finding) == ("illegal_write", "UB", 0, 768)
        assert finding.serial == 12 and finding.tensor is not None and finding.tensor.size == 256

    def test_sides_are_separate(self) -> None:
        """A read is judged by the read operands only: a read of the written operand's bytes is illegal."""
        mc = memcheck(tools=["memcheck"])
        finding = only(run_kernel(mc, operand_instruction(
            5,
            tensors(Space.UB, 0, 256, mode=TENSOR_OPERAND_WRITE),
            tensors(Space.UB, 256, 256, mode=TENSOR_OPERAND_READ),
            make_events(kind=EventKind.TENSOR_READ, space=Space.UB, address=0, block_size=256),
            make_events(kind=EventKind.TENSOR_WRITE, space=Space.UB, address=0, block_size=256),
        )))  # fmt: skip
        assert summary(finding) == ("illegal_read", "UB", 0, 256)

    def test_binary_reads_two_operands(self) -> None:
        """src0 and src1 both read operands (here overlapping): a read inside their union is fine."""
        mc = memcheck(tools=["memcheck"])
        assert run_kernel(mc, operand_instruction(
            5,
            tensors(Space.UB, 0, 256, mode=TENSOR_OPERAND_READ),
            tensors(Space.UB, 128, 256, mode=TENSOR_OPERAND_READ),
            tensors(Space.UB, 0, 256, mode=TENSOR_OPERAND_READ),
            make_events(kind=EventKind.TENSOR_READ, space=Space.UB, address=0, block_size=384),
        )) == []  # fmt: skip

    def test_operands_belong_to_their_instruction(self) -> None:
        """Another instruction's operands do not judge this one's access; operand accesses never reach the block
        tensor check and operands never become block tensors."""
        mc = memcheck(tools=["memcheck"])
        finding = only(run_kernel(mc, np.concatenate([
            operand_instruction(1, tensors(Space.UB, 0, 4096, mode=TENSOR_OPERAND_WRITE)),
            operand_instruction(2, make_events(kind=EventKind.TENSOR_WRITE, space=Space.UB, address=0, block_size=64)),
            operand_instruction(3, accesses(WRITE, Space.UB, 0, 8192)),
        ])))  # fmt: skip
        assert summary(finding) == ("illegal_write", "UB", 0, 64)

    def test_too_many_operands_refused(self) -> None:
        mc = memcheck(tools=["memcheck"])
        n = MAX_OPERANDS + 3
        findings = run_kernel(mc, operand_instruction(
            7,
            tensors(Space.UB, np.arange(n) * 64, 64, mode=TENSOR_OPERAND_READ),
            make_events(kind=EventKind.TENSOR_READ, space=Space.UB, address=0, block_size=64 * MAX_OPERANDS),
        ))  # fmt: skip
        assert [f.kind for f in findings] == ["internal_error"]
        assert "3 more than 4 operands" in findings[0].detail

    def test_other_detectors_ignore_operand_events(self) -> None:
        from tests.detector_helpers import make_detector
        from tests.detector_helpers import run_kernel as run_any

        batch = operand_instruction(
            3,
            tensors(Space.UB, 0, 32, mode=TENSOR_OPERAND_WRITE),
            make_events(kind=EventKind.TENSOR_WRITE, space=Space.UB, address=0, block_size=1024, pipe=Pipe.V),
            make_events(kind=EventKind.TENSOR_READ, space=Space.UB, address=0, block_size=1024, pipe=Pipe.MTE3),
        )
        for tool in ("initcheck", "racecheck", "synccheck"):
            assert run_any(make_detector(tool), batch) == [], tool


def _model_bad_bytes(events: np.ndarray, start: int, end: int) -> tuple[int, int]:
    """Byte model: bytes of the access outside [start, end), and the start of its first piece with any (the pieces
    msSanitizer's merged records are: ``_patterns.ranges``, which the pattern property tests hold to the blocks)."""
    _, lo, hi = ranges(events, extents(events), np.arange(events.size))
    outside: set[int] = set()
    first = None
    for a, b in zip(lo.tolist(), hi.tolist(), strict=True):
        bad = {x for x in range(a, b) if not start <= x < end}
        if bad and (first is None or a < first):
            first = a
        outside |= bad
    return len(outside), first if first is not None else 0


@settings(max_examples=150, deadline=None)
@given(
    tensor_start=st.integers(0, 64) .map(lambda k: 32 * k),
    tensor_size=st.integers(1, 4096),
    offset=st.integers(0, 512),
    block_size=st.sampled_from([1, 4, 32, 64]),
    block_num=st.integers(1, 8),
    block_stride=st.integers(0, 4),
    repeat=st.integers(1, 6),
    repeat_stride=st.integers(0, 12),
    operand=st.booleans(),
)
def test_bad_bytes_match_a_byte_model(
    tensor_start: int, tensor_size: int, offset: int, block_size: int, block_num: int, block_stride: int,
    repeat: int, repeat_stride: int, operand: bool,
) -> None:  # fmt: skip
    """The closed forms over a strided access against its tensor agree with a byte-by-byte model, for block tensors
    (the access starts inside) and operands (wherever it starts); the reported address is the first block with bad
    bytes (the one msSanitizer's flattened pattern reports first)."""
    address = tensor_start + (offset % tensor_size if not operand else offset)
    kind = EventKind.TENSOR_WRITE if operand else EventKind.WRITE
    access = make_events(kind=kind, space=Space.UB, address=address, block_size=block_size, block_num=block_num,
                         block_stride=block_stride, repeat=repeat, repeat_stride=repeat_stride, align=1)  # fmt: skip
    mode = TENSOR_OPERAND_WRITE if operand else 0
    batch = operand_instruction(9, tensors(Space.UB, tensor_start, tensor_size, mode=mode), access)
    findings = [f for f in run_kernel(memcheck(tools=["memcheck"]), batch) if f.kind != "misaligned_access"]
    bad, first = _model_bad_bytes(access, tensor_start, tensor_start + tensor_size)
    if not bad:
        assert findings == []
    else:
        assert [summary(f) for f in findings] == [("illegal_write", "UB", first, bad)]
