"""Building client_shim/native with the system's compilers, for the tests that run the C client or read its ELF.

The tests need ``cc`` (C11) for the client and ``c++`` for the kernel ELF (with ``-g``: GCC or Clang); they skip
only where neither exists (the CI machine has GCC).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import ROOT

NATIVE = ROOT / "client_shim" / "native"
KERNEL_SOURCE = NATIVE / "add_custom_kernel.cpp"
CLIENT_SOURCE = NATIVE / "msop_add_client.c"


def compiler(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"no {name} on this machine")
    return path


def compile_checked(command: list[str]) -> None:
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"{' '.join(command)}:\n{done.stderr}"


def build_kernel(directory: Path, source: Path = KERNEL_SOURCE, *, shared: bool = False) -> Path:
    """The kernel ELF: a relocatable object (every section at 0, so the labels are at their .org offsets; the DWARF
    addresses are relocations) or, ``shared=True``, a shared object (addresses as a linker places them)."""
    out = directory / (source.stem + (".elf" if shared else ".o"))
    flags = ["-fPIC", "-shared", "-nostdlib"] if shared else ["-c"]
    compile_checked([compiler("c++"), "-g", "-O0", *flags, "-o", str(out), str(source)])
    return out


# mssanitizer_wire.h's MSOP_WIRE values, by the sanitizerd layout each one declares.
WIRES = {
    "mssanitizer-4a419f05": "MSOP_WIRE_4A419F05",
    "mssanitizer-74a1ad94": "MSOP_WIRE_26_1_0",
    "mssanitizer-1e040de1": "MSOP_WIRE_MASTER",
}


def wire_flag(layout: str) -> str:
    return f"-DMSOP_WIRE={WIRES[layout]}"


def build_client(directory: Path, layout: str = "mssanitizer-4a419f05") -> Path:
    """The C client built for ``layout``'s wire (a name of ``WIRES``)."""
    out = directory / f"msop_add_client-{layout}"
    compile_checked([compiler("cc"), "-std=c11", "-Wall", "-Wextra", "-Werror", "-O1", wire_flag(layout), "-o",
                     str(out), str(CLIENT_SOURCE)])  # fmt: skip
    return out
