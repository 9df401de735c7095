"""Suppressions: known findings hidden with a reason (`run --suppressions FILE`, the daemon's ``suppressions``
setting): stored and marked, shown under `--show-suppressed`, never printed as errors, never counted for
`--error-exitcode`. The rules' file and matcher alone, then real runs of the demo against real daemons."""

from __future__ import annotations

import json
import signal
import socket
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from client_shim import Client, EventKind, Space, accesses
from sanitizerd.findings.suppressions import SuppressionError, Suppressor, load
from sanitizerd_protocol.messages import Config
from sanitizerd_protocol.model import Frame, RaceAccess, Suppression, make_finding
from tests import other_uid
from tests.conftest import DEMO, RunningDaemon, sanitizerd, start_daemon, stop_daemon
from tests.test_e2e_ci_report import valid_sarif
from tests.test_e2e_daemon import free_port
from tests.test_e2e_run import JOB

REASON = "UB tail read, fixed in the next CANN (JIRA-1234)"
MISALIGNED = f"""
[[suppress]]
kind = "misaligned_access"
kernel = "add_custom*"
reason = "{REASON}"
"""


def rules_file(directory: Path, text: str, name: str = "suppressions.toml") -> Path:
    path = directory / name
    path.write_text(text)
    return path


class TestFile:
    def test_a_rule_per_table(self, tmp_path: Path) -> None:
        path = rules_file(tmp_path, MISALIGNED + '\n[[suppress]]\nkinds = ["race_raw", "race_war"]\nfile = "*/x.cpp"\n'
                          'function = "CopyIn"\nreason = "r"\n')  # fmt: skip
        assert load(path) == [
            Suppression(reason=REASON, kinds=["misaligned_access"], kernel="add_custom*"),
            Suppression(reason="r", kinds=["race_raw", "race_war"], file="*/x.cpp", function="CopyIn"),
        ]
        assert load(rules_file(tmp_path, "", "empty.toml")) == []

    @pytest.mark.parametrize(
        ("text", "says"),
        [
            ('[[suppress]]\nkind = "misaligned_access"\n', "rule 1: Object missing required field `reason`"),
            ('[[suppress]]\nkind = "misaligned_access"\nreason = ""\n', "rule 1: Expected `str` of length >= 1"),
            ('[[suppress]]\nkind = "misaligned"\nreason = "r"\n', "rule 1: unknown finding kind misaligned"),
            ('[[suppress]]\nreason = "r"\n', "would hide every finding"),
            ('[[suppress]]\nkind = "deadlock"\nkinds = ["deadlock"]\nreason = "r"\n', "kind or kinds, not both"),
            ('[[suppress]]\nkind = "deadlock"\nfunc = "f"\nreason = "r"\n', "rule 1: unknown key func"),
            ('[[suppres]]\nkind = "deadlock"\nreason = "r"\n', "unknown table or key suppres"),
            ('[[suppress]]\nkernel = "' + "k" * 257 + '"\nreason = "r"\n', "length <= 256"),
            ('[[suppress]]\nkernel = "k"\nreason = "r"\n' * 257, "257 rules; at most 256"),
            ("suppress = [", "not TOML"),
            ("suppress = 3", "an array of tables"),
        ],
    )
    def test_what_cannot_be_used_is_refused_by_rule(self, tmp_path: Path, text: str, says: str) -> None:
        with pytest.raises(SuppressionError, match=None) as refused:
            load(rules_file(tmp_path, text))
        assert says in str(refused.value) and str(tmp_path) in str(refused.value)

    def test_a_missing_file(self, tmp_path: Path) -> None:
        with pytest.raises(SuppressionError, match="cannot read suppression file"):
            load(tmp_path / "none.toml")


