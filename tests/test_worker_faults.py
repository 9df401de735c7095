"""Faults of a daemon's processes that the jobs it serves must not feel: a worker killed in the middle of a compat
job or a client_shim job (its msSanitizer-form socket, the run's control connection and verdict, the session's
counts), and a stop that must end within its deadline whatever a thread is still doing."""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from client_shim import Client, EventKind, Space, accesses
from sanitizerd.sessions.jobs import job_key
from sanitizerd.workers.routing import worker_for
from tests.conftest import RunningDaemon, program_env, sanitizerd, start_daemon, stop_daemon
from tests.native_build import build_client, build_kernel
from tests.test_hooks import bare_env
from tests.test_workers import log_lines, worker_pids

DRAIN = 1.0  # --drain-timeout of the stop tests
MARGIN = 2.0 + 1.5  # the daemon's own margin past the drain timeout, and the test's for exit


@pytest.mark.parametrize("workers", [1, 2])
def test_sigterm_ends_the_daemon_within_the_drain_deadline_while_a_thread_is_stuck(
    short_dir: Path, workers: int
) -> None:
    """A session's findings write blocks in a thread (another process holds the store's write lock, for SQLite's
    30 s busy timeout), as a detector busy with a huge batch would: SIGTERM still ends the daemon (one process, or
    a listener and its workers) at the drain deadline plus its margin, abandoning the thread, where it waited for
    the thread to finish."""
    daemon = start_daemon(short_dir, "--drain-timeout", str(DRAIN), workers=workers)
    try:
        client = Client(daemon.socket, job="stuck", resume_buffer=0)
        client.malloc(0x1000, 256)
        holder = sqlite3.connect(daemon.state_dir / "sanitizerd.db", timeout=0, isolation_level=None)
        holder.execute("BEGIN EXCLUSIVE")  # the daemon's next write waits on this lock in a store thread
        kernel = client.kernel_begin("stuck", 1)
        client.events(kernel, accesses(EventKind.READ, Space.GM, 0x1000 + 512, 32, block_num=1))
        client.kernel_end(kernel)
        client.flush()
        time.sleep(1.0)  # the kernel checked, its findings' write waiting on the lock
        started = time.monotonic()
        daemon.process.send_signal(signal.SIGTERM)
        daemon.process.wait(DRAIN + MARGIN + 30)
        took = time.monotonic() - started
        assert took < DRAIN + MARGIN, (took, daemon.log_text()[-3000:])
        assert "exiting without it" in daemon.log_text()
        assert not daemon.socket.exists()  # the socket file removed on the way out
        holder.execute("ROLLBACK")
        holder.close()
    finally:
        if daemon.process.poll() is None:
            daemon.process.kill()
            daemon.process.wait()


# --- a worker SIGKILLed while a `sanitizerd run` job is being served --------------------------------------------

WORKERS = 2
SUMMARY = re.compile(r"SUMMARY: job (\S+): (\d+) session\(s\), (\d+) kernel\(s\), .*; (\d+) error\(s\), (\d+) warning")

# A job in two halves: the test kills the job's worker while the program waits between them (its name in
# ``paused``), then lets it go on (``go``).
_PAUSE = """
import os, pathlib, sys, time
directory = pathlib.Path(sys.argv[1])
time.sleep(0.5)  # the first half's reports written to the run
(directory / "paused").write_text(os.environ["SANITIZERD_JOB"])
while not (directory / "go").exists():
    time.sleep(0.05)
"""

# msSanitizer's hooks in the processes of a job: each launch here is a process of its own (the C client built on
# msSanitizer's wire header), which connects to the job's socket as the hooks do (50 tries 100 ms apart).
_HOOKED_JOB = """#!/bin/sh
set -e
"$1" "$2"
"$1" "$2"
python3 -c '""" + _PAUSE.replace("'", '"') + """' "$3"
"$1" "$2"
"$1" "$2"
"""

# The same with client_shim: one session whose second kernel is sent after the worker died (it resumes there).
_SHIM_JOB = (
    """
from client_shim import Client
from tests.test_resume import first_part, second_part
client = Client(job=__import__("os").environ["SANITIZERD_JOB"], resume_buffer=64 << 20, resume_timeout=30)
k2 = first_part(client)
"""
    + _PAUSE
    + """
second_part(client, k2)
print("resumes", client.resumes)
"""
)


