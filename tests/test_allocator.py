"""The daemon's allocator thresholds: a batch's arrays come from the heap, not a fresh mmap each."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")


def test_tune_sets_the_thresholds_in_a_fresh_process() -> None:
    """A 4 MiB block freed and made again is served from the heap (no new mapping) once tuned, and mapped
    afresh each time without tuning (glibc's threshold starts at 128 KiB)."""
    probe = (
        "import ctypes, sys\n"
        "from sanitizerd import allocator\n"
        "tuned = sys.argv[1] == 'tuned' and allocator.tune()\n"
        "libc = ctypes.CDLL(None); libc.malloc.restype = ctypes.c_void_p; libc.malloc.argtypes = (ctypes.c_size_t,)\n"
        "libc.free.argtypes = (ctypes.c_void_p,)\n"
        "def maps(): return sum(1 for _ in open('/proc/self/maps'))\n"
        "p = libc.malloc(4 << 20); before = maps(); libc.free(p); after = maps()\n"
        "print(int(tuned), before - after)\n"
    )
    tuned = subprocess.run([sys.executable, "-c", probe, "tuned"], capture_output=True, text=True, check=True)
    plain = subprocess.run([sys.executable, "-c", probe, "plain"], capture_output=True, text=True, check=True)
    assert tuned.stdout.split() == ["1", "0"]  # freeing the block unmapped nothing: it was heap memory
    assert plain.stdout.split() == ["0", "1"]  # its own mapping, gone when freed

