"""``sanitizerd run`` end to end: real daemon processes, real sockets, the real demo program."""

from __future__ import annotations

import concurrent.futures
import json
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.conftest import DEMO, ROOT, RunningDaemon, program_env, sanitizerd, start_daemon, stop_daemon

DEMO_ARGS = ("-t", "memcheck", "--leak-check", "yes", "--", sys.executable, str(DEMO))
JOB = re.compile(r"SUMMARY: job (\S+):")


def write_program(directory: Path, body: str) -> Path:
    path = directory / "program.py"
    path.write_text(textwrap.dedent(body))
    return path


class TestDemoReports:
    def test_embedded_daemon_prints_msSanitizer_reports(self, short_dir: Path) -> None:
        """Without a daemon to find (no --socket; none on the host or the user's private socket), run starts its
        own and prints all four planted bugs."""
        runtime = short_dir / "runtime"  # the user's private socket would be here: nothing there
        # The host's service configuration, one that no daemon may start with: the embedded one does not read it.
        host_config = short_dir / "host.toml"
        host_config.write_text('log_level = "shout"\nmetrics_addr = "127.0.0.1:1"\n')
        env = dict(program_env(), XDG_RUNTIME_DIR=str(runtime), SANITIZERD_CONFIG=str(host_config))
        result = sanitizerd("run", *DEMO_ARGS, env=env)
        assert result.returncode == 0, result.stderr
        out = result.stdout
        assert "====== ERROR: illegal read of size 224\n======    at 0x12c0c0007e00 on GM in add_custom_kernel\n" in out
        assert "======    in block aiv(7) on device 0\n" in out
        assert "====== ERROR: misaligned access of size 1\n======    at 0x6 on UB in add_custom_kernel\n" in out
        assert "====== ERROR: illegal free()\n======    at 0x12c0c0010000 on GM\n" in out
        assert "====== ERROR: LeakCheck: detected memory leaks\n\n======    Direct leak of 4096 byte(s)\n" in out
        assert "====== SUMMARY: 4096 byte(s) leaked in 1 allocation(s)\n" in out
        assert "4 error(s), 0 warning(s)" in out
        # The kernel's reports sit between msSanitizer's per-kernel banners; host-side ones follow.
        start = out.index("[sanitizerd] Start memcheck sanitizer on kernel add_custom_kernel\n")
        end = out.index("[sanitizerd] Sanitizer finished on kernel add_custom_kernel. See all detected errors above.\n")
        assert start < out.index("illegal read of size 224") < end < out.index("illegal free()")
        assert not runtime.exists()  # the private daemon had a directory of its own, removed with it

    def test_findings_json_from_a_running_daemon(self, daemon: RunningDaemon) -> None:
        """After a run against a daemon, `findings --format json` returns the job's findings with every field."""
        result = sanitizerd("run", "--socket", str(daemon.socket), *DEMO_ARGS)
        assert result.returncode == 0, result.stderr
        query = sanitizerd("findings", "--socket", str(daemon.socket), "--format", "json")
        assert query.returncode == 0, query.stderr
        findings = json.loads(query.stdout)
        required = {
            "kind",
            "severity",
            "job",
            "session",
            "device",
            "kernel",
            "blocks",
            "space",
            "address",
            "size",
        }
        assert all(required | {"serial"} <= set(f) for f in findings)
        kinds = {f["kind"] for f in findings}
        assert kinds == {"illegal_read", "misaligned_access", "illegal_free", "memory_leak"}
        [read] = [f for f in findings if f["kind"] == "illegal_read"]
        assert (read["size"], read["space"], read["blocks"], read["kernel"]) == (
            224,
            "GM",
            {"aiv": [7]},
            "add_custom_kernel",
        )
        [leak] = [f for f in findings if f["kind"] == "memory_leak"]
        assert (leak["size"], leak["kernel"], leak["location"]["line"]) == (4096, None, 73)

    def test_error_exitcode(self, daemon: RunningDaemon) -> None:
        """--error-exitcode N replaces the program's status when errors were found."""
        result = sanitizerd("run", "--socket", str(daemon.socket), "--error-exitcode", "9", *DEMO_ARGS)
        assert result.returncode == 9, result.stderr

    def test_program_status_passes_through(self, daemon: RunningDaemon, short_dir: Path) -> None:
        """Without --error-exitcode, run exits with the program's own status."""
        program = write_program(short_dir, "import sys; sys.exit(3)")
        result = sanitizerd("run", "--socket", str(daemon.socket), "--", sys.executable, str(program))
        assert result.returncode == 3

    def test_log_level_error_keeps_the_leak(self, daemon: RunningDaemon) -> None:
        """--log-level error prints errors only; a leak prints as an ERROR, so it is one (msSanitizer counts it a
        warning and hides it here), and --error-exitcode counts it."""
        result = sanitizerd("run", "--socket", str(daemon.socket), "--log-level", "error", *DEMO_ARGS)
        assert "illegal read of size 224" in result.stdout
        assert "====== ERROR: LeakCheck: detected memory leaks" in result.stdout

    def test_a_leak_alone_fails_error_exitcode(self, daemon: RunningDaemon, short_dir: Path) -> None:
        program = write_program(
            short_dir,
            """
            import client_shim
            c = client_shim.connect(device=0)
            c.malloc(0x1000, 4096)
            c.close()
            """,
        )
        result = sanitizerd("run", "--socket", str(daemon.socket), "--leak-check=yes", "--error-exitcode", "9",
                            "--", sys.executable, str(program))  # fmt: skip
        assert "LeakCheck: detected memory leaks" in result.stdout, result.stdout + result.stderr
        assert "1 error(s), 0 warning(s)" in result.stdout
        assert result.returncode == 9

    def test_log_file_receives_reports(self, daemon: RunningDaemon, short_dir: Path) -> None:
        """--log-file writes the reports and summary to the file instead of stdout."""
        log = short_dir / "report.txt"
        result = sanitizerd("run", "--socket", str(daemon.socket), "--log-file", str(log), *DEMO_ARGS)
        assert result.returncode == 0, result.stderr
        assert "illegal read of size 224" not in result.stdout
        assert "illegal read of size 224" in log.read_text()
        assert (log.stat().st_mode & 0o777) == 0o600


