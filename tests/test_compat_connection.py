"""msSanitizer's client protocol, sans-I/O: packets built byte by byte from the layouts measured on msSanitizer's
headers (reference §1.9), fed to a CompatConnection, and the native messages and replies it gives.

The packet builders here pack every struct with ``struct`` at the offsets the reference states, not with
``sanitizerd.compat.wire``'s tables, so that a wrong offset there fails a test rather than agreeing with itself.
"""

from __future__ import annotations

import itertools
import struct
from collections.abc import Iterable
from pathlib import Path

import anyio
import anyio.abc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sanitizerd.compat import wire
from sanitizerd.compat.packets.connection import CHUNK_SIZE, SECURITY_MESSAGE, CompatConnection
from sanitizerd_protocol import CONNECTION_CLOSED, NEED_DATA, RemoteProtocolError, State, as_events
from sanitizerd_protocol import messages as m

LAYOUT = wire.LAYOUTS[wire.DEFAULT_LAYOUT]
SECURITY = 0x5A5A5A5A5A5A5A5A
GLOBAL_HEAD = 38528
BLOCK_HEAD = 128
HEADS = GLOBAL_HEAD + BLOCK_HEAD

# --- packets, packed at the reference's offsets ----------------------------------------------------------------


def packet(kind: int, payload: bytes) -> bytes:
    return struct.pack("<I", kind) + payload


def variable(kind: int, data: bytes) -> bytes:
    return struct.pack("<IQ", kind, len(data)) + data


def device_summary(device: int = 2, block_num: int = 24, device_id: int = 0) -> bytes:
    return packet(0, struct.pack("<IIIi", device, 32, block_num, device_id))


def kernel_summary(name: str = "add_custom", block_dim: int = 8, kernel_type: int = 1, pc: int = 0x1240_0000) -> bytes:
    payload = bytearray(2064)
    struct.pack_into("<QIBBB", payload, 0, pc, block_dim, kernel_type, 0, 1)
    encoded = name.encode()
    payload[15 : 15 + len(encoded)] = encoded
    return packet(1, bytes(payload))


def host_record(
    op: int, dst: int, size: int = 0, src: int = 0, info_src: int = 3, desc: int = 0, root: int = 0
) -> bytes:
    payload = bytearray(48)
    struct.pack_into("<IBB", payload, 0, op, info_src, desc)
    struct.pack_into("<QQQQQ", payload, 8, src, dst, size, 0, root)
    return packet(1000, bytes(payload))


def ipc_record(op: int, addr: int = 0, size: int = 0, name: str = "") -> bytes:
    payload = bytearray(88)
    struct.pack_into("<I", payload, 0, op)
    raw = name.encode()
    if op == 0:
        struct.pack_into("<QQ", payload, 8, addr, size)
        payload[24 : 24 + len(raw)] = raw
    elif op == 1:
        payload[8 : 8 + len(raw)] = raw
    elif op == 2:
        struct.pack_into("<Q", payload, 8, addr)
        payload[16 : 16 + len(raw)] = raw
    else:
        struct.pack_into("<Q", payload, 8, addr)
    return packet(1002, bytes(payload))


def memory_record(op: int, dst: int, size: int = 0, file: str = "", line: int = 0, info_src: int = 3) -> bytes:
    """SANITIZER_RECORD holding a MEMORY_RECORD (MemOpRecord at 8), as the ACL hooks send host operations."""
    payload = bytearray(296)
    record = bytearray(168)
    struct.pack_into("<QIii", record, 0, 77, op, -1, 5)
    struct.pack_into("<QQii", record, 24, 0, dst, 1, 1)
    struct.pack_into("<Qi", record, 48, size, line)
    raw = file.encode()
    record[60 : 60 + len(raw)] = raw
    record[136] = info_src
    payload[8:176] = record
    return packet(1003, bytes(payload))


def kernel_record_single(record_type: int, block_type: int = 0) -> bytes:
    """SANITIZER_RECORD holding one KernelRecord (recordType, blockType at 4, serialNo at 8, payload at 16)."""
    payload = bytearray(296)
    struct.pack_into("<I", payload, 0, 1)
    struct.pack_into("<IB", payload, 8, record_type, block_type)
    return packet(1003, bytes(payload))


def dma_record(
    dst: int, src: int, pc: int, block_id: int, n_burst: int = 1, len_burst: int = 1, file_no: int = 0, line_no: int = 0
) -> bytes:
    """A DMA_MOV (RecordType 100) from GM to UB: DmaMovRecord {dst, src, Location{fileNo, lineNo, pc, blockId} at
    16, nBurst at 48, lenBurst at 50, srcStride, dstStride, dstMemType at 56, srcMemType at 57, padMode, byteMode}."""
    body = bytearray(64)
    struct.pack_into("<QQQQQH", body, 0, dst, src, file_no, line_no, pc, block_id)
    struct.pack_into("<HHHHBB", body, 48, n_burst, len_burst, 0, 0, 4, 6)  # MemType UB = 4, GM = 6
    return struct.pack("<I", 100) + bytes(body)


RECORD = 68  # bytes of one DMA_MOV with its type


def slot_body(
    total: int,
    records: bytes = b"",
    count: int | None = None,
    *,
    write_count: int | None = None,
    block_id: int = 0,
    block_type: int = 0,
    security: int = SECURITY,
    lost_bytes: int = 0,
) -> bytes:
    """One sub-block slot: RecordGlobalHead (securityVal at 0, totalBlockDim at 24), RecordBlockHead (recordCount,
    recordWriteCount, offset, writeOffset from 0, blockId at 40, blockType at 48), then the records."""
    n = count if count is not None else 0
    head = bytearray(GLOBAL_HEAD)
    struct.pack_into("<Q", head, 0, security)
    struct.pack_into("<Q", head, 24, total)
    block = bytearray(BLOCK_HEAD)
    written = write_count if write_count is not None else n
    struct.pack_into("<QQQQ", block, 0, n, written, len(records) + lost_bytes, len(records))
    struct.pack_into("<H", block, 40, block_id)
    block[48] = block_type
    return bytes(head) + bytes(block) + records


def slot(total: int, records: Iterable[bytes] = (), **kw: int) -> bytes:
    records = list(records)
    return variable(1001, slot_body(total, b"".join(records), len(records), **kw))


