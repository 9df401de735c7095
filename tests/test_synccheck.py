"""synccheck driven directly with hand-built sync streams (reference §2.3), and its report text (§2.5)."""

from __future__ import annotations

import numpy as np
import pytest

from client_shim.events import BlockType, EventKind, Pipe, Space, accesses, syncs
from sanitizerd.detectors.base import KernelLaunch
from sanitizerd.detectors.synccheck import Synccheck
from sanitizerd.findings.render import render_text
from sanitizerd_protocol.messages import Location
from sanitizerd_protocol.model import Finding
from tests.detector_helpers import make_detector, run_kernel, stream

SET, WAIT = EventKind.SET_FLAG, EventKind.WAIT_FLAG


def synccheck() -> Synccheck:
    detector = make_detector(
        "synccheck", device=1, locations={5: Location(id=5, file="kernel_event.h", line=785, column=13)}
    )
    assert isinstance(detector, Synccheck)
    return detector


def kernel(*batches: np.ndarray, detector: Synccheck | None = None) -> list[Finding]:
    return run_kernel(detector or synccheck(), *batches)


def summary(findings: list[Finding]) -> list[tuple[str, int, str, str, dict[str, list[int]]]]:
    return [(f.kind, f.serial, f.pipe, f.dst_pipe, f.blocks) for f in findings]


class TestUnpaired:
    def test_balanced_pairs_are_clean(self) -> None:
        """Every set_flag met by its wait_flag gives no finding."""
        events = stream(syncs(SET, Pipe.MTE2, Pipe.V, 0), syncs(WAIT, Pipe.MTE2, Pipe.V, 0))
        assert kernel(events) == []

    def test_set_without_wait(self) -> None:
        """A set_flag whose wait never comes is reported with its pipes, block and serial."""
        events = stream(syncs(WAIT, Pipe.MTE2, Pipe.V, 0), syncs(SET, Pipe.S, Pipe.MTE3, 1, block_id=1))
        assert summary(kernel(events)) == [("unpaired_set_flag", 2, "PIPE_S", "PIPE_MTE3", {"aiv": [1]})]

    def test_wait_without_set_is_not_reported(self) -> None:
        """Unpaired waits are kept but never reported, as in msSanitizer."""
        assert kernel(stream(syncs(WAIT, Pipe.V, Pipe.MTE3, 2))) == []

    def test_order_independent(self) -> None:
        """A wait that comes before its set still pairs with it."""
        events = stream(syncs(WAIT, Pipe.MTE2, Pipe.V, 0), syncs(SET, Pipe.MTE2, Pipe.V, 0))
        assert kernel(events) == []

    def test_the_last_extra_set_is_the_unpaired_one(self) -> None:
        """Waits consume the oldest sets, so of two sets and one wait the later set is reported."""
        events = stream(
            syncs(SET, Pipe.MTE3, Pipe.MTE2, 0, pc=0x10),
            syncs(WAIT, Pipe.MTE3, Pipe.MTE2, 0, pc=0x20),
            accesses(EventKind.WRITE, Space.GM, 0x1000, 32, pipe=Pipe.MTE3),  # so the second set is not redundant
            syncs(SET, Pipe.MTE3, Pipe.MTE2, 0, pc=0x30),
        )
        [finding] = kernel(events)
        assert (finding.kind, finding.serial, finding.pc) == ("unpaired_set_flag", 4, 0x30)

    def test_keyed_per_block(self) -> None:
        """A wait on another block does not pair with this block's set."""
        events = stream(syncs(SET, Pipe.MTE2, Pipe.V, 0, block_id=0), syncs(WAIT, Pipe.MTE2, Pipe.V, 0, block_id=1))
        assert summary(kernel(events)) == [("unpaired_set_flag", 1, "PIPE_MTE2", "PIPE_V", {"aiv": [0]})]

    def test_keyed_per_block_type(self) -> None:
        """A cube block's wait does not pair with the vector block of the same id."""
        events = stream(
            syncs(SET, Pipe.MTE1, Pipe.M, 0, block_type=BlockType.AIV),
            syncs(WAIT, Pipe.MTE1, Pipe.M, 0, block_type=BlockType.AIC),
        )
        assert [f.blocks for f in kernel(events)] == [{"aiv": [0]}]

    def test_event_ids_are_not_masked(self) -> None:
        """Event ids 0 and 16 are different flags (msSanitizer masks ids to 4 bits and pairs them)."""
        events = stream(syncs(SET, Pipe.MTE2, Pipe.V, 0), syncs(WAIT, Pipe.MTE2, Pipe.V, 16))
        assert [f.kind for f in kernel(events)] == ["unpaired_set_flag"]

    def test_pairs_across_batches(self) -> None:
        """A set in one batch pairs with its wait in the next."""
        events = stream(syncs(SET, Pipe.MTE2, Pipe.V, 0), syncs(WAIT, Pipe.MTE2, Pipe.V, 0))
        assert kernel(events[:1], events[1:]) == []

    def test_same_site_in_several_blocks_is_one_finding(self) -> None:
        """The same unpaired set in blocks 0-3 folds into one finding naming every block."""
        events = stream(syncs(SET, Pipe.S, Pipe.MTE3, 0, block_id=np.arange(4), pc=0x2C94, location=5))
        [finding] = kernel(events)
        assert (finding.blocks, finding.count, finding.serial) == ({"aiv": [0, 1, 2, 3]}, 4, 1)


