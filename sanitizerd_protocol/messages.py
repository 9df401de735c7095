"""Every message of wire protocol v1, as typed msgspec Structs (see docs/protocol.md).

Messages are msgpack maps tagged by their ``type`` field. New fields are only ever appended with defaults,
so an older peer's messages still decode.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from sanitizerd_protocol.model import MAX_SUPPRESSIONS, Finding, SessionInfo, Suppression

PROTOCOL_VERSION = 1

TOOLS = ("memcheck", "racecheck", "initcheck", "synccheck", "registercheck")
MAX_CACHE_SIZE_MB = 8192  # the largest per-block record buffer, msSanitizer's MAX_RECORD_BUF_SIZE_EACH_BLOCK


DEFAULT_SINGLE_PIPE_DISTANCE = 16
# msSanitizer's --padding: the GM guard area after each buffer, in bytes (cli_parser.cpp's bounds and default)
MIN_GM_PADDING, MAX_GM_PADDING, DEFAULT_GM_PADDING = 32, 1024, 32

# A name that identifies something (a job, an IPC export, a signature entry) is refused past this length rather
# than cut (a cut name would name something else); descriptive text is cut instead (protocol/texts.py).
MAX_IDENT = 1024
Ident = Annotated[str, msgspec.Meta(max_length=MAX_IDENT)]
# A session id a client names: the store's (SQLite's) integers are signed 64-bit.
SessionId = Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)]
# A device address or size: the detectors hold them as uint64 (msgpack carries no integer above 2**64 - 1).
U64 = Annotated[int, msgspec.Meta(ge=0)]
# Each fits, but an address plus a size may not: a range of bytes ends at most here, where its (exclusive) end still
# fits a uint64 as the detectors hold it.
ADDRESS_END_MAX = 2**64 - 1


class Config(msgspec.Struct, kw_only=True):
    """What to check, as msSanitizer's ``Config`` (reference §1.3), with tools named rather than flagged."""

    # Bounded: each entry may start a detector for the session.
    tools: Annotated[list[Ident], msgspec.Meta(max_length=16)] = msgspec.field(default_factory=lambda: ["memcheck"])
    leak_check: bool = False
    check_unused_memory: bool = False
    check_device_heap: bool = False
    check_cann_heap: bool = False
    check_cross_npu_races: bool = False
    block_id: int = -1  # -1: all blocks
    kernel_name: Ident = ""  # substring filter; "" = every kernel
    cache_size: int = 100  # MB per block; device-buffer sizing, recorded for the hooks
    full_backtrace: bool = False
    demangle: Ident = "full"
    log_level: Ident = "warn"
    # racecheck: accesses of one pipe more than this many instructions apart are ordered (msSanitizer: 16)
    single_pipe_distance: int = DEFAULT_SINGLE_PIPE_DISTANCE
    # racecheck: one report per racing pair of sites over all blocks (`run --race-fold yes`), not per pair of blocks
    race_fold: bool = False
    # racecheck: a scalar GM access another block depends on without the dcci that makes it visible (`--check-dcci`)
    check_dcci: bool = False
    # bytes of guard area msSanitizer's hooks leave after each GM buffer, in which a host-side write is reported
    # (`--padding`, 32..1024)
    padding: Annotated[int, msgspec.Meta(ge=MIN_GM_PADDING, le=MAX_GM_PADDING)] = DEFAULT_GM_PADDING
    # memcheck: trace each vector instruction that runs with a non-default vector mask, at INFO
    # (`--trace-non-default-spr-reg=vector`, msSanitizer's master of August 2026)
    trace_non_default_spr_reg: bool = False
    # known findings, hidden with a reason (`run --suppressions FILE`); the host's file applies too
    suppressions: Annotated[list[Suppression], msgspec.Meta(max_length=MAX_SUPPRESSIONS)] = []


class Message(msgspec.Struct, tag_field="type", kw_only=True):
    pass


# --- handshake ---------------------------------------------------------------------------------------------