# --- driving a connection ----------------------------------------------------------------------------------------


def connection(**kw: int) -> CompatConnection:
    return CompatConnection(LAYOUT, job="job-1", peer_pid=4242, **kw)


def drain(conn: CompatConnection) -> list[m.Message]:
    out: list[m.Message] = []
    while True:
        event = conn.next_event()
        if event is NEED_DATA or event is CONNECTION_CLOSED:
            return out
        out.append(event)  # type: ignore[arg-type]


def feed(data: bytes, pieces: int | Iterable[int] = 0, *, eof: bool = True, **kw: int) -> list[m.Message]:
    """Every message ``data`` gives, fed whole (``pieces`` 0), in pieces of that size, or at the cuts given."""
    conn = connection(**kw)
    out: list[m.Message] = []
    if isinstance(pieces, int):
        step = pieces or max(len(data), 1)
        cuts = range(0, len(data), step)
        parts = [data[i : i + step] for i in cuts]
    else:
        bounds = [0, *sorted(pieces), len(data)]
        parts = [data[a:b] for a, b in itertools.pairwise(bounds)]
    for part in parts:
        if part:
            conn.receive_data(part)
        out += drain(conn)
    if eof:
        conn.receive_data(b"")
        out += drain(conn)
    return out


def normalized(messages: list[m.Message]) -> list[object]:
    """Messages with each kernel's consecutive events batches joined: how a stream is cut into batches depends on how
    its bytes arrived, what they say does not."""
    out: list[object] = []
    for message in messages:
        if isinstance(message, m.Events):
            data = bytes(message.records)
            if out and isinstance(out[-1], tuple) and out[-1][0] == message.kernel:
                out[-1] = (message.kernel, out[-1][1] + data)
            else:
                out.append((message.kernel, data))
        else:
            out.append(message)
    return out


def kinds(messages: list[m.Message]) -> list[str]:
    return [type(message).__name__ for message in messages]


# --- layouts -----------------------------------------------------------------------------------------------------


class TestLayouts:
    def test_the_april_layout_has_the_sizes_measured_on_its_headers(self) -> None:
        assert LAYOUT.name == "mssanitizer-4a419f05"
        assert LAYOUT.heads_size == HEADS
        assert (LAYOUT.record_global_head_size, LAYOUT.record_block_head_size) == (38528, 128)
        assert LAYOUT.config.size == 2584
        assert LAYOUT.kernel_summary.size == 2064
        assert LAYOUT.device_summary.size == 16
        assert LAYOUT.structs["HostMemRecord"].size == 48
        assert LAYOUT.sanitizer_record_size == 296
        assert LAYOUT.ipc_mem_record_size == 88

    @pytest.mark.parametrize(
        ("layout", "struct_name"),
        [
            (layout, name)
            for layout in wire.LAYOUTS.values()
            for name in ["Config", *wire.PACKET_STRUCTS.values()]
            if name == "Config" or name in layout.structs
        ],
        ids=lambda value: value.name if isinstance(value, wire.WireLayout) else value,
    )
    def test_struct_and_dtype_agree(self, layout: wire.WireLayout, struct_name: str) -> None:
        """Every struct a packet carries, in every layout, reads the same through ``struct`` and numpy (union
        members one at a time)."""
        whole = layout.config if struct_name == "Config" else layout.structs[struct_name]
        views = list(wire.ipc_views(layout).values()) if struct_name == "IPCMemRecord" else [whole]
        for view in views:
            assert view.struct.size == view.dtype.itemsize == view.size
            for name, offset, _ in view.fields:
                assert view.dtype.fields[name][1] == offset

    def test_config_offsets_of_the_reference(self) -> None:
        offsets = {name: offset for name, offset, _ in LAYOUT.config.fields}
        assert offsets["checkBlockId"] == 12
        assert offsets["cacheSize"] == 16
        assert offsets["demangleMode"] == 20
        assert offsets["pluginPath"] == 21
        assert offsets["kernelName"] == 277
        assert offsets["dumpPath"] == 2325

    def test_other_releases_named_in_refusals(self) -> None:
        text = wire.other_releases_text(LAYOUT)
        assert "38528 + 128" in text and "2584" in text
        sizes = {(o.config.size, o.global_head.size, o.block_head.size) for o in wire.LAYOUTS.values()}
        assert all(f"Config {c} B, heads {g} + {b} B" in text for c, g, b in sizes)  # every release's sizes, once
        assert "26.1.0" in text and "master" in text and text.count("Config 2588 B, heads 55424 + 192 B") == 1


class TestConfig:
    def flags(self, data: bytes) -> list[bool]:
        return [bool(b) for b in data[:12]]

    def test_memcheck_as_the_cli_resolves_it(self) -> None:
        data = wire.encode_config(m.Config(tools=["memcheck", "registercheck"]), LAYOUT)
        assert len(data) == 2584
        # defaultCheck, memCheck, raceCheck, initCheck, syncCheck, registerCheck, ...
        assert self.flags(data)[:6] == [True, True, False, False, False, True]
        assert struct.unpack_from("<h", data, 12) == (-1,)
        assert struct.unpack_from("<I", data, 16) == (100,)
        assert data[20] == 0
        assert data[21:277] == bytes(256) and data[2325:] == bytes(256 + 3)

    def test_initcheck_alone_sets_default_check_not_mem_check(self) -> None:
        data = wire.encode_config(m.Config(tools=["initcheck"]), LAYOUT)
        assert self.flags(data)[:6] == [True, False, False, True, False, False]

    def test_race_and_sync(self) -> None:
        data = wire.encode_config(m.Config(tools=["racecheck", "synccheck"]), LAYOUT)
        assert self.flags(data)[:6] == [False, False, True, False, True, False]

    def test_every_option_at_its_offset(self) -> None:
        config = m.Config(
            tools=["memcheck"],
            check_device_heap=True,
            leak_check=True,
            check_unused_memory=True,
            check_cross_npu_races=True,
            full_backtrace=True,
            block_id=7,
            cache_size=8192,
            demangle="no",
            kernel_name="add_custom",
        )
        data = wire.encode_config(config, LAYOUT)
        assert self.flags(data)[6:12] == [True, False, True, True, True, True]
        assert struct.unpack_from("<hxxIB", data, 12) == (7, 8192, 2)
        assert data[277 : 277 + 11] == b"add_custom\0"
        assert wire.encode_config(m.Config(check_cann_heap=True, demangle="simple"), LAYOUT)[7] == 1
        assert wire.encode_config(m.Config(demangle="simple"), LAYOUT)[20] == 1

    def test_long_kernel_name_cut_to_its_field(self) -> None:
        data = wire.encode_config(m.Config(kernel_name="k" * 5000), LAYOUT)
        assert data[277 : 277 + 2047] == b"k" * 2047 and data[277 + 2047] == 0


