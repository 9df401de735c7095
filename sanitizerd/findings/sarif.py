"""Findings as a SARIF 2.1.0 log, the format CI systems and code-review tools read (GitHub code scanning among
them): one run, one rule per finding kind, one result per finding with msSanitizer's report text as its message,
the source location when the finding has one, and the device context in the result's properties."""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any, Final
from urllib.parse import quote

import msgspec

from sanitizerd.findings.checked import CheckedKernel
from sanitizerd.findings.render import blocks_text, render_text
from sanitizerd_protocol.model import ERROR, INFO, KINDS, Finding, Frame

SCHEMA_URI: Final = "https://json.schemastore.org/sarif-2.1.0.json"

# What each kind means, in a line a reviewer reads next to the result.
DESCRIPTIONS: Final[dict[str, str]] = {
    "illegal_read": "A kernel read memory that is not allocated.",
    "illegal_write": "A kernel wrote memory that is not allocated.",
    "guard_write": "A host-side function (aicpu tiling) wrote into the guard area after a GM buffer.",
    "misaligned_access": "A kernel accessed memory at an address not aligned as its space requires.",
    "out_of_bounds": "A kernel accessed memory past the end of the space.",
    "illegal_free": "A free of an address that is not allocated (never allocated, or freed already).",
    "memory_leak": "Device memory allocated and never freed.",
    "unused_memory": "Device memory allocated and never accessed.",
    "uninitialized_read": "A kernel read memory that was never written.",
    "race_raw": "Read-after-write hazard: two pipes or blocks access the same memory unordered.",
    "race_war": "Write-after-read hazard: two pipes or blocks access the same memory unordered.",
    "race_waw": "Write-after-write hazard: two pipes or blocks access the same memory unordered.",
    "dcci_missing": "A scalar GM access another block depends on, without the dcci that makes it visible.",
    "deadlock": "A wait_flag that no set_flag ever releases: the pipeline cannot progress.",
    "kernel_locked_up": "A pipe of a running kernel waits on a sync that nothing that ran releases: the kernel hangs.",
    "kernel_silent": "A kernel launch sent nothing for a long time and did not end: what it did after was not checked.",
    "unpaired_set_flag": "A set_flag without a matching wait_flag.",
    "redundant_set_flag": "A set_flag whose event was already set.",
    "redundant_wait_flag": "A wait_flag with no set_flag to wait for.",
    "divergent_threads": "SIMT threads of a block reached a __syncthreads() a different number of times.",
    "register_not_reset": "A kernel left a control register away from its default value.",
    "non_default_mask": "Trace (--trace-non-default-spr-reg): a vector instruction ran with a non-default mask.",
    "trace_left_out": "Trace: instruction sites past the per-kernel bound were not traced.",
    "sdc_mismatch": "Silent data corruption: a replayed step's result differs from the original.",
    "sdc_replica_mismatch": "Silent data corruption: data-parallel replicas disagree on a step's result.",
    "internal_error": "sanitizerd could not check some of the program's records.",
    "wire_mismatch": "msSanitizer's hooks spoke another release's wire: the rest of the session was not checked.",
}
assert set(DESCRIPTIONS) == set(KINDS), "every finding kind needs a rule description"

_encode: Final = msgspec.json.Encoder().encode

_RULES: Final = sorted(KINDS)
_RULE_INDEX: Final = {kind: i for i, kind in enumerate(_RULES)}


def _level(severity: str) -> str:
    return "error" if severity == ERROR else "note" if severity == INFO else "warning"


def _rule(kind: str) -> dict[str, Any]:
    return {
        "id": kind,
        "name": "".join(part.capitalize() for part in kind.split("_")),
        "shortDescription": {"text": DESCRIPTIONS[kind]},
        "defaultConfiguration": {"level": _level(KINDS[kind])},
    }


def _uri(file: str) -> str:
    # Absolute paths as file URIs; relative ones stay relative, for a CI's checkout to resolve.
    return "file://" + quote(file) if file.startswith("/") else quote(file)


