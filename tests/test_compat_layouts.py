"""Every measured msSanitizer wire, spoken by a model client built from the measured JSON itself.

The client here packs each struct with ``struct.pack_into`` at the offsets and formats that
``sanitizerd/compat/layouts/wires.json`` records (read with ``json`` and ``wire.unpack_wires``), never through
``wire.Layout``'s struct/dtype machinery: a wrong table or a wrong reading of it in the daemon fails a test here
rather than agreeing with itself. Then: clients of one release fed to a listener of another are refused before
anything they say is misread, and the packets and heads that 26.1.0 added are fed lies, truncations and noise.
"""

from __future__ import annotations

import itertools
import json
import struct
from collections.abc import Mapping
from functools import cache
from importlib import resources
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sanitizerd.compat import wire
from sanitizerd.compat.packets.connection import CompatConnection
from sanitizerd.compat.records.numbering import record_table
from sanitizerd.compat.records.types import RecordType
from sanitizerd_protocol import CONNECTION_CLOSED, NEED_DATA, RemoteProtocolError, State
from sanitizerd_protocol import messages as m
from sanitizerd_protocol.records import EVENT_DTYPE, EventKind
from tests.detector_helpers import make_detector, run_kernel

SECURITY = 0x5A5A5A5A5A5A5A5A
# The JSON's numpy formats as struct codes: the measured files use only these.
CODES = {"u1": "B", "<u2": "H", "<u4": "I", "<u8": "Q", "i1": "b", "<i2": "h", "<i4": "i", "<i8": "q", "?": "?"}
# MemType of DmaMovRecord's dst/srcMemType (not in the measured enums; the same in every release).
UB, GM = 4, 6
MALLOC, FREE = 0, 1  # MemOpType
ACL = 3  # MemInfoSrc


@cache
def raw_wires() -> dict[str, dict[str, Any]]:
    packed = json.loads((resources.files("sanitizerd.compat") / "layouts" / "wires.json").read_text())
    return wire.unpack_wires(packed)


def raw_named(name: str) -> dict[str, Any]:
    """A wire's measured JSON by its name or alias (``26.1.0``, ``master``), found in the JSON, not the daemon."""
    wires = raw_wires()
    return wires[name] if name in wires else next(w for w in wires.values() if name in w.get("aliases", ()))