# --- packets to messages -----------------------------------------------------------------------------------------


def test_hello_is_a_producer_of_the_job() -> None:
    hello = connection().hello()
    assert (hello.role, hello.job, hello.pid, hello.version) == ("producer", "job-1", 4242, m.PROTOCOL_VERSION)


def test_welcome_writes_the_config_and_nothing_else() -> None:
    conn = connection()
    data = conn.send(m.Welcome(session=1, config=m.Config(tools=["racecheck"])))
    assert data == wire.encode_config(m.Config(tools=["racecheck"]), LAYOUT)
    assert conn.state is State.READY


def test_device_summary_names_the_chip() -> None:
    (summary, close) = feed(device_summary(device=7, block_num=8, device_id=3))
    assert summary == m.DeviceSummary(chip="310P", block_num=8, device=3)
    assert isinstance(close, m.Close)
    assert feed(device_summary(device=20))[0] == m.DeviceSummary(chip="950", block_num=24, device=0)


def test_unknown_device_keeps_the_chip_and_says_so() -> None:
    log, summary, _ = feed(device_summary(device=7) + device_summary(device=6))[1:]
    assert isinstance(log, m.Log) and "DeviceType 6" in log.text and "310P" in log.text
    assert summary.chip == "310P"


def test_host_records() -> None:
    data = (
        host_record(0, 0x1000, 64)
        + host_record(2, 0x1000, 32, src=0x2000, info_src=0)
        + host_record(4, 0x1010, 4, info_src=7, desc=5, root=0x1000)
        + host_record(3, 0x1020, 8, info_src=6)
        + host_record(1, 0x1000)
    )
    ops = feed(data)[:-1]
    assert ops == [
        m.HostOp(op="malloc", address=0x1000, size=64, source="acl", serial=0),
        m.HostOp(op="memcpy", address=0x1000, size=32, src=0x2000, source="bypass", serial=1),
        m.HostOp(op="store", address=0x1010, size=4, source="mstx_region", desc="section", serial=2, root=0x1000),
        m.HostOp(op="load", address=0x1020, size=8, source="mstx_heap", serial=3),
        m.HostOp(op="free", address=0x1000, source="acl", serial=4),
    ]


def test_undefined_host_record_is_said_not_used() -> None:
    log, op, _ = feed(host_record(5, 0x1000) + host_record(0, 0x2000, 8))
    assert isinstance(log, m.Log) and "MemOpType 5" in log.text
    assert op.serial == 1  # the ignored record took its serial, as msSanitizer's tool counts it


def test_log_string_and_kernel_binary() -> None:
    log, close = feed(variable(3, b"hook says hi\n"))
    assert log == m.Log(text="hook says hi", level="info")
    # An ELF is kept for call stacks, no message; one that cannot be read is said in a log line.
    *said, close = feed(variable(2, b"\x7fELF not really"))
    assert close == m.Close() and all(isinstance(x, m.Log) and "kernel binary" in x.text for x in said)


def test_ipc_records_and_their_answers() -> None:
    conn = connection()
    conn.receive_data(ipc_record(0, 0x5000, 4096, "shm") + ipc_record(2, 0x9000, name="shm") + ipc_record(3, 0x9000))
    conn.receive_data(ipc_record(1, name="shm"))
    got = drain(conn)
    assert got == [
        m.Ipc(op="set", name="shm", address=0x5000, size=4096, serial=0),
        m.Ipc(op="map", name="shm", address=0x9000, serial=0),
        m.Ipc(op="unmap", address=0x9000, serial=1),
        m.Ipc(op="destroy", name="shm", serial=2),
    ]
    answers = [
        conn.send(m.IpcResult(op=ipc.op, name=ipc.name, address=ipc.address, ok=ipc.op != "destroy")) for ipc in got
    ]
    assert answers == [
        struct.pack("<III", 3000, 0, 0),
        struct.pack("<III", 3000, 2, 0),
        struct.pack("<III", 3000, 3, 0),
        struct.pack("<III", 3000, 1, 1000),
    ]


def test_undefined_ipc_operation_answered_fail_at_once() -> None:
    conn = connection()
    conn.receive_data(ipc_record(9) + host_record(0, 0x10, 8))
    (log,) = drain(conn)  # the host record is held until the next packet begins (or the stream ends)
    assert isinstance(log, m.Log) and "IPC operation type 9" in log.text
    conn.receive_data(b"")
    op, close = drain(conn)
    assert isinstance(op, m.HostOp) and isinstance(close, m.Close)
    assert conn.data_to_send() == struct.pack("<III", 3000, 9, 1000)
    assert conn.data_to_send() == b""