class TestRedundant:
    def test_repeated_set_on_an_idle_pipe(self) -> None:
        """Two identical set_flags with nothing on the source pipe between them are redundant."""
        events = stream(
            syncs(SET, Pipe.V, Pipe.MTE1, 0),
            syncs(SET, Pipe.V, Pipe.MTE1, 0),
            syncs(WAIT, Pipe.V, Pipe.MTE1, 0),
            syncs(WAIT, Pipe.V, Pipe.MTE1, 0),
        )
        kinds = [(f.kind, f.serial, f.count) for f in kernel(events)]
        assert kinds == [("redundant_set_flag", 1, 2), ("redundant_wait_flag", 3, 2)]

    def test_work_on_the_pipe_between_makes_it_necessary(self) -> None:
        """A memory access on the set's source pipe between two identical sets clears the redundancy."""
        events = stream(
            syncs(SET, Pipe.V, Pipe.MTE3, 0),
            syncs(WAIT, Pipe.V, Pipe.MTE3, 0),
            accesses(EventKind.WRITE, Space.UB, 0, 32, pipe=Pipe.V),
            syncs(SET, Pipe.V, Pipe.MTE3, 0),
            syncs(WAIT, Pipe.V, Pipe.MTE3, 0),
        )
        # The waits' slot (MTE3) saw no work between them: only they are redundant.
        assert [f.kind for f in kernel(events)] == ["redundant_wait_flag"]

    def test_work_on_another_pipe_does_not_clear_it(self) -> None:
        """Work on an unrelated pipe between two identical sets leaves them redundant."""
        events = stream(
            syncs(SET, Pipe.V, Pipe.MTE3, 0),
            accesses(EventKind.READ, Space.GM, 0x1000, 32, pipe=Pipe.MTE2),
            syncs(SET, Pipe.V, Pipe.MTE3, 0),
            syncs(WAIT, Pipe.V, Pipe.MTE3, 0),
            accesses(EventKind.READ, Space.UB, 0, 32, pipe=Pipe.MTE3),
            syncs(WAIT, Pipe.V, Pipe.MTE3, 0),
        )
        assert [f.kind for f in kernel(events)] == ["redundant_set_flag"]

    def test_per_block_slots(self) -> None:
        """Another block's identical set between two of this block's sets does not hide their redundancy."""
        events = stream(
            syncs(SET, Pipe.MTE2, Pipe.V, 0, block_id=0),
            syncs(SET, Pipe.MTE2, Pipe.V, 0, block_id=1),
            syncs(SET, Pipe.MTE2, Pipe.V, 0, block_id=0),
            syncs(WAIT, Pipe.MTE2, Pipe.V, 0, block_id=np.array([0, 1])),
            accesses(EventKind.READ, Space.UB, 0, 32, pipe=Pipe.V, block_id=np.array([0, 1])),
            syncs(WAIT, Pipe.MTE2, Pipe.V, 0, block_id=0),
        )
        redundant = [f for f in kernel(events) if f.kind == "redundant_set_flag"]
        assert [(f.blocks, f.count, f.serial) for f in redundant] == [({"aiv": [0]}, 2, 1)]

    def test_across_batches_each_instruction_once(self) -> None:
        """Three identical sets split over batches are reported once, counting three instructions."""
        events = stream(*(syncs(SET, Pipe.MTE3, Pipe.MTE2, 1) for _ in range(3)), *(
            syncs(WAIT, Pipe.MTE3, Pipe.MTE2, 1) for _ in range(3)))  # fmt: skip
        events["pipe"][3:] = Pipe.MTE3
        findings = kernel(events[:1], events[1:2], events[2:])
        [redundant_sets] = [f for f in findings if f.kind == "redundant_set_flag"]
        assert redundant_sets.count == 3


