"""Memory of the job registry at its bounds: MAX_JOBS jobs in use (figures for docs/performance.md and
docs/security.md).

    .venv/bin/python benchmarks/jobs_memory.py
"""

from __future__ import annotations

import gc
import tracemalloc

from sanitizerd.sessions.jobs import MAX_JOBS, Jobs, job_key
from sanitizerd_protocol import messages as m


def main() -> None:
    jobs = Jobs(m.Config())
    jobs.register(job_key("warm-up", 1), m.Config(), 1)  # imports and first-use caches before counting
    jobs.unregister(job_key("warm-up", 1))
    jobs = Jobs(m.Config())
    tracemalloc.start()
    names = [f"user/torchrun-{i:08d}" for i in range(MAX_JOBS)]
    base = tracemalloc.get_traced_memory()[0]
    for i, name in enumerate(names):
        jobs.register(job_key(name, 1000 + i % 8), m.Config(), 1000 + i % 8)
    gc.collect()
    in_use = tracemalloc.get_traced_memory()[0] - base
    print(f"{len(jobs)} jobs in use: {in_use / len(jobs):.0f} B each, {in_use / 1e6:.1f} MB")
    for i, name in enumerate(names):
        jobs.unregister(job_key(name, 1000 + i % 8))
    gc.collect()
    left = tracemalloc.get_traced_memory()[0] - base
    print(f"{len(jobs)} jobs in use once all were unregistered: {left / 1e3:.0f} kB left")


if __name__ == "__main__":
    main()
