"""The CI formats: SARIF 2.1.0, validated against the official OASIS schema (vendored under tests/data with its
licence), and JUnit XML, read back with junitparser."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import junitparser
import pytest

from sanitizerd.findings.checked import CheckedKernel
from sanitizerd.findings.junit import HOST_CASE, render_junit
from sanitizerd.findings.render import render_text
from sanitizerd.findings.sarif import render_sarif
from sanitizerd_protocol.model import KINDS, Finding, Frame, RaceAccess, Replay, make_finding

SCHEMA = json.loads((Path(__file__).parent / "data" / "sarif-schema-2.1.0.json").read_text())
_VALIDATOR = jsonschema.Draft4Validator(SCHEMA, format_checker=jsonschema.Draft4Validator.FORMAT_CHECKER)

KERNEL_SOURCE = "/opt/samples/add_custom/add_custom.cpp"
CALLER = Frame(file=KERNEL_SOURCE, line=54, column=5, function="add_custom_kernel")
INNER = Frame(file=KERNEL_SOURCE, line=18, column=5, function="KernelAdd::CopyIn()")


def sarif(findings: list[Finding], **kwargs: Any) -> dict[str, Any]:
    """The log, validated against the official schema."""
    doc = json.loads(render_sarif(findings, version="9.9.9", **kwargs))
    _VALIDATOR.validate(doc)
    return doc


def junit(findings: list[Finding], kernels: list[CheckedKernel] | None = None) -> Any:
    text = render_junit(findings, kernels=kernels or [])
    return junitparser.JUnitXml.fromstring(text)


def every_kind() -> list[Finding]:
    """One finding of each kind, with the fields its report uses."""
    race = [
        RaceAccess(pipe="PIPE_MTE2", op="Write", address=0x100, block_type="aiv", blocks=[0], serial=3,
                   location=Frame(file="a.cpp", line=10), stack=[Frame(file="a.cpp", line=10)]),
        RaceAccess(pipe="PIPE_V", op="Read", address=0x100, block_type="aiv", blocks=[0], serial=5, pc=0x880,
                   stack=[Frame(file="a.cpp", line=12, column=3), Frame(file="main.cpp", line=3)]),
    ]  # fmt: skip
    common: dict[str, object] = {"job": "j", "session": 1, "device": 0}
    kernel: dict[str, object] = {**common, "kernel": "k", "launch": 1, "blocks": {"aiv": [0, 1]}}
    findings = []
    for kind in KINDS:
        if kind.startswith("race_"):
            findings.append(make_finding(kind, **kernel, space="UB", accesses=race))
        elif kind in {"sdc_mismatch", "sdc_replica_mismatch"}:
            findings.append(make_finding(kind, **common, detail="loss differs", replay=Replay(step=3)))
        elif kind in {"memory_leak", "unused_memory", "illegal_free"}:
            findings.append(make_finding(kind, **common, address=0x40, size=8, location=Frame(file="main.cpp", line=7)))
        elif kind == "internal_error":
            findings.append(make_finding(kind, **common, detail="a record could not be decoded"))
        else:
            findings.append(
                make_finding(kind, **kernel, address=0x2000, size=32, pc=0x800, pipe="PIPE_MTE2", dst_pipe="PIPE_V",
                             register="VECTOR_MASK_0", detail="wait_flag(PIPE_V, PIPE_MTE2, 0)",
                             location=INNER, stack=[INNER, CALLER])
            )  # fmt: skip
    return findings


class TestSarif:
    def test_every_kind_validates(self) -> None:
        """A log with one finding of each kind is valid SARIF 2.1.0; one rule per kind, levels from severity."""
        findings = every_kind()
        doc = sarif(findings)
        assert doc["version"] == "2.1.0"
        [run] = doc["runs"]
        assert run["tool"]["driver"]["name"] == "sanitizerd" and run["tool"]["driver"]["version"] == "9.9.9"
        rules = run["tool"]["driver"]["rules"]
        assert [r["id"] for r in rules] == sorted(KINDS)
        levels = {kind: "note" if severity == "info" else severity for kind, severity in KINDS.items()}  # SARIF's
        assert {r["id"]: r["defaultConfiguration"]["level"] for r in rules} == levels
        assert all(r["shortDescription"]["text"] for r in rules)
        results = run["results"]
        assert [r["ruleId"] for r in results] == list(KINDS)
        for result, finding in zip(results, findings, strict=True):
            assert rules[result["ruleIndex"]]["id"] == finding.kind
            assert result["level"] == levels[finding.kind]
            assert result["message"]["text"] == render_text([finding]).rstrip("\n")

    def test_source_location_and_stack(self) -> None:
        """The innermost frame is the location (file URI, line, column, function); the whole stack follows."""
        finding = make_finding("illegal_read", kernel="k", launch=1, location=INNER, stack=[INNER, CALLER])
        [result] = sarif([finding])["runs"][0]["results"]
        [location] = result["locations"]
        assert location["physicalLocation"] == {
            "artifactLocation": {"uri": "file:///opt/samples/add_custom/add_custom.cpp"},
            "region": {"startLine": 18, "startColumn": 5},
        }
        assert location["logicalLocations"] == [{"fullyQualifiedName": "KernelAdd::CopyIn()", "kind": "function"}]
        [stack] = result["stacks"]
        assert [f["location"]["physicalLocation"]["region"]["startLine"] for f in stack["frames"]] == [18, 54]

    def test_relative_path_stays_relative(self) -> None:
        """A host file as a MEMORY_RECORD names it (no directory) is a relative URI, for the CI's checkout to
        resolve; a line without a column has no startColumn; characters a URI cannot hold are escaped."""
        finding = make_finding("illegal_free", location=Frame(file="my src/main.cpp", line=87))
        [result] = sarif([finding])["runs"][0]["results"]
        assert result["locations"][0]["physicalLocation"] == {
            "artifactLocation": {"uri": "my%20src/main.cpp"},
            "region": {"startLine": 87},
        }

    def test_race_located_at_its_later_access(self) -> None:
        """A race has no location of its own: its later access's stack is where it is shown."""
        [race] = [f for f in every_kind() if f.kind == "race_raw"]
        [result] = sarif([race])["runs"][0]["results"]
        assert result["locations"][0]["physicalLocation"]["region"] == {"startLine": 12, "startColumn": 3}

    def test_no_location_and_no_line(self) -> None:
        """A finding with a pc only has no locations; a file without a line has no region."""
        bare = make_finding("illegal_read", kernel="k", pc=0x10)
        no_line = make_finding("illegal_read", kernel="k", location=Frame(file="x.cpp"))
        results = sarif([bare, no_line])["runs"][0]["results"]
        assert "locations" not in results[0]
        assert results[1]["locations"][0]["physicalLocation"] == {"artifactLocation": {"uri": "x.cpp"}}

    def test_device_context_in_properties(self) -> None:
        finding = make_finding(
            "illegal_read", job="train", session=4, pid=77, device=3, kernel="k", launch=9,
            blocks={"aiv": [0, 1, 2], "aic": [5]}, address=0x12C0C0007E00, size=224, space="GM", serial=647, count=6,
        )  # fmt: skip
        [result] = sarif([finding])["runs"][0]["results"]
        assert result["properties"] == {
            "device": 3, "kernel": "k", "launch": 9, "blocks": "aiv(0-2),aic(5)", "address": "0x12c0c0007e00",
            "size": 224, "space": "GM", "pipe": "", "serial": 647, "job": "train", "session": 4, "count": 6, "pid": 77,
        }  # fmt: skip
        assert result["occurrenceCount"] == 6

    def test_empty_log_and_kernels_checked(self) -> None:
        """A clean run is a valid log with no results that still says which kernels were checked, and whether
        the run saw its job to the end."""
        kernels = [
            CheckedKernel(job="j", session=1, launch=launch, name=name, tools=("memcheck",))
            for launch, name in enumerate(["k", "k", "m", "k"], start=1)
        ]
        [run] = sarif([], kernels=kernels, complete=False)["runs"]
        assert run["results"] == []
        assert run["invocations"] == [{"executionSuccessful": False}]
        assert run["properties"]["kernelsChecked"] == [  # counted per kernel: a job launches each many times
            {"job": "j", "session": 1, "name": "k", "tools": ["memcheck"], "launches": 3},
            {"job": "j", "session": 1, "name": "m", "tools": ["memcheck"], "launches": 1},
        ]

    def test_the_schema_is_really_checked(self) -> None:
        """The validator rejects what SARIF forbids (a line 0 region), so a pass above means something."""
        doc = json.loads(render_sarif([make_finding("illegal_read", location=INNER)], version="1"))
        doc["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["region"]["startLine"] = 0
        with pytest.raises(jsonschema.ValidationError):
            _VALIDATOR.validate(doc)


def cases(xml: Any) -> list[Any]:
    [suite] = list(xml)
    return list(suite)


class TestJunit:
    def test_one_case_per_checked_kernel(self) -> None:
        """A clean kernel passes, a kernel with findings fails with their reports, a kernel no tool ran on is
        skipped; host-side findings fail a case of their session."""
        kernels = [
            CheckedKernel(job="j", session=1, launch=1, name="add", tools=("memcheck",)),
            CheckedKernel(job="j", session=1, launch=2, name="add", tools=("memcheck",)),
            CheckedKernel(job="j", session=2, launch=1, name="mul", tools=()),
        ]
        read = make_finding("illegal_read", job="j", session=1, kernel="add", launch=2, size=4, location=INNER)
        leak = make_finding("memory_leak", job="j", session=1, size=8, location=Frame(file="main.cpp", line=7))
        xml = junit([read, leak], kernels)
        [suite] = list(xml)
        assert (suite.name, suite.tests, suite.failures, suite.errors, suite.skipped) == ("sanitizerd", 4, 2, 0, 1)
        by_name = {(c.classname, c.name): c for c in suite}
        assert set(by_name) == {("j/session-1", "add#1"), ("j/session-1", "add#2"), ("j/session-2", "mul#1"),
                                ("j/session-1", HOST_CASE)}  # fmt: skip
        assert by_name["j/session-1", "add#1"].is_passed
        assert by_name["j/session-2", "mul#1"].is_skipped
        [failure] = by_name["j/session-1", "add#2"].result
        assert isinstance(failure, junitparser.Failure)
        assert failure.type == "illegal_read" and failure.message == "1 error(s), 0 warning(s)"
        assert failure.text == render_text([read])
        [host] = by_name["j/session-1", HOST_CASE].result
        assert host.text == render_text([leak]) and host.message == "1 error(s), 0 warning(s)"

    def test_launches_known_from_findings_alone(self) -> None:
        """`findings --format junit` has no checked-kernel reports: each launch with findings is a case."""
        findings = [
            make_finding("illegal_read", job="j", session=1, kernel="add", launch=3),
            make_finding("misaligned_access", job="j", session=1, kernel="add", launch=3),
            make_finding("race_raw", job="j", session=2, kernel="mul", launch=1),
        ]
        [suite] = list(junit(findings))
        assert [(c.classname, c.name, len(c.result)) for c in suite] == [
            ("j/session-1", "add#3", 1),
            ("j/session-2", "mul#1", 1),
        ]
        assert suite.failures == 2
        assert next(iter(suite)).result[0].type == "illegal_read,misaligned_access"

    def test_incomplete_kernel_says_so(self) -> None:
        kernel = CheckedKernel(job="j", session=1, launch=1, name="add", tools=("memcheck",), lost=12)
        [case] = cases(junit([], [kernel]))
        assert case.is_passed and "12 records did not fit" in case.system_out

    def test_control_characters_from_a_client_stay_readable(self) -> None:
        """A kernel name or detail a client sent with characters XML 1.0 cannot carry still gives a report
        a parser reads."""
        finding = make_finding("internal_error", job="j\x01", session=1, kernel="k\x00\x1b", launch=1, detail="\x07x")
        [case] = cases(junit([finding]))
        assert case.name == "k\ufffd\ufffd#1" and case.classname == "j\ufffd/session-1"
        assert "\ufffdx" in case.result[0].text

    def test_no_findings_no_kernels(self) -> None:
        [suite] = list(junit([]))
        assert suite.tests == 0 and suite.failures == 0
