"""racecheck's one-block proof, step by step: each step that has a compiled loop and numpy's twin, timed both ways on
the arguments it gets from ``benchmarks/racecheck.py``'s kernel (its first block, the one a launch proves), and the
numpy-only steps beside them.

One launch runs with the steps' first calls captured; each is then called ``--repeat`` times a way, alternating, and
the least time is kept (ms). One process can be slower than the next in everything it does on a shared host (up to
1.8x on the 2-core machine), so compare the compiled and numpy figures of one run, and trees by running it in each
more than once.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/racecheck_steps.py

The last line of output is one JSON object with every figure.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from racecheck import BATCH, check, compiled_loops, iterations_stream

from sanitizerd.detectors import _block_proofs, _happens_before, _race_columns, _race_pairs, racecheck

_captured: dict[str, tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]] = {}


def _capture(owner: object, name: str, as_name: str | None = None) -> None:
    """Keep the first call's arguments of ``owner.name``."""
    step = getattr(owner, name)

    def first(*args: Any, **kwargs: Any) -> Any:
        _captured.setdefault(as_name or name, (step, args, kwargs))
        return step(*args, **kwargs)

    setattr(owner, name, first)


def _least_ms(call: Callable[[], object], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - start)
    return round(best * 1e3, 3)


def main() -> None:
    args, native = compiled_loops(__doc__)
    _capture(_race_pairs, "_segments")
    _capture(_happens_before, "_fifo_match")
    _capture(_race_columns, "block_edges")
    _capture(racecheck.Kernel, "_placed_in_blocks")
    _capture(racecheck.Kernel, "_site_keys")
    _capture(_block_proofs, "_footprint")
    stream = iterations_stream(8, args.iterations)
    check(stream, 8)
    segments, segment_args, _ = _captured["_segments"]
    fifo, fifo_args, fifo_kwargs = _captured["_fifo_match"]
    nodes = _captured["block_edges"][1][0]
    kernel = _captured["_placed_in_blocks"][1][0]
    place = _captured["_placed_in_blocks"][0]
    keys = stream["block_id"][:BATCH].astype("uint32")

    def placed(way: object) -> None:
        kernel.native = way
        place(kernel)

    both: dict[str, Callable[[object], object]] = {
        "segments": lambda way: segments(*segment_args[:-1], way),
        "by_rank": lambda way: _race_pairs._by_rank(segment_args[3], way),
        "fifo_match": lambda way: fifo(*fifo_args, **{**fifo_kwargs, "native": way}),
        "issuer_of": lambda way: _happens_before.issuer_of(nodes, nodes.block, nodes.pos, way),
        "placed_in_blocks": placed,
        "key_steps (a batch)": lambda way: _race_columns.key_steps(keys, way),
    }
    figures: dict[str, Any] = {"iterations": args.iterations, "accesses": int(kernel.mem.size), "nodes": nodes.size}
    for name, step in both.items():
        compiled = numpy = float("inf")
        for _ in range(3):  # alternating, so that neither way has the quieter moment
            compiled = min(compiled, _least_ms(lambda step=step: step(native), args.repeat))
            numpy = min(numpy, _least_ms(lambda step=step: step(None), args.repeat))
        figures[name] = {"compiled_ms": compiled, "numpy_ms": numpy}
    kernel.native = native
    for name in ("_site_keys", "_footprint"):
        step, step_args, _ = _captured[name]
        least = _least_ms(lambda step=step, step_args=step_args: step(*step_args), 3 * args.repeat)
        figures[name.lstrip("_")] = {"ms": least}
    for name, figure in figures.items():
        print(f"{name}: {figure}")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