class TestCleanVersusSilent:
    def test_program_that_never_connects_is_called_out(self, daemon: RunningDaemon, short_dir: Path) -> None:
        """A run that received no records says so, instead of looking clean."""
        program = write_program(short_dir, "print('hello')")
        result = sanitizerd("run", "--socket", str(daemon.socket), "--", sys.executable, str(program))
        assert result.returncode == 0
        assert "no records received" in result.stdout
        assert "No error detected" not in result.stdout

    def test_clean_kernel_reports_no_error(self, daemon: RunningDaemon, short_dir: Path) -> None:
        """A program whose accesses are all legal gets a summary with events checked and no error."""
        program = write_program(
            short_dir,
            """
            import client_shim
            from client_shim import EventKind, Space, accesses
            c = client_shim.connect()
            c.malloc(0x1000, 4096)
            k = c.kernel_begin("clean", 2)
            c.events(k, accesses(EventKind.READ, Space.GM, [0x1000, 0x1800], 32, block_num=8, block_id=[0, 1]))
            c.kernel_end(k)
            assert c.wait_kernel(k, timeout=30).errors == 0
            c.free(0x1000)
            c.close()
            """,
        )
        result = sanitizerd(
            "run", "--socket", str(daemon.socket), "--leak-check=yes", "--", sys.executable, str(program)
        )
        assert result.returncode == 0, result.stderr
        assert "1 session(s), 1 kernel(s), 2 device event(s) checked; 0 error(s), 0 warning(s). No error detected." in (
            result.stdout
        )
        assert "[sanitizerd] Sanitizer finished on kernel clean. No error detected.\n" in result.stdout

    def test_kernel_name_filter(self, daemon: RunningDaemon) -> None:
        """--kernel-name that matches no kernel leaves the demo's kernel unchecked, and says so."""
        result = sanitizerd("run", "--socket", str(daemon.socket), "--kernel-name", "matmul", *DEMO_ARGS)
        assert result.returncode == 0, result.stderr
        assert "[sanitizerd] No active sanitizer tool on kernel add_custom_kernel.\n" in result.stdout
        assert "illegal read" not in result.stdout and "misaligned" not in result.stdout
        assert "illegal free()" in result.stdout  # host-side checks still run


