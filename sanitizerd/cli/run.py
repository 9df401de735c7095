"""``sanitizerd run [options] -- PROGRAM``: msSanitizer's launcher, backed by the daemon.

Uses the daemon at ``--socket`` (and only that one: when it does not answer, the run fails, saying why), else the
daemon the client library finds (the host's, then the user's own), else an embedded one started for the duration.
Registers a job with the run's configuration, watches its findings, launches the program with the environment its
clients attach with, prints findings as they arrive, then a summary once every session of the job ended.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import IO

import msgspec

from client_shim.attach import ATTACH_ENV, hook_dir
from client_shim.transport import JOB_ENV, SOCKET_ENV, ClientError, NoDaemon
from sanitizerd import __version__
from sanitizerd.cli import hooks
from sanitizerd.cli.options import PREFIX, RunOptions, UsageError, parse_run_args, run_help
from sanitizerd.cli.progress import Progress, Sample, count
from sanitizerd.cli.savefile import SaveWriter
from sanitizerd.control_client import ControlClient
from sanitizerd.findings.checked import CheckedKernel
from sanitizerd.findings.junit import render_junit
from sanitizerd.findings.render import render_json, render_text
from sanitizerd.findings.sarif import render_sarif
from sanitizerd.findings.store import CRASH_END_REASON
from sanitizerd_protocol import messages as m
from sanitizerd_protocol.model import CROSS_NPU, ERROR, INFO, WARNING, Finding

# The status of a run whose program exited 0 but sent signatures that show silent data corruption (without
# --error-exitcode, which wins for every error); a program that failed keeps its own status.
SDC_EXIT_STATUS = 1
SDC_KINDS = frozenset({"sdc_mismatch", "sdc_replica_mismatch"})

# A report is shown when its severity is at or above --log-level (msSanitizer's filter, §2.0).
_SHOWN = {"info": {ERROR, WARNING, INFO}, "warn": {ERROR, WARNING}, "error": {ERROR}}


# Seconds a run still waits for the daemon's last checks once it was told to stop (SIGTERM, SIGINT), and the stop
# signals it was sent: signals are the process's, and an embedded daemon is then given as long to end.
INTERRUPTED_WAIT = 2.0
STOP_SIGNALS: list[int] = []
# Seconds a run tries to reach the daemon again once its control connection ended before the job did (the job's
# worker process died: the listener starts another, which takes the connection once it is up).
RECONNECT_WINDOW = 60.0
RECONNECT_PAUSE = 0.2
# Ctrl-C, as msSanitizer's master takes it (a kernel locked up on a wait never ends by itself): the first stops
# the program (SIGINT passed on; SIGKILL once it has had KILL_GRACE seconds to go), and the run waits for the
# daemon's report of the pipes each open launch was locked on; the second ends the run at once.
CTRL_C_TEXT = "Ctrl-C received. Running kernel will be killed, and you can press Ctrl-C again to force quit."
KILL_GRACE = 10.0
# Embedded daemons still running: a forced quit ends them too, or they would outlive the run.
EMBEDDED: list[subprocess.Popen[bytes]] = []


class EmbeddedDaemon:
    """A private daemon for one run: its own socket and state under a temporary directory."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="sanitizerd-run-"))
        self.socket = self.dir / "sanitizerd.sock"
        self.log = open(self.dir / "daemon.log", "wb")
        # Embedded defaults: the host's configuration (/etc/sanitizerd) is its service's, whose store, metrics port
        # and limits are not this run's.
        (self.dir / "sanitizerd.toml").write_text("# a run's private daemon: embedded defaults\n")
        # One process: a run is one job, which one worker would serve anyway; a listener and its workers would
        # only add their start-up to the run.
        self.process = subprocess.Popen(
            [sys.executable, "-m", "sanitizerd", "serve", "--socket", str(self.socket), "--state-dir",
             str(self.dir / "state"), "--config", str(self.dir / "sanitizerd.toml"), "--log-level", "warning",
             "--workers", "1"],
            stdout=self.log, stderr=self.log, stdin=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        EMBEDDED.append(self.process)

    def connect(self, timeout: float = 20.0) -> ControlClient:
        deadline = time.monotonic() + timeout
        while True:
            try:
                return ControlClient(self.socket)
            except ClientError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise ClientError(f"the embedded daemon did not start; see {self.dir / 'daemon.log'}") from None
                time.sleep(0.05)

    def stop(self) -> None:
        with contextlib.suppress(ValueError):
            EMBEDDED.remove(self.process)
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(INTERRUPTED_WAIT if STOP_SIGNALS else 10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()
        if self.process.returncode in (0, -signal.SIGTERM):
            shutil.rmtree(self.dir, ignore_errors=True)


class Reporter:
    """Prints the job's findings as they arrive, on its own thread, until the job is idle.

    A kernel's findings are printed between msSanitizer's per-kernel banners (reference §2.0) once the daemon
    reports the kernel checked; host-side findings are printed at once."""

    def __init__(
        self,
        control: ControlClient,
        out: IO[str],
        shown: set[str],
        *,
        save: SaveWriter | None = None,
        keep_kernels: bool = False,
        show_suppressed: bool = False,
        reconnect: Callable[[], ControlClient] | None = None,
        stored: Callable[[], list[Finding]] | None = None,
        cut: Callable[[], list[m.SessionInfo]] | None = None,
        job: str = "",
    ) -> None:
        self.control = control
        self.job = job
        # A control connection that ends before the job's end (its worker died) is made again: ``reconnect`` opens
        # one that registers and watches the job as the first did; ``stored`` reads the job's findings back from
        # the store, for those the lost connection (or the time without one) did not bring.
        self.reconnect = reconnect
        self.stored = stored
        # ``cut``: the job's sessions a worker that died left behind and no client resumed (msSanitizer's hooks
        # connect once per process and never again): what they sent after their last check went unchecked.
        self.cut = cut
        self.cut_sessions: list[m.SessionInfo] = []
        self.cut_unknown = ""  # why the daemon could not say which sessions were cut
        # why the --save file lacks part of the job: what the daemon recorded while the connection was lost (a
        # worker that died, a recording that fell too far behind) never reached it
        self.save_gap = ""
        self.reconnects = 0
        self._swap = threading.Lock()  # the connection is replaced under it; the job's wait is asked under it
        self.waiting = False  # wait_job asked: asked again on a connection made after
        self._seen: set[int] = set()  # ids of the findings reported (a finding reported twice counts once)
        self._checked: set[tuple[int, int]] = set()  # (session, launch) reported checked
        self._sessions: set[int] = set()
        self.show_suppressed = show_suppressed
        self.suppressed = 0  # findings a suppression rule hid: neither errors nor warnings
        self.save = save
        self.out = out
        self.shown = shown
        self.errors = 0
        self.warnings = 0
        self.idle: m.JobIdle | None = None
        self.failure: str | None = None
        self._kernels: dict[tuple[int, int], list[Finding]] = {}  # (session, launch) -> findings held
        self.findings: list[Finding] = []  # all of them, in arrival order
        # every launch reported checked, kept only for --report: a job may launch millions of kernels
        self.keep_kernels = keep_kernels
        self.kernels: list[m.KernelChecked] = []
        self.out_closed = False  # the reader of ``out`` went away
        self.thread = threading.Thread(target=self._loop, name="sanitizerd-reporter", daemon=True)

    @property
    def kernels_checked(self) -> int:
        return len(self._checked)

    def wait_job(self) -> None:
        """Ask for the job's end (the program has exited). A connection lost meanwhile is the loop's to make again,
        which asks again on the new one."""
        with self._swap:
            self.waiting = True
            try:
                self.control.send(m.WaitJob(job=self.job))
            except ClientError:
                pass

    def _loop(self) -> None:
        try:
            while True:
                try:
                    message = self.control.receive()
                except ClientError as exc:
                    if not self._reconnect(exc):
                        raise
                    continue
                if isinstance(message, m.Findings):
                    self._findings(message.findings)
                elif isinstance(message, m.KernelChecked):
                    self._kernel(message)
                elif isinstance(message, m.Recorded) and self.save is not None:
                    self.save.write(message)
                elif isinstance(message, m.JobIdle):
                    self.idle = self._completed(message)
                    for held in self._kernels.values():
                        self._print(held)
                    return
        except ClientError as exc:
            self.failure = str(exc)

    def _reconnect(self, lost: ClientError) -> bool:
        """A connection like the lost one (the job registered and watched, its end asked for if it was), made
        within RECONNECT_WINDOW seconds; False when there is none to make."""
        if self.reconnect is None:
            return False
        deadline = time.monotonic() + RECONNECT_WINDOW
        while True:
            try:
                with self._swap:
                    control = self.reconnect()
                    if self.waiting:
                        control.send(m.WaitJob(job=self.job))
                    old, self.control = self.control, control
            except ClientError:
                if time.monotonic() >= deadline or STOP_SIGNALS:  # told to stop: what was reported is said
                    return False
                time.sleep(RECONNECT_PAUSE)
                continue
            with contextlib.suppress(OSError):
                old.close()
            self.reconnects += 1
            if self.save is not None and not self.save_gap:
                self.save_gap = str(lost)
            return True

    def _completed(self, idle: m.JobIdle) -> m.JobIdle:
        """The job's end as reported, made whole after a reconnect: the findings the store holds that no watch
        brought are reported now, and the sessions and launches counted are at least those reported checked (a
        worker that died took its counts of the job with it)."""
        if not self.reconnects:
            return idle
        if self.stored is not None:
            try:
                missed = [f for f in self.stored() if f.id not in self._seen]
            except ClientError:
                missed = []
            if missed:
                self._findings(missed)
        if self.cut is not None:
            try:
                self.cut_sessions = self.cut()
            except ClientError as exc:  # unknown is not clean: said, and the run fails as for a cut session
                self.cut_unknown = str(exc)
        sessions = max(idle.sessions, len(self._sessions))
        return msgspec.structs.replace(idle, sessions=sessions, kernels=max(idle.kernels, len(self._checked)))

    def _findings(self, findings: list[Finding]) -> None:
        # A resumed session's replay or the store read after a reconnect may bring one again: reported once.
        findings = [f for f in findings if not f.id or f.id not in self._seen]
        self._seen.update(f.id for f in findings if f.id)
        self._sessions.update(f.session for f in findings)
        self.findings.extend(findings)
        for finding in findings:
            if finding.suppressed:
                self.suppressed += 1
            elif finding.severity == ERROR:
                self.errors += 1
            elif finding.severity == INFO:  # a trace asked for, not a defect
                pass
            else:
                self.warnings += 1
        # a launch's findings wait for its report, unless it came already (a cross-NPU verdict that waited for
        # other sessions' kernels comes after it)
        now = [f for f in findings if not f.launch or (f.session, f.launch) in self._checked]
        for finding in findings:
            if finding.launch and (finding.session, finding.launch) not in self._checked:
                self._kernels.setdefault((finding.session, finding.launch), []).append(finding)
        self._print(now)

    def _kernel(self, report: m.KernelChecked) -> None:
        if (report.session, report.kernel) in self._checked:  # a resumed session's replay of a launch reported
            return
        self._checked.add((report.session, report.kernel))
        self._sessions.add(report.session)
        held = self._kernels.pop((report.session, report.kernel), [])
        if self.keep_kernels:
            self.kernels.append(report)
        if not report.tools:
            self._write(f"{PREFIX} No active sanitizer tool on kernel {report.name}.\n")
            return
        # One write for the launch's whole report: a line the program prints meanwhile lands before or after it,
        # never between its banner and its findings.
        findings, shown = self._text(held, debug_line=report.debug_line, kernel=report.name)
        outcome = "See all detected errors above." if shown else "No error detected."
        text = [
            f"{PREFIX} Start {tools_text(report.tools)} sanitizer on kernel {report.name}\n",
            findings,
            f"{PREFIX} Sanitizer finished on kernel {report.name}. {outcome}\n",
        ]
        if report.lost:
            text.append(
                f"{PREFIX} WARNING: {report.lost} records of kernel {report.name} did not fit the per-block record "
                "buffer (--cache-size) and were not checked: its result is incomplete.\n"
            )
        elif report.incomplete:
            text.append(
                f"{PREFIX} WARNING: some records of kernel {report.name} could not be checked (see the internal "
                "errors above): its result is incomplete.\n"
            )
        self._write("".join(text))

    def _print(self, findings: list[Finding]) -> None:
        text, _shown = self._text(findings)
        if text:
            self._write(text)

    def _text(self, findings: list[Finding], *, debug_line: bool = True, kernel: str = "") -> tuple[str, int]:
        """The findings shown, as text, and how many of them are errors or warnings."""
        visible = [f for f in findings if f.severity in self.shown and (self.show_suppressed or not f.suppressed)]
        if not visible:
            return "", 0
        # msSanitizer says it before a launch's first report, once
        missed = (
            ""
            if debug_line
            else f"{PREFIX} WARN: Kernel {kernel} missed debug_line information. Please recompile kernel with `-g' "
            "or `-gline-tables-only' option to enable callstack display.\n"
        )
        return missed + render_text(visible), sum(1 for f in visible if f.severity != INFO)

    def _write(self, text: str) -> None:
        if self.out_closed:
            return
        try:
            self.out.write(text)
            self.out.flush()
        except BrokenPipeError:
            # Whoever read the reports stopped (``| head``): the run goes on, its findings still counted and kept
            # for --report and the exit status; the summary's own write then ends the command quietly.
            self.out_closed = True


# Seconds between two questions a run's progress line asks the daemon (how many records it received for the job).
PROGRESS_POLL = 1.0


class RunCounts:
    """The progress of a run (sanitizerd/cli/progress.py): the records the daemon received for the job, asked on
    a control connection of the line's own (opened at the first sample, so that a run shorter than the first line
    opens none) at most every PROGRESS_POLL seconds; kernels checked and findings as the reporter has them."""

    def __init__(self, socket_path: Path, job: str, reporter: Reporter) -> None:
        self.socket_path = socket_path
        self.job = job
        self.reporter = reporter
        self.info: m.JobInfo | None = None
        self._control: ControlClient | None = None
        self._asked = -PROGRESS_POLL

    def __call__(self) -> Sample:
        now = time.monotonic()
        if now - self._asked >= PROGRESS_POLL:
            self._asked = now
            self._ask()
        reporter = self.reporter
        parts = [count(reporter.kernels_checked, "kernel") + " checked",
                 count(reporter.errors + reporter.warnings, "finding") + " so far"]  # fmt: skip
        if self.info is not None:
            parts.insert(0, count(self.info.events, "record") + " received")
            signatures = sum(self.info.signatures.values())  # per rank, a rank that sent none at 0
            if signatures:
                parts.append(count(signatures, "replay signature"))
        return Sample(", ".join(parts))

    def _ask(self) -> None:
        try:
            if self._control is None:
                self._control = ControlClient(self.socket_path)
            reply = self._control.request(m.QueryJobs(job=self.job))
        except (ClientError, OSError):  # the daemon's count is missed this time; the next sample connects again
            self.close()
            return
        if isinstance(reply, m.Jobs):
            self.info = next((j for j in reply.jobs if j.job == self.job), self.info)

    def close(self) -> None:
        control, self._control = self._control, None
        if control is not None:
            with contextlib.suppress(OSError):
                control.close()


# The tools msSanitizer's banner names, in its order (GetEnabledSanitizerTools): registercheck runs with memcheck
# unnamed.
_BANNER_TOOLS = ("memcheck", "racecheck", "initcheck", "synccheck")


def tools_text(tools: list[str]) -> str:
    """msSanitizer's list of the tools a launch was checked with: ``memcheck``, ``memcheck and racecheck``,
    ``memcheck, racecheck and synccheck`` (HumanReadableListFormat)."""
    names = [tool for tool in _BANNER_TOOLS if tool in tools] or list(tools)
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def summary_line(job: str, idle: m.JobIdle | None, reporter: Reporter, program: str, *, unchecked: str = "") -> str:
    """The run's last line; ``unchecked``: why the program ran without msSanitizer's hooks (--allow-unchecked),
    said on the line itself so that a log that keeps only the summary cannot pass for a checked run."""
    line = _summary(job, idle, reporter, program)
    if unchecked:
        line += f" UNCHECKED: the program ran without msSanitizer's hooks (--allow-unchecked): {unchecked}."
    return line


def _summary(job: str, idle: m.JobIdle | None, reporter: Reporter, program: str) -> str:
    if idle is None:
        return f"{PREFIX} ERROR: lost the daemon before the job ended: {reporter.failure or 'no reply'}"
    if idle.sessions == 0:
        return (
            f"{PREFIX} WARNING: job {job}: no records received: {program} never connected to sanitizerd, so "
            f"nothing was checked. Is it instrumented (client_shim, or the runtime hooks)?"
        )
    found = f"{reporter.errors} error(s), {reporter.warnings} warning(s)"
    if reporter.suppressed:
        shown = "shown above" if reporter.show_suppressed else "--show-suppressed shows them"
        found += f", {reporter.suppressed} suppressed ({shown})"
    if not (idle.kernels or idle.events or idle.signatures or reporter.errors or reporter.warnings):
        # Python processes attach at start-up: a session alone does not mean anything was sent to check.
        return (
            f"{PREFIX} WARNING: job {job}: no records received: {idle.sessions} session(s) attached but sent no "
            f"kernel launch or replay signature, so nothing was checked; {found}"
        )
    signatures = f", {idle.signatures} replay signature(s)" if idle.signatures else ""
    return (
        f"{PREFIX} SUMMARY: job {job}: {idle.sessions} session(s), {idle.kernels} kernel(s), "
        f"{idle.events} device event(s){signatures} checked; {found}"
        + ("" if reporter.errors or reporter.warnings else ". No error detected.")
    )


def cross_npu_line(config: m.Config, reporter: Reporter) -> str:
    """msSanitizer's closing line of its cross-NPU racecheck (cross_npu_checker.cpp), under our prefix, once the
    job's sessions are done; "" where the check was not asked for."""
    if not (config.check_cross_npu_races and "racecheck" in config.tools):
        return ""
    found = any(f.detail == CROSS_NPU and not f.suppressed for f in reporter.findings)
    return f"{PREFIX} Cross npu racecheck finished. " + (
        "See all detected errors above." if found else "No error detected."
    )


def cut_lines(job: str, reporter: Reporter) -> str:
    """What a worker that died took unchecked: each session it served that no client resumed (msSanitizer's hooks
    connect once per process), whose records after its last checked kernel were never checked."""
    if reporter.cut_unknown:
        return (
            f"{PREFIX} WARNING: job {job}: a daemon worker serving the job died, and the daemon could not say which "
            f"sessions it left unchecked ({reporter.cut_unknown}): the result may be incomplete."
        )
    return "\n".join(
        f"{PREFIX} WARNING: job {job}: session {s.session} (pid {s.pid}) was served by a daemon worker that died, "
        "and did not resume on the next: what it sent after its last reported kernel was not checked; the result "
        "is incomplete."
        for s in reporter.cut_sessions
    )


def report_text(fmt: str, job: str, reporter: Reporter, *, unchecked: str = "", save: str | None = None) -> str:
    """The --report file's contents: every finding the reporter collected, whatever --log-level showed. A SARIF log
    of a run without msSanitizer's hooks (``unchecked``: why) says so in its invocation, where a code-scanning
    upload shows it, so that its few results cannot pass for a checked program's."""
    if fmt == "json":
        return render_json(reporter.findings).decode() + "\n"
    if fmt == "html":  # with --save, the page draws each race's pipes from the stream just written
        from sanitizerd.cli.report import html_page

        return html_page(reporter.findings, title=f"job {job}", save=save)
    kernels = [
        CheckedKernel(
            job=job, session=k.session, launch=k.kernel, name=k.name, tools=tuple(k.tools), events=k.events,
            lost=k.lost, incomplete=k.incomplete,
        )
        for k in reporter.kernels
    ]  # fmt: skip
    if fmt == "junit":
        return render_junit(reporter.findings, kernels=kernels)
    log = render_sarif(reporter.findings, version=__version__, kernels=kernels, complete=reporter.idle is not None)
    if not unchecked:
        return log
    data = json.loads(log)  # a run without the hooks has only client_shim's findings: small
    run = data["runs"][0]
    text = f"The program ran without msSanitizer's hooks (--allow-unchecked): {unchecked}"
    run["invocations"][0]["toolExecutionNotifications"] = [{"level": "warning", "message": {"text": text}}]
    run.setdefault("properties", {})["unchecked"] = unchecked
    return json.dumps(data, separators=(",", ":")) + "\n"


def _wait_for_reports(reporter: Reporter, interrupted: list[int]) -> None:
    """Until the job's last report has come, or INTERRUPTED_WAIT seconds after the first stop signal."""
    deadline: float | None = None
    while reporter.thread.is_alive():
        if interrupted and deadline is None:
            deadline = time.monotonic() + INTERRUPTED_WAIT
        if deadline is not None and time.monotonic() >= deadline:
            return
        reporter.thread.join(0.1)


class HookError(Exception):
    """msSanitizer's hooks cannot be used for this run, and --allow-unchecked was not given: the message says why,
    in one line."""


def choose_hooks(options: RunOptions, env: Mapping[str, str]) -> tuple[hooks.Choice, str]:
    """The hooks for the run, and why the program runs unchecked ("" when it does not), decided before any daemon
    is reached, so that a refused run starts nothing. Raises HookError where the hooks cannot be used and
    --allow-unchecked does not allow running without them."""
    config = options.config
    choice = hooks.choose(env, check_device_heap=config.check_device_heap, check_cann_heap=config.check_cann_heap)
    if config.log_level == "info":
        for note in choice.notes:
            print(f"{PREFIX} {note}", file=sys.stderr)
    if not choice.problem:
        return choice, ""
    if not options.allow_unchecked:
        raise HookError(choice.refusal())
    print(
        f"{PREFIX} WARNING: --allow-unchecked: the program runs without msSanitizer's hooks, unchecked "
        f"(programs that use client_shim are still checked): {choice.problem}",
        file=sys.stderr,
    )
    return hooks.Choice(choice.mode, looked_in=choice.looked_in), choice.problem


def hook_env(
    options: RunOptions, choice: hooks.Choice, control: ControlClient, job: str, env: Mapping[str, str]
) -> tuple[dict[str, str], str]:
    """The environment that puts the chosen hook libraries in front of the program, with a socket in msSanitizer's
    form that the daemon opened for the job (the socket alone for a program that is its own client; {} when there
    is no layout), and why the program runs unchecked when the daemon opened none and --allow-unchecked allows
    it. Raises HookError when the daemon opened none and it does not."""
    if choice.layout is None:
        return {}, ""
    whose = str(choice.directory) if choice.directory else "the program's own client"
    name, why = _compat_socket(control, job, choice.layout.name, whose)
    if not name:
        if not options.allow_unchecked:
            raise HookError(
                f"the daemon opened no socket for msSanitizer's hooks ({why}), and the program would run "
                "unchecked; --allow-unchecked runs it without them; nothing was run"
            )
        print(
            f"{PREFIX} WARNING: --allow-unchecked: the program runs without msSanitizer's hooks: {why}", file=sys.stderr
        )
        return {}, f"the daemon opened no socket for msSanitizer's hooks ({why})"
    heap = hooks.HEAP_MODES.get(choice.mode, "")
    if heap and choice.libraries and not env.get("ASCEND_HOME_PATH"):
        # msSanitizer's heap hooks load the real runtime from $ASCEND_HOME_PATH/lib64 and fail without it
        print(
            f"{PREFIX} WARNING: {heap}: msSanitizer's {choice.libraries[0].name} loads the CANN runtime from "
            "$ASCEND_HOME_PATH/lib64, and ASCEND_HOME_PATH is not set: source CANN's set_env.sh first.",
            file=sys.stderr,
        )
    if options.config.log_level == "info":
        how = f"named by {hooks.LAYOUT_ENV}={choice.forced}" if choice.forced else "identified"
        found = f"; {choice.release.facts()}" if choice.release is not None else ""
        preload = ":".join(str(p) for p in choice.libraries) or "none (the program is its own client)"
        print(
            f"{PREFIX} Use preload libs {preload} (wire layout {choice.layout.name}, {how}{found}); socket {name} "
            f"in {', '.join(choice.layout.socket_env)}",
            file=sys.stderr,
        )
    return hooks.hook_environment(env, choice, name), ""


def _compat_socket(control: ControlClient, job: str, layout: str, whose: str) -> tuple[str, str]:
    """The name of a socket in msSanitizer's form the daemon opened for the job, or "" and why the daemon refused;
    ClientError when the control connection is over."""
    try:
        answer = control.request(m.CompatListen(job=job, layout=layout))
    except ClientError as exc:  # the connection is over (an older daemon does not know the request, say)
        raise ClientError(f"the daemon cannot open a socket for msSanitizer's hooks ({whose}): {exc}") from None
    if isinstance(answer, m.CompatListening) and answer.name:
        return answer.name, ""
    return "", answer.message if isinstance(answer, m.CompatListening) else f"unexpected {type(answer).__name__}"


def run(argv: list[str]) -> int:
    try:
        options = parse_run_args(argv)
    except UsageError as exc:
        print(exc.message, file=sys.stderr)
        return exc.exit_code
    if options.show_help:
        print(run_help())
        return 0
    if options.show_version:
        print(f"sanitizerd {__version__}")
        return 0
    for notice in options.notices:
        print(notice, file=sys.stderr)
    try:
        choice, unchecked = choose_hooks(options, os.environ)
    except HookError as exc:
        print(f"{PREFIX} ERROR: {exc}", file=sys.stderr)
        return 1

    out: IO[str] = sys.stdout
    if options.log_file:
        try:
            fd = os.open(options.log_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        except OSError as exc:
            print(
                f"{PREFIX} ERROR: Failed to open the log file {options.log_file}: {exc.strerror}",
                file=sys.stderr,
            )
            return 1
        out = os.fdopen(fd, "w")
    report: IO[str] | None = None
    if options.report:
        # opened now, so that a path that cannot be written fails the run before the program starts
        try:
            fd = os.open(options.report, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        except OSError as exc:
            print(f"{PREFIX} ERROR: cannot write the report {options.report}: {exc.strerror}", file=sys.stderr)
            if out is not sys.stdout:
                out.close()
            return 1
        report = os.fdopen(fd, "w", encoding="utf-8")

    try:
        with daemon_connection(options.socket) as (control, socket_path):
            return _supervise(options, control, socket_path, out, report, choice, unchecked)
    except ClientError as exc:
        print(f"{PREFIX} ERROR: {exc}", file=sys.stderr)
        return 1
    finally:
        if out is not sys.stdout:
            out.close()
        if report is not None:
            report.close()


@contextlib.contextmanager
def daemon_connection(socket: str | None) -> Iterator[tuple[ControlClient, Path]]:
    """A control connection to the daemon at ``socket``; without one, to the daemon the client library finds
    (the host's, else the user's own), or to an embedded daemon started for the duration when none answers.
    A socket given explicitly is the one the user wants: when it does not answer, that is the error."""
    embedded: EmbeddedDaemon | None = None
    try:
        if socket:
            try:
                control = ControlClient(socket)
            except ClientError as exc:
                raise ClientError(f"{exc} (--socket given: no private daemon is started in its place)") from None
        else:
            try:
                control = ControlClient(None)
            except NoDaemon as exc:
                for distrusted in exc.distrusted:
                    print(f"{PREFIX} WARNING: not using {distrusted}", file=sys.stderr)
                embedded = EmbeddedDaemon()
                control = embedded.connect()
        with contextlib.closing(control):
            yield control, control.path
    finally:
        if embedded is not None:
            embedded.stop()


def _supervise(
    options: RunOptions,
    control: ControlClient,
    socket_path: Path,
    out: IO[str],
    report: IO[str] | None,
    choice: hooks.Choice,
    unchecked: str,
) -> int:
    job = f"run-{os.getpid()}-{secrets.token_hex(4)}"
    start = m.JobStart(job=job, config=options.config)
    try:
        save = SaveWriter(options.save, start) if options.save else None
    except OSError as exc:
        print(f"{PREFIX} ERROR: cannot write {options.save}: {exc.strerror}", file=sys.stderr)
        return 1
    control.send(start)
    try:
        hooked, refused = hook_env(options, choice, control, job, os.environ)
    except HookError as exc:
        print(f"{PREFIX} ERROR: {exc}", file=sys.stderr)
        return 1
    watch = m.Watch(job=job, record=save is not None)
    control.send(watch)
    compat_name = next((hooked[name] for name in hooks.socket_variables() if hooked.get(name)), "")
    layout = choice.layout.name if choice.layout is not None else ""

    def reconnect() -> ControlClient:
        """The job's worker died and took this connection: the listener has started another, which takes a new
        one. The job is registered and watched again, and the socket the hooks were told of is asked for again:
        the listener kept it, and gives it back to the same process (no other name would reach the hooks)."""
        again = ControlClient(socket_path)
        try:
            again.send(start)
            if compat_name:
                answer = again.request(m.CompatListen(job=job, layout=layout))
                if not isinstance(answer, m.CompatListening) or answer.name != compat_name:
                    print(
                        f"{PREFIX} WARNING: job {job}: the daemon no longer holds the socket for msSanitizer's hooks "
                        f"({getattr(answer, 'message', '') or 'another was opened'}): processes that connect from "
                        "now on are not checked",
                        file=sys.stderr,
                    )
            again.send(watch)
        except BaseException:
            again.close()
            raise
        return again

    def stored() -> list[Finding]:
        """Every finding the store holds for the job (a connection of its own: the run's carries the watch)."""
        found: list[Finding] = []
        with ControlClient(socket_path) as query:
            cursor = 0
            while True:
                page = query.request(m.QueryFindings(job=job, after=cursor))
                if not isinstance(page, m.Findings):
                    return found
                found.extend(page.findings)
                if not page.next:
                    return found
                cursor = page.next

    def cut() -> list[m.SessionInfo]:
        """The job's sessions the worker that died left open and no client resumed (its successor closed them)."""
        with ControlClient(socket_path) as query:
            listed = query.request(m.QuerySessions())
        if not isinstance(listed, m.Sessions):
            raise ClientError(getattr(listed, "message", "") or "no session list")
        return [s for s in listed.sessions if s.job == job and s.end_reason == CRASH_END_REASON]

    shown = _SHOWN.get(options.config.log_level, _SHOWN["warn"])
    reporter = Reporter(
        control, out, shown, save=save, keep_kernels=report is not None, show_suppressed=options.show_suppressed,
        reconnect=reconnect, stored=stored, cut=cut, job=job,
    )  # fmt: skip
    reporter.thread.start()
    try:
        return _run_program(options, job, socket_path, out, report, save, reporter, hooked, unchecked or refused)
    finally:
        if reporter.control is not control:  # made again after a worker restart: closed as the first would be
            reporter.control.close()


def _run_program(
    options: RunOptions,
    job: str,
    socket_path: Path,
    out: IO[str],
    report: IO[str] | None,
    save: SaveWriter | None,
    reporter: Reporter,
    hooked: dict[str, str],
    unchecked: str,
) -> int:
    env = dict(os.environ, **{SOCKET_ENV: str(socket_path), JOB_ENV: job, ATTACH_ENV: "1"})
    for stale in hooks.socket_variables():
        # a socket name left from an outer run would send the hooks' records to a job that is not this one
        env.pop(stale, None)
    env.update(hooked)
    # Python processes of the job (torchrun's workers included) attach at start-up through this sitecustomize.
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(hook_dir()), os.environ.get("PYTHONPATH", "")) if p)
    try:
        child = subprocess.Popen(options.program, executable=options.executable, env=env)
    except OSError as exc:
        print(f"{PREFIX} ERROR: cannot start {options.program[0]}: {exc.strerror}", file=sys.stderr)
        return 1
    # The child shares our terminal and gets ^C itself; SIGINT is also passed on (a signal sent to the run alone must
    # stop the program too), and SIGTERM. We wait for it, then for the daemon's last checks: after a SIGTERM at most
    # INTERRUPTED_WAIT seconds more, so that a stopped job stops even while its daemon is slow; after a Ctrl-C as
    # long as the daemon takes, since its report of the locked pipes is what the user asked for, and a second
    # Ctrl-C quits at once.
    interrupted = STOP_SIGNALS
    ctrl_c: list[float] = []

    def kill_if_alive() -> None:
        if child.poll() is None:
            with contextlib.suppress(OSError):
                child.kill()

    def force_quit() -> None:
        progress.give_back_last_row()
        kill_if_alive()
        for process in EMBEDDED:
            with contextlib.suppress(OSError):
                process.terminate()
        with contextlib.suppress(OSError):
            sys.stderr.write(f"{PREFIX} Forced to quit by a second Ctrl-C: the run's report is incomplete.\n")
            sys.stderr.flush()
        os._exit(128 + signal.SIGINT)

    def on_signal(signum: int, frame: object) -> None:
        if signum == signal.SIGINT:
            if ctrl_c:
                force_quit()
            ctrl_c.append(time.monotonic())
            with contextlib.suppress(OSError):
                sys.stderr.write(f"{PREFIX} {CTRL_C_TEXT}\n")
                sys.stderr.flush()
            if child.poll() is None:
                with contextlib.suppress(OSError):
                    child.send_signal(signum)
                killer = threading.Timer(KILL_GRACE, kill_if_alive)
                killer.daemon = True
                killer.start()
            return
        interrupted.append(signum)
        if child.poll() is None:
            child.send_signal(signum)

    # The program writes to the terminal too: a line there is kept on its last row (shared=True).
    counts = RunCounts(socket_path, job, reporter)
    progress = Progress("run", counts, quiet=options.quiet, shared=True)
    previous = signal.signal(signal.SIGINT, on_signal)
    forward = signal.signal(signal.SIGTERM, on_signal)
    progress.start()
    try:
        status = child.wait()
        if ctrl_c and status < 0:  # msSanitizer's line for a program a signal ended
            print(f"{PREFIX} user program {options.program[0]} exited by signal({-status})", file=out, flush=True)
        reporter.wait_job()
        _wait_for_reports(reporter, interrupted)
    finally:
        progress.stop()
        counts.close()
        signal.signal(signal.SIGINT, previous)
        signal.signal(signal.SIGTERM, forward)
    if reporter.thread.is_alive():
        signum = interrupted[0]
        print(
            f"{PREFIX} WARNING: job {job}: stopped by {signal.Signals(signum).name} before the daemon had finished "
            f"checking; reported so far: {reporter.errors} error(s), {reporter.warnings} warning(s) "
            f"({len(reporter.findings)} finding(s) in all).",
            file=out,
        )
        out.flush()
        return 128 + signum
    if save is not None:
        save.close()
    if report is not None:
        report.write(report_text(options.report_format, job, reporter, unchecked=unchecked, save=options.save))
    cross_npu = cross_npu_line(options.config, reporter)
    if cross_npu:
        print(cross_npu, file=out)
    print(summary_line(job, reporter.idle, reporter, options.program[0], unchecked=unchecked), file=out)
    if reporter.idle is not None and reporter.idle.replica_note:
        print(f"{PREFIX} WARNING: job {job}: {reporter.idle.replica_note}", file=out)
    cut = cut_lines(job, reporter)
    if cut:
        print(cut, file=out)
    if reporter.save_gap:
        print(
            f"{PREFIX} WARNING: job {job}: {options.save} lacks what the daemon recorded while the run's connection "
            f"was lost ({reporter.save_gap}): a replay of it is not this run's stream.",
            file=out,
        )
    out.flush()
    if options.error_exitcode is not None and reporter.errors:
        return options.error_exitcode
    if ctrl_c:  # the program was stopped before it ended by itself: never a run that passed
        return status if status > 0 else 128 + (-status if status < 0 else signal.SIGINT)
    if cut and status == 0:
        return 1  # part of the program ran unchecked: not a clean run
    status = status if status >= 0 else 128 - status
    if status == 0 and any(f.kind in SDC_KINDS for f in reporter.findings):
        # Silent data corruption means the training's results cannot be trusted, even when it ran to the end
        # (a replica that diverged does not stop it): a scheduler or CI must not take the run for a good one.
        return SDC_EXIT_STATUS
    return status
