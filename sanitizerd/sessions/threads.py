"""The detector threads of one process, shared out fairly among uids and, within a uid, among its sessions.

A FIFO of check requests gives a uid threads in proportion to the requests it queues: one with many sessions (or one
session with many detectors) sending expensive batches holds every thread, and another uid's kernel waits behind all
of its checks. Here each free thread goes to the uid that holds the fewest threads now, among those waiting, and
among equals to the one whose turn it is (round robin: a uid served goes to the back of the turns; one that comes
back after waiting for nothing joins at the back); within that uid, to its session holding the fewest, by turns
likewise; within the session, to its oldest check. A thread is never taken back from a running check: a uid that
holds fewer threads than another waits at most for the shortest running check to end (each bounded by the
detectors' bounds on one batch), then it is next.

With ``serve --workers N`` each worker process has its own threads and its own share: fairness is per process (a
job's sessions are all in one worker).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

import anyio

T = TypeVar("T")


class RunOnThread(Protocol):
    """Runs a blocking call on a detector thread, in the share of the session it was made for."""

    def __call__(self, fn: Callable[[], T], /) -> Awaitable[T]: ...


@dataclass(eq=False, slots=True)
class _Waiter:
    uid: int
    session: int
    since: float
    granted: anyio.Event = field(default_factory=anyio.Event)


class DetectorThreads:
    def __init__(
        self,
        threads: int,
        *,
        clock: Callable[[], float] = time.monotonic,
        on_wait: Callable[[float], None] = lambda seconds: None,
    ) -> None:
        """``on_wait``: the seconds each check waited for its thread, once it has one."""
        self.size = threads
        self.busy = 0
        self._clock = clock
        self._on_wait = on_wait
        # Never waited on: a call reaches it only with a slot granted here, so it only bounds the threads.
        self._limiter = anyio.CapacityLimiter(threads)
        self._held_by_uid: dict[int, int] = {}
        self._held_by_session: dict[tuple[int, int], int] = {}
        self._waiting: dict[int, dict[int, deque[_Waiter]]] = {}  # uid -> session -> its checks, in arrival order
        self._arrivals: dict[_Waiter, None] = {}  # every waiter, in arrival order: the first is the oldest
        # Read from the metrics thread: plain values, set from the event loop at each change.
        self.waiting = 0
        self.oldest_since: float | None = None

    def runner(self, uid: int, session: int) -> RunOnThread:
        """How one session runs its checks."""

        def run(fn: Callable[[], T], /) -> Awaitable[T]:
            return self.run(uid, session, fn)

        return run

    async def run(self, uid: int, session: int, fn: Callable[[], T]) -> T:
        """``fn`` on a detector thread, once the fair share gives this session one."""
        waiter = self._enter(uid, session)
        if waiter is not None:
            try:
                await waiter.granted.wait()
            except BaseException:  # cancelled: a slot granted meanwhile goes to the next
                if waiter.granted.is_set():
                    self._release(uid, session)
                else:
                    self._forget(waiter)
                raise
        try:
            return await anyio.to_thread.run_sync(fn, limiter=self._limiter)
        finally:  # the thread has ended: run_sync waits for it even when cancelled
            self._release(uid, session)

    def oldest_wait(self) -> float:
        """Seconds the longest-waiting check has waited for a thread now (0 when none waits)."""
        since = self.oldest_since
        return max(0.0, self._clock() - since) if since is not None else 0.0

    def saturated(self, after: float) -> str:
        """Why the threads are saturated ("" when they are not): every one busy, and a check has waited for one
        longer than ``after`` seconds. Read from the metrics thread."""
        waited = self.oldest_wait()
        if self.busy < self.size or waited <= after:
            return ""
        return (
            f"saturated: all {self.size} detector threads busy, {self.waiting} check(s) waiting, "
            f"the oldest for {waited:.0f} s"
        )

    # --- the share ---------------------------------------------------------------------------------------------

    def _enter(self, uid: int, session: int) -> _Waiter | None:
        """A slot at once (None) when one is free, or the waiter to wait on."""
        if self.busy < self.size:  # nothing waits while a slot is free: slots are handed on as they come free
            self._hold(uid, session)
            return None
        waiter = _Waiter(uid, session, self._clock())
        self._waiting.setdefault(uid, {}).setdefault(session, deque()).append(waiter)
        self._arrivals[waiter] = None
        self._changed()
        return waiter

    def _hold(self, uid: int, session: int) -> None:
        self.busy += 1
        self._held_by_uid[uid] = self._held_by_uid.get(uid, 0) + 1
        key = (uid, session)
        self._held_by_session[key] = self._held_by_session.get(key, 0) + 1

    def _release(self, uid: int, session: int) -> None:
        self.busy -= 1
        _decrement(self._held_by_uid, uid)
        _decrement(self._held_by_session, (uid, session))
        while self.busy < self.size and self._arrivals:
            self._grant(self._next())

    def _next(self) -> _Waiter:
        """The check the next free thread goes to: of the uid holding fewest threads, the earliest in turn among
        equals, its session holding fewest, likewise; that session's oldest check."""
        uid = min(self._waiting, key=lambda u: self._held_by_uid.get(u, 0))  # the first of the fewest: its turn
        sessions = self._waiting[uid]
        session = min(sessions, key=lambda s: self._held_by_session.get((uid, s), 0))
        return sessions[session][0]

    def _grant(self, waiter: _Waiter) -> None:
        """``waiter`` runs; its session and its uid go to the back of their turns (dicts keep insertion order)."""
        uid, session = waiter.uid, waiter.session
        self._forget(waiter)
        sessions = self._waiting.pop(uid, None)
        if sessions is not None:
            queue = sessions.pop(session, None)
            if queue is not None:
                sessions[session] = queue
            self._waiting[uid] = sessions
        self._hold(uid, session)
        self._on_wait(self._clock() - waiter.since)
        waiter.granted.set()

    def _forget(self, waiter: _Waiter) -> None:
        sessions = self._waiting[waiter.uid]
        queue = sessions[waiter.session]
        queue.remove(waiter)
        if not queue:
            del sessions[waiter.session]
            if not sessions:
                del self._waiting[waiter.uid]
        del self._arrivals[waiter]
        self._changed()

    def _changed(self) -> None:
        self.waiting = len(self._arrivals)
        self.oldest_since = next(iter(self._arrivals)).since if self._arrivals else None


def _decrement(counts: dict[T, int], key: T) -> None:
    left = counts[key] - 1
    if left:
        counts[key] = left
    else:
        del counts[key]