def _alive(pid: int) -> bool:
    """A running process, not one gone or a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


def _kill_the_jobs_worker(
    daemon: RunningDaemon, directory: Path, run: subprocess.Popen[str], *, wait_ready: bool
) -> int:
    """Once the program paused: SIGKILL of the worker serving its job; then it goes on (``wait_ready``: once the
    new worker is up). The killed pid."""
    paused = directory / "paused"
    deadline = time.monotonic() + 60
    while not paused.exists():
        assert run.poll() is None and time.monotonic() < deadline, run.communicate()
        time.sleep(0.05)
    job = paused.read_text()
    index = worker_for(job_key(job, os.getuid()), WORKERS)
    # The job is served, so its worker's "worker started" line is written, but perhaps not yet read back when an
    # earlier attempt's kill replaced that worker: the dead one (a zombie until reaped) would take the SIGKILL.
    victim = worker_pids(daemon)[index]
    while not _alive(victim) and time.monotonic() < deadline:
        time.sleep(0.05)
        victim = worker_pids(daemon)[index]
    ready = len(log_lines(daemon, "worker ready"))
    os.kill(victim, signal.SIGKILL)
    # The C client reads the Config for 1 s only (msSanitizer's hooks read it at their first launch, much later):
    # on a loaded machine a worker may take longer to start, so the job goes on once it is up. A client_shim
    # session resumes by itself however long it takes.
    while wait_ready and len(log_lines(daemon, "worker ready")) == ready and time.monotonic() < deadline:
        time.sleep(0.05)
    (directory / "go").touch()
    return victim


def _agree(daemon: RunningDaemon, job: str) -> list[dict]:
    """The job's findings in the store, each once, and what ``sessions`` says of its sessions: the same count."""
    stored = json.loads(sanitizerd("findings", "--socket", str(daemon.socket), "--job", job, "--format", "json").stdout)
    assert len({f["id"] for f in stored}) == len(stored)
    listed = json.loads(sanitizerd("sessions", "--socket", str(daemon.socket), "--format", "json").stdout)
    mine = [s for s in listed if s["job"] == job]
    assert sum(s["findings"] for s in mine) == len(stored), (mine, stored)
    return stored


