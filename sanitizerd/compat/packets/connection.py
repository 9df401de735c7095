"""msSanitizer's client protocol, sans-I/O: the hooks' packets in, sanitizerd's native messages out.

``CompatConnection`` has the interface of ``sanitizerd_protocol.Connection`` as ``MessageStream`` uses it, so the
daemon serves a connection of msSanitizer's hook or injection libraries as an ordinary producer session: the I/O
layer feeds it bytes (``b""`` at EOF) and calls ``next_event`` until ``NEED_DATA``; ``send`` turns the session's
replies into msSanitizer's packets (docs/mssanitizer-compat.md).

Framing is ``[u32 PacketType][payload]``: a fixed struct of the layout's size, or ``[u64 length][bytes]``. Lengths
are checked before anything is buffered. A KERNEL_RECORD (one sub-block slot of a kernel's record buffer, up to
8 GiB) is never held whole: its heads are read, then its records are decoded as they arrive, a chunk at a time, and
each chunk's events go out as one ``events`` batch. A damaged record buffer is a problem of its kernel (an
internal_error finding), not of the connection: the stream goes on.
"""

from __future__ import annotations

import hashlib
import struct
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np

from sanitizerd.chips import DEFAULT_CHIP, Chip, chip_named
from sanitizerd.compat import stacks, wire
from sanitizerd.compat.records import slots
from sanitizerd.compat.records.convert import base as convert_base
from sanitizerd.compat.records.convert.base import BlockContext, RecordPlaces
from sanitizerd.compat.records.convert.bounds import ExpansionBudget
from sanitizerd.compat.records.numbering import record_table
from sanitizerd.compat.records.types import RecordType
from sanitizerd.compat.wire import LENGTH, PACKET_HEAD, PacketType, WireLayout, c_text
from sanitizerd_protocol import messages as m
from sanitizerd_protocol.errors import LocalProtocolError, RemoteProtocolError
from sanitizerd_protocol.receiving import CONNECTION_CLOSED, NEED_DATA, ReceiveBuffer, ReceivingEnd, Sentinel, State
from sanitizerd_protocol.records import BLOCK_RECORDS_ENDED, EVENT_DTYPE, EventKind
from sanitizerd_protocol.texts import cap_strings

# Record bytes handed to the decoder at once. The slot's bytes held at any time stay within about this (plus one
# record the decoder could not finish): a slot may be gigabytes.
CHUNK_SIZE: Final = 2 << 20
# Messages held at most until the stream has shown it speaks this release (CompatConnection._release): a client
# that sends many host records before its first launch has them released past this many.
MAX_HELD: Final = 4096
# Variable packets that are held whole before they are used: a kernel's ELF (with DWARF) and one hook log line.
MAX_KERNEL_BINARY: Final = 256 << 20
MAX_LOG_STRING: Final = 64 << 10
# Kernel binaries kept parsed, by digest: the injection library resends the same ELF at each launch.
KERNEL_BINARY_CACHE: Final = 8
# ...and at most this many bytes of them: a binary is kept with its ELF (stacks are read from it lazily), and a
# connection that sent eight of the largest would otherwise hold 2 GiB.
KERNEL_BINARY_CACHE_BYTES: Final = 256 << 20
# msSanitizer's message when the security value at the start of a RecordGlobalHead was overwritten.
SECURITY_MESSAGE: Final = slots.SECURITY_TEXT
_IPC_TYPE: Final = struct.Struct("<I")  # IPCMemRecord's IPCOperationType, at 0 in every release
_MAX_PROBLEMS: Final = m.MAX_KERNEL_PROBLEMS


def _said(exc: Exception) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


@dataclass(slots=True)
class _Kernel:
    """A launch: from its KERNEL_SUMMARY (or its first records) to its last slot or FINISH."""

    id: int
    name: str
    block_dim: int
    kernel_type: str
    pc_start: int
    debug_line: bool = True  # KernelSummary.hasDebugLine
    begun: bool = False  # KernelBegin sent: deferred to the first records, since a summary may have none
    slots: int = 0  # KERNEL_RECORD slots received
    total_slots: int | None = None  # kernelInfo.totalBlockDim of its global head
    lost: list[m.BlockLoss] = field(default_factory=list)
    # A problem's text -> the slots it occurred in; a counted one ("12 BINARY_OP records not converted ...") -> the
    # sum of its counts, so that a kernel of 48 slots says one line per problem, not 48.
    problems: dict[str, int] = field(default_factory=dict)
    counted: dict[str, int] = field(default_factory=dict)
    security_said: bool = False
    last_block: tuple[int, int] | None = None  # (block type, block id) of the last record sent alone
    # What the launch's records may still become, and the records refused (convert/bounds.py): one per launch.
    budget: ExpansionBudget = field(default_factory=ExpansionBudget)

    def problem(self, text: str) -> None:
        count, _, rest = text.partition(" ")
        if count.isdigit() and rest:
            self.counted[rest] = self.counted.get(rest, 0) + int(count)
        else:
            self.problems[text] = self.problems.get(text, 0) + 1

    def problem_lines(self) -> list[str]:
        # Refused records first: they are what the user must hear of, whatever else went wrong.
        lines = self.budget.problem_lines()
        lines += [text if n == 1 else f"{text} ({n} slots)" for text, n in self.problems.items()]
        lines += [f"{n} {rest}" for rest, n in self.counted.items()]
        if len(lines) > _MAX_PROBLEMS:
            more = len(lines) - _MAX_PROBLEMS + 1
            lines = [*lines[: _MAX_PROBLEMS - 1], f"... and {more} more problems of this kernel"]
        return lines


