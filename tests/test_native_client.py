"""The C test client (client_shim/native/msop_add_client.c) against a small server written here from the reference's
layouts with ``struct``, independent of sanitizerd's decoders: the packets arrive in the hooks' order, with the
documented sizes, and the records say what examples/add_custom.py's events say. The April client is read in detail;
the 26.1.0 and master builds are checked for what their wires change (reference section 1.10)."""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

from tests.native_build import build_client, build_kernel

CONFIG_SIZE = 2584
GLOBAL_HEAD, BLOCK_HEAD = 38528, 128
PAYLOAD = {100: 64, 101: 72, 10003: 104, 20000: 56, 20001: 56}  # DMA_MOV, MOV_ALIGN, BINARY_OP, SET/WAIT_FLAG
FIXED = {0: 16, 1: 2064, 1000: 48, 1002: 88, 1003: 296}  # packet type -> payload size
VARIABLE = {2, 3, 1001}
PC_SYMBOLS = ("msop_pc_copy_in", "msop_pc_compute", "msop_pc_copy_out", "msop_pc_pad")
GM_X, GM_Y, GM_Z, GM_WORKSPACE = 0x12C0C0000000, 0x12C0C0010000, 0x12C0C0020000, 0x12C0C0030000


@dataclass(frozen=True)
class Wire:
    """What this server needs of one wire, from the reference's tables (section 1.10), not from sanitizerd."""

    layout: str  # the name build_client builds it by
    config_size: int
    fixed: dict[int, int]  # packet type -> payload size
    sanitizer_record: int
    global_head: int
    block_head: int
    total_block_dim_at: int  # kernelInfo.totalBlockDim in the global head
    block_head_size_at: int | None  # offsetInfo.blockHeadSize in the global head (26.1.0 on)
    block_id_at: int  # blockInfo.blockId in the block head (blockType, vecSubBlockDim follow it)
    config_block_id_at: int  # Config.checkBlockId (cacheSize 4 bytes after it)


APRIL = Wire("mssanitizer-4a419f05", CONFIG_SIZE, FIXED, 1003, GLOBAL_HEAD, BLOCK_HEAD, 24, None, 40, 12)
# 1000 MEMORY_RECORD (HostMemRecord 48 B: HOST_RECORD renamed), 1003 MEM_REGION_PERMISSION (24 B), 1004 SANITIZER_RECORD
# (296 B), 1005 GM_ADDR_OUT_OF_BOUND_RECORD (32 B)
NEWER_FIXED = {0: 16, 1: 2064, 1000: 48, 1002: 88, 1003: 24, 1004: 296, 1005: 32}
V26_1_0 = Wire("mssanitizer-74a1ad94", 2588, NEWER_FIXED, 1004, 55424, 192, 24, 104, 88, 12)
MASTER = Wire("mssanitizer-1e040de1", 2592, NEWER_FIXED, 1004, 55424, 192, 32, 112, 88, 16)


def config_bytes(cache_size: int = 100, wire: Wire = APRIL) -> bytes:
    """msSanitizer's Config: twelve flags, checkBlockId at 12, cacheSize at 16, demangleMode at 20, three strings."""
    data = bytearray(wire.config_size)
    data[0], data[1], data[8] = 1, 1, 1  # defaultCheck, memCheck, leakCheck
    struct.pack_into("<hxxIB", data, wire.config_block_id_at, -1, cache_size, 0)
    return bytes(data)


@dataclass
class Capture:
    packets: list[tuple[int, bytes]] = field(default_factory=list)
    config_sent_before: int = -1  # packets received when the Config was written (it goes out at accept)
    reply: bytes = b""
    error: str = ""


def read_exact(conn: socket.socket, n: int) -> bytes:
    data = bytearray()
    while len(data) < n:
        chunk = conn.recv(min(n - len(data), 1 << 20))
        if not chunk:
            raise EOFError
        data += chunk
    return bytes(data)


