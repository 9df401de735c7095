"""The compiled hot loops (C, built by setuptools on install), and the one switch between them and the numpy
reference path that every caller keeps beside them.

Each loop here is an optional extension module (``pyproject.toml``, ``[[tool.setuptools.ext-modules]]`` with
``optional = true``): where the installing machine has no C compiler the install goes on without it and the caller
takes its numpy path, which gives the same answers (each module's tests run both on random and hostile inputs).
Why C through setuptools and not numba or Cython: docs/design.md, "Compiled hot loops".

``SANITIZERD_NATIVE`` chooses, for the whole process:

- unset: the compiled loop where it was built, numpy's where not;
- ``0``: numpy's everywhere (CI runs the tests of every module with a compiled twin so, as a machine without a
  compiler would);
- ``1``: the compiled loop or an ImportError at import time (CI's test passes: a loop that failed to build must not
  pass as numpy's in silence).
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

ENVIRONMENT = "SANITIZERD_NATIVE"
# Every compiled module, by the name under this package; `sanitizerd version --verbose` and the benchmarks say which
# of them this process runs.
MODULES = ("_ingest", "_memcheck", "_initcheck", "_racecheck", "_records")


class NativeMissing(ImportError):
    """``SANITIZERD_NATIVE=1`` and a compiled loop was not built (or fails to load)."""


def mode() -> str:
    """``"auto"``, ``"reference"`` or ``"required"``, from ``SANITIZERD_NATIVE``; any other value is refused, since a
    typo that silently chose a path would defeat the switch."""
    value = os.environ.get(ENVIRONMENT, "")
    if value == "":
        return "auto"
    if value == "0":
        return "reference"
    if value == "1":
        return "required"
    raise ValueError(f"{ENVIRONMENT} must be 0 or 1 (or unset), not {value!r}")


def load(name: str) -> ModuleType | None:
    """The compiled module ``sanitizerd.native.<name>``, or None where the numpy path is to run."""
    chosen = mode()
    if chosen == "reference":
        return None
    try:
        return importlib.import_module(f"{__name__}.{name}")
    except ImportError as missing:
        if chosen == "required":
            raise NativeMissing(f"{ENVIRONMENT}=1 but {__name__}.{name} is not built: {missing}") from missing
        return None


def built() -> dict[str, bool]:
    """Which compiled modules this process uses (False for each under ``SANITIZERD_NATIVE=0``)."""
    chosen = mode()
    found: dict[str, bool] = {}
    for name in MODULES:
        if chosen == "reference":
            found[name] = False
            continue
        try:
            importlib.import_module(f"{__name__}.{name}")
        except ImportError:
            found[name] = False
        else:
            found[name] = True
    return found


def describe() -> str:
    """One line for ``sanitizerd --version``: which hot loops run compiled here."""
    built_here = built()
    compiled = [name.lstrip("_") for name, present in built_here.items() if present]
    if mode() == "reference":
        return f"hot loops: numpy ({ENVIRONMENT}=0)"
    if len(compiled) == len(built_here):
        return "hot loops: compiled"
    numpy_only = [name.lstrip("_") for name, present in built_here.items() if not present]
    return f"hot loops: compiled {', '.join(compiled) or 'none'}; numpy {', '.join(numpy_only)}"