@dataclass(slots=True)
class _Slot:
    """One KERNEL_RECORD being received."""

    index: int  # slot number within the kernel
    length: int  # the packet's length
    remaining: int  # bytes of the packet not yet taken from the buffer
    heads: slots.SlotHeads | None = None  # once read
    decoder: slots.SlotDecoder | None = None  # None while skipping
    tail: bytes = b""  # record bytes the decoder has not consumed yet
    skipping: bool = False  # the rest of the slot is dropped (its heads or records are damaged)


def _block_finish(block_type: int, block_id: int, serial: int) -> np.ndarray:
    """The event that says a block has ended: its on-chip memory is undefined again (initcheck)."""
    event = np.zeros(1, dtype=EVENT_DTYPE)
    event["kind"] = EventKind.BLOCK_FINISH
    event["mode"] = BLOCK_RECORDS_ENDED  # msSanitizer's BLOCK_FINISH says the records ended, not the block
    event["block_type"], event["block_id"], event["serial"] = block_type, block_id, serial
    event["block_num"] = event["repeat"] = event["block_stride"] = 1
    return event


class CompatConnection(ReceivingEnd):
    """Protocol state of one connection of msSanitizer's hooks, from the daemon's side."""

    def __init__(
        self,
        layout: WireLayout,
        *,
        job: str,
        peer_pid: int,
        chunk_size: int = CHUNK_SIZE,
    ) -> None:
        self.layout = layout
        self.job = job
        self.peer_pid = peer_pid
        self.chunk_size = chunk_size
        self.state = State.HANDSHAKE
        self.client_role = "producer"
        super().__init__()
        self._ended = False  # the close at EOF has been returned
        # Messages decoded (``_out``) are held until the stream has shown it speaks this release (``_confirmed``),
        # then returned (``_ready``): see ``_release``.
        self._out: deque[m.Message] = deque()
        self._ready: deque[m.Message] = deque()
        self._confirmed = False
        self._cuts: list[tuple[str, int]] = []
        # Told, at a kernel's end, how many of its records were refused over their bounds, by reason (the metric).
        self.on_refused: Callable[[str, int], None] = lambda reason, records: None
        # Told how many records were past the bound on distinct places (reported at unknown:0), as they are met.
        self.on_unplaced: Callable[[int], None] = lambda records: None
        self._to_send = bytearray()  # replies the connection makes itself (data_to_send)
        # framing
        self._packet: int | None = None  # the type of the packet begun, once its head is read
        self._length: int | None = None  # a variable packet's length, once read
        self._slot: _Slot | None = None
        # session-wide state
        # msSanitizer's serialNo: one per host record and per kernel record, from where this release starts it
        self._serial = layout.first_serial
        self._kernel_ids = 0
        self._kernel: _Kernel | None = None
        self._responses: dict[int, int] = {}  # kernel id -> blockIdx of its KERNEL_RECORD_RESPONSE
        # IPCOperationType of each ipc message the session will answer, in order; None: its client waits for none
        self._ipc_codes: deque[int | None] = deque()
        self._chip_name = DEFAULT_CHIP
        self._chip: Chip = chip_named(DEFAULT_CHIP)
        self._trace_registers = False  # the welcome's config asks memcheck to trace vector masks
        self._binary: Any = None  # stacks.KernelBinary of the current kernel
        self._binaries: OrderedDict[bytes, tuple[Any, int]] = OrderedDict()  # digest -> (binary, ELF bytes)
        self._binary_bytes = 0
        self._pc_locations: dict[tuple[int, int], int] = {}  # (binary id, pc) -> location id (0: none)
        self._frame_locations: dict[tuple[Any, ...], int] = {}  # a frame and its callers -> location id
        self._locations = 0
        self._binary_problems_said: set[int] = set()
        # Each record's location id, set by the converters: its pc's stack, or its own (fileNo, lineNo).
        self._places = RecordPlaces(self._resolve_place)
        self._pending_locations: list[m.Location] = []  # made while decoding; sent before the events that name them
        self._binaries_sent = 0
        self._places_over_said = False
        self._places_over_counted = 0
        # This release's packet numbers: fixed packets -> payload size, and what reads each payload.
        handlers = {
            PacketType.DEVICE_SUMMARY: self._device_summary,
            PacketType.KERNEL_SUMMARY: self._kernel_summary,
            PacketType.HOST_RECORD: self._host_record,
            PacketType.MEMORY_RECORD: self._host_record,  # HOST_RECORD renamed (26.1.0), the same HostMemRecord
            PacketType.IPC_RECORD: self._ipc_record,
            PacketType.MEM_REGION_PERMISSION: self._mem_region_permission,
            PacketType.SANITIZER_RECORD: self._sanitizer_record,
            PacketType.GM_ADDR_OUT_OF_BOUND_RECORD: self._gm_out_of_bound,
        }
        self._kinds = dict(layout.packet_types)
        self._sizes = {n: layout.fixed_payload_size(p) for n, p in self._kinds.items() if p in handlers}
        self._handlers = {n: handlers[p] for n, p in self._kinds.items() if p in handlers}
        self._records = record_table(layout)
        self._packet_number_kernel_record = layout.packet_number(PacketType.KERNEL_RECORD)
        self._ipc_views = wire.ipc_views(layout)
        self._simt = slots.simt_shape(layout)
        self._block_finish_type = self._records.wire(RecordType.BLOCK_FINISH)
        self._finish_type = self._records.wire(RecordType.FINISH)
        self._kernel_finish_type = self._records.wire(RecordType.KERNEL_FINISH)

    # --- the implicit hello --------------------------------------------------------------------------------

    def hello(self) -> m.Hello:
        """The hello the daemon opens the session with: msSanitizer's hooks say nothing before sending records."""
        return m.Hello(version=m.PROTOCOL_VERSION, role="producer", pid=self.peer_pid, tool="mssanitizer", job=self.job)

    # --- receiving -----------------------------------------------------------------------------------------

    def next_event(self) -> m.Message | Sentinel:
        """The next native message, ``NEED_DATA`` or ``CONNECTION_CLOSED``; raises RemoteProtocolError."""
        if self.state is State.ERROR:
            raise RemoteProtocolError("connection is in ERROR after an earlier protocol error", reason="bad_packet")
        try:
            while not self._ready:
                progress = self._step()
                if self._out and (self._confirmed or len(self._out) > MAX_HELD):
                    self._release()
                if not progress and not self._ready:
                    if self._eof and not self._ended:
                        self._at_eof()
                        continue
                    return CONNECTION_CLOSED if self._ended else NEED_DATA
        except RemoteProtocolError:
            self._fail()
            raise
        message = self._ready.popleft()
        self._cuts.extend(cap_strings(message))
        return message

    def data_to_send(self) -> bytes:
        """Replies the connection makes on its own (an IPC_RESPONSE to an IPC operation this release does not
        define): the I/O layer writes them after ``next_event``. ``b""`` when there are none."""
        data, self._to_send = bytes(self._to_send), bytearray()
        return data

    def take_cuts(self) -> list[tuple[str, int]]:
        cuts, self._cuts = self._cuts, []
        return cuts

    @property
    def buffered(self) -> int:
        """Bytes received and held, not yet turned into messages (a slot's bytes are not held: they stream)."""
        return len(self._buffer) + (len(self._slot.tail) if self._slot is not None else 0)

    @property
    def in_packet(self) -> bool:
        """Whether a packet has begun and not ended: a streamed slot can leave nothing buffered mid-packet."""
        return self._packet is not None or bool(self._buffer)

    def _fail(self) -> None:
        self.state = State.ERROR
        self._ready.clear()
        self._buffer = ReceiveBuffer()
        self._slot = None
        self._out.clear()

    # --- framing -------------------------------------------------------------------------------------------

    def _step(self) -> bool:
        """Make progress on the stream: False when nothing more can be done with the bytes held."""
        buffer = self._buffer
        if self._packet is None:
            if len(buffer) < PACKET_HEAD.size:
                if self._eof and buffer:
                    raise RemoteProtocolError("peer closed inside a packet's type", reason="truncated")
                return False
            (packet,) = PACKET_HEAD.unpack(buffer.take(PACKET_HEAD.size))
            self._packet = self._known(packet)
        packet = self._packet
        size = self._sizes.get(packet)
        if size is None:
            return self._variable(packet)
        if len(buffer) < size:
            self._truncated_at_eof(packet, len(buffer), size)
            return False
        payload = bytes(buffer.take(size))
        self._packet = None
        self._handlers[packet](payload)
        if self._kinds[packet] is PacketType.IPC_RECORD:
            self._release()  # its client waits for the answer: what came before it cannot wait either
        return True

    def _release(self) -> None:
        """What was decoded goes out. Until the stream has shown that it speaks this release (a slot whose heads add
        up, ``_read_heads``), what it says is held: a client of another release writes structs of other sizes,
        which read as valid packets for a while (zero padding is DEVICE_SUMMARY's number in every release) before
        garbage shows, and held, a misread host record never reaches a detector (a false illegal free, say). The
        stream's end, an IPC request (its client waits for the answer) and MAX_HELD messages release it too."""
        self._ready.extend(self._out)
        self._out.clear()

    def _known(self, packet: int) -> int:
        kind = self._kinds.get(packet)
        if packet in self._sizes or kind in wire.VARIABLE_PACKETS:
            return packet
        if kind in wire.SERVER_PACKETS:
            raise RemoteProtocolError(f"packet type {kind.name} is the server's to send", reason="bad_packet")
        known = ", ".join(str(n) for n in sorted(self._kinds) if self._kinds[n] not in wire.SERVER_PACKETS)
        # msSanitizer's hooks send only their release's numbers: another number is another release's packet (its
        # renumbered SANITIZER_RECORD, say), or a struct of another size read past its end.
        raise RemoteProtocolError(
            f"unknown packet type {packet} ({self.layout.name} defines {known}): a client of another msSanitizer "
            "release would send such numbers; " + wire.other_releases_text(self.layout),
            reason="wire_mismatch",
        )

    def _name(self, packet: int) -> str:
        kind = self._kinds.get(packet)
        return kind.name if kind is not None else str(packet)

    def _truncated_at_eof(self, packet: int, have: int, need: int) -> None:
        if self._eof:
            raise RemoteProtocolError(
                f"peer closed after {have} of the {need} bytes of a {self._name(packet)} packet",
                reason="truncated",
            )

    def _variable(self, packet: int) -> bool:
        buffer = self._buffer
        kind = self._kinds[packet]
        if self._length is None:
            if len(buffer) < LENGTH.size:
                self._truncated_at_eof(packet, len(buffer), LENGTH.size)
                return False
            (length,) = LENGTH.unpack(buffer.take(LENGTH.size))
            self._check_length(kind, length)
            self._length = length
            if kind is PacketType.KERNEL_RECORD:
                kernel = self._kernel_for_records()
                self._slot = _Slot(index=kernel.slots, length=length, remaining=length)
        length = self._length
        if kind is PacketType.KERNEL_RECORD:
            return self._stream_slot()
        if len(buffer) < length:
            self._truncated_at_eof(packet, len(buffer), length)
            return False
        data = bytes(buffer.take(length))
        self._packet = self._length = None
        if kind is PacketType.KERNEL_BINARY:
            self._kernel_binary(data)
        else:
            self._out.append(m.Log(text=data.decode("utf-8", "replace").rstrip("\0\n"), level="info"))
        return True

    def _check_length(self, kind: PacketType, length: int) -> None:
        heads = self.layout.heads_size
        limit = {
            PacketType.KERNEL_BINARY: MAX_KERNEL_BINARY,
            PacketType.LOG_STRING: MAX_LOG_STRING,
            PacketType.KERNEL_RECORD: heads + self.layout.max_block_bytes,
        }[kind]
        if length > limit:
            raise RemoteProtocolError(
                f"{kind.name} of {length} bytes exceeds the limit of {limit}", reason="frame_too_large"
            )
        if kind is PacketType.KERNEL_RECORD and length < heads:
            raise RemoteProtocolError(
                f"KERNEL_RECORD of {length} bytes is shorter than its heads ({heads} bytes); "
                + wire.other_releases_text(self.layout),
                reason="wire_mismatch",
            )

    # --- fixed packets -------------------------------------------------------------------------------------

    def _device_summary(self, payload: bytes) -> None:
        device, _block_size, block_num, device_id = self.layout.device_summary.struct.unpack(payload)
        chip = wire.chip_of_device(device)
        if chip is None:
            self._out.append(
                m.Log(
                    text=f"DEVICE_SUMMARY names DeviceType {device}, which this release does not define: "
                    f"checking as {self._chip_name}",
                    level="warn",
                )
            )
        else:
            self._chip_name, self._chip = chip, chip_named(chip)
        self._out.append(m.DeviceSummary(chip=self._chip_name, block_num=block_num, device=device_id))

    def _kernel_summary(self, payload: bytes) -> None:
        pc_start, block_dim, kernel_type, _dbi, debug_line, raw_name = self.layout.kernel_summary.struct.unpack(
            payload
        )
        kernel = self._kernel
        if kernel is not None and kernel.begun:
            # The hooks wait for a kernel's last slot's answer before the next launch: this one's slots stopped
            # short (the injection library gave up on a copy). It gets no answer: the client is not waiting for one,
            # and an answer now would be taken as the next kernel's.
            self._end_kernel(
                kernel, respond=False, why=f"the next launch began after {kernel.slots} of {kernel.total_slots} slots"
            )
        type_name = wire.KERNEL_TYPE_NAMES.get(kernel_type)  # type: ignore[call-overload]
        if type_name is None:
            self._out.append(m.Log(text=f"KERNEL_SUMMARY with KernelType {kernel_type}: taken as aiv", level="warn"))
            type_name = "aiv"
        # A summary whose launch sends no records (its record buffer could not be set up) is replaced by the next.
        self._kernel = self._new_kernel(c_text(raw_name), block_dim, type_name, pc_start, bool(debug_line))

    def _new_kernel(
        self, name: str, block_dim: int, kernel_type: str, pc_start: int, debug_line: bool = True
    ) -> _Kernel:
        self._kernel_ids += 1
        return _Kernel(self._kernel_ids, name, block_dim, kernel_type, pc_start, debug_line=debug_line)

    def _kernel_for_records(self) -> _Kernel:
        """The kernel records belong to, begun now if they are its first; records without a summary (msSanitizer
        would count them into the last kernel's slots) become a launch named "unknown"."""
        kernel = self._kernel
        if kernel is None:
            kernel = self._kernel = self._new_kernel("unknown", 0, "aiv", 0)
        if not kernel.begun:
            kernel.begun = True
            self._places.bind((self._binaries_sent, kernel.pc_start))
            self._out.append(
                m.KernelBegin(
                    kernel=kernel.id,
                    name=kernel.name,
                    block_dim=kernel.block_dim,
                    kernel_type=kernel.kernel_type,  # type: ignore[arg-type]
                    pc_start=kernel.pc_start,
                    debug_line=kernel.debug_line,
                )
            )
        return kernel

    def _end_kernel(self, kernel: _Kernel, *, respond: bool, why: str = "") -> None:
        if why:
            kernel.problem(f"kernel {kernel.name!r} ended incomplete: {why}")
        self._out.append(m.KernelEnd(kernel=kernel.id, lost=kernel.lost, problems=kernel.problem_lines()))
        for reason, records in kernel.budget.take_counts().items():
            self.on_refused(reason, records)
        if respond:
            self._responses[kernel.id] = kernel.slots
        if self._kernel is kernel:
            self._kernel = None

    def _next_serial(self) -> int:
        serial = self._serial
        self._serial += 1
        return serial

    def _fields(self, struct_name: str, payload: bytes | memoryview) -> dict[str, Any]:
        layout = self.layout.structs[struct_name]
        return dict(zip(layout.names, layout.struct.unpack(payload[: layout.size]), strict=True))

    def _host_record(self, payload: bytes) -> None:
        f = self._fields("HostMemRecord", payload)
        serial = self._next_serial()
        host_op = self._host_op(
            f["type"], f["infoSrc"], f["infoDesc"], f["srcAddr"], f["dstAddr"], f["memSize"], f["rootAddr"], serial
        )
        if host_op is not None:
            self._out.append(host_op)

    def _mem_region_permission(self, payload: bytes) -> None:
        """26.1.0 on: the access a region of device memory allows, as our ``region_permission``. What msSanitizer's
        SetPermission would not apply (a range past the end of the address space) is said and dropped; flag bits it
        does not define are said and dropped, as its check reads only read, write and shared."""
        f = self._fields("MemRegionPermissionDesc", payload)
        address, size, device, flags = f["addr"], f["size"], f["deviceId"], f["flags"]
        said = f"memory region permission: {size} bytes at {address:#x} on device {device}, flags {flags:#x}"
        if address + size > m.ADDRESS_END_MAX:
            self._out.append(m.Log(text=f"{said}: passes the end of the address space, not applied", level="warn"))
            return
        if flags & ~m.REGION_FLAGS:
            unknown = flags & ~m.REGION_FLAGS
            text = f"{said}: bits {unknown:#x} are not msSanitizer's flags, ignored"
            self._out.append(m.Log(text=text, level="warn"))
        self._out.append(m.RegionPermission(address=address, size=size, device=device, flags=flags & m.REGION_FLAGS))

    def _gm_out_of_bound(self, payload: bytes) -> None:
        """26.1.0 on: a host-side write (the aicpu tiling sink) found in the guard area after a GM buffer: memcheck
        reports it (``m.GuardWrite``). The struct's four members are u64/u32 as measured, so any bytes fit."""
        f = self._fields("GMAddrOutOfBoundRecord", payload)
        self._out.append(
            m.GuardWrite(
                user_address=int(f.get("userAddr", 0)), user_size=int(f.get("userSize", 0)),
                out_address=int(f.get("outAddr", 0)), out_size=int(f.get("outSize", 0)),
            )
        )  # fmt: skip

    def _host_op(
        self, op: int, src: int, desc: int, src_addr: int, dst_addr: int, size: int, root: int, serial: int
    ) -> m.HostOp | None:
        """A MemOpRecord's fields as a host op; None (said in a log line) for an operation or source this release
        does not define, which msSanitizer's memcheck ignores too."""
        op_name = wire.HOST_OP_NAMES.get(op)  # type: ignore[call-overload]
        source = wire.SOURCE_NAMES.get(src)  # type: ignore[call-overload]
        if op_name is None or source is None:
            self._out.append(
                m.Log(text=f"host record with MemOpType {op} and MemInfoSrc {src} ignored (not defined)", level="warn")
            )
            return None
        return m.HostOp(
            op=op_name,
            address=dst_addr,
            size=size,
            src=src_addr if op_name == "memcpy" else 0,
            source=source,
            desc=wire.DESC_NAMES.get(desc, str(desc)),  # type: ignore[call-overload]
            serial=serial,
            root=root,
        )

    def _ipc_record(self, payload: bytes) -> None:
        self._ipc(payload, answered=True)

    def _ipc(self, payload: bytes, *, answered: bool) -> None:
        """An IPC operation; ``answered``: its client waits for an IPC_RESPONSE (an IPC_RECORD packet does, the
        IPC variant of SANITIZER_RECORD, which no released hook sends, does not)."""
        (op,) = _IPC_TYPE.unpack_from(payload)
        name = wire.IPC_OP_NAMES.get(op)  # type: ignore[call-overload]
        view = self._ipc_views.get(op)
        if name is None or view is None:
            # msSanitizer answers an operation it does not define with nothing, and its client waits for ever:
            # here the answer is FAIL, at once, and the operation changes nothing.
            if answered:
                self._to_send += wire.encode_ipc_response(op, False, self.layout)
            self._out.append(m.Log(text=f"IPC operation type {op} is not defined: answered FAIL", level="warn"))
            return
        fields = dict(zip(view.names, view.struct.unpack(payload[: view.size]), strict=True))
        address, size = fields.get("addr", 0), fields.get("size", 0)
        ipc_name = c_text(fields.get("name", b""))
        # The operations that become host records (map, unmap, destroy's frees) take a serial, as msSanitizer's do.
        serial = 0 if op == wire.IpcOperation.SET_INFO else self._next_serial()
        self._ipc_codes.append(op if answered else None)
        self._out.append(m.Ipc(op=name, name=ipc_name, address=address, size=size, serial=serial))

    def _sanitizer_record(self, payload: bytes) -> None:
        (version,) = _IPC_TYPE.unpack_from(payload)  # RecordVersion: a u32 at 0, as IPCMemRecord's type
        body = payload[self.layout.sanitizer_record_payload_offset :]
        if version == wire.RecordVersion.MEMORY_RECORD:
            self._memory_record(body[: self.layout.mem_op_record.size])
        elif version == wire.RecordVersion.IPC_RECORD:
            self._ipc(body[: self.layout.ipc_mem_record_size], answered=False)
        elif version == wire.RecordVersion.KERNEL_RECORD:
            self._single_kernel_record(body[: self.layout.kernel_record_size])
        else:
            raise RemoteProtocolError(f"SANITIZER_RECORD of version {version} (0-2 are defined)", reason="bad_packet")

    def _memory_record(self, body: bytes) -> None:
        fields = self._fields("MemOpRecord", body)
        serial = self._next_serial()  # the tool's own count: the hook's serialNo counts only that hook's records
        op = self._host_op(
            fields["type"],
            fields["infoSrc"],
            fields["infoDesc"],
            fields["srcAddr"],
            fields["dstAddr"],
            fields["memSize"],
            fields["rootAddr"],
            serial,
        )
        if op is None:
            return
        op.module = fields["moduleId"]
        file, line = c_text(fields["fileName"]), max(fields["lineNo"], 0)
        if file or line:  # msSanitizer prints the hook's fileName and lineNo as they are (":0" for neither)
            op.location = self._intern((file, line, 0, ""), ())  # pc 0: printed as file:line, as a native one
        self._out.append(op)

    def _single_kernel_record(self, body: bytes) -> None:
        head = self._fields("KernelRecord", body)
        record_type, block_type = head["recordType"], head["blockType"]
        kernel = self._kernel_for_records()
        serial = self._next_serial()
        if record_type in (self._finish_type, self._kernel_finish_type):
            why = ""
            if kernel.total_slots is not None and kernel.slots < kernel.total_slots:
                why = f"FINISH after {kernel.slots} of {kernel.total_slots} slots"
            # The hooks that send records one by one wait for no answer.
            self._end_kernel(kernel, respond=False, why=why)
            return
        if record_type == self._block_finish_type:
            # Sent after each block's records with an empty payload: the block is the one those records named.
            if kernel.last_block is not None:
                self._emit_events(kernel, _block_finish(*kernel.last_block, serial))
                kernel.last_block = None
            return
        context = BlockContext(
            block_type=block_type,
            chip=self._chip,
            budget=kernel.budget,
            places=self._places,
            detailed_types=self._records.detailed_types,
            trace_registers=self._trace_registers,
        )
        payload = memoryview(body)[self.layout.kernel_record_payload_offset :]
        try:
            events, problem = slots.decode_single(record_type, payload, serial, context, self._records)
        except Exception as exc:  # a decoder bug on this record: said, the stream goes on
            kernel.problem(f"record type {record_type}: the record decoder failed ({_said(exc)})")
            return
        if problem:
            kernel.problem(problem)
        if len(events):
            kernel.last_block = (int(events["block_type"][-1]), int(events["block_id"][-1]))
            self._emit_events(kernel, events)

    # --- kernel records ------------------------------------------------------------------------------------

    def _stream_slot(self) -> bool:
        """Take what has arrived of the slot: its heads whole, then its records a chunk at a time."""
        slot = self._slot
        assert slot is not None and self._kernel is not None
        kernel = self._kernel
        buffer = self._buffer
        if slot.heads is None and not slot.skipping:
            heads_size = self.layout.heads_size
            if len(buffer) < heads_size:
                self._truncated_at_eof(self._packet_number_kernel_record, len(buffer), slot.length)
                return False
            self._read_heads(kernel, slot, bytes(buffer.take(heads_size)))
            slot.remaining -= heads_size
            return True
        if slot.skipping:  # dropped: whatever has arrived goes
            take = min(len(buffer), slot.remaining)
            ready = take or not slot.remaining
        else:
            # A whole chunk (or the rest of the slot) at once: batches of tens of thousands of events, not one per
            # socket read, and the bytes waiting for it are buffered where the uid's budget counts them.
            take = min(slot.remaining, max(self.chunk_size - len(slot.tail), 1))
            ready = len(buffer) >= take
        if not ready:
            self._truncated_at_eof(self._packet_number_kernel_record, slot.length - slot.remaining, slot.length)
            return False
        data = buffer.take(take)
        slot.remaining -= take
        final = not slot.remaining
        if not slot.skipping:
            self._decode(kernel, slot, data, final)
        if final:
            self._slot_done(kernel, slot)
        return True

    def _read_heads(self, kernel: _Kernel, slot: _Slot, data: bytes) -> None:
        try:
            heads = slots.read_heads(data, self.layout)
        except Exception as exc:  # RecordBufferError, or a decoder bug: a problem of this kernel either way
            kernel.problem(f"slot {slot.index}: record buffer heads unreadable: {_said(exc)}")
            total = getattr(exc, "total_block_dim", None)
            if kernel.total_slots is None and total is not None:
                kernel.total_slots = int(total)
            slot.skipping = True
            return
        slot.heads = heads
        if kernel.total_slots is None:
            # The injection library loops over the totalBlockDim of its own copy of this head: the same bytes.
            kernel.total_slots = int(heads.total_block_dim)
        if not heads.security_ok:
            # msSanitizer checks only the first slot and drops it; every slot is checked here, each one dropped
            # (its counts and offsets are the user program's writes), and the message said once per kernel.
            if not kernel.security_said:
                kernel.security_said = True
                kernel.problem(SECURITY_MESSAGE)
            slot.skipping = True
            return
        mismatch = slots.wire_mismatch(heads, self.layout, slot.length)
        self._confirmed = not mismatch  # a client of this release: nothing it says from now on is held
        if mismatch:
            # Heads that do not add up are heads read at another release's offsets (or a program that overwrote
            # the whole head, security value aside): nothing read on this connection can be trusted, so it ends
            # here, and its session says why as an error finding rather than check misread records.
            raise RemoteProtocolError(
                f"KERNEL_RECORD slot {slot.index} of kernel {kernel.name!r} ({slot.length} bytes) is not "
                f"{self.layout.name}'s: {mismatch}; " + wire.other_releases_text(self.layout),
                reason="wire_mismatch",
            )
        context = BlockContext(
            block_type=int(heads.block_type),
            chip=self._chip,
            budget=kernel.budget,
            places=self._places,
            detailed_types=self._records.detailed_types,
            trace_registers=self._trace_registers,
        )
        slot.decoder = slots.SlotDecoder(heads, context, self._serial, self._records, self._simt)

    def _decode(self, kernel: _Kernel, slot: _Slot, data: memoryview | bytes, final: bool) -> None:
        try:
            self._decode_chunk(kernel, slot, data, final)
        except Exception as exc:
            # The decoder is meant to turn every damaged buffer into problems(); should it raise instead, that is
            # a bug of ours on this slot's bytes: said as the kernel's problem, the rest of the slot dropped, and
            # the connection goes on (its other kernels and host records are not the slot's fault).
            kernel.problem(f"slot {slot.index}: the record decoder failed ({_said(exc)}); the rest of the slot dropped")
            slot.skipping = True
            slot.tail = b""

    def _decode_chunk(self, kernel: _Kernel, slot: _Slot, data: memoryview | bytes, final: bool) -> None:
        decoder = slot.decoder
        assert decoder is not None  # a slot is decoded only while not skipping
        chunk = b"".join((slot.tail, data)) if slot.tail else data  # one copy, not two
        events, used = decoder.feed(memoryview(chunk), final)
        slot.tail = bytes(chunk[used:]) if used < len(chunk) else b""
        if not final and not used and len(slot.tail) >= self.chunk_size:
            # A record the decoder cannot finish within a whole chunk: no record is that long. What it has is
            # decoded as the end of the slot (it says what is wrong), and the rest of the slot is dropped.
            events2, _ = decoder.feed(memoryview(slot.tail), True)
            kernel.problem(
                f"slot {slot.index}: no whole record in {len(slot.tail)} bytes; the rest of the slot dropped"
            )
            slot.tail = b""
            slot.skipping = True
            events = events2 if not len(events) else np.concatenate([events, events2])
        # Past the slot's end this counts its BLOCK_FINISH too, which the decoder gives as the slot's last event.
        self._serial = decoder.next_serial
        if len(events):
            self._emit_events(kernel, events)

    def _slot_done(self, kernel: _Kernel, slot: _Slot) -> None:
        decoder = slot.decoder
        if decoder is not None:
            try:
                problems, loss = decoder.problems(), decoder.loss()
            except Exception as exc:  # a decoder bug: said, as in _decode
                problems, loss = [f"slot {slot.index}: the record decoder failed ({_said(exc)})"], None
            for text in problems:
                kernel.problem(text)
            if loss is not None:
                kernel.lost.append(loss)
        self._slot = None
        self._packet = self._length = None
        kernel.slots += 1
        if kernel.total_slots is None or kernel.slots >= kernel.total_slots:
            self._next_serial()  # FINISH, msSanitizer's end frame, takes one too
            self._end_kernel(kernel, respond=True)

    def _emit_events(self, kernel: _Kernel, events: np.ndarray) -> None:
        self._said_places()
        if kernel.pc_start and len(events):  # msSanitizer's CalRecordPc: reports and stacks use pc - pcStartAddr
            pcs = events["pc"]
            if not events.flags.writeable:
                events = events.copy()
            kind = events["kind"]
            # A signal event's pc is its value (docs/protocol.md), no program counter: left as it is.
            code = (pcs >= kernel.pc_start) & (kind != EventKind.NPU_SIGNAL_SET) & (kind != EventKind.NPU_SIGNAL_WAIT)
            events["pc"] = np.where(code, pcs - np.uint64(kernel.pc_start), pcs)
        self._out.append(m.Events(kernel=kernel.id, records=memoryview(np.ascontiguousarray(events).view(np.uint8))))

    # --- call stacks ---------------------------------------------------------------------------------------

    def _kernel_binary(self, elf: bytes) -> None:
        self._binary = None
        self._binaries_sent += 1  # what the records' locations were found with changes (RecordPlaces.bind)
        digest = hashlib.blake2b(elf, digest_size=16).digest()
        kept = self._binaries.get(digest)
        if kept is None:
            try:
                binary = stacks.KernelBinary(elf)
            except stacks.KernelBinaryError as exc:
                self._out.append(m.Log(text=f"kernel binary unreadable, no call stacks: {exc}", level="warn"))
                return
            self._binaries[digest] = (binary, len(elf))
            self._binary_bytes += len(elf)
            # The oldest go first; the binary just sent is always kept (one is at most MAX_KERNEL_BINARY).
            while len(self._binaries) > 1 and (
                len(self._binaries) > KERNEL_BINARY_CACHE or self._binary_bytes > KERNEL_BINARY_CACHE_BYTES
            ):
                _, (_, size) = self._binaries.popitem(last=False)
                self._binary_bytes -= size
        else:
            binary = kept[0]
            self._binaries.move_to_end(digest)
        self._binary = binary

    def _resolve_place(self, key: int) -> int:
        """The location of a record's (pc, fileNo, lineNo) key, as msSanitizer's reports choose it: the call stack
        of its pc where the kernel's binary resolves one, else the record's own place."""
        pc = self._places.sites[key][0]
        kernel, binary = self._kernel, self._binary
        known = 0
        if binary is not None and pc and kernel is not None:
            known = self._stack_location(binary, kernel, pc, self._pending_locations)
        return known or self._place_location(binary, key, self._pending_locations)

    def _said_places(self) -> None:
        """The locations decoding made, before the events that name them; what went wrong finding them."""
        if self._pending_locations:
            self._out.append(m.Locations(locations=self._pending_locations))
            self._pending_locations = []
        binary = self._binary
        problem = getattr(binary, "problem", "")
        if problem and id(binary) not in self._binary_problems_said:
            # Damage met in the part of the DWARF a pc needed: those pcs have no stack; said once per binary.
            self._binary_problems_said.add(id(binary))
            self._out.append(m.Log(text=f"call stacks incomplete: {problem}", level="warn"))
        if self._places.over > self._places_over_counted:
            self.on_unplaced(self._places.over - self._places_over_counted)
            self._places_over_counted = self._places.over
        if self._places.over and not self._places_over_said:
            self._places_over_said = True
            self._out.append(
                m.Log(
                    text=f"records name more than {convert_base.MAX_RECORD_PLACES} distinct pcs and source lines: "
                    "the rest are reported at unknown:0",
                    level="warn",
                )
            )

    def _stack_location(self, binary: Any, kernel: _Kernel, pc: int, pending: list[m.Location]) -> int:
        key = (id(binary), pc)
        known = self._pc_locations.get(key)
        if known is None:
            frames = binary.frames(pc, kernel.pc_start)
            known = self._frames(frames, pending) if frames else 0
            self._pc_locations[key] = known
        return known

    def _place_location(self, binary: Any, key: int, pending: list[m.Location]) -> int:
        """The location of a record's own place: its file from the kernel's file mapping, ``unknown`` where the
        mapping (or the binary) lacks it, as msSanitizer's FileMapping::Query answers."""
        _pc, file_no, line_no = self._places.sites[key]
        name = binary.file_name(file_no) if binary is not None else None
        return self._intern((name if name is not None else "unknown", line_no, 0, ""), (), pending, record=True)

    def _frames(self, frames: list[tuple[str, int, int, str]], pending: list[m.Location]) -> int:
        """The location id of the innermost frame, its callers (outer frames) interned as locations too."""
        callers = tuple(self._intern(frame, (), pending) for frame in frames[1:])
        return self._intern(frames[0], callers, pending)

    def _intern(
        self,
        frame: tuple[str, int, int, str],
        callers: tuple[int, ...],
        pending: list[m.Location] | None = None,
        *,
        record: bool = False,
    ) -> int:
        key = (frame, callers, record)
        known = self._frame_locations.get(key)
        if known is not None:
            return known
        self._locations += 1
        file, line, column, function = frame
        location = m.Location(
            id=self._locations, file=file, line=line, column=column, function=function, callers=list(callers),
            record=record,
        )  # fmt: skip
        self._frame_locations[key] = self._locations
        if pending is None:
            self._out.append(m.Locations(locations=[location]))
        else:
            pending.append(location)
        return self._locations

    # --- EOF -----------------------------------------------------------------------------------------------

    def _at_eof(self) -> None:
        """The hooks have no goodbye: their process ending is the session's close. A kernel still open is ended
        with what arrived, and says so."""
        kernel = self._kernel
        if kernel is not None and kernel.begun:
            self._end_kernel(
                kernel,
                respond=False,
                why=f"the client closed after {kernel.slots} of {kernel.total_slots} slots"
                if kernel.total_slots is not None
                else "the client closed before the kernel's FINISH",
            )
        self._kernel = None
        self._out.append(m.Close())
        self._release()  # the stream ended between packets: what it said goes out, then the close
        self._ended = True

    # --- sending -------------------------------------------------------------------------------------------

    def send(self, message: m.Message) -> bytes:
        """msSanitizer's bytes for a native reply: the Config on welcome, KERNEL_RECORD_RESPONSE for a verdict the
        client waits for, IPC_RESPONSE for an IPC result; b"" for what its clients have no packet for."""
        match message:
            case m.Welcome():
                if self.state is not State.HANDSHAKE:
                    raise LocalProtocolError("welcome after the handshake", reason="unexpected_message")
                try:
                    data = wire.encode_config(message.config, self.layout)
                    config = message.config
                    self._trace_registers = config.trace_non_default_spr_reg and "memcheck" in config.tools
                except ValueError as exc:
                    raise LocalProtocolError(str(exc), reason="internal_error") from None
                self.state = State.READY
                return data
            case m.Verdict():
                total = self._responses.pop(message.kernel, None)
                return b"" if total is None else wire.encode_kernel_record_response(total, self.layout)
            case m.IpcResult():
                op = self._ipc_codes.popleft() if self._ipc_codes else wire.IPC_OP_CODES.get(message.op, 0)
                return b"" if op is None else wire.encode_ipc_response(op, message.ok, self.layout)
            case m.Error():
                self._fail()
                return b""
            case m.Closed():
                self.state = State.CLOSED
                return b""
        return b""

    def send_error(self, reason: str, message: str) -> bytes:
        """msSanitizer's protocol has no error packet: the connection ends, with nothing said."""
        self._fail()
        return b""
