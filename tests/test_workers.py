"""``sanitizerd serve --workers N``: a job's sessions in one worker, jobs spread over the workers, views that list
every worker's sessions, one /metrics summing them, a killed worker restarted and its client resumed with nothing
lost, and ``--workers 1`` the single process it always was."""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from prometheus_client.metrics_core import Metric

from client_shim import Client
from sanitizerd.sessions.jobs import job_key
from sanitizerd.workers.metrics import merge
from sanitizerd.workers.routing import worker_for
from tests.conftest import RunningDaemon, sanitizerd, start_daemon, stop_daemon, wait_for_socket
from tests.test_e2e_daemon import free_port
from tests.test_resume import assert_resumed_intact, findings, first_part, second_part

WORKERS = 2


def jobs_in(worker: int, count: int, prefix: str = "job") -> list[str]:
    """Job names (of jobs with a name: any uid's) that the listener hands to ``worker``."""
    names = (f"{prefix}-{i}" for i in range(10_000))
    return [name for name in names if worker_for(job_key(name, 0), WORKERS) == worker][:count]


def log_lines(daemon: RunningDaemon, event: str) -> list[dict]:
    lines = [json.loads(line) for line in daemon.log_text().splitlines() if line.startswith("{")]
    return [line for line in lines if line.get("event") == event]


def worker_pids(daemon: RunningDaemon) -> dict[int, int]:
    """Each worker's latest process, from the listener's log."""
    return {line["worker"]: line["pid"] for line in log_lines(daemon, "worker started")}


def children(pid: int) -> list[int]:
    return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def interrupted_run(daemon: RunningDaemon, prefix: str) -> tuple[str, Client, int, list[dict]]:
    """A job of worker 1 through test_resume's first part, with a resume log: its name, its client, its second
    kernel (running) and the findings stored so far."""
    daemon.wait_for_log('"worker serving"')
    job = jobs_in(1, 1, prefix)[0]
    client = Client(daemon.socket, job=job, resume_buffer=64 << 20, resume_timeout=30)
    k2 = first_part(client)
    return job, client, k2, findings(daemon, job)


def uninterrupted_run(daemon: RunningDaemon, prefix: str) -> list[dict]:
    """The findings of test_resume's two parts run without interruption, by a job of worker 1."""
    job = jobs_in(1, 1, prefix)[0]
    client = Client(daemon.socket, job=job)
    second_part(client, first_part(client))
    return findings(daemon, job)


def metric_lines(port: int) -> list[str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
        return reply.read().decode().splitlines()


def test_a_jobs_sessions_share_one_worker_and_two_jobs_use_two(short_dir: Path) -> None:
    daemon = start_daemon(short_dir, workers=WORKERS)
    try:
        daemon.wait_for_log('"worker serving"')
        first, second = jobs_in(0, 1)[0], jobs_in(1, 1)[0]
        clients = [Client(daemon.socket, job=job, resume_buffer=0) for job in (first, first, second, second)]
        sessions = json.loads(sanitizerd("sessions", "--socket", str(daemon.socket), "--format", "json").stdout)
        live = {s["session"] for s in sessions if s["state"] == "live"}
        assert live == {client.session for client in clients}  # every worker's live sessions, in one view
        jobs = json.loads(sanitizerd("jobs", "--socket", str(daemon.socket), "--format", "json").stdout)
        assert {job["job"] for job in jobs} == {first, second}
        for client in clients:
            client.close()
        started = log_lines(daemon, "session started")
        by_job = {job: {line["worker"] for line in started if line["job"] == job} for job in (first, second)}
        assert by_job == {first: {0}, second: {1}}
        assert len(children(daemon.process.pid)) == WORKERS
    finally:
        assert stop_daemon(daemon) == 0


def test_killing_a_worker_mid_stream_loses_nothing_and_duplicates_nothing(short_dir: Path) -> None:
    """As test_resume's SIGKILL of the daemon, but of the job's worker only: the listener starts it again, the
    client resumes there, and the findings equal an uninterrupted run's."""
    port = free_port()
    daemon = start_daemon(short_dir, "--metrics-addr", f"127.0.0.1:{port}", workers=WORKERS)
    try:
        job, client, k2, before = interrupted_run(daemon, "resumed")
        assert [f["kind"] for f in before] == ["illegal_read"]
        time.sleep(0.3)  # the second kernel's first batch is in the worker, unchecked until the kernel ends
        victim = worker_pids(daemon)[1]
        os.kill(victim, signal.SIGKILL)
        second_part(client, k2)  # the client notices, resumes on the new worker and replays
        assert client.resumes == 1
        assert worker_pids(daemon)[1] != victim
        assert daemon.process.poll() is None
        resumed = findings(daemon, job)
        uninterrupted = uninterrupted_run(daemon, "uninterrupted")
        assert log_lines(daemon, "worker ended; starting it again")[0]["worker"] == 1
        metrics = metric_lines(port)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=10) as reply:
            assert reply.read() == b"ready\n"  # the restarted worker is up again
        assert "sanitizerd_worker_restarts_total 1.0" in metrics
        assert "sanitizerd_sessions_resumed_total 1.0" in metrics  # counted in the new worker
    finally:
        assert stop_daemon(daemon) == 0
    assert_resumed_intact(resumed, uninterrupted, before)