class Hello(Message, tag="hello"):
    """First message of every connection. ``role`` is "producer" for an instrumented process, "control" for the
    CLI. Every field but ``version`` has a default so that any version's hello decodes and can be refused by name."""

    version: int
    role: Literal["producer", "control"] = "producer"
    pid: int = 0
    host: str = ""
    tool: str = ""
    job: Ident = ""
    rank: int = -1
    local_rank: int = -1
    world_size: int = 0
    device: int = -1
    config: Config | None = None  # requested checks when no job registered them
    # A producer that lost its daemon: the session it had, which it replays from the start (docs/protocol.md)
    resume: SessionId = 0


class Welcome(Message, tag="welcome"):
    session: int
    config: Config
    server: str = ""


class Error(Message, tag="error"):
    """The sender is about to close; ``reason`` is one of a small fixed set (see docs/protocol.md)."""

    reason: str
    message: str


class Close(Message, tag="close"):
    """Graceful end: the server finalizes the session and answers ``closed``."""


# --- producer -> server ------------------------------------------------------------------------------------


class DeviceSummary(Message, tag="device"):
    chip: Ident
    block_num: int = 0
    device: int = -1


class Location(msgspec.Struct, kw_only=True):
    """A source location; ``callers`` are location ids of the enclosing frames, innermost first. ``record``: the
    place a device record names itself (msSanitizer's ``fileNo``/``lineNo``), not the call stack of its pc:
    reports print it as ``file:line`` whatever the event's pc, as msSanitizer does where no stack resolves."""

    id: int
    file: str
    line: int = 0
    column: int = 0
    function: str = ""
    callers: list[int] = []
    record: bool = False


class Locations(Message, tag="locations"):
    locations: list[Location]


# Entries of one signature: a model's parameters, buffers and RNG states, with room to spare; more is bad_packet.
MAX_SIGNATURE_ENTRIES = 1 << 16


class SignatureEntry(msgspec.Struct, kw_only=True, frozen=True):
    """One entry of a replay signature, named as TorchTitan names them (``loss``, ``rng:cpu``,
    ``rng:accelerator:{i}``, ``buffer:{i}:{name}``, ``gradient:{i}:{name}``, ``state:python_rng``,
    ``state:{name}``): its schema (shape, dtype, device; or the state's type) and a 64-bit digest."""

    name: Ident
    schema: Ident = ""
    digest: int = 0  # uint64


# Ranks of a replica group a process group's own check may name (a data-parallel group of a large job).
MAX_REPLICA_RANKS = 1 << 16


class ReplicaOutcome(msgspec.Struct, kw_only=True, frozen=True):
    """The cross-replica check a job's process group made itself (an all-gather of every replica's
    post-all-reduce gradient digests, on any number of hosts). ``ranks``: the group's global ranks in group
    order; ``classes``: for each, the group index of the first rank holding the same digests (all 0: the
    replicas agree); ``signature``: the first gradient entry on which they do not."""

    ranks: Annotated[list[int], msgspec.Meta(max_length=MAX_REPLICA_RANKS)]
    classes: Annotated[list[int], msgspec.Meta(max_length=MAX_REPLICA_RANKS)]
    signature: Ident = ""


class Signature(Message, tag="signature"):
    """A training step's signature for sdccheck (docs/protocol.md). ``phase`` "replay": replay 0 is the
    reference run of (step, local_step) and replays 1.. must equal it. ``phase`` "post_all_reduce": the
    gradients after the data-parallel all-reduce, which every one of the ``replicas`` ranks of
    ``replica_group`` must agree on; with ``outcome``, the group compared them itself (so that a job on many
    hosts, whose daemons each see only their own ranks, is checked)."""

    step: int
    local_step: int = 0
    replay: int = 0
    rank: int = -1  # -1: the session's rank from its hello
    phase: Literal["replay", "post_all_reduce"] = "replay"
    replica_group: Ident = ""
    replicas: int = 0
    entries: Annotated[list[SignatureEntry], msgspec.Meta(max_length=MAX_SIGNATURE_ENTRIES)] = []
    outcome: ReplicaOutcome | None = None  # post_all_reduce: the process group's own verdict, when it made one