class TestSynccheck:
    def test_unpaired_set_flag_is_reported(self, daemon: RunningDaemon, short_dir: Path) -> None:
        """-t synccheck reports a set_flag that no wait_flag consumed, in msSanitizer's text."""
        program = write_program(
            short_dir,
            """
            import client_shim
            from client_shim import EventKind, Pipe, syncs
            c = client_shim.connect()
            site = c.location("kernel_event.h", 785, 13)
            k = c.kernel_begin("sync_bug", 1)
            c.events(k, syncs(EventKind.SET_FLAG, Pipe.S, Pipe.MTE3, 0, serial=31, pc=0x2C94, location=site))
            c.kernel_end(k)
            c.wait_kernel(k, timeout=30)
            c.close()
            """,
        )
        result = sanitizerd(
            "run", "--socket", str(daemon.socket), "-t", "synccheck", "--", sys.executable, str(program)
        )
        assert result.returncode == 0, result.stderr
        assert (
            "====== WARNING: Unpaired set_flag instructions detected\n"
            "======    from PIPE_S to PIPE_MTE3 in sync_bug\n"
            "======    in block aiv(0) on device 0\n"
            "======    code in pc current 0x2c94 (serialNo:31)\n"
            "======    #0 kernel_event.h:785:13\n"
        ) in result.stdout
        assert "0 error(s), 1 warning(s)" in result.stdout
        assert "synccheck" not in result.stderr  # no "not yet checked" notice for it any more

    def test_demo_flags_are_balanced(self, daemon: RunningDaemon) -> None:
        """The demo's set_flag/wait_flag pairs are clean: with synccheck on, only its memcheck bugs appear."""
        result = sanitizerd("run", "--socket", str(daemon.socket), "-t", "memcheck", "-t", "synccheck", *DEMO_ARGS[2:])
        assert result.returncode == 0, result.stderr
        assert "set_flag" not in result.stdout and "wait_flag" not in result.stdout
        assert "4 error(s), 0 warning(s)" in result.stdout