def _where(finding: Finding) -> list[Frame]:
    """The finding's stack, innermost first; a race's from its later access (the one that found the hazard)."""
    if finding.stack:
        return list(finding.stack)
    if finding.location is not None:
        return [finding.location]
    for access in reversed(finding.accesses):
        if access.stack:
            return list(access.stack)
        if access.location is not None:
            return [access.location]
    return []


# A log repeats a few source lines many times over (every block of a kernel hits the same one); the dicts are
# only ever encoded, never changed, so results may share them.
@lru_cache(maxsize=4096)
def _location(frame: Frame) -> dict[str, Any]:
    physical: dict[str, Any] = {"artifactLocation": {"uri": _uri(frame.file)}}
    if frame.line > 0:
        region: dict[str, int] = {"startLine": frame.line}
        if frame.column > 0:
            region["startColumn"] = frame.column
        physical["region"] = region
    location: dict[str, Any] = {"physicalLocation": physical}
    if frame.function:
        location["logicalLocations"] = [{"fullyQualifiedName": frame.function, "kind": "function"}]
    return location


def _properties(finding: Finding) -> dict[str, Any]:
    properties: dict[str, Any] = {
        "device": finding.device,
        "kernel": finding.kernel,
        "launch": finding.launch,
        "blocks": blocks_text(finding.blocks),
        "address": f"{finding.address:#x}",
        "size": finding.size,
        "space": finding.space,
        "pipe": finding.pipe,
        "serial": finding.serial,
        "job": finding.job,
        "session": finding.session,
        "count": finding.count,
    }
    if finding.pid:
        properties["pid"] = finding.pid
    if finding.pc:
        properties["pc"] = f"{finding.pc:#x}"
    if finding.dst_pipe:
        properties["dstPipe"] = finding.dst_pipe
    return properties


def _result(finding: Finding) -> dict[str, Any]:
    frames = [frame for frame in _where(finding) if frame.file]
    result: dict[str, Any] = {
        "ruleId": finding.kind,
        "ruleIndex": _RULE_INDEX[finding.kind],
        "level": _level(finding.severity),
        "message": {"text": render_text([finding]).rstrip("\n")},
        "properties": _properties(finding),
    }
    if frames:
        result["locations"] = [_location(frames[0])]
        if len(frames) > 1:
            result["stacks"] = [{"frames": [{"location": _location(frame)} for frame in frames]}]
    if finding.count > 1:
        result["occurrenceCount"] = finding.count
    if finding.suppressed:  # kept in the log, as SARIF means: code scanning shows it dismissed, with the reason
        result["suppressions"] = [{"kind": "external", "status": "accepted", "justification": finding.suppression}]
    return result


def _kernels_checked(kernels: Sequence[CheckedKernel]) -> list[dict[str, Any]]:
    """Launches counted per kernel and session: a training job launches the same kernels thousands of times."""
    counted: dict[tuple[str, int, str, tuple[str, ...]], int] = {}
    for k in kernels:
        key = (k.job, k.session, k.name, k.tools)
        counted[key] = counted.get(key, 0) + 1
    return [
        {"job": job, "session": session, "name": name, "tools": list(tools), "launches": launches}
        for (job, session, name, tools), launches in counted.items()
    ]


def render_sarif(
    findings: Sequence[Finding], *, version: str, kernels: Sequence[CheckedKernel] = (), complete: bool = True
) -> str:
    """A SARIF 2.1.0 log of ``findings``. ``kernels`` are the launches the run saw checked (in the run's
    properties, so that a clean log still says what was checked); ``complete`` is False when the run lost its
    daemon before the job ended."""
    run: dict[str, Any] = {
        "tool": {
            "driver": {
                "name": "sanitizerd",
                "version": version,
                "rules": [_rule(kind) for kind in _RULES],
            }
        },
        "invocations": [{"executionSuccessful": complete}],
        "results": [_result(finding) for finding in findings],
    }
    if kernels:
        run["properties"] = {"kernelsChecked": _kernels_checked(kernels)}
    # compact, through msgspec: json's indenting encoder is pure Python, ten times slower on a large log
    return _encode({"$schema": SCHEMA_URI, "version": "2.1.0", "runs": [run]}).decode() + "\n"
