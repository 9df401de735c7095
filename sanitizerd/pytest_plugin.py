"""``pytest --sanitizerd``: each test's kernels checked by sanitizerd, and a test whose kernels produced findings
fails with msSanitizer's report.

Each test is a job of its own (``pytest-<pid>-<n>``), registered with the tools asked for; the test's process
connects to it through the environment the client library reads (``SANITIZERD_SOCKET``, ``SANITIZERD_JOB``), so
``client_shim.connect()`` in a test, or in a program the test starts, attaches to that test's job. When the test
has run, its job's sessions are waited for (those it closed; a client kept open past the test is not) and its
findings fetched: errors fail the test (``--sanitizerd-fail-on warning``: warnings too); suppressed findings
never do. A test that fails by itself gets the report as a section of its own.

The daemon is the one ``--sanitizerd-socket`` names, else the one the client library finds (the host's, the
user's own), else a private one started for the pytest run and stopped after it. When the tests have run, the
clients they left open (``connect()`` closes its client only at interpreter exit) are closed first, so that their
sessions end while their daemon is there: a private daemon stopped under an open client would leave it waiting, at
exit, for a daemon to resume its session.
"""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pytest

from client_shim.client import open_clients
from client_shim.transport import JOB_ENV, SOCKET_ENV, ClientError, NoDaemon
from sanitizerd.findings.render import render_text
from sanitizerd_protocol import messages as m
from sanitizerd_protocol.model import ERROR, Finding

if TYPE_CHECKING:
    from collections.abc import Generator

    from sanitizerd.cli.run import EmbeddedDaemon
    from sanitizerd.control_client import ControlClient

_FOUND = pytest.StashKey["Found"]()
# How long closing a client the tests left open may take: its leak checks run then, and take milliseconds; a client
# whose daemon went away during the run gets this long to be resumed, not the half minute it would wait at exit.
CLOSE_TIMEOUT = 10.0


@dataclass
class Found:
    """What sanitizerd found for one test."""

    job: str
    findings: list[Finding] = field(default_factory=list)
    failing: list[Finding] = field(default_factory=list)
    live: int = 0  # sessions still open when the test ended: their kernels not waited for may be missing
    error: str = ""  # the daemon could not be asked


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("sanitizerd", "sanitizerd: check each test's NPU kernels")
    group.addoption("--sanitizerd", action="store_true", help="run each test attached to sanitizerd; a test whose "
                    "kernels produced findings fails with the report")  # fmt: skip
    group.addoption("--sanitizerd-socket", metavar="PATH", default=None,
                    help="the daemon to use [the host's or your own; else a private one for this run]")  # fmt: skip
    group.addoption("--sanitizerd-tools", metavar="TOOLS", default="memcheck",
                    help="comma-separated detectors: memcheck, racecheck, initcheck, synccheck [memcheck]")  # fmt: skip
    group.addoption("--sanitizerd-fail-on", choices=["error", "warning"], default="error",
                    help="the least severe finding that fails a test [error]")  # fmt: skip


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("sanitizerd"):
        config.pluginmanager.register(Checker(config), "sanitizerd-checker")


