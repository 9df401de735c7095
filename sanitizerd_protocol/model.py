"""The one model every detector reports in, and what travels to the CLI, the store and JSON."""

from __future__ import annotations

from typing import Annotated, Final

import msgspec

ERROR: Final = "error"
WARNING: Final = "warning"
# msSanitizer's INFO level: a trace the user asked for (memcheck's --trace-non-default-spr-reg), not a defect; shown
# at --log-level=info only, never counted as an error or a warning.
INFO: Final = "info"

# The JSON ``kind`` vocabulary, shared by every detector; the value is its severity, as msSanitizer's
# GetNotifyLv assigns it (reference §2.1).
KINDS: Final[dict[str, str]] = {
    "illegal_read": ERROR,
    "illegal_write": ERROR,
    # a host-side write into the guard area after a GM buffer (msSanitizer's GM_ADDR_OUT_OF_BOUND, `--padding`)
    "guard_write": ERROR,
    "misaligned_access": ERROR,
    "out_of_bounds": WARNING,
    "illegal_free": ERROR,
    "memory_leak": ERROR,  # printed as an ERROR (LeakCheck), so counted as one (msSanitizer: a warning)
    "unused_memory": WARNING,
    "uninitialized_read": ERROR,
    "race_raw": ERROR,
    "race_war": ERROR,
    "race_waw": ERROR,
    "deadlock": ERROR,
    # synccheck: pipes stuck on a wait_flag nothing sets, while the kernel runs or once it is stopped (msSanitizer's
    # "kernel locked up", master of Aug 2026)
    "kernel_locked_up": ERROR,
    # a kernel launch that sent nothing for --silent-kernel-after seconds and has not ended: not a clean kernel
    "kernel_silent": ERROR,
    "dcci_missing": ERROR,  # racecheck --check-dcci: a cross-core dependency through the data cache without dcci
    "unpaired_set_flag": WARNING,
    "redundant_set_flag": WARNING,
    "redundant_wait_flag": WARNING,
    "divergent_threads": ERROR,  # SIMT: threads of a block reached a __syncthreads() a different number of times
    "register_not_reset": WARNING,
    # memcheck --trace-non-default-spr-reg=vector: a vector instruction ran with a non-default vector mask, and the
    # sites past the per-kernel bound that were not traced
    "non_default_mask": INFO,
    "trace_left_out": INFO,
    "sdc_mismatch": ERROR,
    "sdc_replica_mismatch": ERROR,
    "internal_error": ERROR,
    # msSanitizer's hooks spoke another release's wire than the one the session was opened for: nothing after it
    # was checked (sanitizerd's own: msSanitizer misreads such a stream without a word)
    "wire_mismatch": ERROR,
}


# The ``detail`` of a race finding between accesses of two devices (cross-NPU racecheck): what the run's closing line
# counts, and what tells it apart from a race inside one device in JSON.
CROSS_NPU: Final = "cross-NPU"


# A suppression rule's pattern: bounded, as everything a client sends (fnmatch turns it into a regular expression).
Pattern = Annotated[str, msgspec.Meta(max_length=256)]
MAX_SUPPRESSIONS = 256  # rules of one job (and of the host's file)


class Suppression(msgspec.Struct, frozen=True, kw_only=True):
    """A known finding, hidden with a reason: a finding matches when it is of one of ``kinds`` (none: any kind) and
    every pattern given matches (fnmatch, case-sensitive): ``kernel`` its kernel's name, ``file`` and ``function``
    one frame of its location or stacks (a race's accesses' included)."""

    reason: Annotated[str, msgspec.Meta(min_length=1, max_length=1024)]
    kinds: Annotated[list[Annotated[str, msgspec.Meta(max_length=64)]], msgspec.Meta(max_length=64)] = []
    kernel: Pattern = ""
    file: Pattern = ""
    function: Pattern = ""


class Frame(msgspec.Struct, frozen=True, kw_only=True):
    """One source location of a stack, innermost first."""

    file: str
    line: int = 0
    column: int = 0
    function: str = ""


class RaceAccess(msgspec.Struct, kw_only=True):
    """One of the two accesses of a race: what ran it, what it did, where."""

    pipe: str  # e.g. "PIPE_MTE2"
    op: str  # "Read" or "Write"
    address: int  # the access's start address
    block_type: str  # "aiv", "aic", "aicore"
    blocks: list[int]  # block ids (one, or several when the race is folded over blocks)
    serial: int
    pc: int = 0
    location: Frame | None = None
    stack: list[Frame] = []
    device: int = -1  # the device that ran it, in a cross-NPU race; -1: the finding's device
    thread: list[int] = []  # a SIMT thread's (x, y, z); empty: the block's main scalar or a pipe


