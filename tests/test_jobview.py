"""The job view: sessions grouped by job, and when a job counts as ended."""

from __future__ import annotations

from sanitizerd.sessions.jobview import summarize
from sanitizerd_protocol.messages import SessionInfo


def session(n: int, job: str, rank: int, *, state: str = "ended", ended: float = 100.0, sigs: int = 0) -> SessionInfo:
    return SessionInfo(
        session=n, job=job, pid=1000 + n, rank=rank, device=rank, state=state, started=float(n), ended=ended,
        kernels=1, events=10, findings=rank % 2, signatures=sigs,
    )  # fmt: skip


def test_sessions_group_into_jobs_with_ranks_devices_counts_and_signatures() -> None:
    sessions = [session(1, "ddp", 0, sigs=3), session(2, "ddp", 1, sigs=3), session(3, "other", -1)]
    ddp, other = summarize(sessions, now=1000.0)
    assert (ddp.job, ddp.sessions, ddp.ranks, ddp.devices) == ("ddp", 2, [0, 1], [0, 1])
    assert (ddp.kernels, ddp.events, ddp.findings, ddp.signatures) == (2, 20, 1, {0: 3, 1: 3})
    assert (other.ranks, other.signatures) == ([], {-1: 0})


def test_a_job_is_live_then_ending_for_the_grace_period_then_ended() -> None:
    live = [session(1, "j", 0, state="live", ended=0.0), session(2, "j", 1, ended=50.0)]
    assert summarize(live, now=60.0)[0].state == "live"
    closed = [session(1, "j", 0, ended=55.0), session(2, "j", 1, ended=50.0)]
    assert summarize(closed, now=60.0, grace=30.0)[0].state == "ending"  # a rank may still restart
    assert summarize(closed, now=90.0, grace=30.0)[0].state == "ended"
    assert summarize(closed, now=90.0, grace=30.0)[0].ended == 55.0


def test_a_job_a_live_run_registered_is_live_between_its_sessions_and_before_the_first() -> None:
    closed = [session(1, "j", 0, ended=10.0)]
    (job,) = summarize(closed, now=1000.0, grace=30.0, running={"j"})
    assert (job.state, job.ended, job.sessions, job.live) == ("live", 0.0, 1, 0)
    first, waiting = summarize(closed, now=1000.0, grace=30.0, running={"j", "new"})
    assert (first.job, waiting.job, waiting.state, waiting.sessions) == ("j", "new", "live", 0)
    assert summarize(closed, now=1000.0, grace=30.0)[0].state == "ended"  # once the run is gone