def serve_one(listener: socket.socket, capture: Capture, wire: Wire = APRIL, config: bytes | None = None) -> None:
    """Accept one client, write the Config unasked (``wire``'s, or ``config``), read ``wire``'s packets to EOF; answer
    after the last KERNEL_RECORD."""
    try:
        conn, _ = listener.accept()
        with conn:
            conn.settimeout(30)
            capture.config_sent_before = len(capture.packets)
            conn.sendall(config_bytes(wire=wire) if config is None else config)
            slots_seen = 0
            while True:
                try:
                    (kind,) = struct.unpack("<I", read_exact(conn, 4))
                except EOFError:
                    return
                if kind in wire.fixed:
                    payload = read_exact(conn, wire.fixed[kind])
                elif kind in VARIABLE:
                    (length,) = struct.unpack("<Q", read_exact(conn, 8))
                    assert length < 1 << 30
                    payload = read_exact(conn, length)
                else:
                    capture.error = f"unknown packet type {kind}"
                    return
                capture.packets.append((kind, payload))
                if kind == 1001:
                    slots_seen += 1
                    (total,) = struct.unpack_from("<Q", payload, wire.total_block_dim_at)
                    if slots_seen == total:
                        capture.reply = struct.pack("<III", 3001, total, 0)
                        conn.sendall(capture.reply)
    except Exception as error:  # the test reports it; a thread's exception would be lost
        capture.error = repr(error)


def abstract_address(name: str) -> bytes:
    """The hooks' address: NUL, the name, NUL padding to the whole sun_path (108 bytes)."""
    raw = b"\0" + name.encode()
    return raw + b"\0" * (108 - len(raw))


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    directory = tmp_path_factory.mktemp("native")
    return build_client(directory), build_kernel(directory)


def serve_client(
    client: Path, kernel: Path, wire: Wire = APRIL, config: bytes | None = None
) -> tuple[Capture, subprocess.CompletedProcess[str]]:
    """Run ``client`` against serve_one on a fresh abstract socket named in MSOP_SOCKET_PATH alone."""
    name = f"/tmp/msop_connect.20260101000000.{os.getpid()}.{threading.get_ident()}.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(abstract_address(name))
    listener.listen(1)
    capture = Capture()
    server = threading.Thread(target=serve_one, args=(listener, capture, wire, config))
    server.start()
    env = {k: v for k, v in os.environ.items() if k != "MSSANITIZER_PID"} | {"MSOP_SOCKET_PATH": name}
    try:
        done = subprocess.run([str(client), str(kernel)], env=env, capture_output=True, text=True, timeout=60)
    finally:
        server.join(30)
        listener.close()
    assert not capture.error, capture.error
    return capture, done


@pytest.fixture(scope="module")
def run(built: tuple[Path, Path]) -> tuple[Capture, subprocess.CompletedProcess[str], Path]:
    client, kernel = built
    capture, done = serve_client(client, kernel)
    return capture, done, kernel


def symbols(kernel: Path) -> dict[str, int]:
    with kernel.open("rb") as f:
        table = ELFFile(f).get_section_by_name(".symtab")
        return {s.name: s["st_value"] for s in table.iter_symbols() if s.name in PC_SYMBOLS}


def records_of(slot: bytes) -> list[tuple[int, bytes]]:
    """[u32 RecordType][payload] back to back after the heads, checked against the block head's counts."""
    count, written, offset, write_offset = struct.unpack_from("<QQQQ", slot, GLOBAL_HEAD)
    assert (count, offset) == (written, write_offset)  # no overflow
    body = slot[GLOBAL_HEAD + BLOCK_HEAD :]
    assert len(body) == offset
    out, at = [], 0
    while at < len(body):
        (kind,) = struct.unpack_from("<I", body, at)
        out.append((kind, body[at + 4 : at + 4 + PAYLOAD[kind]]))
        at += 4 + PAYLOAD[kind]
    assert at == len(body) and len(out) == count
    return out


def test_packets_arrive_in_the_hooks_order(run: tuple[Capture, subprocess.CompletedProcess[str], Path]) -> None:
    capture, done, kernel = run
    assert done.returncode == 0, done.stderr
    kinds = [k for k, _ in capture.packets]
    # DEVICE_SUMMARY, six host records, the launch (summary, binary, 24 slots), five host records, DEVICE_SUMMARY.
    assert kinds == [0] + [1003] * 6 + [1, 2] + [1001] * 24 + [1003] * 5 + [0]
    assert capture.config_sent_before == 0 and capture.reply == struct.pack("<III", 3001, 24, 0)
    assert capture.packets[8][1] == kernel.read_bytes()  # KERNEL_BINARY is the ELF, unchanged
    device = struct.unpack("<IIIi", capture.packets[0][1])
    assert device == (2, 0, 8, 0)  # Ascend910B1, 8 blocks, device 0
    pc_start, block_dim, kernel_type, dbi, debug_line = struct.unpack_from("<QIBBB", capture.packets[7][1])
    name = capture.packets[7][1][15:].split(b"\0")[0]
    assert (block_dim, kernel_type, dbi, debug_line, name) == (8, 1, 0, 1, b"add_custom_kernel")
    assert pc_start == 0x124080000000


