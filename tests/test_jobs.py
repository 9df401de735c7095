"""Jobs belong to a uid: ownership rules, the grace period, the bounds and watchers that never block (no I/O:
``Jobs`` is plain state on the event loop; the daemon-level attacks are in test_hostile.py)."""

from __future__ import annotations

import anyio
import pytest

from sanitizerd.protocol import messages as m
from sanitizerd.sessions import jobs as jobs_module
from sanitizerd.sessions.jobs import NO_UID, Jobs, Watcher, job_key, reserved_for

ALICE, BOB = 1000, 1001


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def no_admin() -> bool:
    return False


def make(grace: float = 30.0) -> tuple[Jobs, Clock]:
    clock = Clock()
    return Jobs(m.Config(), grace=lambda: grace, clock=clock), clock


def start(jobs: Jobs, name: str, uid: int, session: int) -> None:
    key = job_key(name, uid)
    assert jobs.admit(key, uid, no_admin) is None
    jobs.session_started(key, session)


def end(jobs: Jobs, name: str, uid: int, session: int) -> None:
    jobs.session_ended(m.SessionInfo(session=session, job=name, pid=1, uid=uid))


def test_the_first_uid_owns_the_job_and_another_is_refused() -> None:
    jobs, _ = make()
    start(jobs, "train", ALICE, 1)
    refused = jobs.admit(job_key("train", BOB), BOB, no_admin)
    assert refused is not None and refused.reason == "permission_denied"
    assert "uid 1001 may not use job 'train'" in refused.message
    assert jobs.admit(job_key("train", BOB), BOB, lambda: True) is None  # an admin may join


def test_a_refusal_changes_nothing() -> None:
    jobs, _ = make()
    start(jobs, "train", ALICE, 1)
    assert jobs.refusal(job_key("other", BOB), BOB, no_admin) is None
    assert len(jobs) == 1 and jobs.owner(job_key("other", BOB)) == NO_UID  # asking claimed nothing


def test_an_ended_job_is_its_owners_through_the_grace_period_then_anyones() -> None:
    jobs, clock = make(grace=30)
    start(jobs, "train", ALICE, 1)
    end(jobs, "train", ALICE, 1)
    assert len(jobs) == 0 and jobs.owners_kept == 1
    clock.now = 29
    assert jobs.refusal(job_key("train", BOB), BOB, no_admin) is not None
    start(jobs, "train", ALICE, 2)  # its owner's rank restarts
    end(jobs, "train", ALICE, 2)
    clock.now = 60
    assert jobs.refusal(job_key("train", BOB), BOB, no_admin) is None
    start(jobs, "train", BOB, 3)
    assert jobs.owner(job_key("train", BOB)) == BOB and jobs.owners_kept == 0


def test_jobs_without_a_name_are_each_uids_own() -> None:
    jobs, _ = make()
    start(jobs, "", ALICE, 1)
    start(jobs, "", BOB, 2)
    assert jobs.ipc_table(job_key("", ALICE)) is not jobs.ipc_table(job_key("", BOB))
    assert jobs.ipc_table(job_key("", ALICE)).set("buf", 1, 0x1000, 16) == ""
    assert jobs.ipc_table(job_key("", BOB)).destroy("buf")[1] == "no export named 'buf'"


def test_a_launcher_derived_name_is_its_users_before_anyone_used_it() -> None:
    assert reserved_for("root/torchrun-1") == 0 and reserved_for("0/x") == 0
    assert reserved_for("torchrun-1") == NO_UID and reserved_for("no-such-user-here/x") == NO_UID
    jobs, _ = make()
    refused = jobs.refusal(job_key("root/torchrun-1", BOB), BOB, no_admin)
    assert refused is not None and refused.reason == "permission_denied"
    assert jobs.refusal(job_key("root/torchrun-1", 0), 0, no_admin) is None


def test_an_admins_watch_does_not_claim_a_job() -> None:
    jobs, _ = make()
    send, receive = anyio.create_memory_object_stream[m.Message](4)
    with send, receive:
        jobs.watch(job_key("train", 0), Watcher(send), 0, admin=True)
        start(jobs, "train", ALICE, 1)
        assert jobs.owner(job_key("train", ALICE)) == ALICE


