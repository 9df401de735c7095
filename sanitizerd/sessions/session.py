"""One producer connection's state. ``handle`` never awaits: it turns a message into detector work and
replies, and is tested without an event loop (the trio rule: sync state, one async pump)."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import msgspec

from sanitizerd.chips import DEFAULT_CHIP, chip_named
from sanitizerd.demangle import demangle
from sanitizerd.detectors import JobAccesses, create_detectors
from sanitizerd.detectors._heap import LEAKING_TABLE, TABLE_OF_SOURCE
from sanitizerd.detectors.base import DEFAULT_MAX_RACE_EVENTS, Detector, KernelLaunch, SessionContext
from sanitizerd.detectors.memory_budget import MemoryAccount, unbounded
from sanitizerd.findings.suppressions import Suppressor
from sanitizerd.sessions.ipc import IpcTable
from sanitizerd.sessions.work import Batch, EndKernel, SharedSpan, StartKernel, Work
from sanitizerd_protocol import RemoteProtocolError
from sanitizerd_protocol import messages as m
from sanitizerd_protocol.messages import MAX_CACHE_SIZE_MB
from sanitizerd_protocol.model import ERROR, Finding, Suppression
from sanitizerd_protocol.records import EVENT_DTYPE, as_events, block_type_name


@dataclass(frozen=True, slots=True)
class Peer:
    """SO_PEERCRED of the connected process; -1 where the platform does not tell."""

    pid: int = -1
    uid: int = -1
    gid: int = -1


@dataclass(frozen=True, slots=True)
class Answer:
    """A checked kernel: the verdict for the client, the report for the job's watchers."""

    verdict: m.Verdict
    report: m.KernelChecked


@dataclass(frozen=True, slots=True)
class ForeignFrees:
    """Mappings another session's ``ipc destroy`` ended: session -> addresses, to be freed there."""

    by_session: dict[int, set[int]]


@dataclass(frozen=True, slots=True)
class SessionFindings:
    """Findings the session itself reports: records a client's full buffer lost, host writes into a guard area."""

    findings: list[Finding]


@dataclass(frozen=True, slots=True)
class SignatureReport:
    """A replay signature for the job's sdccheck, with the rank it speaks for."""

    signature: m.Signature
    rank: int


@dataclass(frozen=True, slots=True)
class RegionRefused:
    """A memory-permission region past the session's bound: not held, and said as a finding (so that a run whose
    regions were not all applied does not pass as clean)."""

    finding: Finding


@dataclass(frozen=True, slots=True)
class GuardWriteRefused:
    """A host write into a guard area past the session's bound (MAX_GUARD_WRITES): not reported, counted; the first
    one past it carries the finding that says so."""

    findings: list[Finding]


Reply = Answer | m.IpcResult | ForeignFrees | SessionFindings | SignatureReport | RegionRefused | GuardWriteRefused

# What a session's source locations may hold, in the units of ``_location_size`` (about bytes): a large program's
# whole debug info fits many times over; a client that sends locations for ever does not.
MAX_LOCATION_BYTES = 64 * 1024 * 1024
# Host writes into GM guard areas one session reports (each is a finding, stored); past it they are counted and
# one internal_error says so.
MAX_GUARD_WRITES = 1024
# Live allocations one session may hold by default (``Limits.max_live_allocations``).
MAX_LIVE_ALLOCATIONS = 1 << 18
# Client log lines one session may put in the daemon's log: a burst, then a steady rate; the rest are counted.
CLIENT_LOG_BURST = 100
CLIENT_LOG_RATE = 10.0  # per second


@dataclass(slots=True)
class LogGate:
    """A token bucket for one session's client log lines."""

    rate: float = CLIENT_LOG_RATE
    burst: float = CLIENT_LOG_BURST
    tokens: float = field(init=False)
    last: float | None = None
    dropped: int = 0  # since the last line let through

    def __post_init__(self) -> None:
        self.tokens = self.burst

    def admit(self, now: float) -> int | None:
        """None: drop this line (counted). Else the lines dropped since the last one let through."""
        if self.last is not None:
            self.tokens = min(self.burst, self.tokens + (now - self.last) * self.rate)
        self.last = now
        if self.tokens < 1:
            self.dropped += 1
            return None
        self.tokens -= 1
        dropped, self.dropped = self.dropped, 0
        return dropped


