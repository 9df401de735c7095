"""memcheck's ``--trace-non-default-spr-reg=vector``: vector instructions that ran with a non-default vector mask.

msSanitizer (master of August 2026, ``AddressSanitizer::CheckNonDefaultReg``) looks once at each instruction
(consecutive events of one serial number are one instruction) whose record names it (``instrName``) and prints, at
INFO, its name, the mask mode and both mask words when either word is not all ones. Its records carry the mask; on
our wire the mask is the block's VECTOR_MASK_0/1 and CTRL bit 56 as its SET_REGISTER events (written or observed)
left them before the access, so the state is per block and found per batch with one stable sort by block.

msSanitizer prints every execution; a loop prints the same lines (but the serial) once per iteration. We fold the
executions of one site (pc, location, instruction, mode, masks) into one finding that counts them and shows the
smallest serial, and keep at most MAX_TRACED_SITES sites per kernel: a client names every pc, and each would be one
finding. Past the bound one more INFO finding says how many sites and executions were left out.
"""

from __future__ import annotations

import numpy as np

from sanitizerd.detectors.base import SessionContext
from sanitizerd_protocol.model import Finding
from sanitizerd_protocol.records import CTRL_MASK_MODE_BIT, EventKind, Register, instr_name

ALL_ONES = (1 << 64) - 1
MAX_TRACED_SITES = 1024  # sites of one kernel launch reported; the rest are counted
_TRACED = np.array([Register.VECTOR_MASK_0, Register.VECTOR_MASK_1, Register.CTRL], dtype=np.uint16)
_DEFAULT_STATE = (ALL_ONES, ALL_ONES, 0)  # mask0, mask1, CTRL as a block starts
NO_SERIAL = (1 << 64) - 1

SITE_DTYPE = np.dtype(
    [
        ("pc", "<u8"),
        ("location", "<u4"),
        ("instr", "u1"),
        ("counter", "u1"),  # mask mode: 0 Normal, 1 Counter
        ("mask1", "<u8"),
        ("mask0", "<u8"),
        ("serial", "<u8"),  # the smallest of the site's executions
        ("count", "<u8"),  # executions folded into the site
    ]
)
_SITE_KEY = ["pc", "location", "instr", "counter", "mask1", "mask0"]


