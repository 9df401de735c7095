"""CI reports end to end: `sanitizerd run --report` and `sanitizerd findings --format sarif|junit` against real
daemons, with the demo program's four planted bugs; SARIF validated against the official schema, JUnit read back
by junitparser."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import jsonschema
import junitparser
import pytest

from tests.conftest import DEMO, RunningDaemon, program_env, sanitizerd
from tests.test_e2e_run import DEMO_ARGS, JOB, write_program

pytestmark = pytest.mark.first_pass_only("renders the store's findings: the same store with workers")

SCHEMA = json.loads((Path(__file__).parent / "data" / "sarif-schema-2.1.0.json").read_text())
KERNEL_SOURCE = "file:///opt/samples/add_custom/add_custom.cpp"
# The demo's planted bugs (examples/add_custom.py), each where its source says it is.
PLANTED = {
    ("illegal_read", KERNEL_SOURCE, 18),
    ("misaligned_access", KERNEL_SOURCE, 24),
    ("illegal_free", "main.cpp", 87),
    ("memory_leak", "main.cpp", 73),
}


def valid_sarif(path: Path) -> dict[str, Any]:
    doc = json.loads(path.read_text())
    jsonschema.Draft4Validator(SCHEMA, format_checker=jsonschema.Draft4Validator.FORMAT_CHECKER).validate(doc)
    return doc


def planted(doc: dict[str, Any]) -> set[tuple[str, str, int]]:
    found = set()
    for result in doc["runs"][0]["results"]:
        physical = result["locations"][0]["physicalLocation"]
        found.add((result["ruleId"], physical["artifactLocation"]["uri"], physical["region"]["startLine"]))
    return found


def suite_of(path: Path) -> Any:
    [suite] = list(junitparser.JUnitXml.fromfile(str(path)))
    return suite


class TestRunReport:
    def test_sarif_lists_the_four_planted_bugs(self, short_dir: Path) -> None:
        """The acceptance run: `--report r.sarif` with run's own embedded daemon gives a log that validates and
        lists the four bugs with file and line, while the text report still goes to stdout."""
        report = short_dir / "r.sarif"
        runtime = short_dir / "runtime"  # no daemon to find: run starts its own
        result = sanitizerd(
            "run", "--report", str(report), *DEMO_ARGS, env=dict(program_env(), XDG_RUNTIME_DIR=str(runtime))
        )
        assert result.returncode == 0, result.stderr
        assert "4 error(s), 0 warning(s)" in result.stdout
        doc = valid_sarif(report)
        assert planted(doc) == PLANTED
        [run] = doc["runs"]
        job = JOB.search(result.stdout).group(1)  # type: ignore[union-attr]
        assert {r["properties"]["job"] for r in run["results"]} == {job}
        [read] = [r for r in run["results"] if r["ruleId"] == "illegal_read"]
        assert read["level"] == "error" and read["message"]["text"].startswith("====== ERROR: illegal read of size 224")
        assert (read["properties"]["kernel"], read["properties"]["blocks"], read["properties"]["address"]) == (
            "add_custom_kernel",
            "aiv(7)",
            "0x12c0c0007e00",
        )
        [leak] = [r for r in run["results"] if r["ruleId"] == "memory_leak"]
        assert leak["level"] == "error"
        assert run["properties"]["kernelsChecked"] == [
            {
                "job": job,
                "session": 1,
                "name": "add_custom_kernel",
                "tools": ["memcheck", "registercheck"],
                "launches": 1,
            }
        ]
        assert run["invocations"] == [{"executionSuccessful": True}]

    def test_junit_fails_the_demo_kernel(self, daemon: RunningDaemon, short_dir: Path) -> None:
        """`--report-format junit` gives the demo kernel's launch as a failing test case with its two findings;
        the host-side free and leak fail their session's own case."""
        report = short_dir / "r.sarif"  # the format given wins over the suffix
        result = sanitizerd("run", "--socket", str(daemon.socket), "--report", str(report), "--report-format",
                            "junit", *DEMO_ARGS)  # fmt: skip
        assert result.returncode == 0, result.stderr
        job = JOB.search(result.stdout).group(1)  # type: ignore[union-attr]
        suite = suite_of(report)
        assert (suite.name, suite.tests, suite.failures) == ("sanitizerd", 2, 2)
        kernel, host = list(suite)
        assert (kernel.name, kernel.classname) == ("add_custom_kernel#1", f"{job}/session-1")
        [failure] = kernel.result
        assert failure.type == "illegal_read,misaligned_access" and failure.message == "2 error(s), 0 warning(s)"
        assert "====== ERROR: illegal read of size 224\n" in failure.text
        assert "====== ERROR: misaligned access of size 1\n" in failure.text
        assert (host.name, host.classname) == ("host-side findings", f"{job}/session-1")
        assert host.result[0].type == "illegal_free,memory_leak"

    def test_junit_passes_a_clean_kernel(self, daemon: RunningDaemon, short_dir: Path) -> None:
        """A clean launch is a passing test case beside the failing one, and the report holds what --log-level
        kept off the screen (a warning under --log-level error)."""
        program = write_program(
            short_dir,
            """
            import client_shim
            from client_shim import Register, register_writes
            c = client_shim.connect(device=0)
            for name, events in (("clean", None), ("dirty", register_writes(Register.VECTOR_MASK_0, 7))):
                k = c.kernel_begin(name, 1)
                if events is not None:
                    c.events(k, events)
                c.kernel_end(k)
                c.wait_kernel(k, timeout=30)
            c.close()
            """,
        )
        report = short_dir / "r.xml"
        result = sanitizerd("run", "--socket", str(daemon.socket), "--report", str(report), "--log-level", "error",
                            "-t", "memcheck", "--", sys.executable, str(program))  # fmt: skip
        assert result.returncode == 0, result.stderr
        assert "Register VECTOR_MASK_0" not in result.stdout
        suite = suite_of(report)
        assert (suite.tests, suite.failures) == (2, 1)
        clean, dirty = list(suite)
        assert clean.name == "clean#1" and clean.is_passed
        assert dirty.name == "dirty#2" and dirty.result[0].type == "register_not_reset"

    def test_json_report(self, daemon: RunningDaemon, short_dir: Path) -> None:
        report = short_dir / "r.json"
        result = sanitizerd("run", "--socket", str(daemon.socket), "--report", str(report), *DEMO_ARGS)
        assert result.returncode == 0, result.stderr
        assert {f["kind"] for f in json.loads(report.read_text())} == {kind for kind, _, _ in PLANTED}

    def test_unwritable_report_fails_before_the_program_runs(self, daemon: RunningDaemon, short_dir: Path) -> None:
        marker = short_dir / "ran"
        program = write_program(short_dir, f"open({str(marker)!r}, 'w').close()\n")
        missing = short_dir / "no such dir" / "r.sarif"
        result = sanitizerd("run", "--socket", str(daemon.socket), "--report", str(missing), "--",
                            sys.executable, str(program))  # fmt: skip
        assert result.returncode == 1
        assert result.stderr.strip() == (
            f"[sanitizerd] ERROR: cannot write the report {missing}: No such file or directory"
        )
        assert not marker.exists()


class TestFindingsFormats:
    def test_sarif_and_junit_from_a_running_daemon(self, daemon: RunningDaemon, short_dir: Path) -> None:
        """`findings --format sarif|junit` after a run: the same planted bugs, as a log and as failing cases."""
        run = sanitizerd("run", "--socket", str(daemon.socket), "-t", "memcheck", "--leak-check", "yes", "--",
                         sys.executable, str(DEMO))  # fmt: skip
        assert run.returncode == 0, run.stderr
        sarif = sanitizerd("findings", "--socket", str(daemon.socket), "--format", "sarif")
        assert sarif.returncode == 0, sarif.stderr
        (short_dir / "q.sarif").write_text(sarif.stdout)
        assert planted(valid_sarif(short_dir / "q.sarif")) == PLANTED
        xml = sanitizerd("findings", "--socket", str(daemon.socket), "--format", "junit")
        assert xml.returncode == 0, xml.stderr
        (short_dir / "q.xml").write_text(xml.stdout)
        suite = suite_of(short_dir / "q.xml")
        assert [(case.name, len(case.result)) for case in suite] == [
            ("add_custom_kernel#1", 1),
            ("host-side findings", 1),
        ]