def test_host_records_carry_file_line_and_serial(run: tuple[Capture, subprocess.CompletedProcess[str], Path]) -> None:
    capture, _, _ = run
    host = [p for k, p in capture.packets if k == 1003]
    rows = []
    for payload in host:
        (version,) = struct.unpack_from("<i", payload, 0)
        serial, op, core, module, _src, dst = struct.unpack_from("<QIii4xQQ", payload, 8)
        size, line = struct.unpack_from("<Qi", payload, 8 + 48)
        file = payload[8 + 60 : 8 + 124].split(b"\0")[0].decode()
        info_src, info_desc, side = payload[8 + 136], payload[8 + 137], payload[8 + 138]
        assert (version, core, module, file, info_src, info_desc, side) == (0, -1, -1, "main.cpp", 3, 0, 0)
        rows.append((serial, op, dst, size, line))
    total = 8 * 2048 * 2
    # Serials count as the server does: 6 host records, then 24 slots of records plus a BLOCK_FINISH each
    # (8 blocks x 8 tiles x 10 records + the pad = 641, + 24), then FINISH.
    after = 6 + 641 + 24 + 1
    assert rows == [
        (0, 0, GM_X, total - 224, 70), (1, 0, GM_Y, total, 71), (2, 0, GM_Z, total, 72),
        (3, 0, GM_WORKSPACE, 4096, 73), (4, 4, GM_X, total - 224, 75), (5, 4, GM_Y, total, 76),
        (after, 3, GM_Z, total, 80), (after + 1, 1, GM_X, 0, 84), (after + 2, 1, GM_Y, 0, 85),
        (after + 3, 1, GM_Z, 0, 86), (after + 4, 1, GM_Y, 0, 87),
    ]  # fmt: skip


def test_vector_blocks_sit_in_their_slots(run: tuple[Capture, subprocess.CompletedProcess[str], Path]) -> None:
    capture, _, _ = run
    slots = [p for k, p in capture.packets if k == 1001]
    for slot, payload in enumerate(slots):
        security, cache_size, check_block = struct.unpack_from("<QIh", payload, 0)
        total = struct.unpack_from("<Q", payload, 24)[0]
        assert (security, cache_size, check_block, total) == (0x5A5A5A5A5A5A5A5A, 100, -1, 24)
        block_id, block_type = struct.unpack_from("<H6xB", payload, GLOBAL_HEAD + 32 + 8)
        records = records_of(payload)
        group, position = divmod(slot, 3)
        if position == 2 or 2 * group + position >= 8:  # cube slots, and slots past the last block
            assert records == [], slot
            assert len(payload) == 38656  # 38 668 bytes on the wire with the packet's type and length
            continue
        block = 2 * group + position
        assert (block_id, block_type) == (block, 0) and slot == block + block // 2
        assert len(records) == 80 + (block == 0)
        assert {struct.unpack_from("<H", p, _location_at(k) + 24)[0] for k, p in records} == {block}


def _location_at(kind: int) -> int:
    return 24 if kind == 10003 else 0 if kind in (20000, 20001) else 16