class TestMatch:
    def test_every_given_pattern_must_match(self) -> None:
        at = Frame(file="/src/ops/add_custom.cpp", line=18, function="AddCustom::CopyIn")
        misaligned = make_finding("misaligned_access", kernel="add_custom_kernel", location=at, stack=[at])
        leak = make_finding("memory_leak", stack=[Frame(file="main.cpp", line=73)])
        race = make_finding("race_raw", kernel="matmul", accesses=[
            RaceAccess(pipe="PIPE_V", op="Read", address=0, block_type="aiv", blocks=[0], serial=1,
                       stack=[Frame(file="/src/matmul.cpp", line=9, function="Compute")]),
        ])  # fmt: skip
        rules = [
            Suppression(reason="by kernel", kinds=["misaligned_access"], kernel="add_*"),
            Suppression(reason="by file", file="main.cpp"),
            Suppression(reason="by a race's access", function="Comp*", kernel="matmul"),
            Suppression(reason="never", kinds=["deadlock"]),
        ]
        suppressor = Suppressor(rules)
        reasons = [suppressor.reason(f) for f in (misaligned, leak, race)]
        assert reasons == ["by kernel", "by file", "by a race's access"]
        elsewhere = Suppression(reason="x", kinds=["misaligned_access"], kernel="mul*")
        assert Suppressor([elsewhere]).reason(misaligned) is None
        assert Suppressor([Suppression(reason="x", file="*.py")]).reason(misaligned) is None
        assert Suppressor([Suppression(reason="x", kernel="*")]).reason(leak) is None  # a host finding has no kernel
        suppressor.mark(found := [misaligned, make_finding("illegal_read", kernel="k")])
        assert [(f.suppressed, f.suppression) for f in found] == [(True, "by kernel"), (False, "")]

    def test_patterns_are_globs_not_regular_expressions(self) -> None:
        finding = make_finding("illegal_read", kernel="a.b(c)")
        assert Suppressor([Suppression(reason="x", kernel="a.b(c)")]).reason(finding) == "x"
        assert Suppressor([Suppression(reason="x", kernel="a.b(c")]).reason(finding) is None
        assert Suppressor([Suppression(reason="x", kernel="a?b[(]c)")]).reason(finding) == "x"


def demo(daemon: RunningDaemon, *options: str) -> tuple[int, str, str]:
    run = sanitizerd("run", "--socket", str(daemon.socket), "-t", "memcheck", "--leak-check", "yes", *options,
                     "--", sys.executable, str(DEMO))  # fmt: skip
    assert "Traceback" not in run.stderr, run.stderr
    return run.returncode, run.stdout, JOB.search(run.stdout).group(1)  # type: ignore[union-attr]


def stored(daemon: RunningDaemon, job: str, *options: str) -> str:
    result = sanitizerd("findings", "--socket", str(daemon.socket), "--job", job, *options)
    assert result.returncode == 0, result.stderr
    return result.stdout


