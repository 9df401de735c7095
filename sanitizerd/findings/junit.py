"""Findings as JUnit XML, the test report every CI system shows: one test case per checked kernel launch, failed
by its findings, and one per session for the findings tied to no kernel (leaks, host-side frees, SDC)."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Sequence

from sanitizerd.findings.checked import CheckedKernel
from sanitizerd.findings.render import render_text
from sanitizerd_protocol.model import ERROR, Finding

# XML 1.0 cannot carry most control characters, not even escaped; a kernel name or a detail comes from the
# client, so these become U+FFFD rather than a report no parser reads.
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")

HOST_CASE = "host-side findings"


def _xml_text(text: str) -> str:
    return _NOT_XML.sub("\ufffd", text)


def _classname(job: str, session: int) -> str:
    return _xml_text(f"{job}/session-{session}")


def _failure(case: ET.Element, findings: list[Finding]) -> bool:
    """The case fails by its findings that no rule suppressed (those are said in its output); whether it did."""
    hidden = [f for f in findings if f.suppressed]
    if hidden:
        out = ET.SubElement(case, "system-out")
        out.text = _xml_text("".join(f"suppressed {f.kind}: {f.suppression}\n" for f in hidden))
    findings = [f for f in findings if not f.suppressed]
    if not findings:
        return False
    errors = sum(1 for f in findings if f.severity == ERROR)
    failure = ET.SubElement(
        case,
        "failure",
        message=f"{errors} error(s), {len(findings) - errors} warning(s)",
        type=",".join(sorted({f.kind for f in findings})),
    )
    failure.text = _xml_text(render_text(findings))
    return True


def render_junit(findings: Sequence[Finding], *, kernels: Sequence[CheckedKernel] = ()) -> str:
    """A JUnit XML report with one testsuite. Launches are those in ``kernels`` (the run's checked kernels, the
    clean ones included) and any launch a finding names that ``kernels`` lacks (a query knows only those)."""
    # keyed by job too: session ids are one daemon's, and a query may span daemons' stores
    by_launch: dict[tuple[str, int, int], list[Finding]] = {}
    host: dict[tuple[str, int], list[Finding]] = {}
    for finding in findings:
        if finding.kernel is not None and finding.launch:
            by_launch.setdefault((finding.job, finding.session, finding.launch), []).append(finding)
        else:
            host.setdefault((finding.job, finding.session), []).append(finding)

    cases: list[ET.Element] = []
    known: dict[tuple[str, int, int], CheckedKernel] = {(k.job, k.session, k.launch): k for k in kernels}
    for key, found in by_launch.items():
        if key not in known:
            first = found[0]
            known[key] = CheckedKernel(
                job=first.job, session=first.session, launch=first.launch, name=first.kernel or ""
            )
    failures = skipped = 0
    for (job, session, launch), kernel in sorted(known.items()):
        case = ET.Element("testcase", name=_xml_text(f"{kernel.name}#{launch}"), classname=_classname(job, session))
        found = by_launch.get((job, session, launch), [])
        if found:
            failures += _failure(case, found)
        elif not kernel.tools:  # (a launch known from findings alone always has findings)
            ET.SubElement(case, "skipped", message="no active sanitizer tool on this kernel")
            skipped += 1
        if kernel.lost or kernel.incomplete:
            out = ET.SubElement(case, "system-out")
            out.text = (
                f"{kernel.lost} records did not fit the per-block record buffer (--cache-size) and were not checked"
                if kernel.lost
                else "some records could not be checked: the result is incomplete"
            )
        cases.append(case)
    for (job, session), found in sorted(host.items()):
        case = ET.Element("testcase", name=HOST_CASE, classname=_classname(job, session))
        failures += _failure(case, found)
        cases.append(case)

    suites = ET.Element("testsuites")
    suite = ET.SubElement(
        suites,
        "testsuite",
        name="sanitizerd",
        tests=str(len(cases)),
        failures=str(failures),
        errors="0",
        skipped=str(skipped),
    )
    suite.extend(cases)
    ET.indent(suites)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"
