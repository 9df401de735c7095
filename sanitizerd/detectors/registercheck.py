"""registercheck: control registers a kernel left away from their defaults (reference §2.4).

Enabled with memcheck, as in msSanitizer. State is the last value each block wrote to each register during
the kernel, found per batch with one sort of the batch's register writes (there are few). At the kernel's end
every (block, register) whose value is not the default is reported. CTRL is compared on bit 56 only, and
QUANT_POST is tracked but never checked, as msSanitizer does. msSanitizer keys its table by physical core slot
(0..74); sanitizerd keys it by the logical block the client reports, which is what the report names anyway.
"""

from __future__ import annotations

import numpy as np

from sanitizerd.detectors._sites import MAX_KERNEL_FINDINGS, left_out_text
from sanitizerd.detectors.base import KernelLaunch, SessionContext
from sanitizerd.detectors.registry import register
from sanitizerd_protocol.messages import HostOp
from sanitizerd_protocol.model import Finding
from sanitizerd_protocol.records import REGISTER_WRITTEN, EventKind, Register, block_type_name

ALL_ONES = (1 << 64) - 1
DEFAULTS: dict[Register, int] = {
    Register.VECTOR_MASK_0: ALL_ONES,
    Register.VECTOR_MASK_1: ALL_ONES,
    Register.CTRL: 0,
    Register.FFTS_BASE_ADDR: 0,
    Register.FPC: 0,
    Register.QUANT_PRE: 0,
    Register.LRELU_ALPHA: 0,
}  # QUANT_POST: never checked
_CHECKED = np.array(sorted(int(reg) for reg in DEFAULTS), dtype=np.uint16)  # register ids held per block
_CTRL_BIT = 56


def display_name(reg: Register) -> str:
    return f"CTRL[{_CTRL_BIT}]" if reg is Register.CTRL else reg.name


def checked_value(reg: Register, value: int) -> int:
    return (value >> _CTRL_BIT) & 1 if reg is Register.CTRL else value


@register("registercheck")
class Registercheck:
    name = "registercheck"

    def __init__(self, context: SessionContext) -> None:
        self.context = context
        self.kernel: KernelLaunch | None = None
        self.last: dict[tuple[int, int, int], tuple[int, int, int, int]] = {}

    def kernel_begin(self, launch: KernelLaunch) -> None:
        self.kernel = launch
        self.last = {}

    def check(self, events: np.ndarray) -> None:
        writes = events["kind"] == EventKind.SET_REGISTER
        if not writes.any():
            return
        # Only registers with a default are compared at the end: the others are not held (a client names any id,
        # and each would be one step of the loop below).
        # An observed value (a record's own mask) traces an instruction; what the kernel left is what it wrote.
        writes &= np.isin(events["event_id"], _CHECKED) & (events["mode"] == REGISTER_WRITTEN)
        if not writes.any():
            return
        w = events[writes]
        key = (w["block_type"].astype(np.uint64) << np.uint64(32)) | (w["block_id"].astype(np.uint64) << np.uint64(16))
        key |= w["event_id"].astype(np.uint64)
        # The last write of each (block, register) in this batch: unique over the reversed batch.
        _, last_from_end = np.unique(key[::-1], return_index=True)
        for i in (w.size - 1 - last_from_end).tolist():  # one step per (block, register), not per event
            row = w[i]
            self.last[(int(row["block_type"]), int(row["block_id"]), int(row["event_id"]))] = (
                int(row["address"]),
                int(row["serial"]),
                int(row["pc"]),
                int(row["location"]),
            )

    def kernel_end(self) -> list[Finding]:
        findings: list[Finding] = []
        last = sorted(self.last.items(), key=lambda item: item[1][1])  # by serial: the earliest are reported
        left_out = max(len(last) - MAX_KERNEL_FINDINGS, 0)
        for (block_type, block_id, reg_id), (value, serial, pc, location) in sorted(last[:MAX_KERNEL_FINDINGS]):
            try:
                reg = Register(reg_id)
            except ValueError:
                continue  # a register this version does not know: nothing to compare it with
            default = DEFAULTS.get(reg)
            if default is None or checked_value(reg, value) == default:
                continue
            findings.append(
                self.context.finding(
                    "register_not_reset",
                    kernel=self.kernel.name if self.kernel else None,
                    location=location,
                    blocks={block_type_name(block_type): [block_id]},
                    space="",
                    serial=serial,
                    pc=pc,
                    register=display_name(reg),
                    expected=default,
                    actual=checked_value(reg, value),
                )
            )
        if left_out:  # an upper bound: some of those registers may hold their default
            findings.append(
                self.context.finding(
                    "internal_error",
                    kernel=self.kernel.name if self.kernel else None,
                    space="",
                    detail=left_out_text("registercheck", left_out, left_out),
                )
            )
        self.kernel = None
        self.last = {}
        return findings

    def host_op(self, op: HostOp) -> list[Finding]:
        return []

    def finish(self) -> list[Finding]:
        return self.kernel_end() if self.kernel is not None else []
