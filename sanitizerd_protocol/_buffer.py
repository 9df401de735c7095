"""Received bytes kept as the chunks they arrived in, or read straight into the frame they belong to.

Two ways in. ``append`` takes bytes someone else read: a frame that one chunk holds is handed out as a view, with no
copy at all; one that spans several chunks is joined once. ``get_buffer``/``buffer_updated`` (asyncio's
BufferedProtocol shape) let the reader ``recv_into`` our memory instead: between frames into the thread's scratch area,
and once the framing layer knows a frame is longer than what has arrived (``gather``), straight into one array the
size of that frame, so that a batch of megabytes reaches its final place with the kernel's copy and no other. Where
the framing layer says how long a frame is from its first bytes (``frame_end``), a read between frames that begins a
longer one goes from the scratch area into that frame's array at once: its head is copied once, not into bytes first.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable

import numpy as np

from sanitizerd_protocol.errors import LocalProtocolError

# One read between frames: several small frames at once, or the head of a large one (which is then copied once
# into its gathered array, a few per cent of a batch frame).
SCRATCH_SIZE = 1 << 18
# The scratch area is the thread's, not the connection's: a thousand idle connections must not hold 256 KiB each.
_per_thread = threading.local()


def _scratch_area() -> memoryview:
    area: memoryview | None = getattr(_per_thread, "area", None)
    if area is None:
        area = _per_thread.area = memoryview(bytearray(SCRATCH_SIZE))
    return area


# The framing layer's length of the frame whose first bytes are given (0: not known from them, or not to be gathered).
FrameEnd = Callable[[memoryview], int]


class ReceiveBuffer:
    __slots__ = ("_chunks", "_filled", "_frame_end", "_offset", "_scratch", "_size", "_target")

    def __init__(self, frame_end: FrameEnd | None = None) -> None:
        self._chunks: deque[bytes | memoryview] = deque()
        self._offset = 0  # bytes of the first chunk already taken
        self._size = 0
        # The piece being gathered: its first ``_filled`` bytes are here, the rest are still to come. While it is
        # set, every buffered byte is in it (``_chunks`` is empty).
        self._target: memoryview | None = None
        self._filled = 0
        self._scratch: memoryview | None = None
        self._frame_end = frame_end

    def __len__(self) -> int:
        return self._size

    def append(self, data: bytes | bytearray | memoryview) -> None:
        if self._target is not None:
            target, filled = self._target, self._filled
            n = min(len(data), len(target) - filled)
            target[filled : filled + n] = data[:n]
            self._advance(n)
            if n == len(data):
                return
            data = data[n:]
        # Views are handed out, so hold only immutable bytes.
        self._chunks.append(data if type(data) is bytes else bytes(data))
        self._size += len(data)

    def gather(self, n: int) -> None:
        """The first ``n`` bytes (more than are buffered) will be taken as one piece: collect them in one array,
        the bytes still to come read straight into it. The array's pages become resident only as bytes arrive."""
        if self._target is not None:
            if len(self._target) != n:
                raise ValueError(f"gathering {len(self._target)} bytes, not {n}")
            return
        if n <= self._size:
            raise ValueError(f"{n} bytes are already buffered")
        target = memoryview(np.empty(n, dtype=np.uint8))
        position, offset = 0, self._offset
        for chunk in self._chunks:
            size = len(chunk) - offset
            target[position : position + size] = chunk[offset:]
            position += size
            offset = 0
        self._chunks.clear()
        self._offset = 0
        self._target, self._filled = target, position

    @property
    def gathering(self) -> int:
        """Bytes still to come for the piece being gathered (0: none is)."""
        return 0 if self._target is None else len(self._target) - self._filled

    def get_buffer(self) -> memoryview:
        """Where the next received bytes go (never empty): fill a prefix of it, then call ``buffer_updated``.

        Between frames this is a scratch area that every buffer of the thread shares: fill it and report it
        before any other buffer of the thread is asked for its memory (read, then report, with no wait between)."""
        if self._target is not None:
            return self._target[self._filled :]
        self._scratch = _scratch_area()
        return self._scratch

    def buffer_updated(self, n: int) -> None:
        """``n`` bytes were written at the start of what ``get_buffer`` returned."""
        if self._target is not None:
            if not 0 <= n <= len(self._target) - self._filled:
                raise ValueError(f"{n} bytes do not fit the gathered piece")
            self._advance(n)
        elif n:
            scratch, self._scratch = self._scratch, None
            assert scratch is not None
            # Nothing buffered: the read starts a frame. One longer than the read is gathered from here: the view
            # of the scratch area is copied into the frame's array at once, and not held.
            end = self._frame_end(scratch[:n]) if self._frame_end is not None and not self._size else 0
            self._chunks.append(scratch[:n] if end > n else bytes(scratch[:n]))
            self._size += n
            if end > n:
                self.gather(end)

    def _advance(self, n: int) -> None:
        self._filled += n
        self._size += n
        if self._target is not None and self._filled == len(self._target):
            self._chunks.append(self._target.toreadonly())
            self._target, self._filled = None, 0

    def _settle(self) -> None:
        """Make a partly gathered piece an ordinary chunk again (taking from it was not foreseen)."""
        if self._target is not None:
            self._chunks.append(bytes(self._target[: self._filled]))
            self._target, self._filled = None, 0

    def peek(self, n: int) -> bytes:
        """The first ``n`` bytes (``n`` small, at most what is buffered), left in place."""
        if self._target is not None:
            return bytes(self._target[:n])
        out = b""
        offset = self._offset
        for chunk in self._chunks:
            out += chunk[offset : offset + n - len(out)]
            offset = 0
            if len(out) == n:
                break
        return out

    def take(self, n: int) -> memoryview | bytes:
        """Remove and return the first ``n`` bytes (at most what is buffered)."""
        if not n:
            return b""
        self._settle()
        self._size -= n
        chunks = self._chunks
        first = chunks[0]
        start = self._offset
        if start + n <= len(first):
            taken: memoryview | bytes = memoryview(first)[start : start + n]
            self._offset = start + n
            if self._offset == len(first):
                chunks.popleft()
                self._offset = 0
            return taken
        parts = [memoryview(first)[start:]]
        chunks.popleft()
        self._offset = 0
        need = n - len(parts[0])
        while need:
            chunk = chunks[0]
            if len(chunk) <= need:
                parts.append(memoryview(chunk))
                chunks.popleft()
                need -= len(chunk)
            else:
                parts.append(memoryview(chunk)[:need])
                self._offset = need
                need = 0
        return b"".join(parts)


class ReceivingEnd:
    """What every sans-I/O door does with the bytes the I/O layer feeds it: hold them in a ``ReceiveBuffer`` until
    they make a frame, and remember the peer's EOF. Both doors take bytes alike so that one I/O loop drives both."""

    def __init__(self, frame_end: FrameEnd | None = None) -> None:
        self._buffer = ReceiveBuffer(frame_end)
        self._eof = False

    def receive_data(self, data: bytes) -> None:
        """Bytes read from the peer; ``b""`` at its EOF."""
        if data:
            self._refuse_after_eof()
            self._buffer.append(data)
        else:
            self._eof = True

    def _refuse_after_eof(self) -> None:
        # Only the I/O layer feeds bytes, and it saw the EOF itself: more after it is our caller's bug, not the peer's.
        if self._eof:
            raise LocalProtocolError("data received after EOF", reason="unexpected_message")
