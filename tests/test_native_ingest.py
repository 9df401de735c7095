"""A session's batch cut by pieces (sessions/work.py): the compiled pass (sanitizerd.native._ingest) makes exactly the
cuts numpy's makes, on random batches and on hostile ones (repeats, blocks and strides at the u16 limits)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sanitizerd import native
from sanitizerd.detectors.base import ALL_PIECES, GM_WRITES
from sanitizerd.sessions.work import WIDE_ACCESS_PIECES, split_by_pieces, split_by_pieces_numpy
from sanitizerd_protocol.records import EVENT_DTYPE, FLAG_CLAIM, EventKind, Space

compiled = native.load("_ingest")
needs_compiled = pytest.mark.skipif(
    compiled is None and native.mode() != "required", reason="sanitizerd.native._ingest not built here"
)
U16 = st.integers(0, 0xFFFF)
SMALL = st.integers(0, 4)


def _batch(rows: list[tuple[int, int, int]]) -> np.ndarray:
    events = np.zeros(len(rows), dtype=EVENT_DTYPE)
    if rows:
        events["repeat"], events["block_num"], events["block_stride"] = np.array(rows, dtype=np.uint16).T
    return events


def _compiled_parts(events: np.ndarray, limit: int, walked: str) -> list[np.ndarray]:
    assert compiled is not None
    cuts = compiled.cuts(events.view(np.uint8), limit, WIDE_ACCESS_PIECES, walked == GM_WRITES)
    return np.split(events, cuts) if cuts else [events]


def _same(events: np.ndarray, limit: int, walked: str = ALL_PIECES) -> None:
    expected = [(part.size, int(part["serial"][0])) for part in split_by_pieces_numpy(events, limit, walked)]
    got = [(part.size, int(part["serial"][0])) for part in _compiled_parts(events, limit, walked)]
    assert got == expected


@needs_compiled
@settings(max_examples=300, deadline=None)
@given(
    rows=st.lists(st.tuples(st.one_of(SMALL, U16), st.one_of(SMALL, U16), st.one_of(SMALL, U16)), min_size=1,
                  max_size=200),
    limit=st.one_of(st.integers(1, 64), st.integers(1, 1 << 22)),
    walked=st.sampled_from([ALL_PIECES, GM_WRITES]),
    seed=st.integers(0, 2**32 - 1),
)  # fmt: skip
def test_compiled_cuts_as_numpy(rows: list[tuple[int, int, int]], limit: int, walked: str, seed: int) -> None:
    events = _batch(rows)
    events["serial"] = np.arange(events.size)
    rng = np.random.default_rng(seed)  # kinds, spaces and claims mixed: GM_WRITES counts GM writes and claims
    events["kind"] = rng.choice([EventKind.READ, EventKind.WRITE, EventKind.SET_FLAG], events.size)
    events["space"] = rng.choice([Space.GM, Space.UB, 0], events.size)
    events["flags"] = rng.choice([0, FLAG_CLAIM, 0xFF], events.size)
    _same(events, limit, walked)


@needs_compiled
@pytest.mark.parametrize("value", [0, 1, 2, 0xFFFE, 0xFFFF])
def test_hostile_rows_at_the_limits(value: int) -> None:
    events = _batch([(value, value, value)] * 1000 + [(0xFFFF, 0xFFFF, 0xFFFF)] * 3)
    events["serial"] = np.arange(events.size)
    for limit in (1, WIDE_ACCESS_PIECES - 1, WIDE_ACCESS_PIECES, 1 << 20, 1 << 62):
        for walked in (ALL_PIECES, GM_WRITES):
            _same(events, limit, walked)


@needs_compiled
def test_refuses_what_is_not_whole_records() -> None:
    assert compiled is not None
    with pytest.raises(ValueError, match="whole 56-byte records"):
        compiled.cuts(np.zeros(57, dtype=np.uint8), 1 << 20, WIDE_ACCESS_PIECES, False)
    with pytest.raises(ValueError):
        compiled.cuts(np.zeros(56, dtype=np.uint8), 0, WIDE_ACCESS_PIECES, False)
    with pytest.raises(ValueError):
        compiled.cuts(np.zeros(56, dtype=np.uint8), (1 << 62) + 1, WIDE_ACCESS_PIECES, True)
    assert compiled.cuts(b"", 1, 1, True) == []


def test_the_session_splits_a_wide_batch_whichever_path() -> None:
    """split_by_pieces, as the session calls it, on a batch of scattered repeated rows past the bound: every part
    within it, the parts the whole batch in order."""
    events = _batch([(8, 64, 2)] * 70_000)
    events["serial"] = np.arange(events.size)
    parts = split_by_pieces(events)
    assert len(parts) > 1
    assert np.array_equal(np.concatenate(parts)["serial"], events["serial"])
    assert all(part.size * 8 * 64 <= 1 << 20 for part in parts)


def test_only_the_walked_pieces_count() -> None:
    """Wide GM reads and on-chip writes are one batch for a detector that walks GM writes alone (memcheck), and
    cut for one that walks every piece; GM writes and claims among them are cut for both."""
    events = _batch([(8, 64, 2)] * 70_000)
    events["serial"] = np.arange(events.size)
    events["kind"], events["space"] = EventKind.READ, Space.GM
    events["kind"][1::2], events["space"][1::2] = EventKind.WRITE, Space.UB
    assert len(split_by_pieces(events, walked=GM_WRITES)) == 1
    assert len(split_by_pieces(events)) > 1
    events["space"][1::2] = Space.GM
    events["flags"][::2] = FLAG_CLAIM
    for walked in (ALL_PIECES, GM_WRITES):
        parts = split_by_pieces(events, walked=walked)
        assert len(parts) == len(split_by_pieces_numpy(events, walked=walked)) > 1
        assert all(part.size * 8 * 64 <= 1 << 20 for part in parts)