def test_sdccheck_state_is_not_handed_to_the_next_owner_of_a_name() -> None:
    jobs, clock = make(grace=1)
    reference = m.Signature(step=1, replay=0, rank=0, entries=[m.SignatureEntry(name="loss", digest=1)])
    replay = m.Signature(step=1, replay=1, rank=0, entries=[m.SignatureEntry(name="loss", digest=2)])
    start(jobs, "train", ALICE, 1)
    jobs.signature(job_key("train", ALICE), reference, 0)
    end(jobs, "train", ALICE, 1)
    clock.now = 5
    start(jobs, "train", BOB, 2)
    assert jobs.signature(job_key("train", BOB), replay, 0) == []  # no reference of ALICE's to differ from


def test_jobs_in_use_are_bounded_per_uid_and_in_all(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jobs_module, "MAX_JOBS_PER_UID", 3)
    monkeypatch.setattr(jobs_module, "MAX_JOBS", 5)
    jobs, _ = make()
    for i in range(3):
        jobs.register(job_key(f"a{i}", ALICE), m.Config(), ALICE)
    refused = jobs.refusal(job_key("a3", ALICE), ALICE, no_admin)
    assert refused is not None and refused.reason == "job_limit" and "uid 1000" in refused.message
    assert jobs.refusal(job_key("a0", ALICE), ALICE, no_admin) is None  # a job it holds already: no new one
    for i in range(2):
        jobs.register(job_key(f"b{i}", BOB), m.Config(), BOB)
    refused = jobs.refusal(job_key("c", 0), 0, lambda: True)
    assert refused is not None and refused.reason == "job_limit"
    jobs.unregister(job_key("a0", ALICE))
    assert jobs.refusal(job_key("a3", ALICE), ALICE, no_admin) is None


def test_owners_of_ended_jobs_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jobs_module, "ENDED_OWNERS_KEPT", 2)
    jobs, _ = make()
    for i in range(4):
        start(jobs, f"j{i}", ALICE, i + 1)
        end(jobs, f"j{i}", ALICE, i + 1)
    assert jobs.owners_kept == 2 and jobs.owner(job_key("j3", BOB)) == ALICE and jobs.owner(job_key("j0", BOB)) == -1


def test_a_watcher_that_does_not_read_is_dropped_not_waited_for() -> None:
    jobs, _ = make()
    send, receive = anyio.create_memory_object_stream[m.Message](2)
    with send, receive:
        watcher = Watcher(send)
        key = job_key("train", ALICE)
        start(jobs, "train", ALICE, 1)
        jobs.watch(key, watcher, ALICE, admin=False, record=True)
        for kernel in range(3):  # never blocks: the third does not fit, and the watcher goes
            report = m.KernelChecked(session=1, kernel=kernel, name="k", tools=[], events=0, errors=0, warnings=0)
            jobs.kernel_checked(key, report)
        assert watcher.dropped.is_set() and "messages waiting" in watcher.reason
        assert not jobs.recording(key)


def test_a_recorder_is_dropped_past_its_bytes() -> None:
    jobs, _ = make()
    send, receive = anyio.create_memory_object_stream[m.Message](100)
    with send, receive:
        watcher = Watcher(send, max_bytes=1000)
        key = job_key("train", ALICE)
        start(jobs, "train", ALICE, 1)
        jobs.watch(key, watcher, ALICE, admin=False, record=True)
        jobs.record(key, 1, m.Log(text="x" * 600))
        assert not watcher.reason
        jobs.record(key, 1, m.Log(text="x" * 600))
        assert "recorded bytes" in watcher.reason


def test_after_a_restart_the_last_daemons_jobs_stay_their_owners_for_a_while() -> None:
    """Owners read from the store are kept as unused jobs' owners for the window, then freed; a job already in use
    is left as it is."""
    clock = [100.0]
    jobs = Jobs(m.Config(), grace=lambda: 30.0, clock=lambda: clock[0])
    jobs.keep_owners([("train", 1000), ("other", 1001)], seconds=120.0)
    assert jobs.owner(job_key("train", 7)) == 1000 and jobs.owner(job_key("other", 7)) == 1001
    assert jobs.refusal(job_key("train", 2000), 2000, lambda: False) is not None
    assert jobs.admit(job_key("train", 1000), 1000, lambda: False) is None  # its owner comes back
    clock[0] += 121.0
    assert jobs.owner(job_key("other", 7)) == NO_UID  # past the window: free again
    assert jobs.owner(job_key("train", 7)) == 1000  # in use by its owner