class Checker:
    def __init__(self, config: pytest.Config) -> None:
        tools = [t.strip() for t in str(config.getoption("sanitizerd_tools")).split(",") if t.strip()]
        unknown = [t for t in tools if t not in m.TOOLS]
        if not tools or unknown:
            raise pytest.UsageError(f"--sanitizerd-tools: unknown tool {', '.join(unknown) or '(none)'}; "
                                    f"the tools are: {', '.join(m.TOOLS)}")  # fmt: skip
        if "memcheck" in tools and "registercheck" not in tools:
            tools.append("registercheck")  # as `run -t memcheck` (msSanitizer's memcheck brings it along)
        self.config_message = m.Config(tools=tools)
        self.fail_on = {ERROR} if config.getoption("sanitizerd_fail_on") == "error" else {ERROR, "warning"}
        self.socket: str | None = config.getoption("sanitizerd_socket")
        self.embedded: EmbeddedDaemon | None = None
        self.jobs = itertools.count(1)
        self.started: set[str] = set()  # the tests' jobs: their clients are the tests'
        self.checked = self.failed = 0
        self.unclosed: list[str] = []  # why clients the tests left open could not be closed

    # --- the daemon -------------------------------------------------------------------------------------------

    def _control(self) -> ControlClient:
        """A control connection of the test's own: a job registered on it lives as long as it does."""
        from sanitizerd.cli.run import EmbeddedDaemon
        from sanitizerd.control_client import ControlClient

        if self.embedded is not None:
            return self.embedded.connect()
        try:
            return ControlClient(self.socket)
        except NoDaemon:
            if self.socket is not None:
                raise
            self.embedded = EmbeddedDaemon()
            return self.embedded.connect()

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """Close the clients the tests left open, while their daemon still runs (before the terminal summary, which
        says if one could not be)."""
        for client in open_clients():
            if client.job not in self.started:
                continue  # not a test's: the process's own (a pytest attached by `sanitizerd run`, say)
            try:
                client.close(timeout=CLOSE_TIMEOUT)
            except (ClientError, OSError) as exc:
                self.unclosed.append(f"session {client.session} of job {client.job}: {exc}")

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        if self.embedded is not None:
            self.embedded.stop()

    # --- each test --------------------------------------------------------------------------------------------

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, None, None]:
        report = Found(job=f"pytest-{os.getpid()}-{next(self.jobs)}")
        item.stash[_FOUND] = report
        self.started.add(report.job)
        try:
            control = self._control()
        except ClientError as exc:
            report.error = f"sanitizerd could not be reached: {exc}"
            yield
            return
        with control:
            control.send(m.JobStart(job=report.job, config=self.config_message))
            saved = {name: os.environ.get(name) for name in (SOCKET_ENV, JOB_ENV)}
            os.environ[SOCKET_ENV], os.environ[JOB_ENV] = str(control.path), report.job
            try:
                yield
            finally:
                for name, value in saved.items():
                    if value is None:
                        os.environ.pop(name, None)
                    else:
                        os.environ[name] = value
                self._collect(control, report)

    def _collect(self, control: ControlClient, report: Found) -> None:
        """The test's findings, once the sessions it closed have been checked to the end."""
        try:
            sessions = control.request(m.QuerySessions())
            assert isinstance(sessions, m.Sessions)
            report.live = sum(1 for s in sessions.sessions if s.job == report.job and s.state == "live")
            if not report.live:  # every session closed: the job is idle once its last checks are in
                idle = control.request(m.WaitJob(job=report.job))
                assert isinstance(idle, m.JobIdle)
            cursor = 0
            while True:
                page = control.request(m.QueryFindings(job=report.job, after=cursor))
                assert isinstance(page, m.Findings)
                report.findings += page.findings
                if not page.next:
                    break
                cursor = page.next
        except (ClientError, AssertionError) as exc:
            report.error = f"sanitizerd could not be asked for the test's findings: {exc}"
        report.failing = [f for f in report.findings if f.severity in self.fail_on and not f.suppressed]

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, None, None]:
        outcome = yield
        if call.when != "call" or _FOUND not in item.stash:
            return
        found = item.stash[_FOUND]
        result: pytest.TestReport = outcome.get_result()
        self.checked += 1
        text = _describe(found)
        if text:
            result.sections.append(("sanitizerd", text))
        if found.failing and result.passed:
            self.failed += 1
            result.outcome = "failed"
            result.longrepr = f"sanitizerd found {len(found.failing)} problem(s) in job {found.job}:\n{text}"
        elif found.error and result.passed:
            result.outcome = "failed"
            result.longrepr = found.error

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        where = f"a private daemon ({self.embedded.socket})" if self.embedded else (self.socket or "the daemon found")
        terminalreporter.write_line(
            f"sanitizerd: {self.checked} test(s) checked with {', '.join(self.config_message.tools)} on {where}; "
            f"{self.failed} failed by their findings"
        )
        for reason in self.unclosed:
            terminalreporter.write_line(f"sanitizerd: a client a test left open could not be closed: {reason}")


def _describe(found: Found) -> str:
    lines = []
    if found.findings:
        lines.append(render_text(found.findings).rstrip("\n"))
    if found.live:
        lines.append(f"[sanitizerd] {found.live} session(s) of job {found.job} were still open when the test ended: "
                     "kernels the test did not wait for (wait_kernel) may not be checked yet")  # fmt: skip
    return "\n".join(lines)
