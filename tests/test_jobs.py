"""Jobs are each uid's own: two uids naming one job have two jobs, and nothing one does answers differently for the
other's existence; the bounds, admins' watches by name, and watchers that never block (no I/O: ``Jobs`` is plain
state on the event loop; the daemon-level attacks are in test_hostile.py)."""

from __future__ import annotations

import anyio
import pytest

from sanitizerd.sessions import jobs as jobs_module
from sanitizerd.sessions.jobs import Jobs, Watcher, job_key
from sanitizerd_protocol import messages as m

ALICE, BOB = 1000, 1001


def no_admin() -> bool:
    return False


def make() -> Jobs:
    return Jobs(m.Config())


def start(jobs: Jobs, name: str, uid: int, session: int) -> None:
    key = job_key(name, uid)
    assert jobs.admit(key, uid, no_admin) is None
    jobs.session_started(key, session)


def end(jobs: Jobs, name: str, uid: int, session: int) -> None:
    jobs.session_ended(m.SessionInfo(session=session, job=name, pid=1, uid=uid))


def kernel(session: int) -> m.KernelChecked:
    return m.KernelChecked(session=session, kernel=1, name="k", tools=[], events=0, errors=0, warnings=0)


def test_two_uids_naming_one_job_have_two_jobs_that_share_nothing() -> None:
    """Bob's session, registration and watch of Alice's job name are admitted as for a name nobody uses, and land
    in a job of Bob's own: Alice's configuration, IPC names, watchers and idle state are untouched."""
    jobs = make()
    alice, bob = job_key("train", ALICE), job_key("train", BOB)
    assert alice != bob
    jobs.register(alice, m.Config(tools=["memcheck"]), ALICE)
    start(jobs, "train", ALICE, 1)
    assert jobs.ipc_table(alice).set("buf", 1, 0x1000, 16) == ""
    assert jobs.refusal(bob, BOB, no_admin) is None  # the same answer as for a name nobody uses
    jobs.register(bob, m.Config(tools=[], kernel_name="none"), BOB)
    start(jobs, "train", BOB, 2)
    hello = m.Hello(version=1, job="train")
    assert jobs.config_for(alice, hello).tools == ["memcheck"] and jobs.config_for(bob, hello).tools == []
    assert jobs.ipc_table(bob).destroy("buf")[1] == "no export named 'buf'"
    assert jobs.ipc_table(alice).map("buf", 1, 0x9000)[1] == ""
    send, receive = anyio.create_memory_object_stream[m.Message](4)
    with send, receive:
        jobs.watch(bob, Watcher(send), admin=False, record=True)
        jobs.kernel_checked(alice, kernel(1))
        jobs.record(alice, 1, m.Log(text="alice's"))
        assert not jobs.recording(alice)
        with pytest.raises(anyio.WouldBlock):
            receive.receive_nowait()  # Bob's watcher sees nothing of Alice's job
    end(jobs, "train", BOB, 2)
    assert len(jobs) == 2  # Alice's (registered, live) and Bob's (registered, watched)


def test_waiting_on_a_name_another_uid_uses_answers_as_for_an_unused_one() -> None:
    jobs = make()
    start(jobs, "train", ALICE, 1)
    unused = anyio.run(jobs.wait_idle, job_key("never-used", BOB))
    theirs = anyio.run(jobs.wait_idle, job_key("train", BOB))  # Alice's job is live: Bob's does not wait on it
    assert (theirs.sessions, theirs.kernels, theirs.findings) == (unused.sessions, unused.kernels, unused.findings)
    assert len(jobs) == 1  # waiting made nothing in use


def test_jobs_without_a_name_are_each_uids_own() -> None:
    jobs = make()
    start(jobs, "", ALICE, 1)
    start(jobs, "", BOB, 2)
    assert jobs.ipc_table(job_key("", ALICE)) is not jobs.ipc_table(job_key("", BOB))
    assert jobs.ipc_table(job_key("", ALICE)).set("buf", 1, 0x1000, 16) == ""
    assert jobs.ipc_table(job_key("", BOB)).destroy("buf")[1] == "no export named 'buf'"


def test_an_admins_watch_of_a_name_sees_every_uids_job_of_it_and_makes_none_in_use() -> None:
    jobs = make()
    send, receive = anyio.create_memory_object_stream[m.Message](8)
    with send, receive:
        admin = Watcher(send)
        jobs.watch(job_key("train", 0), admin, admin=True, record=True)
        assert len(jobs) == 0  # watching before the jobs start holds nothing
        start(jobs, "train", ALICE, 1)
        start(jobs, "train", BOB, 2)
        assert jobs.recording(job_key("train", ALICE)) and jobs.recording(job_key("train", BOB))
        jobs.kernel_checked(job_key("train", ALICE), kernel(1))
        jobs.kernel_checked(job_key("train", BOB), kernel(2))
        jobs.kernel_checked(job_key("other", ALICE), kernel(3))  # no job in use: nobody told
        assert [receive.receive_nowait().session for _ in range(2)] == [1, 2]  # type: ignore[attr-defined]
        jobs.unwatch(job_key("train", 0), admin)
        assert not jobs.recording(job_key("train", ALICE))
        jobs.kernel_checked(job_key("train", ALICE), kernel(1))
        with pytest.raises(anyio.WouldBlock):
            receive.receive_nowait()


def test_sdccheck_state_is_each_uids_own() -> None:
    jobs = make()
    reference = m.Signature(step=1, replay=0, rank=0, entries=[m.SignatureEntry(name="loss", digest=1)])
    replay = m.Signature(step=1, replay=1, rank=0, entries=[m.SignatureEntry(name="loss", digest=2)])
    start(jobs, "train", ALICE, 1)
    jobs.signature(job_key("train", ALICE), reference, 0)
    start(jobs, "train", BOB, 2)
    assert jobs.signature(job_key("train", BOB), replay, 0) == []  # no reference of ALICE's to differ from
    assert jobs.signature(job_key("train", ALICE), replay, 0) != []  # against Alice's own, it differs


def test_jobs_in_use_are_bounded_per_uid_and_in_all(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jobs_module, "MAX_JOBS_PER_UID", 3)
    monkeypatch.setattr(jobs_module, "MAX_JOBS", 5)
    jobs = make()
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


def test_a_watcher_that_does_not_read_is_dropped_not_waited_for() -> None:
    jobs = make()
    send, receive = anyio.create_memory_object_stream[m.Message](2)
    with send, receive:
        watcher = Watcher(send)
        key = job_key("train", ALICE)
        start(jobs, "train", ALICE, 1)
        jobs.watch(key, watcher, admin=False, record=True)
        for kernel in range(3):  # never blocks: the third does not fit, and the watcher goes
            report = m.KernelChecked(session=1, kernel=kernel, name="k", tools=[], events=0, errors=0, warnings=0)
            jobs.kernel_checked(key, report)
        assert watcher.dropped.is_set() and "messages waiting" in watcher.reason
        assert not jobs.recording(key)


def test_a_recorder_is_dropped_past_its_bytes() -> None:
    jobs = make()
    send, receive = anyio.create_memory_object_stream[m.Message](100)
    with send, receive:
        watcher = Watcher(send, max_bytes=1000)
        key = job_key("train", ALICE)
        start(jobs, "train", ALICE, 1)
        jobs.watch(key, watcher, admin=False, record=True)
        jobs.record(key, 1, m.Log(text="x" * 600))
        assert not watcher.reason
        jobs.record(key, 1, m.Log(text="x" * 600))
        assert "recorded bytes" in watcher.reason
