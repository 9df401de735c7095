"""The daemon's allocator thresholds: a batch's arrays come from the heap, not a fresh mmap each."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")


def probe_both_ways(body: str) -> tuple[list[str], list[str]]:
    """What ``body`` prints in a fresh process, tuned (``tuned`` true) and not: the words of each."""
    head = (
        "import ctypes, sys\n"
        "from sanitizerd import allocator\n"
        "tuned = sys.argv[1] == 'tuned' and allocator.tune()\n"
        "libc = ctypes.CDLL(None); libc.malloc.restype = ctypes.c_void_p; libc.malloc.argtypes = (ctypes.c_size_t,)\n"
        "libc.free.argtypes = (ctypes.c_void_p,)\n"
    )
    out = [
        subprocess.run([sys.executable, "-c", head + body, mode], capture_output=True, text=True, check=True).stdout
        for mode in ("tuned", "plain")
    ]
    return out[0].split(), out[1].split()


def test_tune_sets_the_thresholds_in_a_fresh_process() -> None:
    """A 4 MiB block freed and made again is served from the heap (no new mapping) once tuned, and mapped
    afresh each time without tuning (glibc's threshold starts at 128 KiB)."""
    tuned, plain = probe_both_ways(
        "def maps(): return sum(1 for _ in open('/proc/self/maps'))\n"
        "p = libc.malloc(4 << 20); before = maps(); libc.free(p); after = maps()\n"
        "print(int(tuned), before - after)\n"
    )
    assert tuned == ["1", "0"]  # freeing the block unmapped nothing: it was heap memory
    assert plain == ["0", "1"]  # its own mapping, gone when freed


def test_tune_grows_the_heap_by_its_top_pad() -> None:
    """Once tuned, the heap grows by 64 MiB more than asked (M_TOP_PAD), so that a proof's temporaries do not move
    its top (a brk each) and are not given back between proofs; untuned, by what is asked only."""
    tuned, plain = probe_both_ways(
        "def heap():\n"
        "    for line in open('/proc/self/maps'):\n"
        "        if line.rstrip().endswith('[heap]'):\n"
        "            lo, hi = (int(x, 16) for x in line.split()[0].split('-'))\n"
        "            return hi - lo\n"
        "    return 0\n"
        "before = heap(); blocks = [libc.malloc(64 << 10) for _ in range(64)]; grown = heap() - before\n"
        "print(int(tuned), int(grown >= allocator.TOP_PAD))\n"
    )
    assert tuned == ["1", "1"]
    assert plain == ["0", "0"]
