"""Payload dtypes of device records, written as (name, numpy format, offset) triples in field order.

Offsets are facts of msSanitizer's ``record_defs.h`` in the release the wire layout names (measured with
``offsetof``); payloads are packed in the record stream (each starts 4 bytes after its u32 type), so the dtypes use
explicit offsets and itemsize = sizeof(struct). The Location is flattened by ``base.record_dtype``.
"""

from __future__ import annotations

import numpy as np

from sanitizerd.compat.convert import base


def record_dtype(itemsize: int, location: int, fields: list[tuple[str, str, int]]) -> np.dtype:
    """``base.record_dtype`` from a field list (union members may overlap: the MSTX record's do)."""
    return base.record_dtype(itemsize, location, {name: (fmt, offset) for name, fmt, offset in fields})