class KernelBegin(Message, tag="kernel_begin"):
    kernel: int  # launch id, unique within the session
    name: str
    block_dim: int
    kernel_type: Literal["aicpu", "aiv", "aic", "mix"] = "aiv"
    pc_start: int = 0
    # The kernel's binary has line information (msSanitizer's KernelSummary.hasDebugLine); without it, the first
    # report of the launch is preceded by msSanitizer's "missed debug_line information" warning.
    debug_line: bool = True


class Events(Message, tag="events"):
    """A batch of device events of one kernel launch: packed ``EVENT_DTYPE`` records."""

    kernel: int
    records: memoryview  # decoded zero-copy: a view into this frame only


class BlockLoss(msgspec.Struct, kw_only=True):
    """Records of one block the client could not keep: its per-block record buffer (``cache_size`` MB) was full."""

    block_type: int
    block_id: int
    records: int
    bytes: U64 = 0  # the bytes they needed, when the client knows (msSanitizer's record buffers do); 0: unknown


# Problems one kernel's end may report: each becomes one internal_error finding of the kernel.
MAX_KERNEL_PROBLEMS = 256


class KernelEnd(Message, tag="kernel_end"):
    kernel: int
    lost: list[BlockLoss] = []  # blocks whose records overflowed the client's buffer; the result is incomplete
    # What the client could not turn into events (a record type not converted, a damaged record buffer), said
    # in words: each is an internal_error finding of the kernel, and its verdict is incomplete.
    problems: Annotated[list[str], msgspec.Meta(max_length=MAX_KERNEL_PROBLEMS)] = []


HOST_OPS = ("malloc", "free", "memcpy", "memset", "load", "store")
INFO_SOURCES = ("bypass", "hal", "rt", "acl", "extra", "manual", "mstx_heap", "mstx_region")


class HostOp(Message, tag="host_op"):
    """A host-side memory operation (reference §1.1 HostMemRecord). ``address`` is the allocated, freed,
    written or read address; ``src`` is memcpy's source."""

    op: Literal["malloc", "free", "memcpy", "memset", "load", "store"]
    address: U64
    size: U64 = 0
    src: U64 = 0
    source: Literal["bypass", "hal", "rt", "acl", "extra", "manual", "mstx_heap", "mstx_region"] = "acl"
    desc: str = "default"
    serial: int = 0
    location: int = 0
    module: int = -1
    root: U64 = 0  # rootAddr: the heap an MSTX region is carved from


U32 = Annotated[int, msgspec.Meta(ge=0, le=0xFFFF_FFFF)]


class GuardWrite(Message, tag="guard_write"):
    """A host-side write (msSanitizer's GM_ADDR_OUT_OF_BOUND_RECORD: a tiling function run on the host, the aicpu
    tiling sink) of ``out_size`` bytes at ``out_address``, inside the guard area (``Config.padding`` bytes) after the
    buffer of ``user_size`` bytes at ``user_address``. memcheck reports it as an illegal write; no device record
    carries it."""

    user_address: U64
    user_size: U32
    out_address: U64
    out_size: U32


class Ipc(Message, tag="ipc"):
    """IPC shared memory between the processes of one job (reference §1.1 IPCMemRecord): ``set`` exports
    ``[address, address + size)`` under ``name``; ``map`` makes it usable at ``address`` in this process;
    ``unmap`` ends a mapping at ``address``; ``destroy`` ends the export and every mapping of it."""

    op: Literal["set", "map", "unmap", "destroy"]
    name: Ident = ""
    address: U64 = 0
    size: U64 = 0
    serial: int = 0
    location: int = 0