def test_a_stalled_worker_is_killed_and_started_again_and_its_client_resumes(short_dir: Path) -> None:
    """A worker that is alive but answers nothing (stopped here with SIGSTOP, as a stuck event loop would look) is
    killed once it has been silent for --worker-stall-timeout, started again, counted; its client resumes there and
    the findings equal an uninterrupted run's. The other worker is left alone."""
    port = free_port()
    extra = ("--metrics-addr", f"127.0.0.1:{port}", "--worker-stall-timeout", "2")
    daemon = start_daemon(short_dir, *extra, workers=WORKERS)
    try:
        job, client, k2, before = interrupted_run(daemon, "stalled")
        pids = worker_pids(daemon)
        os.kill(pids[1], signal.SIGSTOP)
        second_part(client, k2)  # waits on the stopped worker until the watchdog kills it; then resumes
        assert client.resumes == 1
        [stall] = log_lines(daemon, "worker stalled; killed")
        assert (stall["worker"], stall["pid"]) == (1, pids[1]) and stall["silent_s"] >= 2.0
        assert worker_pids(daemon) == {0: pids[0], 1: worker_pids(daemon)[1]} and worker_pids(daemon)[1] != pids[1]
        resumed = findings(daemon, job)
        uninterrupted = uninterrupted_run(daemon, "unstalled")
        metrics = metric_lines(port)
        assert "sanitizerd_worker_stalls_total 1.0" in metrics
        assert "sanitizerd_worker_restarts_total 1.0" in metrics
    finally:
        assert stop_daemon(daemon) == 0
    assert_resumed_intact(resumed, uninterrupted, before)


def test_serve_starts_a_worker_per_usable_core_by_default(short_dir: Path) -> None:
    """With no --workers, serve runs a worker per core it may use (at most 8); one core is the single process.
    Pinned to one core it is the single process; where two cores are there, it is a listener and two workers."""
    cores = sorted(os.sched_getaffinity(0))
    for pinned, expected in (([cores[0]], 0), (cores[:2], 2 if len(cores) > 1 else 0)):
        base = short_dir / str(len(pinned))
        base.mkdir()
        sock, log = base / "s.sock", base / "daemon.log"
        command = [sys.executable, "-m", "sanitizerd", "serve", "--socket", str(sock), "--state-dir", str(base / "st")]
        with open(log, "ab") as log_file:
            pin = functools.partial(os.sched_setaffinity, 0, pinned)
            process = subprocess.Popen(command, stdout=log_file, stderr=log_file, preexec_fn=pin)
        daemon = RunningDaemon(sock, base / "st", log, process)
        try:
            wait_for_socket(sock, process)
            with Client(daemon.socket, job="default", resume_buffer=0):
                pass
            assert len(children(process.pid)) == expected
        finally:
            assert stop_daemon(daemon) == 0


def test_one_worker_is_the_single_process(short_dir: Path) -> None:
    daemon = start_daemon(short_dir, "--workers", "1", workers=1)
    try:
        with Client(daemon.socket, job="alone", resume_buffer=0):
            pass
        assert children(daemon.process.pid) == []
        assert not log_lines(daemon, "worker started")
    finally:
        assert stop_daemon(daemon) == 0


