"""Which worker owns a job: a stable choice from the job's key alone, so every session of a job (its IPC table,
its sdccheck state, its watchers) and every later start of the listener pick the same worker."""

from __future__ import annotations

import zlib

from sanitizerd.sessions.jobs import JobKey


def worker_for(key: JobKey, workers: int) -> int:
    name, uid = key
    return zlib.crc32(f"{uid}\0{name}".encode("utf-8", "surrogateescape")) % workers