# A memory-permission region's flags, msSanitizer's MSTX_MEM_PERMISSIONS_REGION_FLAGS_* bits: what a kernel may do
# in the region, and whether other devices share it (what cross-NPU racecheck compares).
REGION_READ = 0x01
REGION_WRITE = 0x02
REGION_SHARED = 0x04
REGION_FLAGS = REGION_READ | REGION_WRITE | REGION_SHARED
# Regions one session may declare: past it a region is refused (an internal_error finding says so), not held.
MAX_REGIONS = 4096


class RegionPermission(Message, tag="region_permission"):
    """The access ``[address, address + size)`` of device memory allows from now on (msSanitizer's
    MEM_REGION_PERMISSION, from ``mstxMemRegionsSetPermission``): ``flags`` of REGION_READ, REGION_WRITE and
    REGION_SHARED. ``device``: the device whose memory it is (-1: the session's); a region of another device that
    is not shared may not be touched by this session's kernels at all. A region marked shared is memory other
    devices of the job reach at the same address (symmetric memory): cross-NPU racecheck compares its accesses."""

    address: U64
    size: U64
    device: int = -1
    flags: int = REGION_READ | REGION_WRITE


class Log(Message, tag="log"):
    text: str
    level: str = "info"


# --- server -> producer ------------------------------------------------------------------------------------


class Verdict(Message, tag="verdict"):
    """Sent once every detector has checked a kernel launch (msSanitizer's KERNEL_RECORD_RESPONSE)."""

    kernel: int
    events: int
    errors: int
    warnings: int
    checked: bool = True  # False when a filter (--kernel-name) skipped it
    lost: int = 0  # records the client lost: when not 0, the result is incomplete
    incomplete: bool = False  # records lost or not turned into events (KernelEnd.problems): not every record checked
    suppressed: int = 0  # findings a suppression rule hid: in neither errors nor warnings


class IpcResult(Message, tag="ipc_result"):
    """The answer to each ``ipc`` message (msSanitizer's IPC_RESPONSE): ``ok``, or why not."""

    op: str
    name: str
    address: int
    ok: bool
    reason: str = ""


class Closed(Message, tag="closed"):
    session: int
    kernels: int = 0
    events: int = 0
    findings: int = 0
    unstored: int = 0  # findings reported but not stored (a full disk, the store's size limit): the store lacks them


# --- control <-> server ------------------------------------------------------------------------------------


class JobStart(Message, tag="job_start"):
    """Registers the configuration that producers of ``job`` are welcomed with."""

    job: Ident
    config: Config


class Watch(Message, tag="watch"):
    """Streams the job's findings to this connection as they are stored; with ``record``, also every message
    its producers send (``recorded``), for ``sanitizerd run --save``."""

    job: Ident
    record: bool = False


# A finding kind a query names (model.KINDS): unknown ones match nothing; the list is bounded like any request.
FindingKind = Annotated[str, msgspec.Meta(max_length=64)]
MAX_QUERY_KINDS = 64


class QueryFindings(Message, tag="query_findings"):
    """One page of stored findings: those with ids above ``after``, at most ``limit`` (0: the daemon's page size),
    of the ``kinds`` named (none: every kind), of at least ``severity`` ("error": errors only), stored at or after
    ``since`` (seconds since the epoch). With ``newest``, no findings: ``next`` is the id of the newest finding
    this client may read (0: none yet), where ``findings --follow`` starts."""

    job: Ident = ""
    session: SessionId = 0
    after: SessionId = 0
    limit: SessionId = 0
    kinds: Annotated[list[FindingKind], msgspec.Meta(max_length=MAX_QUERY_KINDS)] = []
    severity: Literal["", "error", "warning"] = ""
    since: Annotated[float, msgspec.Meta(ge=0.0)] = 0.0
    newest: bool = False


class Findings(Message, tag="findings"):
    """Findings: a reply to ``query_findings`` (``next``: where the next page starts, 0 when none follows), or
    findings pushed to a watcher as they are stored."""

    findings: list[Finding]
    next: int = 0