@dataclass(slots=True)
class KernelState:
    launch: KernelLaunch
    checked: bool
    events: int = 0
    errors: int = 0
    warnings: int = 0
    suppressed: int = 0
    lost: int = 0  # records the client could not keep
    pending: int = 0  # detectors still checking it
    incomplete: bool = False  # records lost or not converted: a clean verdict would not mean a clean kernel
    debug_line: bool = True  # the kernel's binary has line information (msSanitizer's hasDebugLine)


class Session:
    def __init__(
        self,
        ident: int,
        hello: m.Hello,
        config: m.Config,
        peer: Peer,
        ipc: IpcTable | None = None,
        *,
        max_race_events: int = DEFAULT_MAX_RACE_EVENTS,
        race_memory: MemoryAccount | None = None,
        max_live_allocations: int = MAX_LIVE_ALLOCATIONS,
        host_suppressions: Sequence[Suppression] = (),
        cross_npu: JobAccesses | None = None,
        on_cross_npu_cut: Callable[[str, int], None] = lambda reason, count: None,
    ) -> None:
        self.id = ident
        # The job's rules, then the host's: the first that matches gives its reason.
        self.suppressor = Suppressor([*config.suppressions, *host_suppressions])
        self.max_live_allocations = max_live_allocations
        self.ipc = ipc if ipc is not None else IpcTable()
        # Frees of this session's IPC mappings that another session's destroy caused, applied in order
        # before this session's next message.
        self.external: list[Work | Reply] = []
        self.regions = 0  # memory-permission regions declared (m.MAX_REGIONS)
        self.hello = hello
        self.peer = peer
        self.started = time.time()
        self.context = SessionContext(
            job=hello.job,
            session=ident,
            pid=hello.pid or peer.pid,
            device=hello.device,
            chip=chip_named(DEFAULT_CHIP),
            config=config,
            max_race_events=max_race_events,
            race_memory=race_memory if race_memory is not None else unbounded(),
            cross_npu=cross_npu,
            on_cross_npu_cut=on_cross_npu_cut,
        )
        self.detectors: list[Detector] = create_detectors(self.context)
        self.kernels: dict[int, KernelState] = {}
        self.current: KernelState | None = None
        self.kernels_seen = 0
        self.events = 0
        self.errors = 0
        self.signatures = 0
        # A resumed session replays its stream from the start: the findings the lost daemon stored already are
        # not stored again (counted as a multiset: the same finding may occur twice).
        self.already_stored: Counter[bytes] = Counter()
        self.warnings = 0
        self.suppressed = 0  # findings a suppression rule hid: neither errors nor warnings
        self.end_reason = ""
        self.unstored = 0  # findings the store could not keep
        self.location_bytes = 0
        self.log_gate = LogGate()
        # (allocation table, address) of every live allocation, as the detectors' heaps key them: what bounds them
        self.live_allocations: set[tuple[str, int]] = set()
        self.guard_writes = 0  # reported, then not reported past MAX_GUARD_WRITES
        self.last_kernel_name = ""  # the kernel msSanitizer names in a guard-area write: the one launched last

    @property
    def job(self) -> str:
        return self.hello.job

    @property
    def config(self) -> m.Config:
        return self.context.config

    def info(self, state: str = "live") -> m.SessionInfo:
        return m.SessionInfo(
            session=self.id,
            job=self.job,
            pid=self.context.pid,
            uid=self.peer.uid,
            gid=self.peer.gid,
            host=self.hello.host,
            tool=self.hello.tool,
            device=self.context.device,
            rank=self.hello.rank,
            state=state,
            end_reason=self.end_reason,
            started=self.started,
            kernels=self.kernels_seen,
            events=self.events,
            findings=self.errors + self.warnings + self.suppressed,
            signatures=self.signatures,
            unstored=self.unstored,
            suppressed=self.suppressed,
        )

    # --- messages ----------------------------------------------------------------------------------------------

    def handle(self, message: m.Message) -> list[Work | Reply]:
        """Work for every detector, and replies for the client, in order."""
        if self.external:
            external, self.external = self.external, []
            return [*external, *self._handle(message)]
        return self._handle(message)

    def _handle(self, message: m.Message) -> list[Work | Reply]:
        match message:
            case m.Events():
                return self._events(message)
            case m.HostOp():
                _check_host_range(message)
                self._count_allocation(message)
                return [message]
            case m.Ipc():
                return self._ipc(message)
            case m.RegionPermission():
                return self._region(message)
            case m.KernelBegin():
                return self._kernel_begin(message)
            case m.KernelEnd():
                return self._kernel_end(message)
            case m.Locations():
                self._locations(message)
                return []
            case m.DeviceSummary():
                self._device(message)
                return []
            case m.GuardWrite():
                return self._guard_write(message)
            case m.Signature():
                self.signatures += 1
                return [SignatureReport(message, message.rank if message.rank >= 0 else self.hello.rank)]
        return []

    def _guard_write(self, write: m.GuardWrite) -> list[Work | Reply]:
        """memcheck's report of a host write into a guard area, in msSanitizer's words (mem_error_def.h,
        PrintGMAddrError): its distance past the buffer's end as msSanitizer computes it, in u64."""
        if "memcheck" not in self.config.tools:
            return []
        self.guard_writes += 1
        if self.guard_writes > MAX_GUARD_WRITES:
            if self.guard_writes > MAX_GUARD_WRITES + 1:
                return [GuardWriteRefused([])]
            detail = (
                f"sanitizerd reports the first {MAX_GUARD_WRITES} host writes into a GM guard area of a session; "
                "later ones are not reported"
            )
            return [GuardWriteRefused([self.context.finding("internal_error", space="GM", detail=detail)])]
        distance = (write.out_address - write.user_address - write.user_size) % (1 << 64)
        detail = (
            f"Access to {write.out_address:#x} on GM is {distance} byte(s) after the nearest allocation at "
            f"{write.user_address:#x} of size {write.user_size} byte(s)"
        )
        finding = self.context.finding(
            "guard_write", kernel=self.last_kernel_name or None, space="GM", address=write.out_address,
            size=write.out_size, detail=detail,
        )  # fmt: skip
        return [SessionFindings([finding])]

    def _count_allocation(self, op: m.HostOp) -> None:
        if op.op not in ("malloc", "free"):
            return
        key = (TABLE_OF_SOURCE.get(op.source, LEAKING_TABLE), op.address)
        if op.op == "free":
            self.live_allocations.discard(key)
        elif key not in self.live_allocations:
            if len(self.live_allocations) >= self.max_live_allocations:
                raise RemoteProtocolError(
                    f"malloc at {op.address:#x}: the session holds its bound of {self.max_live_allocations} live "
                    "allocations (--max-live-allocations)",
                    reason="resource_limit",
                )
            self.live_allocations.add(key)

    def _locations(self, message: m.Locations) -> None:
        known = self.context.locations
        held = self.location_bytes
        for location in message.locations:
            replaced = known.get(location.id)
            held += _location_size(location) - (_location_size(replaced) if replaced is not None else 0)
        if held > MAX_LOCATION_BYTES:
            raise RemoteProtocolError(
                f"source locations of about {held} bytes, over the session's bound of {MAX_LOCATION_BYTES}",
                reason="resource_limit",
            )
        self.location_bytes = held
        for location in message.locations:
            known[location.id] = location

    def _region(self, region: m.RegionPermission) -> list[Work | Reply]:
        """A memory-permission region, for the detectors that judge by it; malformed ones end the session as any
        bad packet, one past the session's bound is refused and said."""
        if region.flags & ~m.REGION_FLAGS:
            raise RemoteProtocolError(
                f"region_permission flags {region.flags:#x}: bits outside read (0x1), write (0x2) and shared (0x4)",
                reason="bad_packet",
            )
        if region.address + region.size > m.ADDRESS_END_MAX:
            raise RemoteProtocolError(
                f"region_permission of {region.size} bytes at {region.address:#x} passes the end of the address space",
                reason="bad_packet",
            )
        if not region.size:
            return []  # marks no byte (msSanitizer's SetPermission changes nothing either)
        if self.regions >= m.MAX_REGIONS:
            detail = (
                f"memory-permission region of {region.size} bytes at {region.address:#x} refused: the session holds "
                f"its bound of {m.MAX_REGIONS} regions; accesses to it are not judged by its permission"
            )
            return [RegionRefused(self.context.finding("internal_error", address=region.address, size=region.size,
                                                       space="GM", detail=detail))]  # fmt: skip
        self.regions += 1
        if region.device < 0:
            region = m.RegionPermission(
                address=region.address, size=region.size, device=self.context.device, flags=region.flags
            )
        return [region]

    def _ipc(self, ipc: m.Ipc) -> list[Work | Reply]:
        work: list[Work | Reply] = []
        reason = ""
        if ipc.op == "set":
            reason = self.ipc.set(ipc.name, self.id, ipc.address, ipc.size)
            if not reason:
                work.append(SharedSpan(ipc.address, ipc.size, self.id, ipc.address))
        elif ipc.op == "map":
            export, reason = self.ipc.map(ipc.name, self.id, ipc.address)
            if export is not None:
                work.append(self._ipc_host_op("malloc", ipc.address, export.size, ipc))
                work.append(SharedSpan(ipc.address, export.size, export.session, export.address))
        elif ipc.op == "unmap":
            reason = self.ipc.unmap(self.id, ipc.address)
            if not reason:
                work.append(self._ipc_host_op("free", ipc.address, 0, ipc))
                work.append(SharedSpan(ipc.address, 0, 0, 0))
        else:
            export = self.ipc.exports.get(ipc.name)
            ended, reason = self.ipc.destroy(ipc.name)
            if export is not None and export.session == self.id and not reason:
                work.append(SharedSpan(export.address, 0, 0, 0))
            if ended:
                for address in sorted(ended.pop(self.id, ())):
                    work.append(self._ipc_host_op("free", address, 0, ipc))
                    work.append(SharedSpan(address, 0, 0, 0))
                if ended:
                    work.append(ForeignFrees(ended))
        work.append(m.IpcResult(op=ipc.op, name=ipc.name, address=ipc.address, ok=not reason, reason=reason))
        return work

    def unmapped_elsewhere(self, addresses: set[int]) -> None:
        """Another session's ``ipc destroy`` ended these mappings of ours: free them before our next message."""
        for address in sorted(addresses):
            self.external.append(m.HostOp(op="free", address=address, source="bypass", desc="ipc_memory"))
            self.external.append(SharedSpan(address, 0, 0, 0))

    @staticmethod
    def _ipc_host_op(op: str, address: int, size: int, ipc: m.Ipc) -> m.HostOp:
        return m.HostOp(
            op=op,  # type: ignore[arg-type]
            address=address,
            size=size,
            source="bypass",
            desc="ipc_memory",
            serial=ipc.serial,
            location=ipc.location,
        )

    def _device(self, summary: m.DeviceSummary) -> None:
        try:
            self.context.chip = chip_named(summary.chip)
        except KeyError as exc:
            raise RemoteProtocolError(str(exc.args[0]), reason="bad_packet") from None
        if summary.device >= 0:
            self.context.device = summary.device

    def _kernel_begin(self, begin: m.KernelBegin) -> list[Work | Reply]:
        if self.current is not None:
            raise RemoteProtocolError(
                f"kernel_begin {begin.kernel} while kernel {self.current.launch.kernel} is still running",
                reason="unexpected_message",
            )
        if begin.kernel in self.kernels:  # ended, but its detectors are still checking it: its verdict is owed
            raise RemoteProtocolError(
                f"kernel_begin {begin.kernel}: that launch id is still being checked; ids are unique within a session",
                reason="bad_reference",
            )
        wanted = self.config.kernel_name
        name = demangle(begin.name, self.config.demangle)
        launch = KernelLaunch(begin.kernel, name, begin.block_dim, begin.kernel_type)
        state = KernelState(launch, checked=not wanted or wanted in begin.name, debug_line=begin.debug_line)
        self.kernels[begin.kernel] = self.current = state
        self.last_kernel_name = name
        self.kernels_seen += 1
        return [StartKernel(launch)] if state.checked else []

    def _running(self, kernel: int, what: str) -> KernelState:
        if self.current is None or self.current.launch.kernel != kernel:
            raise RemoteProtocolError(f"{what} for kernel {kernel}, which is not running", reason="bad_reference")
        return self.current

    def _events(self, batch: m.Events) -> list[Work | Reply]:
        state = self._running(batch.kernel, "events")
        events = as_events(batch.records)
        state.events += events.size
        self.events += events.size
        if not state.checked or not events.size or not self.detectors:  # counted; nobody to hand them to
            return []
        if self.config.block_id >= 0:
            events = events[events["block_id"] == self.config.block_id]
        return [Batch(events)]  # each detector's pipeline cuts it by the pieces that detector walks

    def _kernel_end(self, end: m.KernelEnd) -> list[Work | Reply]:
        state = self._running(end.kernel, "kernel_end")
        self.current = None
        lost = self._lost_records(state, end.lost) + self._problems(state, end.problems)
        if state.checked and self.detectors:
            state.pending = len(self.detectors)
            return [*lost, EndKernel(end.kernel)]
        del self.kernels[end.kernel]
        return [*lost, self._answer(state)]

    def _lost_records(self, state: KernelState, losses: list[m.BlockLoss]) -> list[SessionFindings]:
        """msSanitizer's record-buffer overflow report (reference §1.4), as an internal_error per block."""
        findings = []
        cache = self.config.cache_size
        for loss in losses:
            state.lost += loss.records
            needed = loss.bytes or loss.records * EVENT_DTYPE.itemsize
            lost_mb = -(-needed // (1 << 20))
            if cache + lost_mb <= MAX_CACHE_SIZE_MB:
                detail = (
                    f"{loss.records} records undetected in block {loss.block_id}, please use "
                    f"--cache-size={cache + lost_mb} to run the operator again."
                )
            else:
                detail = (
                    f"{loss.records} records undetected in block {loss.block_id}, exceed the max record buffer "
                    f"size for each block: {MAX_CACHE_SIZE_MB}. Some records were discarded, the detection "
                    "result maybe unreliable!"
                )
            block_name = block_type_name(loss.block_type)
            findings.append(
                self.context.finding(
                    "internal_error",
                    kernel=state.launch.name,
                    blocks={block_name: [loss.block_id]},
                    space="",
                    size=loss.records,
                    detail=detail,
                )
            )
        state.errors += len(findings)
        return [SessionFindings(findings)] if findings else []

    def _problems(self, state: KernelState, problems: list[str]) -> list[SessionFindings]:
        """What the client could not turn into events, one internal_error each: the kernel's result is incomplete."""
        if not problems:
            return []
        findings = [
            self.context.finding("internal_error", kernel=state.launch.name, space="", detail=text) for text in problems
        ]
        state.errors += len(findings)
        state.incomplete = True
        return [SessionFindings(findings)]

    # --- detector results --------------------------------------------------------------------------------------

    def count(self, findings: list[Finding]) -> None:
        """Count findings (marked by the suppression rules first): a suppressed one is neither error nor warning."""
        errors, warnings, suppressed = _tally(findings)
        self.errors += errors
        self.warnings += warnings
        self.suppressed += suppressed

    def kernel_checked(self, kernel: int, findings: list[Finding]) -> Answer | None:
        """One detector finished a kernel; the verdict (for the client) and the report (for the job's watchers)
        once the last one has."""
        state = self.kernels[kernel]
        errors, warnings, suppressed = _tally(findings)
        state.errors += errors
        state.warnings += warnings
        state.suppressed += suppressed
        state.pending -= 1
        if state.pending:
            return None
        del self.kernels[kernel]
        return self._answer(state)

    def _answer(self, state: KernelState) -> Answer:
        launch = state.launch
        verdict = m.Verdict(
            kernel=launch.kernel,
            events=state.events,
            errors=state.errors,
            warnings=state.warnings,
            checked=state.checked,
            lost=state.lost,
            incomplete=state.incomplete or state.lost > 0,
            suppressed=state.suppressed,
        )
        # the watchers are told all the client's verdict says, and the launch's name and tools
        report = m.KernelChecked(
            session=self.id,
            name=launch.name,
            tools=[d.name for d in self.detectors] if state.checked else [],
            debug_line=state.debug_line,
            **msgspec.structs.asdict(verdict),
        )
        return Answer(verdict, report)


def _tally(findings: list[Finding]) -> tuple[int, int, int]:
    """(errors, warnings, suppressed) of findings already marked."""
    suppressed = sum(1 for f in findings if f.suppressed)
    errors = sum(1 for f in findings if f.severity == ERROR and not f.suppressed)
    return errors, len(findings) - errors - suppressed, suppressed


def _location_size(location: m.Location) -> int:
    return 64 + len(location.file) + len(location.function) + 8 * len(location.callers)


def _check_host_range(op: m.HostOp) -> None:
    """A host operation's bytes lie in the 64-bit address space: each field fits, but their sum may not."""
    for what, start in (("address", op.address), ("src", op.src if op.op == "memcpy" else 0)):
        if start + op.size > m.ADDRESS_END_MAX:
            raise RemoteProtocolError(
                f"host_op {op.op} of {op.size} bytes at {what} {start:#x} passes the end of the address space",
                reason="bad_packet",
            )
