"""The job view: sessions grouped into jobs (``sanitizerd jobs``).

A multi-card training job is one job with a session per rank and device. It is live while any of its sessions
is, or while the ``sanitizerd run`` that registered it runs (between its processes no session may be live, and
before the first none has started); once neither holds it is "ending" for a grace period, since a rank that
restarts (torchrun's elastic restarts) comes back under the same job, and ended after that.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Set

from sanitizerd_protocol.messages import JobInfo, SessionInfo

DEFAULT_JOB_GRACE = 30.0  # seconds an ended job's ranks have to come back before it counts as ended


def summarize(
    sessions: list[SessionInfo], *, now: float, grace: float = DEFAULT_JOB_GRACE, running: Set[str] = frozenset()
) -> list[JobInfo]:
    """One entry per job, in the order their first session started; ``running``: the jobs a live run registered
    (those without a session yet come last, live)."""
    by_job: dict[str, list[SessionInfo]] = {}
    for info in sorted(sessions, key=lambda s: s.started):
        by_job.setdefault(info.job, []).append(info)
    jobs = []
    for name, members in by_job.items():
        live = sum(s.state == "live" for s in members)
        ended = 0.0 if live or name in running else max(s.ended for s in members)
        state = "live" if live or name in running else ("ending" if now - ended < grace else "ended")
        signatures: Counter[int] = Counter()
        for s in members:
            signatures[s.rank] += s.signatures
        jobs.append(
            JobInfo(
                job=name,
                state=state,
                sessions=len(members),
                live=live,
                ranks=sorted({s.rank for s in members if s.rank >= 0}),
                devices=sorted({s.device for s in members if s.device >= 0}),
                kernels=sum(s.kernels for s in members),
                events=sum(s.events for s in members),
                findings=sum(s.findings for s in members),
                signatures=dict(sorted(signatures.items())),
                started=min(s.started for s in members),
                ended=ended,
            )
        )
    jobs += [JobInfo(job=name, state="live") for name in sorted(running - by_job.keys())]
    return jobs