class QuerySessions(Message, tag="query_sessions"):
    pass


class Sessions(Message, tag="sessions"):
    sessions: list[SessionInfo]


class JobInfo(msgspec.Struct, kw_only=True):
    """One job as ``sanitizerd jobs`` shows it: its sessions grouped, with their ranks and devices."""

    job: str
    state: str  # live | ending (its last session closed less than the grace period ago) | ended
    sessions: int = 0
    live: int = 0
    ranks: list[int] = []
    devices: list[int] = []
    kernels: int = 0
    events: int = 0
    findings: int = 0
    signatures: dict[int, int] = {}  # rank -> sdccheck signatures sent
    started: float = 0.0
    ended: float = 0.0


class QueryJobs(Message, tag="query_jobs"):
    """Answered with ``jobs``: every job the client may read, or with ``job`` named only that one (a progress line
    asks for its run's job each second: the host's other jobs are not summarized for it). Another uid's job is
    answered as one that does not exist (an empty list), as ``query_findings`` answers."""

    job: Ident = ""


class Jobs(Message, tag="jobs"):
    jobs: list[JobInfo]


class WaitJob(Message, tag="wait_job"):
    """Answered with ``job_idle`` once no producer session of the job is live."""

    job: Ident


class CompatListen(Message, tag="compat_listen"):
    """Asks for a socket in msSanitizer's form for ``job`` (docs/mssanitizer-compat.md): an abstract Unix socket
    named as msSanitizer's launcher names it, for the pid that sent this (SO_PEERCRED), whose connections become
    producer sessions of the job speaking msSanitizer's wire ``layout`` (a name in
    ``sanitizerd.compat.wire.LAYOUTS``). Answered by one ``compat_listening``; the socket lives as long as this
    connection."""

    job: Ident
    layout: Ident


class CompatListening(Message, tag="compat_listening"):
    """The answer to ``compat_listen``: the socket's ``name`` (the value of ``MSOP_SOCKET_PATH`` and
    ``MSSANITIZER_PID``), or, when ``name`` is empty, why not: ``reason`` (one of the error reasons) and
    ``message``. A refusal does not end the control connection."""

    job: str
    name: str = ""
    reason: str = ""
    message: str = ""


class KernelChecked(Message, tag="kernel_checked"):
    """Pushed to a job's watchers once a kernel launch is checked, after its findings."""

    session: int
    kernel: int
    name: str
    tools: list[str]
    events: int
    errors: int
    warnings: int
    checked: bool = True
    lost: int = 0  # records the client lost (--cache-size): the result is incomplete
    incomplete: bool = False  # records lost or not turned into events: not every record was checked
    suppressed: int = 0  # findings a suppression rule hid: in neither errors nor warnings
    debug_line: bool = True  # as the launch's kernel_begin said


class Recorded(Message, tag="recorded"):
    """One message a producer of a recorded job sent (its hello first), as the msgpack body of its frame."""

    session: int
    body: bytes


class JobIdle(Message, tag="job_idle"):
    job: str
    sessions: int
    kernels: int
    events: int
    findings: int
    signatures: int = 0
    replica_steps_checked: int = 0  # data-parallel steps whose replicas were compared (here or by their group)
    replica_steps_incomplete: int = 0  # steps heard from fewer replicas than the group has, and never compared
    replica_note: str = ""  # what the summary says of them


AnyMessage = (
    Hello
    | Welcome
    | Error
    | Close
    | DeviceSummary
    | Locations
    | KernelBegin
    | QueryJobs
    | Jobs
    | Signature
    | Events
    | KernelEnd
    | HostOp
    | GuardWrite
    | Ipc
    | IpcResult
    | RegionPermission
    | Log
    | Verdict
    | Closed
    | JobStart
    | Watch
    | QueryFindings
    | Findings
    | QuerySessions
    | Sessions
    | WaitJob
    | KernelChecked
    | Recorded
    | JobIdle
    | CompatListen
    | CompatListening
)
