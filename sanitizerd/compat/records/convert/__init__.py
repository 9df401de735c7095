"""Record type -> events converters, one module per instruction family, collected in one table.

A converter turns every record of one ``RecordType`` found in a block, as one structured array, into packed
``EVENT_DTYPE`` events: vectorised, with no Python object per record. Each event carries its record's serial
number, and each record's events come out in the order they happen (a copy's read before its write), so a stable
sort by serial puts a block's events of all types back in program order.
"""

from __future__ import annotations

from sanitizerd.compat.records.convert.base import CONVERTERS, BlockContext, Converter, converts

# Importing a family registers its converters.
from sanitizerd.compat.records.convert import cache, cube, moves, mstx, registers, scalar, sync, vector  # noqa: F401  isort: skip

__all__ = ["CONVERTERS", "BlockContext", "Converter", "converts"]