class TestKernels:
    def test_state_resets_between_kernels(self) -> None:
        """A set left pending by one kernel does not pair with a wait in the next."""
        detector = synccheck()
        assert [f.kind for f in kernel(stream(syncs(SET, Pipe.MTE2, Pipe.V, 0)), detector=detector)] == [
            "unpaired_set_flag"
        ]
        assert kernel(stream(syncs(WAIT, Pipe.MTE2, Pipe.V, 0)), detector=detector) == []

    def test_finish_reports_an_open_kernel(self) -> None:
        """A session that ends inside a kernel still reports that kernel's unpaired sets."""
        detector = synccheck()
        detector.kernel_begin(KernelLaunch(kernel=1, name="k", block_dim=1, kernel_type="aiv"))
        detector.check(stream(syncs(SET, Pipe.MTE2, Pipe.V, 0)))
        assert [f.kind for f in detector.finish()] == ["unpaired_set_flag"]

    def test_memory_only_batches_report_nothing(self) -> None:
        """A kernel without sync events gives synccheck nothing to report."""
        assert kernel(stream(accesses(EventKind.READ, Space.UB, 0, 32, pipe=Pipe.V))) == []


class TestText:
    def test_unpaired_report_text(self) -> None:
        """The unpaired report is msSanitizer's block (§2.5): pipes, kernel, block, pc and stack."""
        events = stream(syncs(SET, Pipe.S, Pipe.MTE3, 0, pc=0x2C94, location=5))
        events["serial"] = 31
        assert render_text(kernel(events)).splitlines() == [
            "====== WARNING: Unpaired set_flag instructions detected",
            "======    from PIPE_S to PIPE_MTE3 in add_custom",
            "======    in block aiv(0) on device 1",
            "======    code in pc current 0x2c94 (serialNo:31)",
            "======    #0 kernel_event.h:785:13",
            "",  # msSanitizer ends every report with a blank line
        ]

    def test_redundant_report_text(self) -> None:
        """The redundant report names the pipes and uses the classic location without a pc."""
        events = stream(syncs(SET, Pipe.V, Pipe.MTE1, 0, location=5), syncs(SET, Pipe.V, Pipe.MTE1, 0, location=5))
        events = np.concatenate((events, stream(syncs(WAIT, Pipe.V, Pipe.MTE1, 0))))
        events = np.concatenate((events, stream(accesses(EventKind.READ, Space.L1, 0, 32, pipe=Pipe.MTE1))))
        events = np.concatenate((events, stream(syncs(WAIT, Pipe.V, Pipe.MTE1, 0))))
        text = render_text([f for f in kernel(events) if f.kind == "redundant_set_flag"])
        assert text.splitlines() == [
            "====== WARNING: Redundant set_flag instructions detected",
            "======    from PIPE_V to PIPE_MTE1 in add_custom",
            "======    in block aiv(0) on device 1",
            "======    code in kernel_event.h:785 (serialNo:1)",
            "",  # msSanitizer ends every report with a blank line
        ]


class TestBoundedHolding:
    """The kernel's syncs are compacted as they arrive (matched pairs dropped) and what stays unmatched is bounded."""

    @staticmethod
    def random_stream(seed: int, n: int) -> list[np.ndarray]:
        rng = np.random.default_rng(seed)
        kinds = np.where(rng.random(n) < 0.5, SET, WAIT)
        events = [
            syncs(EventKind(int(k)), Pipe.MTE2, Pipe.V, int(e), block_id=int(b), serial=i + 1, pc=i + 1)
            for i, (k, e, b) in enumerate(zip(kinds, rng.integers(0, 3, n), rng.integers(0, 2, n), strict=True))
        ]
        batches = [stream(*events[lo : lo + 7]) for lo in range(0, n, 7)]
        return batches

    def test_compacting_gives_the_same_findings(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from sanitizerd.detectors import synccheck as module

        for seed in range(20):
            batches = self.random_stream(seed, 120)
            whole = summary(kernel(*batches))
            monkeypatch.setattr(module, "COMPACT_SYNCS", 5)
            compacted = summary(kernel(*batches))
            monkeypatch.setattr(module, "COMPACT_SYNCS", 1 << 20)
            assert compacted == whole, seed

    def test_past_the_bound_the_kernel_stops_and_says_so(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from sanitizerd.detectors import synccheck as module

        monkeypatch.setattr(module, "COMPACT_SYNCS", 4)
        monkeypatch.setattr(module, "MAX_HELD_SYNCS", 8)
        sets = [syncs(SET, Pipe.MTE2, Pipe.V, i, serial=i + 1) for i in range(20)]  # 20 distinct, never waited on
        (stopped,) = kernel(*(stream(*sets[lo : lo + 4]) for lo in range(0, 20, 4)))
        assert stopped.kind == "internal_error" and "left unpaired at once" in stopped.detail
        assert summary(kernel(stream(sets[0]))) != []  # the next kernel is checked again


def test_a_block_type_no_chip_defines_is_named_by_its_number() -> None:
    """An unpaired set_flag of block type 9 (a hostile or newer client's) is reported under "9"."""
    events = stream(syncs(SET, Pipe.S, Pipe.MTE3, 1, block_id=4, block_type=9))  # type: ignore[arg-type]
    assert summary(kernel(events)) == [("unpaired_set_flag", 1, "PIPE_S", "PIPE_MTE3", {"9": [4]})]