def ceil64(n: int) -> int:
    return -(-n // 64) * 64


class Client:
    """msSanitizer's hooks of one release, as far as these tests speak them: every byte from the measured JSON."""

    def __init__(self, raw: Mapping[str, Any]) -> None:
        self.raw = raw
        self.name: str = raw["name"]
        self.packets: dict[str, int] = raw["packets"]
        self.structs: dict[str, Any] = raw["structs"]
        self.types: dict[str, int] = raw["enums"]["RecordType"]

    def size(self, struct_name: str) -> int:
        return int(self.structs[struct_name]["size"])

    def has(self, struct_name: str, field: str) -> bool:
        return field in self.structs[struct_name]["fields"]

    def put(self, struct_name: str, values: Mapping[str, int | bytes], spec: Mapping[str, Any] | None = None) -> bytes:
        """``values`` at the measured offsets of ``struct_name`` (or of ``spec``), the rest zero."""
        spec = spec if spec is not None else self.structs[struct_name]
        buf = bytearray(int(spec["size"]))
        for field, value in values.items():
            offset, fmt = spec["fields"][field][:2]
            if isinstance(value, bytes):
                assert fmt.startswith("S") and len(value) < int(fmt[1:]), (struct_name, field)
                buf[offset : offset + len(value)] = value
            else:
                struct.pack_into("<" + CODES[fmt], buf, offset, value)
        return bytes(buf)

    def packet(self, kind: str, payload: bytes) -> bytes:
        return struct.pack("<I", self.packets[kind]) + payload

    def device_summary(self) -> bytes:
        return self.packet(
            "DEVICE_SUMMARY", self.put("DeviceInfoSummary", {"device": 2, "blockSize": 32, "blockNum": 24})
        )

    def kernel_summary(self, name: str = "add_custom", block_dim: int = 1) -> bytes:
        values = {"pcStartAddr": 0x1240_0000, "blockDim": block_dim, "kernelType": 1, "kernelName": name.encode()}
        return self.packet("KERNEL_SUMMARY", self.put("KernelSummary", values))

    def mem_op(self, op: int, addr: int, size: int) -> bytes:
        return self.put("MemOpRecord", {"type": op, "dstAddr": addr, "memSize": size, "infoSrc": ACL})

    def sanitizer_record(self, version: int, body: bytes) -> bytes:
        spec = self.structs["SanitizerRecord"]
        payload = bytearray(self.put("SanitizerRecord", {"version": version}))
        at = spec["fields"]["payload"][0]
        payload[at : at + len(body)] = body
        return self.packet("SANITIZER_RECORD", bytes(payload))

    def host_op(self, op: int, addr: int, size: int = 0) -> bytes:
        """A host malloc or free as msopcom's injection library sends it: a HostMemRecord in packet 1000, named
        HOST_RECORD up to 26.0.0 and MEMORY_RECORD from 26.1.0 (the name changed, not the struct); else a MemOpRecord
        in a SANITIZER_RECORD (the ACL hooks')."""
        values = {"type": op, "infoSrc": ACL, "dstAddr": addr, "memSize": size}
        if "HOST_RECORD" in self.packets:
            return self.packet("HOST_RECORD", self.put("HostMemRecord", values))
        if "MEMORY_RECORD" in self.packets:
            return self.packet("MEMORY_RECORD", self.put("HostMemRecord", values))
        return self.sanitizer_record(0, self.mem_op(op, addr, size))  # pragma: no cover - no such release measured

    def finish_record(self, record_type: int) -> bytes:
        """SANITIZER_RECORD holding one KernelRecord of ``record_type`` (FINISH ends the kernel)."""
        return self.sanitizer_record(1, self.put("KernelRecord", {"recordType": record_type}))

    def record(self, type_name: str, values: Mapping[str, int]) -> bytes:
        """One record of a slot: ``[u32 RecordType][payload struct]`` at this release's number and layout."""
        struct_name, size = self.raw["payloads"][type_name]
        body = self.put(struct_name, values, self.raw["payload_structs"][struct_name])
        assert len(body) == size
        return struct.pack("<I", self.types[type_name]) + body

    def dma(self, dst: int, src: int, pc: int, block_id: int = 0, len_burst: int = 1) -> bytes:
        """A DMA_MOV of one burst of ``len_burst`` 32-byte blocks from GM at ``src`` to UB at ``dst``."""
        values = {"dst": dst, "src": src, "location.pc": pc, "location.blockId": block_id, "nBurst": 1,
                  "lenBurst": len_burst, "dstMemType": UB, "srcMemType": GM}  # fmt: skip
        return self.record("DMA_MOV", values)

    def heads(
        self,
        records: bytes,
        count: int,
        *,
        total: int = 1,
        block_id: int = 0,
        host_memory: int = 0,
        block_head_size: int | None = None,
        simt: bool = False,
        write_offset: int | None = None,
    ) -> bytes:
        """RecordGlobalHead and RecordBlockHead at this release's offsets; ProtocolOffsetInfo where it has one,
        true (the rounded block head and its HostMemoryInfo entries) unless ``block_head_size`` says otherwise."""
        written = len(records) if write_offset is None else write_offset
        glob: dict[str, int] = {"securityVal": SECURITY, "kernelInfo.totalBlockDim": total, "kernelInfo.kernelType": 1}
        if self.has("RecordGlobalHead", "offsetInfo.blockHeadSize"):
            # A u32 on the device: a count no device could hold wraps, as the C assignment would.
            true_size = ceil64(self.size("RecordBlockHead") + host_memory * self.size("HostMemoryInfo")) & 0xFFFFFFFF
            glob["offsetInfo.blockHeadSize"] = true_size if block_head_size is None else block_head_size
        if simt:
            glob["supportSimt"] = 1
        block = {"recordCount": count, "recordWriteCount": count, "offset": written, "writeOffset": written,
                 "blockInfo.blockId": block_id, "blockInfo.blockType": 0, "hostMemoryNum": host_memory}  # fmt: skip
        return self.put("RecordGlobalHead", glob) + self.put("RecordBlockHead", block)

    def slot(self, records: list[bytes], *, trailing: bytes = b"", **head: Any) -> bytes:
        body = b"".join(records)
        data = self.heads(body, len(records), **head) + body + trailing
        return struct.pack("<IQ", self.packets["KERNEL_RECORD"], len(data)) + data


# The launch every layout is asked to carry: a buffer, a kernel reading one GM block inside it and one past it.
BUFFER, BUFFER_SIZE = 0x12C0_C000_1000, 64
INSIDE, PAST = BUFFER, BUFFER + BUFFER_SIZE  # the second DMA reads the 32 bytes after the buffer's end
UB_DST = 0x100


def launch(client: Client) -> bytes:
    records = [client.dma(UB_DST, INSIDE, 0x10), client.dma(UB_DST + 32, PAST, 0x14)]
    return (
        client.device_summary()
        + client.host_op(MALLOC, BUFFER, BUFFER_SIZE)
        + client.kernel_summary()
        + client.slot(records)
        + client.host_op(FREE, BUFFER)
    )


# --- driving a connection ----------------------------------------------------------------------------------------


def connect(layout: wire.WireLayout) -> CompatConnection:
    return CompatConnection(layout, job="job-1", peer_pid=4242)


def drain(conn: CompatConnection, out: list[m.Message]) -> None:
    """Messages into ``out`` as they come, so that what came before an error is still there to look at."""
    while True:
        event = conn.next_event()
        if event is NEED_DATA or event is CONNECTION_CLOSED:
            return
        out.append(event)  # type: ignore[arg-type]


def feed_all(conn: CompatConnection, data: bytes, out: list[m.Message], *, eof: bool = True) -> None:
    conn.receive_data(data)
    drain(conn, out)
    if eof:
        conn.receive_data(b"")
        drain(conn, out)


def events_of(messages: list[m.Message]) -> np.ndarray:
    data = b"".join(bytes(x.records) for x in messages if isinstance(x, m.Events))
    return np.frombuffer(data, dtype=EVENT_DTYPE)


LAYOUT_NAMES = list(wire.LAYOUTS)


def test_the_json_and_the_daemon_know_the_same_wires() -> None:
    assert set(raw_wires()) == set(wire.LAYOUTS) and len(LAYOUT_NAMES) == 59
    for alias in ("26.0.0", "26.1.0", "master"):
        assert wire.layout_named(alias) is wire.LAYOUTS[raw_named(alias)["name"]]


# --- 1. every measured wire, one launch ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", LAYOUT_NAMES)
def test_one_launch_on_every_measured_wire(name: str) -> None:
    layout = wire.LAYOUTS[name]
    client = Client(raw_wires()[name])
    conn = connect(layout)
    got: list[m.Message] = []
    feed_all(conn, launch(client), got)
    # Logs ("kernel binary unreadable" and the like) and the records' source places aside:
    useful = [x for x in got if not isinstance(x, m.Log | m.Locations)]
    kinds = [type(x).__name__ for x in useful]
    n_events = kinds.count("Events")
    assert kinds == ["DeviceSummary", "HostOp", "KernelBegin", *["Events"] * n_events, "KernelEnd", "HostOp", "Close"]
    assert n_events >= 1
    malloc, begin, end, free = useful[1], useful[2], useful[-3], useful[-2]
    assert (malloc.op, malloc.address, malloc.size, malloc.source) == ("malloc", BUFFER, BUFFER_SIZE, "acl")
    assert (free.op, free.address) == ("free", BUFFER)
    assert (begin.name, begin.block_dim, begin.kernel_type, begin.pc_start) == ("add_custom", 1, "aiv", 0x1240_0000)
    assert end.kernel == begin.kernel and end.problems == [] and end.lost == []
    events = events_of(got)
    reads = events[events["kind"] == EventKind.READ]
    writes = events[events["kind"] == EventKind.WRITE]
    assert sorted(reads["address"].tolist()) == [INSIDE, PAST]
    assert sorted(writes["address"].tolist()) == [UB_DST, UB_DST + 32]
    assert set(reads["block_size"].tolist()) == {32}
    assert events["kind"][-1] == EventKind.BLOCK_FINISH
    answer = conn.send(m.Verdict(kernel=end.kernel, events=len(events), errors=1, warnings=0))
    assert answer == struct.pack("<III", raw_wires()[name]["packets"]["KERNEL_RECORD_RESPONSE"], 1, 0)
    # ... and what memcheck finds in it: the read past the buffer, 32 bytes at its end, and nothing else.
    memcheck = make_detector("memcheck")
    assert memcheck.host_op(malloc) == []
    (finding,) = run_kernel(memcheck, events, name=begin.name)
    assert (finding.kind, finding.address, finding.size, finding.space) == ("illegal_read", PAST, 32, "GM")
    assert memcheck.host_op(free) == []


# msSanitizer's tool numbers a connection's records ``serialNo_++`` (from 0) up to aca3f9d (2026-07-03), and
# ``++serialNo_`` (from 1) from it on (command.cpp, kernel_block.cpp). Of the wires, 6e6a3a28 spans the change (its
# first four commits count from 0, its other 24 from 1) and is taken as counting from 1, as every wire after it does.
FROM_ONE = {"mssanitizer-6e6a3a28", "mssanitizer-74a1ad94", "mssanitizer-77aa773b", "mssanitizer-e7543a02",
            "mssanitizer-0a8f541f", "mssanitizer-0c6f91eb", "mssanitizer-1e040de1"}  # fmt: skip


def test_each_wire_starts_its_serial_numbers_where_its_release_does() -> None:
    assert {name for name, layout in wire.LAYOUTS.items() if layout.first_serial == 1} == FROM_ONE
    assert {layout.first_serial for layout in wire.LAYOUTS.values()} == {0, 1}
    assert [wire.layout_named(name).first_serial for name in ("26.0.0", wire.DEFAULT_LAYOUT, "26.1.0", "master")] == [
        0, 0, 1, 1,
    ]  # type: ignore[union-attr]  # fmt: skip


@pytest.mark.parametrize(("name", "first"), [("26.0.0", 0), (wire.DEFAULT_LAYOUT, 0), ("26.1.0", 1), ("master", 1)])
def test_the_launchs_serial_numbers_are_its_releases(name: str, first: int) -> None:
    """The malloc is the connection's first record; then the two DMA records, the slot's BLOCK_FINISH and the
    kernel's FINISH (which makes no event) each take one, and the free the next: as msSanitizer's tool of that
    release numbers them, so a report prints its ``(serialNo:N)``."""
    out: list[m.Message] = []
    feed_all(connect(wire.layout_named(name)), launch(client_of(name)), out)  # type: ignore[arg-type]
    malloc, free = [x for x in out if isinstance(x, m.HostOp)]
    events = events_of(out)
    dma = events[events["kind"] != EventKind.BLOCK_FINISH]
    assert malloc.serial == first
    assert sorted(set(dma["serial"].tolist())) == [first + 1, first + 2]
    assert events["serial"][-1] == first + 3  # BLOCK_FINISH
    assert free.serial == first + 5


# --- 2. a client of one release, a listener of another -----------------------------------------------------------

APRIL, R26_0, R26_1, MASTER = wire.DEFAULT_LAYOUT, "26.0.0", "26.1.0", "master"
# The last release that numbered SANITIZER_RECORD 1003, and the first that gave 1003 to MEM_REGION_PERMISSION (and
# SANITIZER_RECORD 1004): the rest of what this client sends is laid out alike in both.
BEFORE_RENUMBERING, RENUMBERED = "mssanitizer-02aa7ee2", "mssanitizer-2dfbe55b"

def client_of(name: str) -> Client:
    return Client(raw_named(name))


def launch_with_sanitizer_record(client: Client) -> bytes:
    """The launch with its malloc in a SANITIZER_RECORD (a MemOpRecord), as the ACL hooks send it: the packet whose
    number moved when MEM_REGION_PERMISSION took 1003."""
    return (
        client.device_summary()
        + client.sanitizer_record(0, client.mem_op(MALLOC, BUFFER, BUFFER_SIZE))
        + client.kernel_summary()
        + client.slot([client.dma(UB_DST, INSIDE, 0x10), client.dma(UB_DST + 32, PAST, 0x14)])
        + client.host_op(FREE, BUFFER)
    )


def said(messages: list[m.Message]) -> list[object]:
    """What a detector is given: no log lines, each kernel's events batches as one bytes (how a stream is cut into
    batches is not what it says)."""
    out: list[object] = []
    for message in messages:
        if isinstance(message, m.Log):
            continue
        if isinstance(message, m.Events):
            if out and isinstance(out[-1], bytes):
                out[-1] += bytes(message.records)
            else:
                out.append(bytes(message.records))
        else:
            out.append(message)
    return out


def read_by(server: str, data: bytes) -> tuple[list[m.Message], RemoteProtocolError | None]:
    conn = connect(wire.layout_named(server) or wire.LAYOUTS[server])
    out: list[m.Message] = []
    try:
        feed_all(conn, data, out)
    except RemoteProtocolError as exc:
        assert conn.state is State.ERROR and conn.buffered == 0
        return out, exc
    return out, None


def assert_refused_before_misreading(client: str, server: str, data: bytes) -> RemoteProtocolError:
    """``data`` of ``client``'s release, read by ``server``'s listener, is refused as another release's, and all
    it said before is what the client said (a host record laid out alike in both may go through; a misread one,
    or any record of the slot, may not)."""
    truth = said(read_by(client, data)[0])
    out, error = read_by(server, data)
    assert error is not None, f"{client}'s client accepted by {server}'s listener"
    assert error.reason in ("wire_mismatch", "bad_packet"), error
    assert "another" in str(error) and "release" in str(error)
    assert not any(isinstance(x, m.Events) for x in out)
    before = said(out)
    assert before == truth[: len(before)], f"misread before the refusal: {before}"
    return error


# A HostMemRecord (48 bytes) read as a MemOpRecord (208) swallows the KernelSummary's start and finds type 0 (a
# DEVICE_SUMMARY of every release) in the kernel name's zeros: such pairs read as valid packets for a while. The
# connection holds what a client says until one of its slots' heads add up, so none of it is said.
REFUSED_PAIRS = [
    (APRIL, R26_1),
    (R26_1, APRIL),
    (R26_1, MASTER),
    (MASTER, R26_1),
    (R26_0, R26_1),
    (R26_1, R26_0),
    (APRIL, MASTER),
    (MASTER, APRIL),
]


@pytest.mark.parametrize(("client", "server"), REFUSED_PAIRS)
def test_a_client_of_another_release_is_refused_before_it_is_misread(client: str, server: str) -> None:
    data = launch(client_of(client))
    assert data != launch(client_of(server))  # what makes the pair worth refusing: the bytes differ
    assert_refused_before_misreading(client, server, data)


@pytest.mark.parametrize(("client", "server"), [(BEFORE_RENUMBERING, RENUMBERED), (RENUMBERED, BEFORE_RENUMBERING)])
def test_a_release_that_only_renumbered_a_packet_is_refused(client: str, server: str) -> None:
    """02aa7ee2 and 2dfbe55b differ, for this client, only in SANITIZER_RECORD's number (1003, then 1004, with
    MEM_REGION_PERMISSION at 1003): the HOST_RECORD launch is byte-identical and must be read alike, and the ACL
    hooks' SANITIZER_RECORD is refused by the other, never read as a region permission or an unknown record."""
    assert launch(client_of(client)) == launch(client_of(server))
    assert said(read_by(server, launch(client_of(client)))[0]) == said(read_by(client, launch(client_of(client)))[0])
    data = launch_with_sanitizer_record(client_of(client))
    assert data != launch_with_sanitizer_record(client_of(server))
    assert_refused_before_misreading(client, server, data)


# January 2026: DMA_MOV renumbered (9, then 100) with every head and struct alike. No check of a slot can see it:
# the records are read as other types (100 is LDP before, 9 nothing after), and what comes of them is the kernel's
# problem lines, never an access at a misread address.
RENUMBERED_RECORDS = frozenset(
    {("mssanitizer-72e61ae6", "mssanitizer-44337db0"), ("mssanitizer-44337db0", "mssanitizer-72e61ae6")}
)
NEIGHBOURS = [(a, b) for x, y in itertools.pairwise(LAYOUT_NAMES) for a, b in ((x, y), (y, x))]


@pytest.mark.parametrize(("client", "server"), NEIGHBOURS)
def test_neighbouring_wires_are_read_alike_or_refused(client: str, server: str) -> None:
    """Each measured wire's client against the listener of the wire measured next to it. Where the launch's bytes
    are the same (their releases differ only in the Config, in record types this launch does not send, or in
    payload structs it does not use) it is accepted and read exactly as by its own listener; where they differ it
    is either refused before anything is misread, or its differences lie in fields no listener reads (a
    ProtocolOffsetInfo a release without one ignores), and then it too must be read exactly as by its own. The
    one exception is RENUMBERED_RECORDS: accepted, and its records become the kernel's problems, never accesses."""
    data = launch(client_of(client))
    truth = said(read_by(client, data)[0])
    out, error = read_by(server, data)
    if data == launch(client_of(server)):
        assert error is None, error
    if (client, server) in RENUMBERED_RECORDS:
        assert error is None and data != launch(client_of(server))
        (end,) = [x for x in out if isinstance(x, m.KernelEnd)]
        assert end.problems and "record" in " ".join(end.problems)
        assert not np.isin(events_of(out)["kind"], [EventKind.READ, EventKind.WRITE]).any()
    elif error is None:
        assert said(out) == truth
    else:
        assert_refused_before_misreading(client, server, data)


def test_identical_wires_accept_each_other() -> None:
    """64aee8ab and ca1f0086 were measured alike in everything: each listener reads the other's launch as its own."""
    a, b = "mssanitizer-64aee8ab", "mssanitizer-ca1f0086"
    assert launch(client_of(a)) == launch(client_of(b))
    for client, server in ((a, b), (b, a)):
        out, error = read_by(server, launch(client_of(client)))
        assert error is None and said(out) == said(read_by(client, launch(client_of(client)))[0])


# --- 3. hostile input on what 26.1.0 added ------------------------------------------------------------------------

NEW = client_of(R26_1)
HEADS_26_1 = 55_424 + 192


def permission(addr: int = 0x1000, size: int = 4096, device: int = 0, flags: int = 3) -> bytes:
    values = {"addr": addr, "size": size, "deviceId": device, "flags": flags}
    return NEW.packet("MEM_REGION_PERMISSION", NEW.put("MemRegionPermissionDesc", values))


def out_of_bound(user: int = 0x1000, user_size: int = 64, out: int = 0x1040, out_size: int = 32) -> bytes:
    values = {"userAddr": user, "userSize": user_size, "outAddr": out, "outSize": out_size}
    return NEW.packet("GM_ADDR_OUT_OF_BOUND_RECORD", NEW.put("GMAddrOutOfBoundRecord", values))


def refused_by(layout_name: str, data: bytes, reason: str, *, eof: bool = False) -> str:
    conn = connect(wire.layout_named(layout_name) or wire.LAYOUTS[layout_name])
    out: list[m.Message] = []
    with pytest.raises(RemoteProtocolError) as caught:
        feed_all(conn, data, out, eof=eof)
    assert caught.value.reason == reason, str(caught.value)
    assert conn.state is State.ERROR and conn.buffered == 0
    return str(caught.value)


def test_the_new_packets_are_numbered_as_measured() -> None:
    assert (NEW.packets["MEM_REGION_PERMISSION"], NEW.packets["GM_ADDR_OUT_OF_BOUND_RECORD"]) == (1003, 1005)
    assert (NEW.size("MemRegionPermissionDesc"), NEW.size("GMAddrOutOfBoundRecord")) == (24, 32)
    assert NEW.size("RecordGlobalHead") + NEW.size("RecordBlockHead") == HEADS_26_1


@pytest.mark.parametrize(
    ("data", "said"),
    [(permission(), m.RegionPermission), (out_of_bound(), m.GuardWrite)],
    ids=["permission", "out_of_bound"],
)
def test_the_new_packets_truncated_anywhere_at_eof(data: bytes, said: type) -> None:
    out, error = read_by(R26_1, data)
    assert error is None and len([x for x in out if isinstance(x, said)]) == 1  # whole, it is read
    for cut in range(1, len(data)):
        refused_by(R26_1, data[:cut], "truncated", eof=True)


def test_the_new_packets_with_huge_values_are_said_not_followed() -> None:
    top64, top32 = 2**64 - 1, 2**32 - 1
    data = permission(top64, top64, top32, top32) + out_of_bound(top64, top32, top64, top32) + NEW.device_summary()
    out, error = read_by(R26_1, data)
    assert error is None
    logs = [x.text for x in out if isinstance(x, m.Log)]
    assert len(logs) == 1 and "0xffffffffffffffff" in logs[0]
    assert "passes the end of the address space, not applied" in logs[0]  # a region that overflows is not applied
    assert [type(x).__name__ for x in out if not isinstance(x, m.Log)] == ["GuardWrite", "DeviceSummary", "Close"]


@pytest.mark.parametrize("release", [R26_1, MASTER])
def test_permission_is_a_region_read_at_the_measured_offsets(release: str) -> None:
    """Each field at its measured offset (distinct values in every byte that matters) becomes the region's: the
    address, size, device and msSanitizer's read/write/shared bits, unchanged."""
    client = client_of(release)
    values = {"addr": 0x1122_3344_5566_7788, "size": 0x0102_0304, "deviceId": 7, "flags": 0x5}
    data = client.packet("MEM_REGION_PERMISSION", client.put("MemRegionPermissionDesc", values))
    out, error = read_by(release, data)
    assert error is None
    (region,) = [x for x in out if isinstance(x, m.RegionPermission)]
    assert (region.address, region.size, region.device, region.flags) == (0x1122_3344_5566_7788, 0x0102_0304, 7, 5)
    assert not [x for x in out if isinstance(x, m.Log)]


@pytest.mark.parametrize(
    ("flags", "kept"), [(0, 0), (0x7, 0x7), (0x8, 0), (0xFFFF_FFFF, 0x7), (0x1_0002, 0x2)]
)  # fmt: skip
def test_permission_flags_outside_mssanitizers_are_said_and_dropped(flags: int, kept: int) -> None:
    out, error = read_by(R26_1, permission(flags=flags) + NEW.device_summary())
    assert error is None
    (region,) = [x for x in out if isinstance(x, m.RegionPermission)]
    assert region.flags == kept
    logs = [x.text for x in out if isinstance(x, m.Log)]
    assert bool(logs) == (flags != kept) and all("not msSanitizer's flags" in text for text in logs)


@pytest.mark.parametrize(
    ("addr", "size", "applied"),
    [(0, 0, True), (2**64 - 1, 0, True), (2**64 - 2, 1, True), (2**64 - 1, 1, False), (1, 2**64 - 1, False)],
)
def test_permission_at_the_end_of_the_address_space(addr: int, size: int, applied: bool) -> None:
    """A region may end at 2**64 - 1, not past it: past it, it is said and not applied; the stream goes on."""
    out, error = read_by(R26_1, permission(addr, size) + NEW.device_summary())
    assert error is None
    assert len([x for x in out if isinstance(x, m.RegionPermission)]) == int(applied)
    rest = [type(x).__name__ for x in out if not isinstance(x, m.Log | m.RegionPermission)]
    assert rest == ["DeviceSummary", "Close"]


def test_the_new_packets_repeated_are_held_in_bounded_memory() -> None:
    """Twenty thousand of each, fed in 64 KiB reads: nothing piles up but the read's own bytes."""
    data = (permission() + out_of_bound()) * 20_000
    conn = connect(wire.LAYOUTS[raw_named(R26_1)["name"]])
    logs = held = 0
    step = 64 << 10
    for i in range(0, len(data), step):
        conn.receive_data(data[i : i + step])
        out: list[m.Message] = []
        drain(conn, out)
        logs += sum(isinstance(x, m.Log | m.GuardWrite | m.RegionPermission) for x in out)
        held = max(held, conn.buffered)
    assert held < 64  # at most one packet's part, waiting for the rest
    conn.receive_data(b"")
    out = []
    drain(conn, out)
    assert logs + sum(isinstance(x, m.Log | m.GuardWrite | m.RegionPermission) for x in out) == 40_000


def new_slot(records: list[bytes] | None = None, **head: Any) -> bytes:
    records = [NEW.dma(UB_DST, INSIDE, 0x10)] if records is None else records
    return NEW.kernel_summary() + NEW.slot(records, **head)


def test_a_true_protocol_offset_info_with_host_memory_is_accepted() -> None:
    """The control for the lies below: five HostMemoryInfo entries make a 192 + 5 * 24 = 312, so 320-byte, head."""
    assert NEW.heads(b"", 0, host_memory=5)[104:108] == struct.pack("<I", 320)
    out, error = read_by(R26_1, new_slot(host_memory=5))
    assert error is None and [x.problems for x in out if isinstance(x, m.KernelEnd)] == [[]]


@pytest.mark.parametrize(
    ("block_head_size", "host_memory"),
    [(0, 0), (192, 5), (2**32 - 1, 0), (320, 0), (256, 0)],
    ids=["zero", "192_with_5_entries", "u32_max", "320_with_none", "256"],
)
def test_a_lying_protocol_offset_info_ends_the_connection(block_head_size: int, host_memory: int) -> None:
    text = refused_by(R26_1, new_slot(block_head_size=block_head_size, host_memory=host_memory), "wire_mismatch")
    assert f"blockHeadSize is {block_head_size}" in text


def test_a_write_offset_past_the_packet_ends_the_connection() -> None:
    record = NEW.dma(UB_DST, INSIDE, 0x10)
    text = refused_by(R26_1, new_slot([record], write_offset=2 * len(record)), "wire_mismatch")
    assert f"writeOffset says {2 * len(record)}" in text


@pytest.mark.parametrize("length", [0, 1, 38_656, HEADS_26_1 - 1])
def test_a_slot_shorter_than_the_heads_is_another_releases(length: int) -> None:
    data = NEW.kernel_summary() + struct.pack("<IQ", 1001, length) + bytes(length)
    assert str(HEADS_26_1) in refused_by(R26_1, data, "wire_mismatch")


def test_simt_trailing_bytes_are_not_records() -> None:
    """supportSimt: the SIMT part follows the writeOffset bytes of records, and is never decoded as records."""
    trailing = NEW.dma(UB_DST, 0xDEAD_0000, 0x20) * 4 + b"\xff" * 100
    data = new_slot([NEW.dma(UB_DST, INSIDE, 0x10)], simt=True, trailing=trailing) + NEW.host_op(FREE, BUFFER)
    out, error = read_by(R26_1, data)
    assert error is None
    events = events_of(out)
    assert events[events["kind"] == EventKind.READ]["address"].tolist() == [INSIDE]
    assert [type(x).__name__ for x in out if not isinstance(x, m.Log | m.Events)][-3:] == [
        "KernelEnd",
        "HostOp",
        "Close",
    ]
    # Without supportSimt the same bytes are a slot that does not add up.
    refused_by(R26_1, new_slot([NEW.dma(UB_DST, INSIDE, 0x10)], trailing=trailing), "wire_mismatch")


def test_finish_is_renumbered_between_releases() -> None:
    """26.1.0 numbers FINISH 100002 (KERNEL_FINISH took 100001); April's FINISH is 100001 and 100002 is nothing."""
    assert record_table(wire.layout_named(R26_1)).wire(RecordType.FINISH) == 100002  # type: ignore[arg-type]
    assert record_table(wire.LAYOUTS[APRIL]).wire(RecordType.FINISH) == 100001
    new = NEW.kernel_summary("k") + NEW.finish_record(100002)
    conn = connect(wire.layout_named(R26_1))  # type: ignore[arg-type]
    out: list[m.Message] = []
    feed_all(conn, new + NEW.device_summary(), out, eof=True)
    begin, end = [x for x in out if isinstance(x, m.KernelBegin | m.KernelEnd)]
    assert end == m.KernelEnd(kernel=begin.kernel)  # ended by FINISH (the close would add "closed before FINISH")
    old = client_of(APRIL)
    out, error = read_by(APRIL, old.kernel_summary("k") + old.finish_record(100002))
    assert error is None
    (end,) = [x for x in out if isinstance(x, m.KernelEnd)]
    assert any("closed before the kernel's FINISH" in text for text in end.problems)  # 100002 ended nothing
    out, error = read_by(APRIL, old.kernel_summary("k") + old.finish_record(100001) + old.device_summary())
    assert error is None and next(x for x in out if isinstance(x, m.KernelEnd)).problems == []


FUZZ = settings(max_examples=150, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
FUZZED = [R26_1, MASTER]


def fed_to_the_end(layout_name: str, data: bytes, chunk: int) -> None:
    """Only native messages come out, or a RemoteProtocolError: nothing else escapes, nothing is kept after it."""
    conn = CompatConnection(wire.layout_named(layout_name), job="job-1", peer_pid=4242, chunk_size=256)  # type: ignore[arg-type]
    out: list[m.Message] = []
    try:
        for i in range(0, len(data), chunk):
            conn.receive_data(data[i : i + chunk])
            drain(conn, out)
        conn.receive_data(b"")
        drain(conn, out)
    except RemoteProtocolError:
        assert conn.state is State.ERROR and conn.buffered == 0
    assert all(isinstance(x, m.Message) for x in out)


@pytest.mark.parametrize("layout_name", FUZZED)
@FUZZ
@given(data=st.binary(max_size=800), chunk=st.integers(1, 64))
def test_random_bytes_to_the_new_wires(layout_name: str, data: bytes, chunk: int) -> None:
    fed_to_the_end(layout_name, data, chunk)


@pytest.mark.parametrize("layout_name", FUZZED)
@FUZZ
@given(
    kind=st.sampled_from([0, 1, 2, 3, 1000, 1001, 1002, 1003, 1004, 1005, 3000, 3001, 7, 0xFFFFFFFF]),
    length=st.integers(0, 2**64 - 1) | st.integers(0, HEADS_26_1 + 600),
    body=st.binary(max_size=600),
    repeat=st.integers(1, 4),
    chunk=st.integers(1, 4096),
)
def test_random_typed_packets_to_the_new_wires(
    layout_name: str, kind: int, length: int, body: bytes, repeat: int, chunk: int
) -> None:
    fed_to_the_end(layout_name, (struct.pack("<IQ", kind, length) + body) * repeat, chunk)


@pytest.mark.parametrize("layout_name", FUZZED)
@FUZZ
@given(
    records=st.binary(max_size=1500),
    count=st.integers(0, 2**64 - 1) | st.integers(0, 30),
    host_memory=st.integers(0, 2**32 - 1) | st.integers(0, 8),
    block_head_size=st.none() | st.integers(0, 2**32 - 1),
    simt=st.booleans(),
    chunk=st.integers(512, 8192),  # the heads alone are 55 616 bytes: a byte at a time would take seconds
)
def test_random_slots_to_the_new_wires(
    layout_name: str, records: bytes, count: int, host_memory: int, block_head_size: int | None, simt: bool, chunk: int
) -> None:
    client = client_of(layout_name)
    heads = client.heads(records, count, host_memory=host_memory, block_head_size=block_head_size, simt=simt)
    body = heads + records
    data = client.kernel_summary() + struct.pack("<IQ", client.packets["KERNEL_RECORD"], len(body)) + body
    fed_to_the_end(layout_name, data + client.host_op(MALLOC, 1, 1), chunk)