class TestRun:
    def test_the_misaligned_access_is_hidden_shown_and_marked(self, daemon: RunningDaemon, short_dir: Path) -> None:
        """The acceptance: a file naming the misaligned access hides it from the text and the exit code, shows it
        under --show-suppressed, and `findings --format json` marks it suppressed with its reason."""
        rules = rules_file(short_dir, MISALIGNED)
        code, out, job = demo(daemon, "--suppressions", str(rules), "--error-exitcode", "5")
        assert "misaligned access" not in out and "illegal read of size 224" in out
        assert "3 error(s), 0 warning(s), 1 suppressed (--show-suppressed shows them)" in out
        assert code == 5  # the other three are still errors
        every = ["illegal_free", "illegal_read", "memory_leak", "misaligned_access"]
        everything = rules_file(short_dir, "\n".join(
            f'[[suppress]]\nkind = "{kind}"\nreason = "known: {kind}"\n' for kind in every), "all.toml")  # fmt: skip
        code, out, _ = demo(daemon, "--suppressions", str(everything), "--error-exitcode", "5")
        assert code == 0 and "0 error(s), 0 warning(s), 4 suppressed" in out and "No error detected." in out

        code, out, _ = demo(daemon, "--suppressions", str(rules), "--show-suppressed")
        assert f"[sanitizerd] SUPPRESSED ({REASON}):\n====== ERROR: misaligned access of size 1\n" in out
        assert "3 error(s), 0 warning(s), 1 suppressed (shown above)" in out

        marked = json.loads(stored(daemon, job, "--format", "json"))
        [misaligned] = [f for f in marked if f["kind"] == "misaligned_access"]
        assert (misaligned["suppressed"], misaligned["suppression"]) == (True, REASON)
        assert not any(f["suppressed"] for f in marked if f["kind"] != "misaligned_access")
        text = stored(daemon, job)
        assert "misaligned access" not in text
        assert text.rstrip().endswith("3 finding(s), and 1 suppressed (--show-suppressed shows them)")
        assert f"SUPPRESSED ({REASON})" in stored(daemon, job, "--show-suppressed")
        assert "misaligned_access" not in stored(daemon, job, "--format", "junit")

    def test_reports_carry_the_suppression(self, daemon: RunningDaemon, short_dir: Path) -> None:
        """SARIF keeps the result with SARIF's own suppression (schema-valid); JUnit does not fail on it."""
        rules = rules_file(short_dir, MISALIGNED)
        for report in (short_dir / "r.sarif", short_dir / "r.xml"):
            code, _, _ = demo(daemon, "--suppressions", str(rules), "--report", str(report))
            assert code == 0
        results = valid_sarif(short_dir / "r.sarif")["runs"][0]["results"]
        [misaligned] = [r for r in results if r["ruleId"] == "misaligned_access"]
        assert misaligned["suppressions"] == [{"kind": "external", "status": "accepted", "justification": REASON}]
        assert not any("suppressions" in r for r in results if r is not misaligned)
        xml = (short_dir / "r.xml").read_text()
        assert f"suppressed misaligned_access: {REASON}" in xml and 'type="illegal_read"' in xml

    def test_a_bad_file_is_one_line_before_anything_runs(self, daemon: RunningDaemon, short_dir: Path) -> None:
        rules = rules_file(short_dir, '[[suppress]]\nkind = "misaligned"\nreason = "r"\n')
        result = sanitizerd("run", "--socket", str(daemon.socket), "--suppressions", str(rules), "--", "true")
        assert result.returncode == 1 and result.stdout == ""
        said = f"[sanitizerd] ERROR: --suppressions: {rules}: rule 1: unknown finding kind misaligned"
        assert result.stderr.strip() == said

    def test_one_jobs_rules_leave_other_jobs_alone(self, daemon: RunningDaemon) -> None:
        """Rules travel in a job's configuration: a job without them (another user's, or the same user's) keeps
        every finding, and a client's verdict counts what its own rules did not hide."""
        rule = Suppression(reason="mine", kinds=["illegal_read"])
        verdicts = []
        for job, rules in (("with-rules", [rule]), ("without", [])):
            with Client(daemon.socket, job=job, config=Config(tools=["memcheck"], suppressions=rules)) as client:
                client.malloc(0x1000, 512)
                kernel = client.kernel_begin("k", 1)
                client.events(kernel, accesses(EventKind.READ, Space.GM, 0x1000 + 512, 32, block_num=1))
                client.kernel_end(kernel)
                verdicts.append(client.wait_kernel(kernel, timeout=30))
        assert [(v.errors, v.suppressed) for v in verdicts] == [(0, 1), (1, 0)]
        with_rules, without = (json.loads(stored(daemon, job, "--format", "json")) for job in ("with-rules", "without"))
        assert [f["suppressed"] for f in with_rules] == [True] and [f["suppressed"] for f in without] == [False]
        sessions = json.loads(sanitizerd("sessions", "--socket", str(daemon.socket), "--format", "json").stdout)
        counted = {s["job"]: (s["findings"], s["suppressed"]) for s in sessions}
        assert counted == {"with-rules": (1, 1), "without": (1, 0)}