class TestInitcheck:
    def test_initcheck_alone(self, daemon: RunningDaemon) -> None:
        """-t initcheck alone reports the demo's read of 224 bytes nothing wrote, and no memcheck findings."""
        result = sanitizerd(
            "run", "--socket", str(daemon.socket), "-t", "initcheck", "--", sys.executable, str(DEMO)
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        assert (
            "====== ERROR: uninitialized read of size 224\n"
            "======    at 0x12c0c0007e00 on GM in add_custom_kernel\n"
            "======    in block aiv(7) on device 0\n"
        ) in result.stdout
        assert "[sanitizerd] Start initcheck sanitizer on kernel add_custom_kernel" in result.stdout
        for other in ("illegal read", "misaligned", "illegal free", "LeakCheck"):
            assert other not in result.stdout
        assert "1 error(s), 0 warning(s)" in result.stdout
        assert "[sanitizerd] WARNING" not in result.stderr  # initcheck is no longer "not yet checked"


class TestStomping:
    def test_two_blocks_writing_the_same_output(self, daemon: RunningDaemon, short_dir: Path) -> None:
        """Two blocks of one kernel writing the same GM bytes are reported as msSanitizer's out-of-bounds
        warning; the same writes in atomic mode are not."""
        program = write_program(
            short_dir,
            """
            import client_shim
            from client_shim import EventKind, Space, accesses
            c = client_shim.connect(device=0)
            c.malloc(0x12C0C0015000, 4096)
            for name, atomic in (("plain", False), ("atomic", True)):
                k = c.kernel_begin(name, 16)
                c.events(k, accesses(EventKind.WRITE, Space.GM, 0x12C0C0015000, 256, block_id=0, atomic=atomic))
                c.events(k, accesses(EventKind.WRITE, Space.GM, 0x12C0C00150FC, 256, block_id=9, pc=0x7B8,
                                     atomic=atomic))
                c.kernel_end(k)
                c.wait_kernel(k, timeout=30)
            c.free(0x12C0C0015000)
            c.close()
            """,
        )
        result = sanitizerd("run", "--socket", str(daemon.socket), "--", sys.executable, str(program))
        assert result.returncode == 0, result.stderr
        assert (
            "====== WARNING: out of bounds of size 4\n"
            "======    at 0x12c0c00150fc on GM when writing data in plain\n"
            "======    in block aiv(9) on device 0\n"
            "======    code in unknown:0 (serialNo:0)\n"  # a pc without a stack: the record's place, none here
        ) in result.stdout
        assert "Sanitizer finished on kernel atomic. No error detected." in result.stdout
        assert "0 error(s), 1 warning(s)" in result.stdout


class TestCacheSize:
    @pytest.mark.parametrize(
        "send",
        [
            "c.events(k, big)",
            # Full batches are framed before they are counted: the batch that overflows is counted again and cut.
            "c.batch_events = 1000; c.events(k, big)",
            "c.batch_events = 1000; c.events(k, big[:10000]); c.events(k, big[10000:])",
        ],
        ids=["coalesced", "one-full-batch", "overflow-in-the-second-batch"],
    )
    def test_overflow_is_reported_and_the_result_marked_incomplete(
        self, daemon: RunningDaemon, short_dir: Path, send: str
    ) -> None:
        """Records past a block's --cache-size buffer are lost as on the device, counted, and reported."""
        program = write_program(
            short_dir,
            f"""
            import numpy as np
            import client_shim
            from client_shim import EventKind, Space, accesses
            c = client_shim.connect(device=0)
            c.malloc(0x1000, 1 << 20)
            k = c.kernel_begin("big", 4)
            big = accesses(EventKind.READ, Space.GM, 0x1000 + 32 * np.arange(20000), 32, block_id=3)
            {send}
            c.events(k, accesses(EventKind.READ, Space.GM, 0x1000, 32, block_id=0))
            c.kernel_end(k)
            verdict = c.wait_kernel(k, timeout=30)
            c.free(0x1000)
            c.close()
            print("lost", verdict.lost, "events", verdict.events)
            """,
        )
        result = sanitizerd(
            "run", "--socket", str(daemon.socket), "--cache-size", "1", "--", sys.executable, str(program)
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        capacity = (1 << 20) // 56  # events of 56 bytes in a 1 MB per-block buffer
        lost = 20000 - capacity
        assert f"lost {lost} events {capacity + 1}" in result.stdout
        assert "====== ERROR: internal errors (serialNo:0)\n" in result.stdout
        assert (
            f"======    {lost} records undetected in block 3, please use --cache-size=2 to run the operator again."
            in (result.stdout)
        )
        assert f"{lost} records of kernel big did not fit" in result.stdout and "incomplete" in result.stdout


class TestSharedStdout:
    def test_a_launch_report_is_whole_while_the_program_writes(self, daemon: RunningDaemon, short_dir: Path) -> None:
        """The program writes to the run's stdout, a line at a time, while its kernel's report is printed there:
        the report (banner, findings, end) comes whole, with the program's lines before or after it."""
        program = write_program(
            short_dir,
            """
            import os
            import threading
            import time
            import client_shim
            from client_shim import EventKind, Space, accesses
            c = client_shim.connect(device=0)
            c.malloc(0x1000, 64)
            k = c.kernel_begin("chatty", 1)
            c.events(k, accesses(EventKind.READ, Space.GM, 0x1000, 128, block_id=0))
            stop = threading.Event()

            def chatter():
                while not stop.is_set():
                    os.write(1, b"tick\\n")  # each line its own write, as an unbuffered program's
                    time.sleep(0.00005)

            talker = threading.Thread(target=chatter)
            talker.start()
            c.kernel_end(k)
            c.wait_kernel(k, timeout=30)
            time.sleep(0.3)  # the run prints the report once the daemon tells it, after the verdict reached us
            stop.set()
            talker.join()
            c.free(0x1000)
            c.close()
            """,
        )
        result = sanitizerd("run", "--socket", str(daemon.socket), "--", sys.executable, str(program))
        assert result.returncode == 0, result.stderr
        start = result.stdout.index("[sanitizerd] Start memcheck sanitizer on kernel chatty\n")
        end = result.stdout.index("[sanitizerd] Sanitizer finished on kernel chatty. See all detected errors above.\n")
        report = result.stdout[start:end]
        assert "tick" not in report, report
        assert "====== ERROR: illegal read of size 64\n" in report, report


class TestRegistercheck:
    def test_mask_not_reset_is_reported_with_memcheck(self, daemon: RunningDaemon, short_dir: Path) -> None:
        """-t memcheck brings registercheck along, which reports a vector mask the kernel did not reset."""
        program = write_program(
            short_dir,
            """
            import client_shim
            from client_shim import Register, register_writes
            c = client_shim.connect(device=0)
            k = c.kernel_begin("add_custom", 1)
            c.events(k, register_writes(Register.VECTOR_MASK_0, 123456))
            c.kernel_end(k)
            c.wait_kernel(k, timeout=30)
            c.close()
            """,
        )
        result = sanitizerd("run", "--socket", str(daemon.socket), "-t", "memcheck", "--", sys.executable, str(program))
        assert result.returncode == 0, result.stderr
        assert (
            "[sanitizerd] Warning:Register VECTOR_MASK_0 was not reset to default in block aiv(0) on kernel "
            "add_custom. Expected default value is (18446744073709551615), but current value is (123456)\n"
        ) in result.stdout
        assert "[sanitizerd] WARNING" not in result.stderr  # nothing of memcheck's set is "not yet checked"


class TestSaveAndReplay:
    def test_replay_reproduces_the_findings(self, daemon: RunningDaemon, short_dir: Path) -> None:
        """`run --save F` then `replay F` yields the same findings: same kinds, places, blocks, serials, stacks."""
        saved = short_dir / "demo.save"
        run = sanitizerd(
            "run", "--socket", str(daemon.socket), "--save", str(saved), "-t", "memcheck", "-t", "synccheck",
            "--leak-check", "yes", "--check-unused-memory", "yes", "--", sys.executable, str(DEMO),
        )  # fmt: skip
        assert run.returncode == 0, run.stderr
        assert (saved.stat().st_mode & 0o777) == 0o600
        job = JOB.search(run.stdout).group(1)
        original = json.loads(
            sanitizerd("findings", "--socket", str(daemon.socket), "--job", job, "--format", "json").stdout
        )
        replayed = sanitizerd("replay", str(saved), "--socket", str(daemon.socket), "--format", "json")
        assert replayed.returncode == 0, replayed.stderr

        def facts(findings: list[dict[str, object]]) -> list[dict[str, object]]:
            drop = {"job", "session", "id", "time"}
            return sorted(({k: v for k, v in f.items() if k not in drop} for f in findings), key=json.dumps)

        assert len(original) == 5  # the 4 planted bugs, and the never-written workspace
        assert facts(json.loads(replayed.stdout)) == facts(original)
        # As `run --error-exitcode`: the code when the replay reports errors (it found four), else the status.
        failing = sanitizerd("replay", str(saved), "--socket", str(daemon.socket), "--error-exitcode", "7")
        assert failing.returncode == 7, failing.stderr
        assert "4 error(s), 1 warning(s)" in failing.stdout

    def test_replay_of_a_damaged_file_says_where(self, short_dir: Path) -> None:
        """A truncated save file is refused with the byte offset, not a traceback."""
        damaged = short_dir / "damaged.save"
        damaged.write_bytes(b"\x10\x00\x00\x00abc")
        result = sanitizerd("replay", str(damaged), "--socket", str(short_dir / "none.sock"))
        assert result.returncode == 1
        assert "truncated" in result.stderr and "Traceback" not in result.stderr


class TestConcurrentRuns:
    def test_32_runs_each_get_their_own_complete_findings(self, daemon: RunningDaemon) -> None:
        """32 runs at once against one daemon: each sees exactly its own four findings, and the daemon stays up."""
        with concurrent.futures.ThreadPoolExecutor(32) as pool:
            results = list(
                pool.map(
                    lambda _: sanitizerd("run", "--socket", str(daemon.socket), *DEMO_ARGS, timeout=300),
                    range(32),
                )
            )
        jobs = set()
        for result in results:
            assert result.returncode == 0, result.stderr
            assert result.stdout.count("illegal read of size 224") == 1
            assert result.stdout.count("misaligned access of size 1\n") == 1
            assert result.stdout.count("illegal free()") == 1
            assert result.stdout.count("Direct leak of 4096 byte(s)") == 1
            jobs.add(JOB.search(result.stdout).group(1))
        assert len(jobs) == 32
        for job in list(jobs)[:4]:
            query = sanitizerd("findings", "--socket", str(daemon.socket), "--job", job, "--format", "json")
            findings = json.loads(query.stdout)
            assert sorted(f["kind"] for f in findings) == [
                "illegal_free",
                "illegal_read",
                "memory_leak",
                "misaligned_access",
            ]
            assert {f["job"] for f in findings} == {job}
        assert daemon.process.poll() is None
        sessions = json.loads(sanitizerd("sessions", "--socket", str(daemon.socket), "--format", "json").stdout)
        assert len([s for s in sessions if s["state"] == "ended"]) == 32


class TestStopped:
    """``sanitizerd run`` told to stop (SIGTERM, as `timeout` sends it) while its daemon is slow: it passes the
    signal on to the program, waits at most 2 s more for the daemon, and says what was checked."""

    def test_sigterm_ends_the_run_within_seconds_while_the_daemon_is_stuck(
        self, daemon: RunningDaemon, tmp_path: Path
    ) -> None:
        import os
        import signal
        import subprocess
        import time

        stuck: list[int] = []
        program = write_program(tmp_path, "import time\nprint('program started', flush=True)\ntime.sleep(60)\n")
        run = subprocess.Popen(
            [sys.executable, "-m", "sanitizerd", "run", "--socket", str(daemon.socket), "--", sys.executable,
             str(program)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=program_env(),
        )  # fmt: skip
        try:
            assert run.stdout is not None
            assert "program started" in run.stdout.readline()
            stuck = daemon_processes(daemon.process.pid)  # the listener and its workers, when it has them
            for pid in stuck:
                os.kill(pid, signal.SIGSTOP)  # the daemon answers nothing from now on
            started = time.monotonic()
            run.send_signal(signal.SIGTERM)
            out, err = run.communicate(timeout=30)
            took = time.monotonic() - started
        finally:
            for pid in stuck:
                os.kill(pid, signal.SIGCONT)
            if run.poll() is None:
                run.kill()
        assert took < 6, (took, out, err)  # 2 s for the daemon, the rest the program's own exit
        assert run.returncode == 128 + signal.SIGTERM, (out, err)
        assert "stopped by SIGTERM before the daemon had finished checking" in out, out
        assert "Traceback" not in err, err


def daemon_processes(pid: int) -> list[int]:
    """``pid`` and its descendants (a daemon's worker processes), from /proc."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            parents.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo += parents.get(current, [])
    return found


JOB_GRACE = 1.0  # the daemon's --job-grace in the test below


def test_jobs_says_a_run_is_live_between_its_processes(short_dir: Path) -> None:
    """Past the job grace period with no session live, the job of a run still running is live (`jobs` said ended
    while its run was alive), with workers too; once the run ends it is not."""
    daemon = start_daemon(short_dir, "--job-grace", str(JOB_GRACE))
    ended, go = short_dir / "first-ended", short_dir / "go"
    program = write_program(
        short_dir,
        f"""
        import os, pathlib, time
        from client_shim import Client
        with Client(job=os.environ["SANITIZERD_JOB"]) as client:
            pass
        pathlib.Path({str(ended)!r}).write_text(os.environ["SANITIZERD_JOB"])
        while not pathlib.Path({str(go)!r}).exists():
            time.sleep(0.05)
        """,
    )
    env = dict(program_env(), PYTHONPATH=str(ROOT))
    run = subprocess.Popen(
        [sys.executable, "-m", "sanitizerd", "run", "--socket", str(daemon.socket), "--", sys.executable,
         str(program)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not ended.exists():
            assert run.poll() is None and time.monotonic() < deadline, run.communicate()
            time.sleep(0.05)
        job = ended.read_text()

        def state() -> str:
            listed = json.loads(sanitizerd("jobs", "--socket", str(daemon.socket), "--format", "json").stdout)
            return next(j["state"] for j in listed if j["job"] == job)

        time.sleep(JOB_GRACE + 0.5)  # its only session closed longer ago than the grace period
        assert state() == "live"
        go.touch()
        assert run.wait(60) == 0, run.communicate()
        time.sleep(JOB_GRACE + 0.5)
        assert state() == "ended"
    finally:
        go.touch()
        if run.poll() is None:
            run.kill()
        run.communicate()
        assert stop_daemon(daemon) == 0
