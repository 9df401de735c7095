"""Which worker owns a job: a stable choice from the job's key alone, so every session of a job (its IPC table,
its sdccheck state, its watchers) and every later start of the listener pick the same worker."""

from __future__ import annotations

import zlib

from sanitizerd.sessions.jobs import JobKey


def worker_for(key: JobKey, workers: int) -> int:
    name, uid = key
    if name:
        # By the name alone: every uid's job of a name is on one worker, where an admin's watch of the name sees
        # them all (-1: where named jobs went when they were not each uid's).
        uid = -1
    return zlib.crc32(f"{uid}\0{name}".encode("utf-8", "surrogateescape")) % workers
