"""Received bytes kept as the chunks they arrived in.

A frame that one chunk holds is handed out as a view, with no copy at all; one that spans several chunks is
joined once. (A single growing bytearray costs a copy on append and another to cut each frame out.)
"""

from __future__ import annotations

from collections import deque


class ReceiveBuffer:
    __slots__ = ("_chunks", "_offset", "_size")

    def __init__(self) -> None:
        self._chunks: deque[bytes] = deque()
        self._offset = 0  # bytes of the first chunk already taken
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def append(self, data: bytes) -> None:
        # Views are handed out, so hold only immutable bytes.
        self._chunks.append(data if type(data) is bytes else bytes(data))
        self._size += len(data)

    def peek(self, n: int) -> bytes:
        """The first ``n`` bytes (``n`` small, at most what is buffered), left in place."""
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