def test_what_a_client_says_is_held_until_a_slot_of_this_release_adds_up() -> None:
    """A client of another release writes structs of other sizes, which read as valid packets for a while before
    garbage shows. So nothing it says goes out until one of its slots' heads add up (or the stream ends, or it asks
    for an IPC answer), and a misread host record never reaches a detector: here a 208-byte struct (a MemOpRecord,
    as a SANITIZER_RECORD carries it) in packet 1000, read as April's 48-byte HostMemRecord, with a DEVICE_SUMMARY's
    number in its zeros."""
    conn = connection()
    conn.receive_data(host_record(1, 0x12C0C0001000) + device_summary() + kernel_summary())  # a free: illegal at once
    assert drain(conn) == []
    conn.receive_data(slot(1, [dma_record(0x10, 8, 0, 0)]))  # heads that add up: April's, so the rest goes out
    got = drain(conn)
    assert kinds(got)[:3] == ["HostOp", "DeviceSummary", "KernelBegin"] and "KernelEnd" in kinds(got)
    conn.receive_data(host_record(0, 0x20, 8))
    assert kinds(drain(conn)) == ["HostOp"]  # this release's client: nothing held any more
    other = bytearray(208)
    struct.pack_into("<QIii", other, 0, 0, 1, -1, -1)  # serialNo, FREE, coreId, moduleId
    struct.pack_into("<QQii", other, 24, 0, 0x12C0C0001000, 1, 1)
    struct.pack_into("<Q", other, 48, 0x8020)  # memSize, where April's next packet's type would be
    refused_conn = connection()
    refused_conn.receive_data(packet(1000, bytes(other)))
    with pytest.raises(RemoteProtocolError) as caught:
        drain(refused_conn)
    assert caught.value.reason == "wire_mismatch" and "another msSanitizer release" in str(caught.value)
    assert refused_conn.state is State.ERROR


def test_a_client_that_never_launches_is_held_at_most_max_held_messages() -> None:
    """Host records with no slot to show the release: they go out past MAX_HELD (bounded memory), and at the end."""
    from sanitizerd.compat.packets.connection import MAX_HELD

    conn = connection()
    conn.receive_data(b"".join(host_record(0, 0x1000 + 64 * i, 32) for i in range(MAX_HELD + 1)))
    got = drain(conn)
    assert len(got) == MAX_HELD + 1 and all(isinstance(x, m.HostOp) for x in got)
    conn.receive_data(host_record(0, 0x90000, 32))
    assert drain(conn) == []
    conn.receive_data(b"")
    assert kinds(drain(conn)) == ["HostOp", "Close"]


def test_memory_record_carries_its_source_line() -> None:
    data = memory_record(0, 0x3000, 128, file="main.cpp", line=42) + memory_record(1, 0x3000, file="main.cpp", line=42)
    locations, malloc, free, _ = feed(data)
    assert locations == m.Locations(locations=[m.Location(id=1, file="main.cpp", line=42)])
    assert malloc == m.HostOp(op="malloc", address=0x3000, size=128, source="acl", serial=0, location=1, module=5)
    assert free.location == 1 and free.serial == 1


def test_single_kernel_records_finish_ends_the_kernel_without_an_answer() -> None:
    conn = connection()
    conn.receive_data(kernel_summary("k") + kernel_record_single(100001) + b"")
    conn.receive_data(b"")  # the ACL hooks send no slot: what they say goes out at the end (or MAX_HELD)
    begin, end, _close = drain(conn)
    assert isinstance(begin, m.KernelBegin) and begin.name == "k" and begin.kernel_type == "aiv"
    assert end == m.KernelEnd(kernel=begin.kernel)
    verdict = m.Verdict(kernel=begin.kernel, events=0, errors=0, warnings=0)
    assert conn.send(verdict) == b""  # the ACL hooks wait for no answer


def test_a_summary_without_records_is_no_launch() -> None:
    got = feed(kernel_summary("never_ran") + kernel_summary("ran", kernel_type=3) + kernel_record_single(100001))
    begin, end, _ = got
    assert begin.name == "ran" and begin.kernel_type == "mix" and begin.kernel == 2 and end.kernel == 2


def test_unknown_kernel_type() -> None:
    log, begin, _, _ = feed(kernel_summary(kernel_type=9) + kernel_record_single(100001))
    assert "KernelType 9" in log.text and begin.kernel_type == "aiv"


def test_eof_ends_an_open_kernel_and_closes() -> None:
    got = feed(kernel_summary("k") + kernel_record_single(100000 + 2, block_type=0))  # not FINISH: still open
    assert kinds(got)[-2:] == ["KernelEnd", "Close"]
    assert any("closed before the kernel's FINISH" in text for text in got[-2].problems)


def test_send_error_and_closed_say_nothing() -> None:
    conn = connection()
    assert conn.send(m.Closed(session=1)) == b""
    assert conn.send_error("bad_packet", "x") == b""
    assert conn.state is State.ERROR
    with pytest.raises(RemoteProtocolError):
        conn.next_event()


# --- bounds ------------------------------------------------------------------------------------------------------


def refused(data: bytes, reason: str, *, eof: bool = False) -> str:
    conn = connection()
    conn.receive_data(data)
    if eof:
        conn.receive_data(b"")
    with pytest.raises(RemoteProtocolError) as caught:
        drain(conn)
    assert caught.value.reason == reason, str(caught.value)
    assert conn.state is State.ERROR and conn.buffered == 0
    with pytest.raises(RemoteProtocolError):
        conn.next_event()
    return str(caught.value)


class TestBounds:
    def test_unknown_packet_type(self) -> None:
        assert "unknown packet type 7" in refused(packet(7, b"x" * 16), "wire_mismatch")

    def test_server_packets_from_the_client(self) -> None:
        assert "server's" in refused(packet(3001, struct.pack("<II", 1, 0)), "bad_packet")

    def test_log_string_over_64_kib(self) -> None:
        refused(struct.pack("<IQ", 3, (64 << 10) + 1), "frame_too_large")
        assert feed(variable(3, b"x" * (64 << 10)))[0].text.startswith("xxx")

    def test_kernel_binary_over_256_mib(self) -> None:
        refused(struct.pack("<IQ", 2, (256 << 20) + 1), "frame_too_large")

    def test_kernel_record_over_a_block_buffer(self) -> None:
        refused(struct.pack("<IQ", 1001, HEADS + (8192 << 20) + 1), "frame_too_large")

    def test_a_100_gib_length(self) -> None:
        for kind in (2, 3, 1001):
            refused(struct.pack("<IQ", kind, 100 << 30), "frame_too_large")

    def test_kernel_record_shorter_than_its_heads_names_both_releases(self) -> None:
        text = refused(variable(1001, b"\0" * 640), "wire_mismatch")
        assert "640" in text and str(HEADS) in text and "26.1.0" in text and "55424 + 192" in text

    def test_sanitizer_record_of_an_unknown_version(self) -> None:
        refused(packet(1003, struct.pack("<I", 3) + bytes(292)), "bad_packet")

    @pytest.mark.parametrize(
        "data",
        [
            device_summary(),
            kernel_summary(),
            host_record(0, 0x10, 8),
            ipc_record(0, 1, 2, "n"),
            memory_record(0, 0x10, 8),
            variable(3, b"log line"),
            variable(2, b"elf"),
        ],
        ids=["device", "kernel_summary", "host", "ipc", "sanitizer", "log", "binary"],
    )
    def test_truncated_anywhere_at_eof(self, data: bytes) -> None:
        for cut in range(1, len(data)):
            refused(data[:cut], "truncated", eof=True)

    def test_kernel_record_truncated_at_eof(self) -> None:
        data = kernel_summary() + slot(1, [dma_record(0x100, 0x1000, 0, 0)] * 3)
        start = len(kernel_summary())
        for cut in [start + 1, start + 11, start + 12, start + 12 + HEADS - 1, start + 12 + HEADS, len(data) - 1]:
            refused(data[:cut], "truncated", eof=True)


