"""The client's per-block record buffers: the compiled count and numpy's give the same answers, batch after batch."""

from __future__ import annotations

import shutil
import sysconfig
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from client_shim import record_buffer
from client_shim.record_buffer import hold_numpy
from sanitizerd_protocol.records import empty_events

KEYS = 3 << 16  # the client's table: block types 0-2, every block id

batches = st.lists(
    st.lists(st.tuples(st.integers(0, 3), st.sampled_from([0, 1, 2, 7, 47, 65535])), max_size=60),
    min_size=1,
    max_size=6,
)


def _events(blocks: list[tuple[int, int]]) -> np.ndarray:
    events = empty_events(len(blocks))
    if blocks:
        events["block_type"], events["block_id"] = np.array(blocks).T
    return events


@pytest.mark.skipif(record_buffer.hold_compiled is None, reason="built without a C compiler: numpy's count only")
@settings(max_examples=300, deadline=None)
@given(batches, st.integers(1, 20))
def test_compiled_and_numpy_hold_alike(stream: list[list[tuple[int, int]]], capacity: int) -> None:
    """Each batch: both fit or neither; where they fit both count it, and where not neither changes a thing
    (block type 3 lies past the table: not fitting)."""
    assert record_buffer.hold_compiled is not None
    compiled, numpy_used = np.zeros(KEYS, np.int64), np.zeros(KEYS, np.int64)
    for blocks in stream:
        events = _events(blocks)
        assert record_buffer.hold_compiled(events, compiled, capacity) == hold_numpy(events, numpy_used, capacity)
        assert np.array_equal(compiled, numpy_used)


def test_numpy_hold_counts_until_a_block_is_full() -> None:
    used = np.zeros(KEYS, np.int64)
    assert hold_numpy(_events([(0, 5), (0, 5), (1, 5)]), used, 2)
    assert (used[5], used[(1 << 16) | 5]) == (2, 1)
    assert not hold_numpy(_events([(0, 5)]), used, 2)  # block 5 is full: nothing counted
    assert not hold_numpy(_events([(3, 0)]), used, 2)  # past the table
    assert hold_numpy(_events([]), used, 2)
    assert int(used.sum()) == 3


def test_the_compiled_count_is_built_where_a_compiler_is() -> None:
    """pip builds it on install wherever a C compiler and Python's headers are (CI's machine has both): a build
    that silently failed would leave every client on the slower count."""
    compiler = shutil.which(str(sysconfig.get_config_var("CC") or "cc").split()[0])
    if compiler is None or not Path(sysconfig.get_paths()["include"], "Python.h").exists():
        pytest.skip("no C compiler or Python headers here: the numpy count is the one in use")
    assert record_buffer.hold is record_buffer.hold_compiled
