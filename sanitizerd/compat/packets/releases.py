"""Which msSanitizer wire an install speaks, from the commits compiled into its binaries.

``mssanitizer.bin`` carries msSanitizer's commit (``git rev-parse HEAD`` at build, cmake/options.cmake) and the
injection library ``libmssanitizer_injection.so`` carries msopcom's (``GetFuncInjectionRevision``). Every commit
of msSanitizer's release branches and tags was measured (``layouts/commits.json``, made with the layouts by
compiling each revision's headers): each names the wire (``sanitizerd.compat.wire`` layout) it speaks. msopcom's
commits are mapped the same way, to the msSanitizer wire whose structs its injection library writes. The
``version.info`` of a package says 26.0.0 on every branch, master included, so it never decides alone.
"""

from __future__ import annotations

import functools
import json
from importlib import resources
from typing import Any

from sanitizerd.compat.wire import LAYOUT_DIR


@functools.cache
def _commits() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((resources.files("sanitizerd.compat") / LAYOUT_DIR / "commits.json").read_text())
    return data


def wire_of_tool(commit: str) -> str | None:
    """The wire msSanitizer's ``commit`` speaks, or None for a commit not measured."""
    return _commits()["mssanitizer"].get(commit.lower())


def wire_of_injection(commit: str) -> str | None:
    """The wire an injection library built from msopcom's ``commit`` speaks (the latest msSanitizer wire whose outer
    structs, the only ones msopcom has copies of, it matches); None for a commit not measured."""
    return _commits()["msopcom"].get(commit.lower())


def tool_commits() -> frozenset[str]:
    return frozenset(_commits()["mssanitizer"])


def injection_commits() -> frozenset[str]:
    return frozenset(_commits()["msopcom"])
