"""C++ name demangling with the system's ``c++filt`` (binutils): kernel names as msSanitizer displays them per
``--demangle``, and the function names of call stacks.

msSanitizer's kernel display name (GetDisplayKernelName, reference §2.0): ``unknown`` for an empty name; a trailing
``_mix_aic``/``_mix_aiv`` dropped; with ``no``, the name as sent; otherwise ``abi::__cxa_demangle`` of the whole
name, which demangles types as well as functions (``ra`` is ``signed char restrict``). Where that fails, the name as
sent; with ``simple``, the function's name without its return type, template arguments and parameters where the
signature has them (``void ns::f<int>(int)`` -> ``ns::f``); otherwise the signature in double quotes, since it has
spaces. ``c++filt -t`` demangles exactly what ``__cxa_demangle`` does (both are libiberty's demangler); it runs in
its own process, so that a hostile name cannot take the daemon down with it. Without c++filt on the host, names
are shown as sent, and the daemon says so once.
"""

from __future__ import annotations

import functools
import shutil
import subprocess

import structlog

log = structlog.get_logger("sanitizerd.demangle")

MIX_SUFFIXES = ("_mix_aic", "_mix_aiv")


@functools.cache
def _cxxfilt() -> str | None:
    path = shutil.which("c++filt")
    if path is None:
        log.warning("c++filt not found: kernel names are shown mangled (install binutils to demangle them)")
    return path


def _printable(name: str) -> bool:
    return bool(name) and name.isprintable()


@functools.lru_cache(maxsize=4096)
def _demangled(name: str, types: bool) -> str | None:
    """``name`` demangled (with ``types``, as a type too, as ``__cxa_demangle`` does), or None where it is not a
    mangled name."""
    tool = _cxxfilt()
    if tool is None or not _printable(name) or (not types and not name.startswith("_Z")):
        return None
    try:
        done = subprocess.run(
            [tool, *(["-t"] if types else []), "--", name], capture_output=True, text=True, timeout=5, check=True
        )
    except (OSError, subprocess.SubprocessError, UnicodeDecodeError):
        return None
    out = done.stdout.rstrip("\n")
    return out if out and out != name and "\n" not in out else None


def function_name(name: str) -> str:
    """A call stack's function: its linkage name demangled, as llvm-symbolizer ``--demangle`` prints it."""
    return _demangled(name, False) or name


def _enclosed_from(text: str, end: int, left: str, right: str) -> int:
    """The index of the ``left`` that opens the ``right`` at ``end``, or -1 (msSanitizer's RfindEnclosureChar)."""
    depth = 0
    for at in range(end, -1, -1):
        if text[at] == right:
            depth += 1
        elif text[at] == left:
            depth -= 1
        if depth <= 0:
            return at if depth == 0 else -1
    return -1


def simplified(signature: str) -> str | None:
    """msSanitizer's SimplifyDemangledName: the name between the last space before the parameters (and template
    arguments) and them; None where the signature has no such shape (then msSanitizer shows it whole)."""
    if not signature.endswith(")"):
        return None
    end = _enclosed_from(signature, len(signature) - 1, "(", ")")
    if end <= 0:
        return None
    if signature[end - 1] == ">":
        end = _enclosed_from(signature, end - 1, "<", ">")
        if end <= 0:
            return None
    start = signature.rfind(" ", 0, end + 1)
    if start <= 0 or start + 1 >= end:
        return None
    return signature[start + 1 : end]


def demangle(name: str, mode: str) -> str:
    """A kernel's name as msSanitizer displays it with ``--demangle mode`` (full, simple or no)."""
    for suffix in MIX_SUFFIXES:
        if name.endswith(suffix):
            name = name[: -len(suffix)]
            break
    if not name:
        return "unknown"
    if mode == "no":
        return name
    signature = _demangled(name, True)
    if signature is None:
        return name
    if mode == "simple":
        short = simplified(signature)
        if short is not None:
            return short
    return f'"{signature}"'


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
