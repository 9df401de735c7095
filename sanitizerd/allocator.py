"""The C allocator's thresholds, set once at start: the daemon's work is numpy arrays of a few MiB made and freed
for every batch, and glibc's defaults hand each of them its own fresh mmap.

glibc serves a block over ``M_MMAP_THRESHOLD`` (128 KiB at first, raised only as such blocks are freed) with mmap,
and gives memory back to the kernel once ``M_TRIM_THRESHOLD`` is free at the heap's top. A decoded record chunk
(2 MiB) and each temporary array of its conversion are over that, so every batch paid page faults on memory just
unmapped: through the compat connection that was 40 % of the decoding time (benchmarks/compat.py --connection,
docs/performance.md). Blocks up to 32 MiB now come from the heap, which gives back what is free beyond 64 MiB, and
larger blocks (a racecheck kernel's tables) are still mapped and unmapped on their own.

The heap also grows and shrinks by ``M_TOP_PAD`` (64 MiB) more than asked. With glibc's 128 KiB, a racecheck
proof's temporaries (tens of MiB, made and freed in a few milliseconds) moved the heap's top with a brk each, and
what they freed at the top was given back and faulted in afresh by the next proof: at 3 M events, 92 brks and
50-75 ms of page faults a launch, a third of its CPU (benchmarks/racecheck.py, docs/performance.md). What the
heap keeps free at its top stays within 64 MiB either way: it is trimmed past the threshold, down to the pad.
"""

from __future__ import annotations

import ctypes
import ctypes.util

M_TRIM_THRESHOLD = -1  # glibc's mallopt parameters (malloc.h)
M_TOP_PAD = -2
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 << 20
TRIM_THRESHOLD = 64 << 20
TOP_PAD = 64 << 20


def tune() -> bool:
    """Set the thresholds where the C library is glibc; whether it was."""
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (musl has no mallopt): its defaults stand
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return all(mallopt(option, value) for option, value in (
        (M_MMAP_THRESHOLD, MMAP_THRESHOLD), (M_TRIM_THRESHOLD, TRIM_THRESHOLD), (M_TOP_PAD, TOP_PAD)
    ))  # fmt: skip
