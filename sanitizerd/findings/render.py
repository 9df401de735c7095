"""msSanitizer's report text (reference §2.5), and JSON.

Deliberate differences, each listed in docs/design.md: no trailing space after ``illegal free()``; the
unused-memory summary reads ``N byte(s)`` with a space, like the leak summary; leaks print on two lines as
msSanitizer's code does (not one line as its docs show).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import msgspec

from sanitizerd_protocol.model import ERROR, Finding, Frame, RaceAccess

P = "======"

_TITLES = {
    "illegal_read": "illegal read of size {size}",
    "illegal_write": "illegal write of size {size}",
    "misaligned_access": "misaligned access of size {size}",
    "out_of_bounds": "out of bounds of size {size}",
    "uninitialized_read": "uninitialized read of size {size}",
    "illegal_free": "illegal free()",
    "internal_error": "internal errors (serialNo:{serial})",
}


def block_list(ids: list[int]) -> str:
    """``[0, 1, 3, 4, 5]`` -> ``0-1,3-5``."""
    parts: list[str] = []
    run_start = previous = None
    for block in sorted(ids):
        if previous is not None and block == previous + 1:
            previous = block
            continue
        if run_start is not None:
            parts.append(f"{run_start}" if run_start == previous else f"{run_start}-{previous}")
        run_start = previous = block
    if run_start is not None:
        parts.append(f"{run_start}" if run_start == previous else f"{run_start}-{previous}")
    return ",".join(parts)


_BLOCK_ORDER = {"aiv": 0, "aic": 1, "aicore": 2}


def blocks_text(blocks: dict[str, list[int]]) -> str:
    """``aiv(0-1,3),aic(2)``: vector blocks first, as msSanitizer prints them."""
    kinds = sorted(blocks, key=lambda kind: (_BLOCK_ORDER.get(kind, len(_BLOCK_ORDER)), kind))
    return ",".join(f"{kind}({block_list(blocks[kind])})" for kind in kinds if blocks[kind])


def _frame(frame: Frame) -> str:
    return f"{frame.file}:{frame.line}:{frame.column}" if frame.column else f"{frame.file}:{frame.line}"


def _where(location: Frame | None, kernel_side: bool, *, basename: bool = False) -> str:
    """msSanitizer's classic location, ``file:line``: a kernel record's file comes from the kernel's file mapping
    (``unknown`` where the mapping lacks it), a host record's as the hook sent it (empty where it sent none).
    memcheck's kernel-side reports print only the file's name, race and sync reports its whole path."""
    if location is None:
        return "unknown:0" if kernel_side else ":0"
    file = location.file.rsplit("/", 1)[-1] if basename else location.file
    return f"{file}:{location.line}"


def location_lines(
    pc: int,
    location: Frame | None,
    stack: list[Frame],
    serial: int,
    *,
    head: str,
    kernel_side: bool,
    basename: bool = False,
    indent: str = "    ",
) -> Iterator[str]:
    """A record's location as msSanitizer prints it: ``pc current 0x..`` and the call stack (every frame as
    ``file:line:column``) where the pc resolved to one, otherwise the record's own ``file:line``. ``head`` is
    the first line's text before it (its indent and verb). A native client's location whose callers travel with
    it prints them after the file:line, numbered on (msSanitizer's records have no such chain)."""
    if pc and stack:
        yield f"{head}pc current {pc:#x} (serialNo:{serial})"
        for i, frame in enumerate(stack):
            yield f"{P}{indent}#{i} {frame.file}:{frame.line}:{frame.column}"
        return
    where = location if location is not None else (stack[0] if stack else None)
    yield f"{head}{_where(where, kernel_side, basename=basename)} (serialNo:{serial})"
    for i, frame in enumerate(stack[1:], start=1):
        yield f"{P}{indent}#{i} {_frame(frame)}"


def _code_lines(
    finding: Finding, indent: str = "    ", verb: str = "code in", *, basename: bool = False
) -> Iterator[str]:
    yield from location_lines(
        finding.pc, finding.location, finding.stack, finding.serial, head=f"{P}{indent}{verb} ",
        kernel_side=finding.kernel is not None, basename=basename, indent=indent,
    )  # fmt: skip


_SYNC_TITLES = {
    "unpaired_set_flag": "Unpaired set_flag instructions detected",
    "redundant_set_flag": "Redundant set_flag instructions detected",
    "redundant_wait_flag": "Redundant wait_flag instructions detected",
}


def _sync(finding: Finding) -> Iterator[str]:
    """synccheck's block (sync_info_display.h): pipes instead of an address."""
    yield f"{P} WARNING: {_SYNC_TITLES[finding.kind]}"
    yield f"{P}    from {finding.pipe} to {finding.dst_pipe} in {finding.kernel}"
    yield f"{P}    in block {blocks_text(finding.blocks) or '?'} on device {finding.device}"
    yield from _code_lines(finding)


def _register(finding: Finding) -> Iterator[str]:
    """registercheck's single line (register_info_display.h), under our tool's name."""
    yield (
        f"[sanitizerd] Warning:Register {finding.register} was not reset to default in block "
        f"{blocks_text(finding.blocks) or '?'} on kernel {finding.kernel}. Expected default value is "
        f"({finding.expected}), but current value is ({finding.actual})"
    )


def _non_default_mask(finding: Finding) -> Iterator[str]:
    """memcheck's register trace (mem_error_def.h's PrintNonDefaultReg); the executions of one site are one finding,
    so a site run more than once says how often (msSanitizer prints each execution, with its serial)."""
    yield (
        f"{P} INFO: {finding.instr} is using non-default mask. MaskMode: {finding.mask_mode}, "
        f"MaskHigh: 0x{finding.mask_high:x}, MaskLow: 0x{finding.mask_low:x}"
    )
    yield f"{P}    in kernel {finding.kernel} on device {finding.device}"
    yield from _code_lines(finding, basename=True)
    if finding.count > 1:
        yield f"{P}    executed {finding.count} times with these values (first serialNo shown)"


def _trace_left_out(finding: Finding) -> Iterator[str]:
    yield f"{P} INFO: {finding.detail}"
    yield f"{P}    in kernel {finding.kernel} on device {finding.device}"


_HAZARDS = {"race_raw": "RAW", "race_war": "WAR", "race_waw": "WAW"}


def _race(finding: Finding) -> Iterator[str]:
    """racecheck's block (race_info_display.h): a header, then each access with its pipe and place."""
    hazard = _HAZARDS[finding.kind]
    kernel = f" in {finding.kernel}" if finding.kernel else ""
    yield f"{P} ERROR: Potential {hazard} hazard detected at {finding.space}{kernel}:"
    for access in finding.accesses:
        yield from _race_access(access, hazard, finding.device)


def _race_access(access: RaceAccess, hazard: str, device: int) -> Iterator[str]:
    device = access.device if access.device >= 0 else device  # a cross-NPU race names each access's device
    # A SIMT thread's access names its thread where a pipe's names the pipe (race_info_display.h's FormatEvent)
    doer = f"{access.pipe} {access.op}"
    if access.thread:
        doer = f" {access.op} Thread ({','.join(map(str, access.thread))})"
    head = (
        f"{P}    {doer} at {hazard}()+{access.address:#x} in block {block_list(access.blocks)} "
        f"({access.block_type}) on device {device} at "
    )
    yield from location_lines(access.pc, access.location, access.stack, access.serial, head=head, kernel_side=True)


def _dcci_missing(finding: Finding) -> Iterator[str]:
    """racecheck's missing-dcci block (race_info_display.h, FormatMissDcciInfo): the write, then the read, each
    without a hazard name."""
    kernel = f" in {finding.kernel}" if finding.kernel else ""
    yield f"{P} ERROR: Missing DCCI instructions detected on cross core data dependency at {finding.space}{kernel}:"
    for access in finding.accesses:
        head = (
            f"{P}    {access.pipe} {access.op} at {access.address:#x} in block {block_list(access.blocks)} "
            f"({access.block_type}) on device {finding.device} at "
        )
        yield from location_lines(access.pc, access.location, access.stack, access.serial, head=head, kernel_side=True)


def _guard_write(finding: Finding) -> Iterator[str]:
    """memcheck's report of a host write into a GM guard area (mem_error_def.h, PrintGMAddrError): no location,
    as the host side has no pc or call stack to give."""
    yield f"{P} ERROR: illegal write of size {finding.size} byte(s)"
    yield f"{P}    {finding.detail}"
    yield f"{P}    in {finding.kernel or ''} on device {finding.device}"
def _divergent(finding: Finding) -> Iterator[str]:
    """synccheck's SIMT block (sync_info_display.h): the first thread that missed the __syncthreads() at the pc."""
    x, y, z = [*finding.thread, 0, 0, 0][:3]
    yield f"{P} ERROR: Sync error detected. Divergent thread(s) in {finding.kernel}"
    yield f"{P}    by thread({x},{y},{z}) in block {blocks_text(finding.blocks) or '?'} on device {finding.device}"
    yield from _code_lines(finding)


def _deadlock(finding: Finding) -> Iterator[str]:
    """A wait the simulated pipeline can never pass (msSanitizer only logs "The pipe line is in the infinite
    loop!" and drops the rest of the kernel)."""
    kernel = f" in {finding.kernel}" if finding.kernel else ""
    yield f"{P} ERROR: Deadlock: {finding.detail} is never released{kernel}"
    yield f"{P}    in block {blocks_text(finding.blocks) or '?'} on device {finding.device}"
    yield from _code_lines(finding)
    yield (
        f"{P}    The pipe line cannot progress: {finding.blocked} instruction(s) waiting behind it were not "
        "checked for races"
    )


def _sdc(finding: Finding) -> Iterator[str]:
    """TorchTitan's message, then where it came from."""
    yield f"{P} ERROR: {finding.detail}"
    yield f"{P}    in job {finding.job} session {finding.session} (pid {finding.pid}) on device {finding.device}"


def _silent(finding: Finding) -> Iterator[str]:
    """sanitizerd's own (msSanitizer waits for the kernel without a word): a kernel gone quiet is not a clean one."""
    yield f"{P} ERROR: Kernel {finding.kernel} sent no record for {finding.detail} and has not ended"
    yield f"{P}    on device {finding.device}: it may be locked up, and what it ran unseen was not checked"


def _wire_mismatch(finding: Finding) -> Iterator[str]:
    yield f"{P} ERROR: msSanitizer's hooks speak another wire than this session's: nothing after this was checked"
    yield f"{P}    {finding.detail}"


_OWN_LAYOUT = {
    **dict.fromkeys(_HAZARDS, _race),
    **dict.fromkeys(_SYNC_TITLES, _sync),
    "deadlock": _deadlock,
    "dcci_missing": _dcci_missing,
    "guard_write": _guard_write,
    "divergent_threads": _divergent,
    "register_not_reset": _register,
    "non_default_mask": _non_default_mask,
    "trace_left_out": _trace_left_out,
    "sdc_mismatch": _sdc,
    "sdc_replica_mismatch": _sdc,
    "wire_mismatch": _wire_mismatch,
    "kernel_silent": _silent,
}


def _single(finding: Finding) -> Iterator[str]:
    layout = _OWN_LAYOUT.get(finding.kind)
    if layout is not None:
        yield from layout(finding)
        return
    if finding.kind == "internal_error" and finding.detail:
        yield f"{P} ERROR: internal errors (serialNo:{finding.serial})"
        if finding.kernel is not None:
            yield f"{P}    in block {blocks_text(finding.blocks) or '?'} on device {finding.device} in {finding.kernel}"
        yield f"{P}    {finding.detail}"
        return
    label = "ERROR" if finding.severity == ERROR else "WARNING"
    title = _TITLES.get(finding.kind, finding.kind.replace("_", " ") + " of size {size}")
    yield f"{P} {label}: {title.format(size=finding.size, serial=finding.serial)}"
    at = f"{P}    at {finding.address:#x} on {finding.space}"
    if finding.kind == "out_of_bounds":
        at += " when writing data"
    if finding.kernel is not None:
        at += f" in {finding.kernel}"
    yield at
    if finding.kernel is not None:
        # a SIMT thread's error names it first (mem_error_def.h's FormatBlockInfo)
        by = "by thread ({},{},{}) ".format(*finding.thread[:3]) if len(finding.thread) >= 3 else ""
        yield f"{P}    {by}in block {blocks_text(finding.blocks) or '?'} on device {finding.device}"
    yield from _code_lines(finding, basename=finding.kernel is not None)


def _leaks(group: list[Finding]) -> Iterator[str]:
    """msSanitizer's one leak message: its header and a blank line, each leak and a blank line, the summary."""
    yield f"{P} ERROR: LeakCheck: detected memory leaks"
    yield ""
    for leak in group:
        yield f"{P}    Direct leak of {leak.size} byte(s)"
        by_module = f" by module {leak.module}" if leak.module != -1 else ""
        yield f"{P}      at {leak.address:#x} on {leak.space}{by_module}"
        yield from _code_lines(leak, indent="      ", verb="allocated in")
        yield ""
    total = sum(leak.size for leak in group)
    yield f"{P} SUMMARY: {total} byte(s) leaked in {len(group)} allocation(s)"


def _unused(group: list[Finding]) -> Iterator[str]:
    """msSanitizer's one unused-memory message: each allocation and a blank line, the summary and a blank line."""
    for finding in group:
        yield f"{P} WARNING: Unused memory of {finding.size} byte(s)"
        yield f"{P}    at {finding.address:#x} on {finding.space}"
        yield from _code_lines(finding)
        yield ""
    total = sum(finding.size for finding in group)
    yield f"{P} SUMMARY: {total} byte(s) unused memory in {len(group)} allocation(s)"
    yield ""


def _locked_up(group: list[Finding]) -> Iterator[str]:
    """synccheck's lock-up message (sync_info_display.h, msSanitizer master): one header, each locked pipe after a
    separator line, and the count of pipes. A finding folds the blocks where one wait locked the same pipe, each
    block a pipe of msSanitizer's count."""
    yield f"{P} ERROR: Sync error detected. kernel locked up at"
    for finding in group:
        yield f"{P}    "
        yield f"{P}    {finding.detail or 'WAIT_FLAG'} in {finding.kernel}"
        yield f"{P}    by {finding.dst_pipe} in block {blocks_text(finding.blocks) or '?'} on device {finding.device}"
        yield from _code_lines(finding)
    yield f"{P}    "
    yield f"{P} SUMMARY: {sum(finding.count for finding in group)} pipe(s) locked up."
    yield ""


_GROUPED = {"memory_leak": _leaks, "unused_memory": _unused, "kernel_locked_up": _locked_up}


def _suppressed(finding: Finding) -> Iterator[str]:
    if finding.suppressed:
        yield f"[sanitizerd] SUPPRESSED ({finding.suppression}):"


def render_text(findings: Iterable[Finding]) -> str:
    """Reports in msSanitizer's format, each followed by a blank line as msSanitizer ends every report (its
    reports end their last line and the message adds a line end). Consecutive leaks (and unused blocks) of one
    session share a header and a summary line, as msSanitizer prints them at exit. A suppressed finding (shown
    only when asked for) follows a line that says so, with the rule's reason."""
    lines: list[str] = []
    pending: list[Finding] = []

    def flush() -> None:
        if pending:
            lines.extend(_suppressed(pending[0]))
            lines.extend(_GROUPED[pending[0].kind](pending))
            pending.clear()

    for finding in findings:
        if pending and (finding.kind, finding.session, finding.suppression) != (
            pending[0].kind, pending[0].session, pending[0].suppression,
        ):  # fmt: skip
            flush()
        if finding.kind in _GROUPED:
            pending.append(finding)
        else:
            lines.extend(_suppressed(finding))
            lines.extend(_single(finding))
            lines.append("")
    flush()
    return "\n".join(lines) + ("\n" if lines else "")


_json = msgspec.json.Encoder()


def render_json(findings: list[Finding]) -> bytes:
    return _json.encode(findings)
