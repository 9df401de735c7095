"""Per-chip facts the detectors need: on-chip memory sizes and block naming (reference §1.5).

Sizes are bytes. The private ("stack") space is cores x 32 KiB by AscendC convention.
"""

from __future__ import annotations

from dataclasses import dataclass

from sanitizerd_protocol.records import Space

KiB = 1024


@dataclass(frozen=True, slots=True)
class Chip:
    name: str
    ai_cores: int
    has_sub_blocks: bool  # aiv/aic naming (910B, 950) rather than aicore
    sizes: dict[Space, int]

    @property
    def is_950(self) -> bool:
        """Of the 950 family (every 950 variant is named by this one entry: ``chip_named``), whose vector pipe
        keeps its own order and whose data cache lines are 64 bytes."""
        return self.name == "950"


def _chip(name: str, cores: int, sub: bool, *, l0c: int, l1: int, ub: int, private_cores: int) -> Chip:
    return Chip(
        name,
        cores,
        sub,
        {
            Space.L0A: 64 * KiB,
            Space.L0B: 64 * KiB,
            Space.L0C: l0c * KiB,
            Space.L1: l1 * KiB,
            Space.UB: ub * KiB,
            Space.PRIVATE: private_cores * 32 * KiB,
        },
    )


CHIPS: dict[str, Chip] = {
    c.name: c
    for c in (
        _chip("910_premium_a", 32, False, l0c=256, l1=1024, ub=256, private_cores=32),
        _chip("910B1", 24, True, l0c=128, l1=512, ub=192, private_cores=75),
        _chip("910B2", 24, True, l0c=128, l1=512, ub=192, private_cores=75),
        _chip("910B3", 20, True, l0c=128, l1=512, ub=192, private_cores=75),
        _chip("910B4", 20, True, l0c=128, l1=512, ub=192, private_cores=75),
        _chip("310P", 8, False, l0c=256, l1=1024, ub=256, private_cores=18),
        _chip("950", 32, True, l0c=256, l1=512, ub=256, private_cores=96),
    )
}

DEFAULT_CHIP = "910B1"


def chip_named(name: str) -> Chip:
    """Look a chip up by any common spelling: ``Ascend910B1``, ``910b1``, ``ascend310p``."""
    key = name.strip().lower().removeprefix("ascend").strip("_- ")
    for chip in CHIPS.values():
        if chip.name.lower() == key:
            return chip
    if key.startswith("95"):
        return CHIPS["950"]
    raise KeyError(f"unknown chip {name!r}; known: {', '.join(CHIPS)}")