def test_records_say_what_the_demo_does(run: tuple[Capture, subprocess.CompletedProcess[str], Path]) -> None:
    capture, _, kernel = run
    # The kernel object puts its labels at fixed .text offsets, the pcs examples/add_custom.py names.
    assert symbols(kernel) == {"msop_pc_copy_in": 0x800, "msop_pc_compute": 0x880, "msop_pc_copy_out": 0x900,
                               "msop_pc_pad": 0x980}  # fmt: skip
    pcs = {name: 0x124080000000 + value for name, value in symbols(kernel).items()}
    slots = [p for k, p in capture.packets if k == 1001]
    block7 = records_of(slots[7 + 7 // 2])
    tile = [k for k, _ in block7[:10]]
    assert tile == [100, 100, 20000, 20001, 10003, 20000, 20001, 100, 20000, 20001]
    # Block 7's last tile reads x from 0x7e00: 512 bytes, of which the last 224 lie past x's 32 544.
    kind, last_x = block7[70]
    dst, src, _file, line, pc, _block, n_burst, len_burst = struct.unpack_from("<QQQQQH6xHH", last_x)
    assert (kind, dst, src, n_burst, len_burst) == (100, 0x0, GM_X + 0x7E00, 1, 16)
    assert (line, pc) == (58, pcs["msop_pc_copy_in"])
    assert last_x[56:60] == bytes([4, 6, 0, 0])  # to UB from GM, no pad, no byte mode
    add = block7[4][1]
    dst, src0, src1 = struct.unpack_from("<QQQ", add)
    assert (dst, src0, src1, struct.unpack_from("<Q", add, 24 + 16)[0]) == (0x400, 0x0, 0x200, pcs["msop_pc_compute"])
    assert struct.unpack_from("<QQ6H3HB3B3BB", add, 56)[-8:] == (2, 8, 8, 8, 16, 16, 16, 0)
    set_flag = block7[2][1]
    assert struct.unpack_from("<IIQ?", set_flag, 32) == (4, 1, 0, False)  # MTE2 -> V, event 0
    # Block 0 ends with the DataCopyPad of 13 bytes into UB offset 6.
    kind, pad = records_of(slots[0])[-1]
    dst, src = struct.unpack_from("<QQ", pad)
    src_gap, dst_gap, len_burst, n_burst = struct.unpack_from("<IIIH", pad, 48)
    assert (kind, dst, src, len_burst, n_burst, src_gap, dst_gap) == (101, 0x6, GM_X + 4096 - 13, 13, 1, 0, 0)
    assert pad[62:65] == bytes([4, 6, 1])  # to UB, from GM, B8
    assert struct.unpack_from("<QQQ", pad, 16) == (0x2A, 24, pcs["msop_pc_pad"])


def test_refuses_a_missing_server_and_a_bad_kernel(built: tuple[Path, Path], tmp_path: Path) -> None:
    client, _ = built
    garbage = tmp_path / "garbage.elf"
    garbage.write_bytes(b"\x7fELF" + b"\xff" * 60)
    done = subprocess.run([str(client), str(garbage)], env=dict(os.environ, MSOP_SOCKET_PATH="x"),
                          capture_output=True, text=True, timeout=30)  # fmt: skip
    assert done.returncode == 2 and "msop_add_client:" in done.stderr
    env = {k: v for k, v in os.environ.items() if k not in ("MSOP_SOCKET_PATH", "MSSANITIZER_PID")}
    done = subprocess.run([str(client), str(built[1])], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 2 and "MSOP_SOCKET_PATH" in done.stderr


def misbehaving_server(listener: socket.socket, answer: bytes | None) -> None:
    """Accept one client; write ``answer`` after the Config once the last slot is in (None: close at once)."""
    conn, _ = listener.accept()
    with conn:
        if answer is None:
            return
        conn.settimeout(30)
        conn.sendall(config_bytes())
        slots = 0
        while slots < 24:
            (kind,) = struct.unpack("<I", read_exact(conn, 4))
            if kind in FIXED:
                read_exact(conn, FIXED[kind])
            else:
                (length,) = struct.unpack("<Q", read_exact(conn, 8))
                read_exact(conn, length)
                slots += kind == 1001
        conn.sendall(answer)


def test_a_misbehaving_server_is_reported(built: tuple[Path, Path]) -> None:
    """No Config (the server closed) and a wrong KERNEL_RECORD_RESPONSE each end the client with status 1."""
    client, kernel = built
    # Closed at once: the client fails on its next send or on the Config read, whichever comes first.
    for answer, said in ((None, ("Config", "send")), (struct.pack("<III", 3001, 5, 1000), ("unexpected reply",))):
        name = f"/tmp/msop_connect.20260101000001.{os.getpid()}.sock"
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(abstract_address(name))
        listener.listen(1)
        server = threading.Thread(target=misbehaving_server, args=(listener, answer))
        server.start()
        try:
            done = subprocess.run([str(client), str(kernel)], env=dict(os.environ, MSOP_SOCKET_PATH=name),
                                  capture_output=True, text=True, timeout=60)  # fmt: skip
        finally:
            server.join(30)
            listener.close()
        assert done.returncode == 1 and any(text in done.stderr for text in said), done.stderr


@pytest.fixture(scope="module")
def newer(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    directory = tmp_path_factory.mktemp("newer")
    return {wire.layout: build_client(directory, wire.layout) for wire in (V26_1_0, MASTER)}


@pytest.mark.parametrize("wire", [V26_1_0, MASTER], ids=lambda wire: wire.layout)
def test_a_newer_wire_is_spoken_whole(built: tuple[Path, Path], newer: dict[str, Path], wire: Wire) -> None:
    """The 26.1.0 and master builds: the same launch with the renumbered SANITIZER_RECORD, MemOpRecords of 208 bytes,
    heads of 55 424 + 192 bytes with ProtocolOffsetInfo.blockHeadSize = 192, and the Config read whole."""
    capture, done = serve_client(newer[wire.layout], built[1], wire)
    assert done.returncode == 0, done.stderr
    assert "no whole Config" not in done.stderr
    kinds = [k for k, _ in capture.packets]
    assert kinds == [0] + [1004] * 6 + [1, 2] + [1001] * 24 + [1004] * 5 + [0]
    assert capture.reply == struct.pack("<III", 3001, 24, 0)
    host = [p for k, p in capture.packets if k == 1004]
    for payload in host:
        (version,) = struct.unpack_from("<i", payload, 0)
        _serial, _op, core, module = struct.unpack_from("<QIii", payload, 8)
        file = payload[8 + 60 : 8 + 124].split(b"\0")[0].decode()
        # MemOpRecord's new members (mainScalarPc at 160, isSimt at 169, the out-of-bound record at 176) are zero.
        assert (version, core, module, file, payload[8 + 136]) == (0, -1, -1, "main.cpp", 3)
        assert payload[8 + 160 : 8 + 208] == bytes(48)
    assert [struct.unpack_from("<Qi", p, 8 + 48) for p in host][:4] == [
        (8 * 2048 * 2 - 224, 70), (8 * 2048 * 2, 71), (8 * 2048 * 2, 72), (4096, 73)
    ]  # fmt: skip
    heads = wire.global_head + wire.block_head
    assert wire.block_head_size_at is not None
    for slot, payload in enumerate(p for k, p in capture.packets if k == 1001):
        security, cache_size, check_block = struct.unpack_from("<QIh", payload, 0)
        (total,) = struct.unpack_from("<Q", payload, wire.total_block_dim_at)
        (block_head_size,) = struct.unpack_from("<I", payload, wire.block_head_size_at)
        regions = struct.unpack_from("<6Q", payload, wire.block_head_size_at - 48)
        assert (security, cache_size, check_block, total) == (0x5A5A5A5A5A5A5A5A, 100, -1, 24)
        assert (block_head_size, regions) == (192, (0,) * 6)
        count, written, offset, write_offset = struct.unpack_from("<QQQQ", payload, wire.global_head)
        assert count == written and offset == write_offset == len(payload) - heads
        block_id, block_type, sub_blocks = struct.unpack_from("<HBB", payload, wire.global_head + wire.block_id_at)
        group, position = divmod(slot, 3)
        block = group if position == 2 else 2 * group + position
        assert (block_id, block_type, sub_blocks) == (block, int(position == 2), 2)
        assert count == (0 if position == 2 or block >= 8 else 80 + (block == 0))


def test_a_short_config_is_polled_for_then_the_launch_goes_on(built: tuple[Path, Path], newer: dict[str, Path]) -> None:
    """A server of another wire writes a Config 4 bytes short of 26.1.0's: the client waits about 1 s for the rest
    (the hooks poll 10 x 100 ms), says so, sends the launch with msSanitizer's defaults, and ends with status 1."""
    capture, done = serve_client(newer[V26_1_0.layout], built[1], V26_1_0, config=config_bytes(cache_size=7))
    assert done.returncode == 1
    assert (
        "no whole Config from the server within 1 s (2584 of the 2588 bytes of mssanitizer-74a1ad94's)" in done.stderr
    )
    slots = [p for k, p in capture.packets if k == 1001]
    assert len(slots) == 24 and capture.reply
    assert struct.unpack_from("<Ih", slots[0], 8) == (100, -1)  # the defaults, not the short Config's 7 MB


def test_a_newer_wire_reads_only_msop_socket_path(newer: dict[str, Path], built: tuple[Path, Path]) -> None:
    """From 26.1.0 the launcher exports MSOP_SOCKET_PATH alone; a client of that wire does not fall back to
    MSSANITIZER_PID."""
    env = {k: v for k, v in os.environ.items() if k != "MSOP_SOCKET_PATH"} | {"MSSANITIZER_PID": "/tmp/x.sock"}
    done = subprocess.run([str(newer[V26_1_0.layout]), str(built[1])], env=env, capture_output=True, text=True,
                          timeout=30)  # fmt: skip
    assert done.returncode == 2 and "MSOP_SOCKET_PATH is not set" in done.stderr
