"""The daemon's log: JSON lines on stderr, each written whole."""

from __future__ import annotations

import json
import sys

import pytest
import structlog

from sanitizerd import logs


class _Writes:
    """A stream that keeps each write call apart, as the kernel sees them."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def write(self, text: str) -> int:
        self.calls.append(text)
        return len(text)

    def flush(self) -> None:
        pass


def test_each_line_is_one_write(monkeypatch: pytest.MonkeyPatch) -> None:
    """The listener and its workers share one stderr: a line written in two calls (print's text, then its newline)
    can have another process's line between them. Each line, a long one too, is one call ending in its newline."""
    stream = _Writes()
    monkeypatch.setattr(sys, "stderr", stream)
    try:
        logs.configure("info")
        log = structlog.get_logger("test")
        log.info("reloaded", limits="x" * 5000)
        log.warning("worker stalled; killed", worker=1)
    finally:
        monkeypatch.undo()
        logs.configure("info")
    assert len(stream.calls) == 2
    assert all(call.endswith("\n") and call.count("\n") == 1 for call in stream.calls)
    assert [json.loads(call)["event"] for call in stream.calls] == ["reloaded", "worker stalled; killed"]