@pytest.fixture(scope="module")
def native(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    directory = tmp_path_factory.mktemp("native")
    return {"kernel": build_kernel(directory), "client": build_client(directory, "mssanitizer-4a419f05")}


def test_worker_sigkill_during_a_hooked_job(short_dir: Path, native: dict[str, Path]) -> None:
    """The job's msSanitizer-form socket is the listener's: after its worker is SIGKILLed, the hooks of the job's
    next processes still connect (the connection waits in the listener for the new worker), every launch is
    checked once, and the run, whose control connection died with the worker, connects again, keeps its socket
    and exits 0 with the whole job's summary; ``sessions`` and ``findings`` agree. (Before: the socket died with
    the worker, the next hooks got ConnectionRefusedError, and the run ended 'lost the connection', exit 1.)"""
    daemon = start_daemon(short_dir, workers=WORKERS)
    try:
        daemon.wait_for_log('"worker serving"')
        script = short_dir / "job.sh"
        script.write_text(_HOOKED_JOB)
        script.chmod(0o755)
        env = bare_env(SANITIZERD_COMPAT_LAYOUT="mssanitizer-4a419f05")
        command = [str(script), str(native["client"]), str(native["kernel"]), str(short_dir)]
        run = subprocess.Popen(
            [sys.executable, "-m", "sanitizerd", "run", "--socket", str(daemon.socket), "-t", "memcheck",
             "--leak-check", "yes", "--", *command],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        )  # fmt: skip
        victim = _kill_the_jobs_worker(daemon, short_dir, run, wait_ready=True)
        out, err = run.communicate(timeout=120)
        assert run.returncode == 0, out + err
        assert "lost the" not in out + err and err.count("24 slots sent and checked") == 4, out + err
        summary = SUMMARY.search(out)
        assert summary is not None, out
        job, sessions, kernels, errors = summary.group(1), *map(int, summary.group(2, 3, 4))
        assert (sessions, kernels, errors) == (4, 4, 16), out
        assert out.count("Sanitizer finished on kernel") == 4, out  # each launch reported once
        stored = _agree(daemon, job)
        assert len(stored) == 16 and sorted({f["kind"] for f in stored}) == [
            "illegal_free", "illegal_read", "memory_leak", "misaligned_access"
        ], stored  # fmt: skip
        assert worker_pids(daemon)[worker_for(job_key(job, os.getuid()), WORKERS)] != victim
    finally:
        assert stop_daemon(daemon) == 0, daemon.log_text()[-3000:]


def test_worker_sigkill_during_a_client_shim_job_every_time(short_dir: Path) -> None:
    """client_shim's session resumes on the new worker; the run reconnects too, and exits 0 with the summary,
    each of several tries (the issue saw 'lost the connection', exit 1, in 2 of 4); the resumed session's
    finding count in ``sessions`` is what the store holds (it said 28 where the store had 40)."""
    daemon = start_daemon(short_dir, workers=WORKERS)
    try:
        daemon.wait_for_log('"worker serving"')
        for attempt in range(4):
            directory = short_dir / str(attempt)
            directory.mkdir()
            program = directory / "job.py"
            program.write_text(_SHIM_JOB)
            env = dict(program_env(), PYTHONPATH=str(Path(__file__).resolve().parents[1]))
            run = subprocess.Popen(
                [sys.executable, "-m", "sanitizerd", "run", "--socket", str(daemon.socket), "--", sys.executable,
                 str(program), str(directory)],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
            )  # fmt: skip
            _kill_the_jobs_worker(daemon, directory, run, wait_ready=False)
            out, err = run.communicate(timeout=120)
            assert run.returncode == 0 and "resumes 1" in out, (attempt, out + err)
            assert "lost the" not in out + err, (attempt, out + err)
            summary = SUMMARY.search(out)
            assert summary is not None, (attempt, out)
            stored = _agree(daemon, summary.group(1))
            assert sorted(f["kind"] for f in stored) == [
                "illegal_free", "illegal_read", "illegal_write", "misaligned_access"
            ], (attempt, stored)  # fmt: skip
            assert int(summary.group(4)) + int(summary.group(5)) == len(stored), (attempt, out)
    finally:
        assert stop_daemon(daemon) == 0, daemon.log_text()[-3000:]


def test_a_saved_run_whose_connection_was_made_again_says_its_file_lacks_part_of_the_job(short_dir: Path) -> None:
    """`run --save` across a worker's SIGKILL: the checks are whole (the run exits 0), but what the dead worker
    recorded and had not sent never reached the file, and the run says so rather than leave a replay that differs
    in silence."""
    daemon = start_daemon(short_dir, workers=WORKERS)
    try:
        daemon.wait_for_log('"worker serving"')
        program = short_dir / "job.py"
        program.write_text(_SHIM_JOB)
        saved = short_dir / "job.save"
        env = dict(program_env(), PYTHONPATH=str(Path(__file__).resolve().parents[1]))
        run = subprocess.Popen(
            [sys.executable, "-m", "sanitizerd", "run", "--quiet", "--socket", str(daemon.socket), "--save",
             str(saved), "--", sys.executable, str(program), str(short_dir)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        )  # fmt: skip
        _kill_the_jobs_worker(daemon, short_dir, run, wait_ready=False)
        out, err = run.communicate(timeout=120)
        assert run.returncode == 0 and SUMMARY.search(out), out + err
        assert f"WARNING: job {SUMMARY.search(out).group(1)}: {saved} lacks what the daemon recorded" in out, out
        assert saved.exists()
    finally:
        assert stop_daemon(daemon) == 0, daemon.log_text()[-3000:]


# One process of msSanitizer's hooks connected across the kill: it reads its Config, opens its session (a device
# summary), and is still connected when the job's worker dies. msSanitizer's hooks connect once per process.
_HELD_ACROSS = r"""
import os, pathlib, socket, sys, time
name = os.environ["MSOP_SOCKET_PATH"].encode()
sock = socket.socket(socket.AF_UNIX)
sock.connect(b"\0" + name + b"\0" * (107 - len(name)))
config = b""
while len(config) < int(sys.argv[2]):
    config += sock.recv(int(sys.argv[2]) - len(config))
sock.sendall(bytes.fromhex(sys.argv[3]))
""" + _PAUSE.replace("import os, pathlib, sys, time\n", "") + r"""
try:
    sock.sendall(bytes.fromhex(sys.argv[3]))  # what it would send next goes nowhere
except OSError:
    pass
"""


def test_a_hooks_session_cut_by_a_worker_sigkill_fails_the_run(short_dir: Path) -> None:
    """A hooked process connected when its worker is SIGKILLed cannot resume (the hooks never reconnect): the run
    says which session was cut and that the result is incomplete, and exits 1 where it would have passed the job
    as checked."""
    from sanitizerd.compat import wire

    layout = wire.LAYOUTS["mssanitizer-4a419f05"]
    summary = wire.PACKET_HEAD.pack(layout.packet_number(wire.PacketType.DEVICE_SUMMARY))
    summary += layout.device_summary.struct.pack(3, 0, 0, 0)
    daemon = start_daemon(short_dir, workers=WORKERS)
    try:
        daemon.wait_for_log('"worker serving"')
        program = short_dir / "held.py"
        program.write_text(_HELD_ACROSS)
        run = subprocess.Popen(
            [sys.executable, "-m", "sanitizerd", "run", "--socket", str(daemon.socket), "--", "python3",
             str(program), str(short_dir), str(layout.config.size), summary.hex()],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=bare_env(SANITIZERD_COMPAT_LAYOUT="mssanitizer-4a419f05"),
        )  # fmt: skip
        _kill_the_jobs_worker(daemon, short_dir, run, wait_ready=True)
        out, err = run.communicate(timeout=120)
        assert run.returncode == 1, out + err
        assert "was served by a daemon worker that died, and did not resume" in out, out + err
        assert "the result is incomplete" in out and "lost the" not in out + err, out + err
    finally:
        assert stop_daemon(daemon) == 0, daemon.log_text()[-3000:]
