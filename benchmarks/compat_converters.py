"""Speed of the vector, cube and mstx record converters alone (issue 11): records/s and events/s of one converter
call on ``--records`` records of one kind, best CPU time of ``--repeats`` runs, one core.

    PYTHONPATH=. .venv/bin/python benchmarks/compat_converters.py [--records 200000] [--repeats 3]

Kinds: a UNARY_OP with a full MASK_NORM mask (one event per operand), a BINARY_OP under MASK_COUNT cut into full
repeats, blocks and a tail (three events per operand), an MSTX cross-core set, a MATRIX_MUL_OP (A, B, C read and
written).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from sanitizerd.chips import CHIPS
from sanitizerd.compat.records.convert import CONVERTERS, BlockContext

ALL = np.iinfo(np.uint64).max
KINDS = {
    "UNARY_OP, MASK_NORM all ones": (10000, dict(
        src_block_num=8, dst_block_num=8, src_block_size=32, dst_block_size=32, src_block_stride=1,
        dst_block_stride=1, src_repeat_stride=8, dst_repeat_stride=8, repeat=4, src_data_bits=16, dst_data_bits=16,
        mask0=ALL, mask1=ALL)),
    "BINARY_OP, MASK_COUNT 300 halves": (10003, dict(mask_mode=1, mask0=300, repeat=2, **{
        f"{p}_{k}": v for p in ("src0", "src1", "dst")
        for k, v in (("block_num", 8), ("block_size", 32), ("block_stride", 1), ("repeat_stride", 8),
                     ("data_bits", 16))})),
    "MSTX_STUB, cross-core set": (20017, dict(interface=0, cross_addr=0x9000, cross_pipe=5)),
    "MATRIX_MUL_OP": (10006, dict(src0_block_num=2, src0_block_size=512, src0_repeat=1, src1_block_num=2,
                                  src1_block_size=512, dst_block_num=2, dst_block_size=1024)),
}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    context = BlockContext(block_type=0, chip=CHIPS["910B1"])
    serials = np.arange(args.records, dtype=np.uint64)
    print(f"records per call: {args.records:,}, numpy {np.__version__}, one core, best CPU time of {args.repeats}")
    for name, (record_type, fields) in KINDS.items():
        registered = CONVERTERS[record_type]
        records = np.zeros(args.records, dtype=registered.dtype)
        for field, value in fields.items():
            records[field] = value
        best = float("inf")
        for _ in range(args.repeats):
            start = time.process_time()
            events = registered.convert(record_type, records, serials, context)
            best = min(best, time.process_time() - start)
        print(f"{name:36s} {args.records / best / 1e6:6.2f} M records/s  {len(events) / best / 1e6:6.2f} M events/s")


if __name__ == "__main__":
    main()
