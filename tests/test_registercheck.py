"""registercheck driven directly (reference §2.4), and its one-line report."""

from __future__ import annotations

import numpy as np

from client_shim.events import BlockType, Register, register_writes
from sanitizerd.detectors.registercheck import Registercheck
from sanitizerd.findings.render import render_text
from sanitizerd_protocol.model import Finding
from tests.detector_helpers import make_detector, run_kernel

ALL_ONES = (1 << 64) - 1


def registercheck() -> Registercheck:
    detector = make_detector("registercheck")
    assert isinstance(detector, Registercheck)
    return detector


def kernel(*batches: np.ndarray, detector: Registercheck | None = None) -> list[Finding]:
    return run_kernel(detector or registercheck(), *batches)


def summary(findings: list[Finding]) -> list[tuple[str, dict[str, list[int]], int, int]]:
    return [(f.register, f.blocks, f.expected, f.actual) for f in findings]


class TestRegistercheck:
    def test_mask_left_changed(self) -> None:
        """A vector mask left away from all-ones is reported with the default and the value left."""
        findings = kernel(register_writes(Register.VECTOR_MASK_0, 123456, serial=9))
        assert summary(findings) == [("VECTOR_MASK_0", {"aiv": [0]}, ALL_ONES, 123456)]
        assert (findings[0].kind, findings[0].severity, findings[0].serial) == ("register_not_reset", "warning", 9)

    def test_mask_reset_before_the_end(self) -> None:
        """A mask changed and then reset to its default gives no finding, even across batches."""
        assert (
            kernel(register_writes(Register.VECTOR_MASK_1, 7), register_writes(Register.VECTOR_MASK_1, ALL_ONES)) == []
        )

    def test_last_write_in_a_batch_wins(self) -> None:
        """Within one batch, the last write of a block's register is the one that counts."""
        writes = register_writes(Register.FPC, np.array([5, 0, 9], dtype=np.uint64), serial=np.array([1, 2, 3]))
        assert summary(kernel(writes)) == [("FPC", {"aiv": [0]}, 0, 9)]

    def test_per_block(self) -> None:
        """Each block's registers are its own: only the block that left a value is named."""
        writes = np.concatenate(
            (
                register_writes(Register.LRELU_ALPHA, 3, block_id=0),
                register_writes(Register.LRELU_ALPHA, 3, block_id=1, block_type=BlockType.AIC),
                register_writes(Register.LRELU_ALPHA, 0, block_id=0),
            )
        )
        assert summary(kernel(writes)) == [("LRELU_ALPHA", {"aic": [1]}, 0, 3)]

    def test_ctrl_compares_bit_56_only(self) -> None:
        """CTRL is checked on bit 56 alone and printed as CTRL[56]."""
        assert kernel(register_writes(Register.CTRL, 0xFF)) == []
        assert summary(kernel(register_writes(Register.CTRL, 1 << 56))) == [("CTRL[56]", {"aiv": [0]}, 0, 1)]

    def test_quant_post_is_never_checked(self) -> None:
        """QUANT_POST is tracked but, as in msSanitizer, never reported."""
        assert kernel(register_writes(Register.QUANT_POST, 42)) == []

    def test_state_resets_per_kernel(self) -> None:
        """A value left by one kernel is not held against the next, which starts from the defaults."""
        detector = registercheck()
        assert len(kernel(register_writes(Register.QUANT_PRE, 1), detector=detector)) == 1
        assert kernel(register_writes(Register.QUANT_PRE, 0), detector=detector) == []

    def test_report_line(self) -> None:
        """The report is msSanitizer's single line, under sanitizerd's name."""
        text = render_text(kernel(register_writes(Register.VECTOR_MASK_0, 123456)))
        assert text == (
            "[sanitizerd] Warning:Register VECTOR_MASK_0 was not reset to default in block aiv(0) on kernel "
            "add_custom. Expected default value is (18446744073709551615), but current value is (123456)\n\n"
        )  # msSanitizer ends the line, and its message adds a blank line as after every report

    def test_enabled_with_memcheck_by_run_options(self) -> None:
        """`sanitizerd run -t memcheck` configures registercheck too, so the session creates it."""
        from sanitizerd.cli.options import parse_run_args

        tools = parse_run_args(["-t", "memcheck", "--", "/bin/true"]).config.tools
        assert "registercheck" in tools
