"""C++ name demangling for kernel names, with the system's ``c++filt`` (binutils), as ``--demangle`` asks.

``full`` gives c++filt's whole signature, ``simple`` the qualified name without its parameters, ``no`` the
name as the client sent it. Without c++filt on the host, names are shown as sent, and the daemon says so once.
"""

from __future__ import annotations

import functools
import shutil
import subprocess

import structlog

log = structlog.get_logger("sanitizerd.demangle")


@functools.cache
def _cxxfilt() -> str | None:
    path = shutil.which("c++filt")
    if path is None:
        log.warning("c++filt not found: kernel names are shown mangled (install binutils to demangle them)")
    return path


@functools.lru_cache(maxsize=4096)
def _full(name: str) -> str:
    tool = _cxxfilt()
    if tool is None or not name.startswith("_Z"):
        return name
    try:
        done = subprocess.run([tool, name], capture_output=True, text=True, timeout=5, check=True)
    except (OSError, subprocess.SubprocessError):
        return name
    return done.stdout.strip() or name


def _without_parameters(signature: str) -> str:
    """``ns::f<int>(int, char*) const`` -> ``ns::f<int>``: cut at the first '(' outside template brackets."""
    depth = 0
    for i, char in enumerate(signature):
        if char == "<":
            depth += 1
        elif char == ">":
            depth -= 1
        elif char == "(" and depth == 0 and i:
            return signature[:i]
    return signature


def demangle(name: str, mode: str) -> str:
    if mode == "no":
        return name
    full = _full(name)
    return _without_parameters(full) if mode == "simple" else full


def demangle_many(names: list[str]) -> dict[str, str]:
    """Full demangling of many names with one c++filt (call stacks name every function of a kernel: one process
    each would cost milliseconds apiece). Names it cannot demangle, or all of them without c++filt, map to
    themselves."""
    mangled = sorted({n for n in names if n.startswith("_Z") and "\n" not in n and "\r" not in n})
    out = {n: n for n in names}
    tool = _cxxfilt()
    if not mangled or tool is None:
        return out
    try:
        done = subprocess.run(
            [tool], input="\n".join(mangled) + "\n", capture_output=True, text=True, timeout=30, check=True
        )
    except (OSError, subprocess.SubprocessError, UnicodeDecodeError):
        return out
    lines = done.stdout.split("\n")
    if len(lines) >= len(mangled):  # one line out per line in; anything else is not trusted
        out.update((name, line.strip() or name) for name, line in zip(mangled, lines, strict=False))
    return out