class Replay(msgspec.Struct, kw_only=True):
    """Where an SDC finding was seen: TorchTitan's step, local step, replay and rank, and the first entry that
    differs; ``replica_group`` for a disagreement between data-parallel replicas."""

    step: int
    local_step: int = 0
    replay: int = 0
    rank: int = -1
    signature: str = ""
    replica_group: str = ""
    ranks: list[int] = []  # replicas that split with no majority: all of them (``rank`` is the lowest)


class LocalTensor(msgspec.Struct, frozen=True, kw_only=True):
    """The local tensor an illegal on-chip access was judged by: a block's buffer (with the serial number and
    location of its declaration) or an operand of the annotated instruction (msSanitizer's mstx annotation)."""

    space: str  # "UB", "L1", ...
    address: int  # its first byte
    size: int  # its bytes
    serial: int = 0  # the declaration's serial number (an operand's: its instruction's)
    location: Frame | None = None  # where it was declared, when the client said


class Finding(msgspec.Struct, kw_only=True):
    kind: str
    severity: str
    job: str = ""
    session: int = 0
    pid: int = 0
    device: int = -1
    kernel: str | None = None  # None for host-side findings
    launch: int = 0  # the kernel launch's id within its session; 0 when not tied to a finished launch
    blocks: dict[str, list[int]] = {}  # "aiv" -> sorted block ids that hit this site
    space: str = "GM"
    address: int = 0
    size: int = 0
    serial: int = 0
    pc: int = 0
    location: Frame | None = None
    stack: list[Frame] = []
    detail: str = ""
    count: int = 1  # occurrences folded into this finding
    module: int = -1  # module id the client gave the allocation (msSanitizer's moduleId), -1 = none
    table: str = ""  # host-side GM findings: the legality table that judged, "runtime", "dfx" or "mstx"
    pipe: str = ""  # sync findings: the source pipe, e.g. "PIPE_MTE2"
    dst_pipe: str = ""  # sync findings: the destination pipe
    event_id: int = -1  # sync findings: the flag's event id
    register: str = ""  # register findings: its name, e.g. "VECTOR_MASK_0"
    expected: int = 0  # register findings: the default it should have been reset to
    actual: int = 0  # register findings: the value the kernel left
    instr: str = ""  # non_default_mask: the vector instruction, e.g. "VADD"
    mask_mode: str = ""  # non_default_mask: "Normal" or "Counter"
    mask_high: int = 0  # non_default_mask: VECTOR_MASK_1 as the instruction ran
    mask_low: int = 0  # non_default_mask: VECTOR_MASK_0 as the instruction ran
    accesses: list[RaceAccess] = []  # race findings: the earlier and the later access, by serial number
    blocked: int = 0  # deadlock findings: instructions of the kernel that could not run after the stuck waits
    replay: Replay | None = None  # sdccheck findings
    tensor: LocalTensor | None = None  # illegal on-chip reads and writes judged by a local tensor, not the space
    thread: list[int] = []  # SIMT findings: the (x, y, z) of the (first) thread concerned
    id: int = 0  # assigned by the store
    time: float = 0.0
    suppressed: bool = False  # a suppression rule matched: stored and shown as such, never counted as found
    suppression: str = ""  # that rule's reason


def make_finding(kind: str, **fields: object) -> Finding:
    """A finding of a known kind with its severity filled in."""
    return Finding(kind=kind, severity=KINDS[kind], **fields)  # type: ignore[arg-type]


def kinds_named(kinds: list[str], severity: str) -> set[str] | None:
    """The finding kinds a query selects: those it names (none: every kind) of at least ``severity``; None: any."""
    if not kinds and not severity:
        return None
    selected = set(kinds) if kinds else set(KINDS)
    if severity == ERROR:
        selected = {kind for kind in selected if KINDS.get(kind) == ERROR}
    elif severity == WARNING:  # INFO is below it: a trace the user asked for is no warning
        selected = {kind for kind in selected if KINDS.get(kind) != INFO}
    return selected


class SessionInfo(msgspec.Struct, kw_only=True):
    """One session as the store keeps it and the control wire sends it (``Sessions``): it lives on the ground floor
    so that the stores need nothing of the wire (issue 27)."""

    session: int
    job: str
    pid: int
    uid: int = -1
    host: str = ""
    tool: str = ""
    device: int = -1
    rank: int = -1
    state: str = "live"  # live | ended
    end_reason: str = ""
    started: float = 0.0
    ended: float = 0.0
    kernels: int = 0
    events: int = 0
    findings: int = 0
    signatures: int = 0  # sdccheck signatures received: none sent is not the same as clean
    gid: int = -1
    unstored: int = 0  # findings the store could not keep (a full disk, its size limit)
    suppressed: int = 0  # of ``findings``, those a suppression rule hid
