"""The per-block record buffers of a kernel launch, as the device hooks keep them: ``cache_size`` MB a block, and
what does not fit is lost (reference §1.4). The client counts every batch into them before sending it.

``hold`` is compiled (``_record_buffer.c``, built on install) where a C compiler was there, and numpy otherwise;
both give the same answers (tests/test_record_buffer.py runs them side by side). The compiled one is one pass that
reads three bytes of each record; numpy's takes two passes over the strided fields and a ``bincount``, about as
much CPU as sending the batch (docs/performance.md).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from sanitizerd_protocol.records import EVENT_DTYPE, block_keys

Hold = Callable[[np.ndarray, np.ndarray, int], bool]


def hold_numpy(events: np.ndarray, used: np.ndarray, capacity: int) -> bool:
    """Add each event to its block's count in ``used`` (int64, by ``block_type << 16 | block_id``) if every block
    stays within ``capacity`` records; otherwise change nothing and return False (a block past the table too)."""
    if not events.size:
        return True
    dense = np.bincount(block_keys(events))  # as long as the highest block key in the batch: short for vector blocks
    if dense.size > used.size:
        return False
    total = used[: dense.size] + dense
    if int(total.max()) > capacity:
        return False
    used[: dense.size] = total
    return True


def _compiled() -> Hold | None:
    try:
        from client_shim._record_buffer import hold as compiled_hold
    except ImportError:  # no compiler at install: numpy's
        return None

    def hold_compiled(events: np.ndarray, used: np.ndarray, capacity: int) -> bool:
        assert events.dtype == EVENT_DTYPE and used.dtype == np.int64 and used.flags.c_contiguous
        return bool(compiled_hold(np.ascontiguousarray(events).view(np.uint8), used, capacity))

    return hold_compiled


hold_compiled = _compiled()
hold: Hold = hold_compiled or hold_numpy