class TestHostile:
    @pytest.mark.parametrize(
        "suppressions",
        [
            [{"reason": "r", "kernel": "k"}] * 257,
            [{"reason": "r", "kernel": "k" * 257}],
            [{"reason": "r" * 1025, "kernel": "k"}],
            [{"reason": "", "kernel": "k"}],
            [{"kernel": "k"}],
            [{"reason": "r", "kinds": ["x"] * 65}],
            "all",
        ],
        ids=["too-many-rules", "long-pattern", "long-reason", "empty-reason", "no-reason", "many-kinds", "not-a-list"],
    )
    def test_malformed_rules_are_refused_by_name(self, daemon: RunningDaemon, suppressions: object) -> None:
        """A hello carrying rules the daemon will not take ends that session with bad_packet, nothing else."""
        with socket.socket(socket.AF_UNIX) as sock:
            sock.settimeout(30)
            sock.connect(str(daemon.socket))
            hello = other_uid.hello("producer", job="hostile-rules",
                                    config={"tools": ["memcheck"], "suppressions": suppressions})  # fmt: skip
            sock.sendall(other_uid.frames(hello))
            received = b""
            while chunk := sock.recv(1 << 16):
                received += chunk
        [error] = other_uid.replies(received)
        assert (error["type"], error["reason"]) == ("error", "bad_packet"), error
        with Client(daemon.socket, job="after") as client:
            assert client.session


class TestHost:
    def test_the_config_files_rules_apply_to_every_job_and_reload(self, short_dir: Path) -> None:
        """The daemon's `suppressions` setting: the host's known findings, hidden in every job after the job's own
        rules, counted in sanitizerd_findings_suppressed_total, and read again on SIGHUP."""
        host_rules = rules_file(short_dir, MISALIGNED.replace(REASON, "host: known"), "host.toml")
        config = short_dir / "sanitizerd.toml"
        config.write_text(f'suppressions = "{host_rules}"\n')
        port = free_port()
        daemon = start_daemon(short_dir, "--config", str(config), "--metrics-addr", f"127.0.0.1:{port}")
        try:
            _, out, job = demo(daemon)
            assert "misaligned access" not in out and "1 suppressed" in out
            [misaligned] = [f for f in json.loads(stored(daemon, job, "--format", "json")) if f["suppressed"]]
            assert (misaligned["kind"], misaligned["suppression"]) == ("misaligned_access", "host: known")
            own = rules_file(short_dir, MISALIGNED.replace(REASON, "mine first"), "own.toml")
            _, _, job = demo(daemon, "--suppressions", str(own))
            [misaligned] = [f for f in json.loads(stored(daemon, job, "--format", "json")) if f["suppressed"]]
            assert misaligned["suppression"] == "mine first"
            text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
            assert 'sanitizerd_findings_suppressed_total{kind="misaligned_access"} 2.0' in text

            config.write_text("")  # no rules from now on
            daemon.process.send_signal(signal.SIGHUP)
            deadline = time.monotonic() + 10
            while daemon.log_text().count('"reloaded"') < 1 and time.monotonic() < deadline:
                time.sleep(0.05)
            _, out, _ = demo(daemon)
            assert "misaligned access of size 1" in out and "suppressed" not in out
        finally:
            assert stop_daemon(daemon) == 0

    def test_a_host_file_that_cannot_be_used_stops_the_start(self, short_dir: Path) -> None:
        host_rules = rules_file(short_dir, '[[suppress]]\nreason = "r"\n', "host.toml")
        config = short_dir / "sanitizerd.toml"
        config.write_text(f'suppressions = "{host_rules}"\n')
        result = sanitizerd("serve", "--config", str(config), "--socket", str(short_dir / "s.sock"),
                            "--state-dir", str(short_dir / "state"), "--workers", "1", timeout=60)  # fmt: skip
        assert result.returncode == 2
        assert f"suppressions: {host_rules}: rule 1: names no kind" in result.stderr

