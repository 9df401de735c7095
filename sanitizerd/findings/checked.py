"""A kernel launch the daemon reported checked, as the CI formats need it: a passing test case needs to know the
kernels that produced no finding, which only the run's own reports (``KernelChecked``) say."""

from __future__ import annotations

import msgspec


class CheckedKernel(msgspec.Struct, frozen=True, kw_only=True):
    job: str
    session: int
    launch: int  # the kernel launch's id within its session, as Finding.launch
    name: str
    tools: tuple[str, ...] = ()  # empty: no sanitizer tool was active on it (nothing was checked)
    events: int = 0
    lost: int = 0  # records the client could not keep (--cache-size): the result is incomplete
    incomplete: bool = False
