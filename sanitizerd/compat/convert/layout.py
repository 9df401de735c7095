"""Payload dtypes of device records: explicit offsets, packed as in the record stream (each payload starts 4 bytes
after its u32 type, so nothing is aligned), itemsize = sizeof(struct) in msSanitizer's release.

Offsets are facts of that release's ``record_defs.h`` (measured with ``offsetof``); this is our own declaration of
them. A record's ``Location`` (fileNo, lineNo, pc, blockId) is flattened into ``file_no``, ``line_no``, ``pc`` and
``block_id``.
"""

from __future__ import annotations

import numpy as np

LOCATION_SIZE = 32


def record_dtype(itemsize: int, location: int, fields: list[tuple[str, str, int]]) -> np.dtype:
    """A packed payload dtype: ``fields`` as (name, numpy format, offset), the Location at offset ``location``."""
    names = ["file_no", "line_no", "pc", "block_id"]
    formats = ["<u8", "<u8", "<u8", "<u2"]
    offsets = [location, location + 8, location + 16, location + 24]
    for name, fmt, offset in fields:
        names.append(name)
        formats.append(fmt)
        offsets.append(offset)
    return np.dtype({"names": names, "formats": formats, "offsets": offsets, "itemsize": itemsize})