# --- kernel record slots -------------------------------------------------------------------------------------------


def launch(total: int = 3, records_per_slot: int = 2) -> bytes:
    """Reference §1.9 "Default mode, one launch", as the injection library sends it (Config read in between)."""
    slots = b"".join(
        slot(total, [dma_record(0x100 + 32 * r, 0x1000 + 64 * i + 32 * r, 0x100 + 4 * r, block_id=i) for r in range(n)])
        for i, n in enumerate([records_per_slot] + [0] * (total - 1))
    )
    return (
        device_summary()
        + host_record(0, 0x1000, 4096)
        + host_record(4, 0x1000, 4096)
        + kernel_summary(block_dim=1)
        + variable(2, b"\x7fELF")
        + host_record(0, 0x1240_0000, 256, info_src=0, desc=5)
        + host_record(4, 0x1240_0000, 256, info_src=0, desc=5)
        + slots
        + host_record(1, 0x1240_0000, info_src=0, desc=5)
        + host_record(1, 0x1000)
        + device_summary()
    )


class TestKernelRecords:
    def test_one_launch_in_the_injection_librarys_order(self) -> None:
        # Logs (with stacks: "kernel binary unreadable") and the records' source places (a Locations before the
        # events that first name one) aside:
        got = [x for x in feed(launch()) if not isinstance(x, m.Log | m.Locations)]
        assert kinds(got) == [
            "DeviceSummary",
            "HostOp",
            "HostOp",
            "HostOp",
            "HostOp",
            "KernelBegin",
            *(["Events"] * sum(1 for x in got if isinstance(x, m.Events))),
            "KernelEnd",
            "HostOp",
            "HostOp",
            "DeviceSummary",
            "Close",
        ]
        begin = got[5]
        assert begin == m.KernelBegin(kernel=1, name="add_custom", block_dim=1, kernel_type="aiv", pc_start=0x1240_0000)
        host_serials = [x.serial for x in got if isinstance(x, m.HostOp)]
        # 4 host records, then the slots: 2 records, 3 BLOCK_FINISH, FINISH; then the frees
        assert host_serials == [0, 1, 2, 3, 10, 11]

    def test_verdict_answers_after_the_last_slot(self) -> None:
        conn = connection()
        conn.receive_data(launch(total=3))
        end = next(x for x in drain(conn) if isinstance(x, m.KernelEnd))
        assert conn.send(m.Verdict(kernel=end.kernel, events=2, errors=0, warnings=0)) == struct.pack(
            "<III", 3001, 3, 0
        )
        assert conn.send(m.Verdict(kernel=end.kernel, events=2, errors=0, warnings=0)) == b""  # answered once

    def test_events_match_the_decoder_on_the_whole_slot(self) -> None:
        from sanitizerd.chips import chip_named
        from sanitizerd.compat.records import slots
        from sanitizerd.compat.records.convert.base import BlockContext

        records = [dma_record(0x100 + 32 * r, 0x1000 + 32 * r, 0x100 + 4 * r, block_id=0) for r in range(50)]
        body = slot_body(1, b"".join(records), len(records))
        heads = slots.read_heads(body[:HEADS], LAYOUT)
        whole, _ = slots.SlotDecoder(heads, BlockContext(0, chip_named("910B1")), 0).feed(
            memoryview(body[HEADS:]), True
        )
        got = feed(variable(1001, body), pieces=97)
        streamed = b"".join(bytes(x.records) for x in got if isinstance(x, m.Events))
        assert len(whole) == 101  # a read and a write per record, and the block's end
        # The connection puts location ids where the decoder alone (no places kept) leaves 0: all else is the same.
        events = as_events(streamed).copy()
        [place] = [loc for x in got if isinstance(x, m.Locations) for loc in x.locations]
        assert (place.file, place.line, place.record) == ("unknown", 0, True)  # no binary: no file mapping
        assert set(events["location"][:-1].tolist()) == {place.id} and events["location"][-1] == 0
        events["location"] = 0
        assert events.tobytes() == whole.tobytes()
        finish = as_events(streamed)[-1]
        assert finish["kind"] == 23 and finish["serial"] == 50

    def test_byte_at_a_time_gives_the_same_messages(self) -> None:
        data = launch(total=3, records_per_slot=3)
        assert normalized(feed(data, 1)) == normalized(feed(data))

    def test_records_without_a_summary_are_an_unknown_kernel(self) -> None:
        got = feed(slot(1, [dma_record(0x10, 8, 0, 0)]))
        assert got[0] == m.KernelBegin(kernel=1, name="unknown", block_dim=0, kernel_type="aiv")
        assert isinstance(got[-2], m.KernelEnd) and isinstance(got[-1], m.Close)

    def test_overwritten_security_value_is_a_problem_and_the_stream_goes_on(self) -> None:
        data = kernel_summary() + slot(2, [dma_record(0x10, 8, 0, 0)], security=0) + slot(2) + host_record(0, 1, 1)
        got = feed(data)
        end = next(x for x in got if isinstance(x, m.KernelEnd))
        assert SECURITY_MESSAGE in end.problems
        events = as_events(b"".join(bytes(x.records) for x in got if isinstance(x, m.Events)))
        assert events["kind"].tolist() == [23]  # only the good slot's end: the damaged slot's records are dropped
        assert isinstance(got[-2], m.HostOp)

    def test_lost_records_become_a_block_loss(self) -> None:
        records = [dma_record(0x10, 8, 0, 0)]
        data = variable(1001, slot_body(1, b"".join(records), 5, write_count=1, lost_bytes=4 * RECORD))
        end = next(x for x in feed(data) if isinstance(x, m.KernelEnd))
        assert end.lost == [m.BlockLoss(block_type=0, block_id=0, records=4, bytes=4 * RECORD)]

    def test_garbage_records_are_problems_not_errors(self) -> None:
        data = kernel_summary() + variable(1001, slot_body(1, b"\xff" * 1000, 3)) + host_record(0, 1, 1)
        got = feed(data)
        end = next(x for x in got if isinstance(x, m.KernelEnd))
        assert end.problems
        assert isinstance(got[-2], m.HostOp)

    def test_problems_of_every_slot_said_once_per_kernel(self) -> None:
        from sanitizerd.compat.records.convert.base import CONVERTERS
        from sanitizerd.compat.records.types import PAYLOAD_SIZE, RecordType

        # A record type whose layout is known and that no converter handles yet (whichever that is today).
        kind = next(t for t in sorted(PAYLOAD_SIZE) if t not in CONVERTERS and t in RecordType.__members__.values())
        record = struct.pack("<I", kind) + bytes(PAYLOAD_SIZE[kind])
        data = kernel_summary() + b"".join(slot(4, [record] * (i + 1), block_id=i) for i in range(4))
        end = next(x for x in feed(data) if isinstance(x, m.KernelEnd))
        [line] = end.problems  # 1 + 2 + 3 + 4 records of four slots, one line
        assert line.startswith(f"10 {RecordType(kind).name} records not converted")

    def test_a_next_summary_ends_a_short_kernel_without_an_answer(self) -> None:
        conn = connection()
        conn.receive_data(
            kernel_summary("a") + slot(3, [dma_record(0x10, 8, 0, 0)]) + kernel_summary("b") + device_summary()
        )
        end = next(x for x in drain(conn) if isinstance(x, m.KernelEnd))
        assert "1 of 3 slots" in end.problems[0]
        assert conn.send(m.Verdict(kernel=end.kernel, events=1, errors=1, warnings=0)) == b""

    def test_a_record_longer_than_a_chunk_ends_the_slot_not_the_connection(self) -> None:
        data = kernel_summary() + slot(1, [dma_record(0x100, 0x1000, 0, 0)] * 2) + host_record(0, 1, 1)
        got = feed(data, chunk_size=16)  # a chunk smaller than one 68-byte record
        end = next(x for x in got if isinstance(x, m.KernelEnd))
        assert any("no whole record in 16 bytes" in text for text in end.problems)
        assert isinstance(got[-2], m.HostOp)

    def test_a_large_slot_streams_within_a_chunk(self) -> None:
        records = dma_record(0x10, 0x10, 0, 0) * (CHUNK_SIZE // RECORD * 5)  # about 10 MiB of records
        n = len(records) // RECORD
        data = kernel_summary() + variable(1001, slot_body(1, records, n))
        conn = connection()
        held = 0
        batches = 0
        for i in range(0, len(data), 1 << 20):
            conn.receive_data(data[i : i + (1 << 20)])
            for message in drain(conn):
                batches += isinstance(message, m.Events)
            held = max(held, conn.buffered)
        assert held <= CHUNK_SIZE + (1 << 20)  # a chunk waiting for the decoder, and the read that completed it
        assert batches >= 5  # a batch per chunk, not one for the slot


# --- fuzz --------------------------------------------------------------------------------------------------------

FUZZ = settings(max_examples=200, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
KNOWN_TYPES = st.sampled_from([0, 1, 2, 3, 1000, 1001, 1002, 1003, 3000, 7, 0xFFFFFFFF])


def fed_to_the_end(data: bytes, chunk: int) -> None:
    conn = connection(chunk_size=256)
    try:
        for i in range(0, len(data), chunk):
            conn.receive_data(data[i : i + chunk])
            drain(conn)
        conn.receive_data(b"")
        drain(conn)
    except RemoteProtocolError:
        pass


class TestFuzz:
    @FUZZ
    @given(data=st.binary(max_size=600), chunk=st.integers(1, 64))
    def test_random_bytes_only_ever_raise_remote_protocol_error(self, data: bytes, chunk: int) -> None:
        fed_to_the_end(data, chunk)

    @FUZZ
    @given(
        kind=KNOWN_TYPES,
        length=st.integers(0, 2**64 - 1) | st.integers(0, HEADS + 600),
        body=st.binary(max_size=HEADS + 600),
        chunk=st.integers(1, 4096),
    )
    def test_typed_packets_with_random_bodies(self, kind: int, length: int, body: bytes, chunk: int) -> None:
        fed_to_the_end(struct.pack("<IQ", kind, length) + body, chunk)

    @FUZZ
    @given(
        records=st.binary(max_size=2000),
        count=st.integers(0, 2**64 - 1) | st.integers(0, 40),
        written=st.integers(0, 2**64 - 1) | st.integers(0, 40),
        total=st.integers(0, 2**64 - 1) | st.integers(0, 4),
        chunk=st.integers(1, 2048),
    )
    def test_slots_with_random_records(self, records: bytes, count: int, written: int, total: int, chunk: int) -> None:
        data = kernel_summary() + variable(1001, slot_body(total, records, count, write_count=written))
        fed_to_the_end(data + host_record(0, 1, 1), chunk)

    @FUZZ
    @given(cuts=st.lists(st.integers(0, 60000), max_size=12))
    def test_a_valid_stream_split_anywhere(self, cuts: list[int]) -> None:
        data = device_summary() + host_record(0, 0x1000, 64) + kernel_summary() + variable(3, b"hi") + ipc_record(3, 5)
        data += slot(1, [dma_record(0x1000, 8, 0, 0)])
        cuts = [c % (len(data) + 1) for c in cuts]
        assert normalized(feed(data, cuts)) == normalized(feed(data))


# --- through a real Session ----------------------------------------------------------------------------------------


def test_a_session_takes_the_stream_and_its_answers_go_back_as_packets() -> None:
    """The messages are ones a producer Session accepts as they come, and what it answers becomes the packets the
    hooks wait for: the IPC_RESPONSE, and the KERNEL_RECORD_RESPONSE once every detector has checked the kernel."""
    from sanitizerd.sessions.session import Answer, Peer, Session
    from sanitizerd.sessions.work import EndKernel

    conn = connection()
    session = Session(1, conn.hello(), m.Config(tools=["memcheck", "registercheck"]), Peer(pid=4242, uid=1, gid=1))
    assert conn.send(m.Welcome(session=1, config=session.config)) == wire.encode_config(session.config, LAYOUT)
    conn.receive_data(ipc_record(0, 0x5000, 4096, "shm") + launch(total=3))
    conn.receive_data(b"")
    replies = b""
    for message in drain(conn):
        if isinstance(message, m.Close):
            break
        for item in session.handle(message):
            if isinstance(item, m.IpcResult):
                replies += conn.send(item)
            if isinstance(item, EndKernel):
                for _ in session.detectors:
                    answer = session.kernel_checked(item.kernel, [])
                assert isinstance(answer, Answer)
                replies += conn.send(answer.verdict)
    assert session.context.chip.name == "910B1"
    assert replies == struct.pack("<III", 3000, 0, 0) + struct.pack("<III", 3001, 3, 0)


# --- call stacks -----------------------------------------------------------------------------------------------------

KERNEL_SOURCE = """\
__attribute__((noinline)) static int leaf(int x) {
    return x * 3;
}
extern "C" int kernel_entry(int x) {
    return leaf(x) + 1;
}
"""


def test_events_carry_the_locations_of_their_pcs(tmp_path: Path) -> None:
    """With the kernel's ELF sent first, each distinct pc of a batch becomes a location (its enclosing frames as
    callers), sent before the batch, and every event of that pc carries its id."""
    stacks = pytest.importorskip("sanitizerd.compat.stacks")
    import shutil
    import subprocess

    from elftools.elf.elffile import ELFFile

    compiler = shutil.which("c++")
    if compiler is None:
        pytest.skip("no c++ on this machine")
    source, elf = tmp_path / "k.cpp", tmp_path / "k.elf"
    source.write_text(KERNEL_SOURCE)
    subprocess.run([compiler, "-g", "-O0", "-fPIC", "-shared", "-nostdlib", "-o", str(elf), str(source)], check=True)
    with elf.open("rb") as f:
        symbols = ELFFile(f).get_section_by_name(".symtab")
        entry = next(s for s in symbols.iter_symbols() if s.name == "kernel_entry")["st_value"]
    pc_start = 0x1240_0000
    binary = elf.read_bytes()
    expected = stacks.KernelBinary(binary).frames(pc_start + entry + 4, pc_start)
    assert expected[0][0].endswith("k.cpp") and expected[0][3] == "kernel_entry", expected

    records = [dma_record(0x100, 0x1000 + 32 * r, pc_start + entry + 4 if r % 2 else 0, block_id=0) for r in range(6)]
    got = feed(kernel_summary(pc=pc_start) + variable(2, binary) + slot(1, records))
    locations = {loc.id: loc for x in got if isinstance(x, m.Locations) for loc in x.locations}
    first_events = next(i for i, x in enumerate(got) if isinstance(x, m.Events))
    assert all(i < first_events for i, x in enumerate(got) if isinstance(x, m.Locations))
    events = as_events(b"".join(bytes(x.records) for x in got if isinstance(x, m.Events)))
    memory = events[events["kind"] <= 1]
    with_pc = memory[memory["pc"] != 0]
    assert len(with_pc) == 6 and len(set(with_pc["location"].tolist())) == 1
    # A record without a pc has its own place instead: line 0 of a file the kernel's mapping does not name.
    [place] = set(memory[memory["pc"] == 0]["location"].tolist())
    assert (locations[place].file, locations[place].line, locations[place].record) == ("unknown", 0, True)
    location = locations[int(with_pc["location"][0])]
    assert (location.file, location.line, location.column, location.function) == tuple(expected[0])
    assert [(locations[c].file, locations[c].line) for c in location.callers] == [f[0:2] for f in expected[1:]]


# --- the transport, unchanged ----------------------------------------------------------------------------------------


class _ScriptedPeer(anyio.abc.ByteStream):
    """The hooks' side of a socket: sends ``data`` in reads of ``read`` bytes, then EOF; keeps what it is sent."""

    def __init__(self, data: bytes, read: int) -> None:
        self.data, self.read, self.at = data, read, 0
        self.sent: list[bytes] = []

    async def receive(self, max_bytes: int = 65536) -> bytes:
        if self.at >= len(self.data):
            raise anyio.EndOfStream
        chunk = self.data[self.at : self.at + min(self.read, max_bytes)]
        self.at += len(chunk)
        return chunk

    async def send(self, item: bytes) -> None:
        self.sent.append(bytes(item))

    async def send_eof(self) -> None:
        pass

    async def aclose(self) -> None:
        pass


def test_message_stream_serves_a_compat_connection() -> None:
    """sessions.transport.MessageStream, as the daemon uses it for native producers, reads the compat connection's
    messages to the hooks' EOF, charges what it holds of a slot to the uid's budget, and writes its replies."""
    from sanitizerd.sessions.transport import MessageStream, PeerClosed, UnfinishedBytes

    budget = UnfinishedBytes(lambda: 4 << 20)
    peer = _ScriptedPeer(launch(total=3), read=5000)
    stream = MessageStream(peer, connection(), unfinished=budget, uid=1000)
    held: list[int] = []

    async def scenario() -> list[m.Message]:
        await stream.send(m.Welcome(session=1, config=m.Config()))
        got: list[m.Message] = []
        with pytest.raises(PeerClosed):
            while True:
                message = await stream.receive()
                held.append(budget.total)
                got.append(message)
                if isinstance(message, m.KernelEnd):
                    await stream.send(m.Verdict(kernel=message.kernel, events=0, errors=0, warnings=0))
        return got

    got = anyio.run(scenario)
    assert isinstance(got[-1], m.Close) and any(isinstance(x, m.KernelEnd) for x in got)
    assert peer.sent == [wire.encode_config(m.Config(), LAYOUT), struct.pack("<III", 3001, 3, 0)]
    assert max(held) <= HEADS + 5000 and budget.total == 0


def test_kept_kernel_binaries_are_bounded_in_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A connection keeps the ELFs it was sent (for the stacks of later kernels) up to a byte budget: past it the
    oldest go, and the one just sent is always kept."""
    import shutil
    import subprocess

    from sanitizerd.compat.packets import connection as conn

    compiler = shutil.which("c++")
    if compiler is None:
        pytest.skip("no c++ on this machine")
    binaries = []
    for i in range(3):
        source, elf = tmp_path / f"k{i}.cpp", tmp_path / f"k{i}.elf"
        source.write_text(KERNEL_SOURCE.replace("x * 3", f"x * {i + 3}"))
        subprocess.run([compiler, "-g", "-O0", "-fPIC", "-shared", "-nostdlib", "-o", str(elf), str(source)],
                       check=True)  # fmt: skip
        binaries.append(elf.read_bytes())
    monkeypatch.setattr(conn, "KERNEL_BINARY_CACHE_BYTES", len(binaries[0]) + len(binaries[1]))
    connection = CompatConnection(LAYOUT, job="j", peer_pid=1)
    for binary in binaries:
        connection.receive_data(variable(2, binary))
        while isinstance(connection.next_event(), m.Message):
            pass
        assert connection._binary_bytes <= max(conn.KERNEL_BINARY_CACHE_BYTES, len(binary))
    kept = [size for _, size in connection._binaries.values()]
    assert kept == [len(binaries[1]), len(binaries[2])]  # the first went when the third came


# --- the records' own places (fileNo, lineNo) ------------------------------------------------------------------------


def test_record_places_are_keyed_once_per_site_and_bounded() -> None:
    """Each distinct (pc, fileNo, lineNo) gets one key, whatever its records' order or batch, on the fast path
    (every pc has one place) and the sorted one (a pc with two, pcs spread wide); past MAX_RECORD_PLACES keys a
    record gets none (key 0) and is counted, so a hostile stream of distinct lines costs a bounded table."""
    import numpy as np

    from sanitizerd.compat.records.convert.base import MAX_RECORD_PLACES, RecordPlaces

    def u64(*values: int) -> np.ndarray:
        return np.array(values, dtype=np.uint64)

    places = RecordPlaces()
    keys, distinct = places.keys(u64(0x100, 0x100, 0x108, 0x100), u64(7, 7, 7, 7), u64(18, 18, 19, 18))
    assert keys.tolist() == [1, 1, 2, 1] and sorted(distinct.tolist()) == [1, 2]
    assert places.sites[1:] == [(0x100, 7, 18), (0x108, 7, 19)]
    # pc 0x100 with another line, and a pc 2**63 away: the sort, with the keys already given kept
    keys, _ = places.keys(u64(0x100, 0x100, 2**63), u64(7, 7, 2**64 - 1), u64(18, 20, 1))
    assert keys.tolist() == [1, 3, 4]
    assert places.sites[3:] == [(0x100, 7, 20), (2**63, 2**64 - 1, 1)]
    many = MAX_RECORD_PLACES + 10
    keys, _ = places.keys(np.arange(many, dtype=np.uint64), np.zeros(many, dtype=np.uint64), u64(*[5] * many))
    assert len(places.sites) == MAX_RECORD_PLACES + 1  # key 0 is none
    assert int((keys == 0).sum()) == places.over == many - (MAX_RECORD_PLACES - 4)


def test_record_locations_are_resolved_once_per_key_and_binding() -> None:
    """The resolver is asked once per key while the binding holds, and again after a new one (another binary)."""
    import numpy as np

    from sanitizerd.compat.records.convert.base import RecordPlaces

    asked: list[int] = []
    places = RecordPlaces(lambda key: asked.append(key) or 100 + key)
    places.bind("binary 1")
    pcs = np.array([0x10, 0x20, 0x10], dtype=np.uint64)
    zeros = np.zeros(3, dtype=np.uint64)
    assert places.locations(pcs, zeros, zeros).tolist() == [101, 102, 101]
    assert places.locations(pcs, zeros, zeros).tolist() == [101, 102, 101] and asked == [1, 2]
    places.bind("binary 2")
    places.locations(pcs[:1], zeros[:1], zeros[:1])
    assert asked == [1, 2, 1]


def test_records_past_the_place_bound_are_said_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A connection whose records name more distinct lines than it keeps says so once, and those records' events
    carry no location (reported at unknown:0), while the kept ones carry theirs."""
    from sanitizerd.compat.records.convert import base

    monkeypatch.setattr(base, "MAX_RECORD_PLACES", 2)
    records = [dma_record(0x100, 0x1000 + 32 * r, 0, block_id=0, file_no=5, line_no=10 + r) for r in range(4)]
    got = feed(kernel_summary(pc=0) + slot(1, records) + kernel_summary(pc=0) + slot(1, records))
    said = [x.text for x in got if isinstance(x, m.Log) and "distinct pcs and source lines" in x.text]
    assert said == ["records name more than 2 distinct pcs and source lines: the rest are reported at unknown:0"]
    located = {loc.id: loc for x in got if isinstance(x, m.Locations) for loc in x.locations}
    assert sorted((loc.line, loc.record) for loc in located.values()) == [(10, True), (11, True)]
    events = as_events(b"".join(bytes(x.records) for x in got if isinstance(x, m.Events)))
    memory = events[events["kind"] <= 1]
    assert sorted(set(memory["location"].tolist())) == [0, *sorted(located)]


def test_records_past_the_place_bound_are_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every record past the bound on places is counted (the metric), as its batch is decoded, not once."""
    from sanitizerd.compat.records.convert import base

    monkeypatch.setattr(base, "MAX_RECORD_PLACES", 2)
    records = [dma_record(0x100, 0x1000 + 32 * r, 0, block_id=0, file_no=5, line_no=10 + r) for r in range(4)]
    conn = connection()
    counted: list[int] = []
    conn.on_unplaced = counted.append
    for _ in range(2):
        conn.receive_data(kernel_summary(pc=0) + slot(1, records))
        drain(conn)
    assert sum(counted) == 4 and len(counted) == 2