def test_sighup_reloads_every_worker(short_dir: Path) -> None:
    daemon = start_daemon(short_dir, workers=WORKERS)
    try:
        daemon.wait_for_log('"worker serving"')
        deadline = time.monotonic() + 10
        while len(log_lines(daemon, "worker serving")) < WORKERS and time.monotonic() < deadline:
            time.sleep(0.05)
        daemon.process.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        while len(log_lines(daemon, "reloaded")) < WORKERS + 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        reloaded = log_lines(daemon, "reloaded")
        assert sorted(line.get("worker", -1) for line in reloaded) == [-1, 0, 1]
    finally:
        assert stop_daemon(daemon) == 0


def test_metrics_of_the_workers_are_summed_under_their_names() -> None:
    def family(name: str, kind: str, *samples: tuple[str, dict[str, str], float]) -> Metric:
        metric = Metric(name, "help", kind)
        for sample in samples:
            metric.add_sample(*sample)
        return metric

    listener = family("sanitizerd_sessions_started", "counter", ("sanitizerd_sessions_started_total", {}, 0.0))
    wait = "sanitizerd_detector_oldest_wait_seconds"
    workers = [
        family("sanitizerd_sessions_started", "counter", ("sanitizerd_sessions_started_total", {}, 3.0)),
        family("sanitizerd_sessions_started", "counter", ("sanitizerd_sessions_started_total", {}, 4.0)),
        family("sanitizerd_build_info", "gauge", ("sanitizerd_build_info", {"version": "1"}, 1.0)),
        family("sanitizerd_build_info", "gauge", ("sanitizerd_build_info", {"version": "1"}, 1.0)),
        family(wait, "gauge", (wait, {}, 2.0)),
        family(wait, "gauge", (wait, {}, 9.0)),
    ]
    merged = {m.name: m for m in merge([listener, *workers])}
    # Each worker shares out its own threads: the longest wait of any is the daemon's, not their sum.
    assert [s.value for s in merged[wait].samples] == [9.0]
    assert [s.value for s in merged["sanitizerd_sessions_started"].samples] == [7.0]
    assert [(s.labels, s.value) for s in merged["sanitizerd_build_info"].samples] == [({"version": "1"}, 1.0)]


def test_a_control_connection_asks_the_listener_then_watches_in_the_jobs_worker(short_dir: Path) -> None:
    """Queries answered by the listener first, then a watch that moves the connection to the job's worker: the
    answers keep their order, and the watch sees the job's findings and its end."""
    from client_shim import EventKind, Space, accesses
    from sanitizerd.control_client import ControlClient
    from sanitizerd_protocol import messages as m

    daemon = start_daemon(short_dir, workers=WORKERS)
    try:
        daemon.wait_for_log('"worker serving"')
        job = jobs_in(1, 1, "watched")[0]
        other = Client(daemon.socket, job=jobs_in(0, 1, "other")[0], resume_buffer=0)  # live in worker 0
        control = ControlClient(daemon.socket)
        try:
            control.send(m.QuerySessions())
            control.send(m.Watch(job=job))
            listed = control.receive()
            assert isinstance(listed, m.Sessions) and [s.session for s in listed.sessions] == [other.session]
            with Client(daemon.socket, job=job, resume_buffer=0) as client:
                client.malloc(0x1000, 256)
                kernel = client.kernel_begin("watched", 1)
                client.events(kernel, accesses(EventKind.READ, Space.GM, 0x1000 + 512, 32, block_num=1))
                client.kernel_end(kernel)
                assert client.wait_kernel(kernel, timeout=10).errors == 1
                client.free(0x1000)
            control.send(m.WaitJob(job=job))
            seen = []
            while not seen or not isinstance(seen[-1], m.JobIdle):
                seen.append(control.receive())
            assert any(isinstance(message, m.KernelChecked) for message in seen), seen
            # The worker that serves the connection now lists the other worker's live session too.
            control.send(m.QuerySessions())
            listed = control.receive()
            assert isinstance(listed, m.Sessions)
            assert other.session in {s.session for s in listed.sessions if s.state == "live"}
        finally:
            control.close()
            other.close()
        assert log_lines(daemon, "session started")[-1]["worker"] == 1
    finally:
        assert stop_daemon(daemon) == 0
