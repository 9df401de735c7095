"""Which block of a kernel has written each GM page: stomping's shortcut for the steady state.

A kernel's blocks mostly write pages of their own (each its slice of the output). A batch whose writes touch
only pages that nobody or the writing block itself has written cannot stomp: no other block's byte can be
there. Only then may stomping skip the byte-exact lookups in its owner sets, and only pages where two blocks
have written (``SHARED``, for the rest of the kernel) need them. Pages are 64 KiB: big enough that a page
table of a kernel writing all of a 64 GiB HBM holds a million entries, small enough that blocks writing
slices of a few hundred KiB each keep pages of their own.
"""

from __future__ import annotations

import numpy as np

from sanitizerd.detectors import _intervals

PAGE_SHIFT = 16
# Pages a kernel's table may hold, and one batch may touch: a client's ranges are its own words (one write may
# claim to span terabytes). Past either the table gives up for the kernel, and stomping looks everything up.
MAX_PAGES = 1 << 21
SHARED = -1  # two blocks have written the page
_NOBODY = -2
_U64 = np.uint64


def pages_of(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The first and the last page of each non-empty ``[lo, hi)``."""
    return lo >> _U64(PAGE_SHIFT), (hi - _U64(1)) >> _U64(PAGE_SHIFT)


class PageOwners:
    """Sorted written pages and, for each, its one writer (an owner number) or SHARED."""

    def __init__(self) -> None:
        self.pages = np.empty(0, dtype=_U64)
        self.owners = np.empty(0, dtype=np.int64)

    def __len__(self) -> int:
        return int(self.pages.size)

    def note(self, owners: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        """Record that each owner wrote ``[lo, hi)`` (non-empty ranges). Returns, per range, whether every page
        it touches is its owner's alone (nobody else's before, and no other owner's in this batch), and the
        pages that had one writer and now have two (sorted); None when the pages pass ``MAX_PAGES`` (nothing
        recorded: the table is no longer exact, and must not be used again)."""
        native = _intervals.native
        if (
            native is not None
            and lo.dtype == _U64
            and hi.dtype == _U64
            and lo.ndim == 1
            and lo.size
            and lo.shape == hi.shape == owners.shape
            and self.owners.flags.c_contiguous
            and self.owners.flags.writeable
        ):
            try:
                noted = native.page_note(
                    np.ascontiguousarray(owners).astype(np.int64, copy=False), np.ascontiguousarray(lo),
                    np.ascontiguousarray(hi), np.ascontiguousarray(self.pages), self.owners, MAX_PAGES, PAGE_SHIFT,
                )  # fmt: skip
            except ValueError:  # an empty range: the reference path's answer, whatever it is
                return self.note_numpy(owners, lo, hi)
            if noted is None:
                return None
            alone, shared, pages, table = noted
            if pages is not None:
                self.pages, self.owners = np.frombuffer(pages, _U64), np.frombuffer(table, np.int64)
            return np.frombuffer(alone, dtype=bool), np.frombuffer(shared, _U64)
        return self.note_numpy(owners, lo, hi)

    def note_numpy(self, owners: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        """``note``'s reference path."""
        first, last = pages_of(lo, hi)
        span = (last - first).astype(np.int64) + 1
        if int(span.sum()) + self.pages.size > MAX_PAGES:
            return None
        if int(span.max()) == 1:
            page, writer = first, owners.astype(np.int64)
        else:  # a range over several pages: each of them (a range's pages are bounded by the bytes it writes)
            starts = np.repeat(np.cumsum(span) - span, span)
            page = np.repeat(first, span) + (np.arange(int(span.sum())) - starts).astype(_U64)
            writer = np.repeat(owners.astype(np.int64), span)
        order = np.lexsort((writer, page))
        sorted_page, sorted_writer = page[order], writer[order]
        head = np.empty(page.size, dtype=bool)
        head[0] = True
        np.not_equal(sorted_page[1:], sorted_page[:-1], out=head[1:])
        heads = np.flatnonzero(head)
        tails = np.append(heads[1:] - 1, page.size - 1)
        unique = sorted_page[heads]
        # Writers sorted within a page: its first and last are one writer, or two wrote it here.
        batch = np.where(sorted_writer[heads] == sorted_writer[tails], sorted_writer[heads], SHARED)
        at = np.searchsorted(self.pages, unique)
        held = at < self.pages.size
        held[held] = self.pages[at[held]] == unique[held]
        before = np.full(unique.size, _NOBODY, dtype=np.int64)
        before[held] = self.owners[at[held]]
        page_alone = (batch != SHARED) & ((before == _NOBODY) | (before == batch))
        after = np.where(page_alone, batch, SHARED)
        newly_shared = unique[(before >= 0) & (after == SHARED)]
        if not (page_alone.all() and held.all()):
            self.owners[at[held]] = after[held]
            fresh = ~held
            if fresh.any():
                self.pages = np.insert(self.pages, at[fresh], unique[fresh])
                self.owners = np.insert(self.owners, at[fresh], after[fresh])
        # Back from pages to ranges: a range is alone when each of its pages is.
        piece_alone = np.empty(page.size, dtype=bool)
        piece_alone[order] = page_alone[np.cumsum(head) - 1]
        if piece_alone.size == lo.size:
            return piece_alone, newly_shared
        return np.logical_and.reduceat(piece_alone, np.cumsum(span) - span), newly_shared
