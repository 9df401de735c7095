"""The host's memory for racecheck, shared by every session: bytes reserved and released, nothing else.

racecheck holds a kernel launch's events until the launch ends, then checks them all at once; what it holds and
what that check allocates grow with the events a client chooses to send. One ``MemoryBudget`` per daemon bounds
the sum over all sessions (``sanitizerd serve --race-memory``); each session draws on it through its own
``MemoryAccount``, which the session closes when it ends, whatever ended it, so a failed detector or a session
cut off mid-launch never keeps a reservation. No I/O: the owner (the Hub) counts and logs refusals through
``on_refused``.
"""

from __future__ import annotations

import os
import resource
import threading
from collections.abc import Callable
from pathlib import Path

_MIN_DEFAULT = 256 << 20


def default_race_memory() -> int:
    """A quarter of the memory the daemon may use (at least 256 MiB): the host's physical memory, or less where
    its cgroup (systemd's MemoryMax=) or its address-space limit says so. Room for racecheck's launches beside the
    rest of the daemon and the programs under test. Read once, at start."""
    try:
        available = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        available = 8 << 30
    address_space = resource.getrlimit(resource.RLIMIT_AS)[0]
    if address_space != resource.RLIM_INFINITY:
        available = min(available, address_space)
    return max(_MIN_DEFAULT, min(available, _cgroup_memory_max() or available) // 4)


def _cgroup_memory_max() -> int | None:
    """cgroup v2's memory.max for this process, if it sets one."""
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            if line.startswith("0::"):
                text = Path("/sys/fs/cgroup", line[3:].lstrip("/"), "memory.max").read_text().strip()
                return int(text) if text.isdigit() else None
    except (OSError, ValueError):
        pass
    return None


class OverBudget(Exception):
    """A check would allocate more than the host's budget has left: what for, and how many bytes."""

    def __init__(self, what: str, nbytes: int) -> None:
        super().__init__(what, nbytes)
        self.what, self.nbytes = what, nbytes


class MemoryBudget:
    """Bytes all sessions' racecheck may hold at once. Thread-safe: checks run on worker threads."""

    def __init__(self, limit: int, on_refused: Callable[[int, int, int], None] | None = None) -> None:
        self.limit = int(limit)  # a config file may say 2e9
        self.used = 0
        self.peak = 0  # the most ever reserved at once
        self.refusals = 0
        self._lock = threading.Lock()
        self._on_refused = on_refused  # (bytes asked, bytes in use, limit), called outside the lock

    def account(self) -> MemoryAccount:
        return MemoryAccount(self)

    def resize(self, limit: int) -> None:
        """A new limit (SIGHUP); what is held already stays held, new reservations see the new limit."""
        with self._lock:
            self.limit = int(limit)

    def _reserve(self, account: MemoryAccount, nbytes: int, *, counted: bool = True) -> bool:
        with self._lock:
            if account.closed:
                return False
            if self.used + nbytes <= self.limit:
                self.used += nbytes
                self.peak = max(self.peak, self.used)
                account.held += nbytes
                return True
            if not counted:
                return False
            self.refusals += 1
            used, limit = self.used, self.limit
        if self._on_refused is not None:
            self._on_refused(nbytes, used, limit)
        return False

    def _give_back(self, account: MemoryAccount, nbytes: int) -> None:
        with self._lock:
            nbytes = min(nbytes, account.held)
            self.used -= nbytes
            account.held -= nbytes

    def _release(self, account: MemoryAccount, *, close: bool) -> None:
        with self._lock:
            self.used -= account.held
            account.held = 0
            account.closed |= close


class MemoryAccount:
    """One session's share of the budget: what it holds now. Changed only under the budget's lock."""

    def __init__(self, budget: MemoryBudget) -> None:
        self.budget = budget
        self.held = 0
        self.closed = False

    @property
    def limit(self) -> int:
        return self.budget.limit

    def reserve(self, nbytes: int) -> bool:
        """Take ``nbytes`` more from the host's budget; False (and nothing taken) when it has not that much
        left or the session has ended."""
        return self.budget._reserve(self, nbytes)

    def spare(self, nbytes: int) -> bool:
        """Take ``nbytes`` for what only saves time (a copy kept to avoid work later), where the budget has them:
        a refusal is not counted, for nothing is refused the user."""
        return self.budget._reserve(self, nbytes, counted=False)

    def give_back(self, nbytes: int) -> None:
        """Give back ``nbytes`` of what this session holds (a ``spare`` no longer kept)."""
        self.budget._give_back(self, nbytes)

    def need(self, nbytes: int, what: str) -> None:
        """Take ``nbytes`` for ``what`` before allocating it, or raise OverBudget."""
        if not self.reserve(nbytes):
            raise OverBudget(what, nbytes)

    def release(self) -> None:
        """Give back everything this session holds."""
        self.budget._release(self, close=False)

    def close(self) -> None:
        """The session ended: give everything back, take nothing more."""
        self.budget._release(self, close=True)


class TrialAccount:
    """What a trial check takes from a session's account (racecheck's blocks checked on their own as they
    complete, ``_block_proofs``): its temporaries, given back when it ends (``give_back``). A refusal is not
    counted: the trial only gives way to the whole check, which asks for itself and counts its own."""

    def __init__(self, account: MemoryAccount) -> None:
        self.account = account
        self.taken = 0

    @property
    def limit(self) -> int:
        return self.account.limit

    def need(self, nbytes: int, what: str) -> None:
        if not self.account.budget._reserve(self.account, nbytes, counted=False):
            raise OverBudget(what, nbytes)
        self.taken += nbytes

    def give_back(self) -> None:
        self.account.budget._give_back(self.account, self.taken)
        self.taken = 0


def unbounded() -> MemoryAccount:
    """An account with no limit, for a detector driven outside a daemon (tests, benchmarks, replays)."""
    return MemoryBudget(1 << 62).account()