class SprTrace:
    """The per-block register state and the traced sites of the current kernel launch."""

    def __init__(self, context: SessionContext) -> None:
        self.context = context
        self.kernel_begin()

    def kernel_begin(self) -> None:
        self.registers: dict[int, tuple[int, int, int]] = {}  # block key -> mask0, mask1, CTRL
        self.last_serial: dict[int, int] = {}  # block key -> serial of its last traced instruction event
        self.sites = np.zeros(0, dtype=SITE_DTYPE)
        self.left_out_sites = 0
        self.left_out_executions = 0

    def check(self, events: np.ndarray) -> None:
        kind = events["kind"]
        registers = (kind == EventKind.SET_REGISTER) & np.isin(events["event_id"], _TRACED)
        instructions = (events["instr"] != 0) & (kind <= EventKind.WRITE)
        selected = registers | instructions
        if not selected.any():
            return
        rows = events[selected]
        is_register = registers[selected]
        block = (rows["block_type"].astype(np.uint32) << np.uint32(16)) | rows["block_id"].astype(np.uint32)
        order = np.argsort(block, kind="stable")  # program order kept inside each block
        rows, block, is_register = rows[order], block[order], is_register[order]
        n = rows.size
        starts = np.flatnonzero(np.r_[True, block[1:] != block[:-1]])
        sizes = np.diff(np.r_[starts, n])
        group = np.repeat(np.arange(starts.size), sizes)
        group_start = starts[group]
        position = np.arange(n)
        keys = block[starts].tolist()  # one step per block of the batch, not per event
        carried = np.array([self.registers.get(k, _DEFAULT_STATE) for k in keys], dtype=np.uint64).reshape(-1, 3)
        values = []
        for column, reg in enumerate(_TRACED):
            written = is_register & (rows["event_id"] == reg)
            latest = np.maximum.accumulate(np.where(written, position, -1))
            in_block = latest >= group_start
            values.append(np.where(in_block, rows["address"][np.maximum(latest, 0)], carried[group, column]))
        mask0, mask1, ctrl = values
        ends = starts + sizes - 1
        for i, k in enumerate(keys):
            self.registers[k] = (int(mask0[ends[i]]), int(mask1[ends[i]]), int(ctrl[ends[i]]))
        self._trace(rows, ~is_register, block, starts, keys, mask0, mask1, ctrl)

    def _trace(
        self, rows: np.ndarray, is_instruction: np.ndarray, block: np.ndarray, starts: np.ndarray, keys: list[int],
        mask0: np.ndarray, mask1: np.ndarray, ctrl: np.ndarray,
    ) -> None:  # fmt: skip
        at = np.flatnonzero(is_instruction)
        if not at.size:
            return
        serial = rows["serial"][at]
        inst_block = block[at]
        # An instruction's read and write events are one instruction: only the first event of each run of one serial
        # in a block is looked at, the run possibly begun in the previous batch.
        first = np.r_[True, (serial[1:] != serial[:-1]) | (inst_block[1:] != inst_block[:-1])]
        block_first = np.r_[True, inst_block[1:] != inst_block[:-1]]
        previous = np.array([self.last_serial.get(int(b), NO_SERIAL) for b in inst_block[block_first]], dtype=np.uint64)
        first[np.flatnonzero(block_first)] &= serial[block_first] != previous
        block_last = np.r_[inst_block[1:] != inst_block[:-1], True]
        for b, s in zip(inst_block[block_last].tolist(), serial[block_last].tolist(), strict=True):
            self.last_serial[b] = s
        at = at[first]
        m0, m1 = mask0[at], mask1[at]
        traced = (m0 != np.uint64(ALL_ONES)) | (m1 != np.uint64(ALL_ONES))
        at, m0, m1 = at[traced], m0[traced], m1[traced]
        if not at.size:
            return
        found = np.zeros(at.size, dtype=SITE_DTYPE)
        found["pc"] = rows["pc"][at]
        found["location"] = rows["location"][at]
        found["instr"] = rows["instr"][at]
        found["counter"] = (ctrl[at] >> np.uint64(CTRL_MASK_MODE_BIT)) & np.uint64(1)
        found["mask1"], found["mask0"] = m1, m0
        found["serial"] = rows["serial"][at]
        found["count"] = 1
        self._fold(found)

    def _fold(self, found: np.ndarray) -> None:
        both = np.concatenate([self.sites, found])
        unique, first, inverse = np.unique(both[_SITE_KEY], return_index=True, return_inverse=True)
        inverse = inverse.reshape(-1)
        folded = both[first]
        folded["count"] = np.bincount(inverse, weights=both["count"], minlength=unique.size).astype(np.uint64)
        smallest = np.full(unique.size, NO_SERIAL, dtype=np.uint64)
        np.minimum.at(smallest, inverse, both["serial"])
        folded["serial"] = smallest
        held = np.zeros(unique.size, dtype=bool)
        held[inverse[: self.sites.size]] = True
        new = np.flatnonzero(~held)
        room = MAX_TRACED_SITES - int(held.sum())
        new = new[np.argsort(folded["serial"][new], kind="stable")]  # the earliest new sites are kept
        dropped = new[room:]
        self.left_out_sites += int(dropped.size)
        self.left_out_executions += int(folded["count"][dropped].sum())
        keep = held.copy()
        keep[new[:room]] = True
        self.sites = folded[keep]

    def kernel_end(self, kernel: str | None) -> list[Finding]:
        findings: list[Finding] = []
        for site in np.sort(self.sites, order="serial").tolist():
            pc, location, instr, counter, mask1, mask0, serial, count = site
            findings.append(
                self.context.finding(
                    "non_default_mask", kernel=kernel, location=location, space="", pc=pc, serial=serial,
                    count=count, instr=instr_name(instr), mask_mode="Counter" if counter else "Normal",
                    mask_high=mask1, mask_low=mask0,
                )
            )  # fmt: skip
        if self.left_out_sites:
            findings.append(
                self.context.finding(
                    "trace_left_out", kernel=kernel, space="", count=self.left_out_executions,
                    detail=f"{self.left_out_sites} more instruction site(s) using non-default mask "
                    f"({self.left_out_executions} execution(s)) were not traced: at most {MAX_TRACED_SITES} "
                    "sites per kernel",
                )
            )  # fmt: skip
        self.kernel_begin()
        return findings
