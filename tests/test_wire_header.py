"""client_shim/native/mssanitizer_wire.h against the daemon's own tables: the C compiler's sizeof and offsetof for
every field the Python side reads (sanitizerd.compat.wire's layouts, the decoder's payload dtypes and sizes) must be
the same numbers, so the header, the daemon and the C client cannot drift apart. Both were written from the probe's
figures independently; this checks them against each other with the system compiler, for each wire the header
declares (built with its -DMSOP_WIRE) against that wire's measured layout."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from sanitizerd.compat import wire
from sanitizerd.compat.records.convert.base import CONVERTERS
from sanitizerd.compat.records.types import PAYLOAD_SIZE
from tests.native_build import NATIVE, WIRES, compile_checked, compiler, wire_flag

WIRE_STRUCTS = {
    "Config": "msop_config",
    "DeviceInfoSummary": "msop_device_info_summary",
    "KernelSummary": "msop_kernel_summary",
    "HostMemRecord": "msop_host_mem_record",
    "MemOpRecord": "msop_mem_op_record",
}
PAYLOADS = {  # RecordType -> the header's payload struct
    0: "msop_load_store_record",
    1: "msop_load_store_record",
    100: "msop_dma_mov_record",
    101: "msop_mov_align_record",
    102: "msop_mov_align_record_v2",
    10003: "msop_binary_op_record",
    20000: "msop_sync_record",
    20001: "msop_sync_record",
    20004: "msop_pipe_barrier_record",
}
# The decoder's dtypes name fields in snake case; most are the C names camel-cased, these are not.
RENAMED = {
    "file_no": "location.fileNo",
    "line_no": "location.lineNo",
    "pc": "location.pc",
    "block_id": "location.blockId",
    "dst_mem": "dstMemType",
    "src_mem": "srcMemType",
    "left_pad": "leftPaddingNum",
    "right_pad": "rightPaddingNum",
    "mask0": "vectorMask.mask0",
    "mask1": "vectorMask.mask1",
    "generated": "isGenerated",
    "event_id": "eventID",
    "align": "alignSize",
}


def camel(name: str) -> str:
    if name in RENAMED:
        return RENAMED[name]
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def probe(tmp_path: Path, values: list[tuple[str, str]], flags: tuple[str, ...] = (), *, extra: str = "") -> str:
    """Compile (with ``flags``) and run a program that prints ``key value`` for each (key, C integer expression),
    then runs the C statements ``extra``; its output."""
    lines = ["#include <stdio.h>", '#include "mssanitizer_wire.h"', "int main(void) {"]
    lines += [f'    printf("%s %zu\\n", "{key}", (size_t)({value}));' for key, value in values]
    lines += [extra, "    return 0;", "}"]
    source = tmp_path / "probe.c"
    source.write_text("\n".join(lines) + "\n")
    binary = tmp_path / "probe"
    compile_checked([compiler("cc"), "-std=c11", "-Wall", "-Werror", *flags, "-I", str(NATIVE), "-o", str(binary),
                     str(source)])  # fmt: skip
    return subprocess.run([str(binary)], capture_output=True, text=True, check=True, timeout=30).stdout


def measured(
    tmp_path: Path, queries: list[tuple[str, str, str]], flags: tuple[str, ...] = ()
) -> dict[tuple[str, str], int]:
    """Compile a program that prints each (struct, field) offset (field "" = sizeof) and run it."""
    values = [
        (key, f"sizeof(struct {struct})" if not field else f"offsetof(struct {struct}, {field})")
        for key, struct, field in queries
    ]
    out = probe(tmp_path, values, flags)
    return {tuple(k.split("/")): int(v) for k, v in (line.split() for line in out.splitlines())}  # type: ignore[misc]


def test_the_header_and_the_daemon_agree_on_every_layout(tmp_path: Path) -> None:
    layout = wire.LAYOUTS["mssanitizer-4a419f05"]
    queries: list[tuple[str, str, str]] = []
    expected: dict[tuple[str, str], int] = {}
    for name, struct in WIRE_STRUCTS.items():
        table = layout.config if name == "Config" else layout.structs[name]
        queries.append((f"{struct}/", struct, ""))
        expected[(struct, "")] = table.size
        for field, offset, _format in table.fields:
            queries.append((f"{struct}/{field}", struct, field))
            expected[(struct, field)] = offset
    for struct, size in (
        ("msop_ipc_mem_record", layout.ipc_mem_record_size),
        ("msop_kernel_record", layout.kernel_record_size),
        ("msop_sanitizer_record", layout.sanitizer_record_size),
        ("msop_record_global_head", layout.record_global_head_size),
        ("msop_record_block_head", layout.record_block_head_size),
    ):
        queries.append((f"{struct}/", struct, ""))
        expected[(struct, "")] = size
    for record_type, struct in PAYLOADS.items():
        queries.append((f"{struct}/", struct, ""))
        expected[(struct, "")] = PAYLOAD_SIZE[record_type]
        registered = CONVERTERS.get(record_type)
        if registered is None:
            continue
        dtype = registered.dtype
        assert dtype.itemsize == PAYLOAD_SIZE[record_type]
        for name in dtype.names or ():
            field = camel(name)
            queries.append((f"{struct}/{field}", struct, field))
            expected[(struct, field)] = dtype.fields[name][1]
    got = measured(tmp_path, queries)
    assert got == expected
    assert got[("msop_record_global_head", "")] + got[("msop_record_block_head", "")] == layout.heads_size


# Each wire's measured structs (sanitizerd's C names) -> the header's struct. The record payloads are compared
# with the layout's payload_structs, the others with its structs.
HEADER_STRUCTS = {
    "DeviceInfoSummary": "msop_device_info_summary",
    "KernelSummary": "msop_kernel_summary",
    "HostMemRecord": "msop_host_mem_record",
    "MemOpRecord": "msop_mem_op_record",
    "KernelRecord": "msop_kernel_record",
    "SanitizerRecord": "msop_sanitizer_record",
    "IPCMemRecord": "msop_ipc_mem_record",
    "IPCResponse": "msop_ipc_response",
    "KernelRecordResponse": "msop_kernel_record_response",
    "Location": "msop_location",
    "RecordGlobalHead": "msop_record_global_head",
    "RecordBlockHead": "msop_record_block_head",
    "ProtocolOffsetInfo": "msop_protocol_offset_info",
    "GMAddrOutOfBoundRecord": "msop_gm_addr_out_of_bound_record",
    "MemRegionPermissionDesc": "msop_mem_region_permission",
}
HEADER_PAYLOADS = {
    "LoadStoreRecord": "msop_load_store_record",
    "DmaMovRecord": "msop_dma_mov_record",
    "MovAlignRecord": "msop_mov_align_record",
    "MovAlignRecordV2": "msop_mov_align_record_v2",
    "BinaryOpRecord": "msop_binary_op_record",
    "SyncRecord": "msop_sync_record",
    "PipeBarrierRecord": "msop_pipe_barrier_record",
}
# Where the header spells a measured member otherwise: the IPC union is named, paraBase is an array, padding is ours.
MEMBER_SPELLING = {
    "paraBase.addr": "paraBase[0]",
    "paraBase.size": "paraBase[1]",
    "reserved": "tail_padding",
}
HEADER_PACKETS = ("DEVICE_SUMMARY", "KERNEL_SUMMARY", "KERNEL_BINARY", "LOG_STRING", "HOST_RECORD", "MEMORY_RECORD",
                  "KERNEL_RECORD", "IPC_RECORD", "MEM_REGION_PERMISSION", "SANITIZER_RECORD",
                  "GM_ADDR_OUT_OF_BOUND_RECORD", "IPC_RESPONSE", "KERNEL_RECORD_RESPONSE")  # fmt: skip
HEADER_RECORDS = ("LOAD", "STORE", "DMA_MOV", "MOV_ALIGN", "MOV_ALIGN_V2", "UNARY_OP", "BINARY_OP", "SET_FLAG",
                  "WAIT_FLAG", "PIPE_BARRIER", "BLOCK_FINISH", "FINISH", "KERNEL_FINISH")  # fmt: skip


def member(struct: str, field: str) -> str:
    if struct == "IPCMemRecord" and field != "type":
        return "info." + field
    return MEMBER_SPELLING.get(field, field)


@pytest.mark.parametrize("name", sorted(WIRES))
def test_each_wire_of_the_header_is_its_measured_layout(tmp_path: Path, name: str) -> None:
    """Every struct, member, packet number, record number and socket variable the header declares for a wire is
    the measured layout's: a struct the wire has is compared member by member, and one it lacks must be absent."""
    layout = wire.LAYOUTS[name]
    flags = (wire_flag(name),)
    queries: list[tuple[str, str, str]] = [("msop_config/", "msop_config", "")]
    expected: dict[tuple[str, str], int] = {("msop_config", ""): layout.config.size}
    for field, offset, _fmt in layout.config.fields:
        queries.append((f"msop_config/{field}", "msop_config", field))
        expected[("msop_config", field)] = offset
    tables: list[tuple[str, str, tuple[int, dict[str, int]] | None]] = []
    for theirs, ours in HEADER_STRUCTS.items():
        table = layout.structs.get(theirs)
        tables.append((theirs, ours, None if table is None else (table.size, {f: o for f, o, _ in table.fields})))
    for theirs, ours in HEADER_PAYLOADS.items():
        payload = layout.payload_structs[theirs]
        tables.append((theirs, ours, (payload["size"], {f: spec[0] for f, spec in payload["fields"].items()})))
    absent = []
    for theirs, ours, table in tables:
        if table is None:
            absent.append(ours)
            continue
        size, offsets = table
        queries.append((f"{ours}/", ours, ""))
        expected[(ours, "")] = size
        for field, offset in offsets.items():
            queries.append((f"{ours}/{member(theirs, field)}", ours, member(theirs, field)))
            expected[(ours, member(theirs, field))] = offset
    got = measured(tmp_path, queries, flags)
    assert got == expected
    assert got[("msop_record_global_head", "")] + got[("msop_record_block_head", "")] == layout.heads_size
    # The per-core register shadow is one opaque member in the layout: its bytes must be the header's array's.
    registers = layout.global_head.fields[layout.global_head.names.index("registers")][2]
    numbers = probe(tmp_path, [("registers", "sizeof(((struct msop_record_global_head *)0)->registers)")], flags)
    assert int(numbers.split()[1]) == int(registers[1:])

    # Numbers: each packet and record type the header names is the layout's, and it names every one the layout has.
    packets = {f"MSOP_PACKET_{p}": p for p in HEADER_PACKETS}
    records = {f"MSOP_RECORD_{r}": r for r in HEADER_RECORDS}
    # Enumerators are not macros, so which exist is asked of the compiler one by one: an absent one fails to build.
    declared = {c for c in (*packets, *records) if _compiles(tmp_path, c, flags)}
    values = dict(line.split() for line in probe(tmp_path, [(c, c) for c in sorted(declared)], flags).splitlines())
    for constant, packet in packets.items():
        number = layout.packet_number(wire.PacketType[packet]) if layout.has_packet(wire.PacketType[packet]) else None
        assert (int(values[constant]) if constant in declared else None) == number, constant
    for constant, record in records.items():
        assert (int(values[constant]) if constant in declared else None) == layout.record_types.get(record), constant
    for ours in absent:
        assert not _compiles(tmp_path, f"(int)sizeof(struct {ours})", flags), f"{name} has no {ours}"

    out = probe(tmp_path, [], flags, extra='    printf("layout %s\\n", MSOP_WIRE_LAYOUT);\n'
                '    printf("env %s\\n", MSOP_SOCKET_ENV);\n'
                '#ifdef MSOP_PID_ENV\n    printf("env %s\\n", MSOP_PID_ENV);\n#endif')  # fmt: skip
    assert re.findall(r"^layout (\S+)$", out, re.M) == [name]
    assert tuple(re.findall(r"^env (\S+)$", out, re.M)) == layout.socket_env


def _compiles(tmp_path: Path, expression: str, flags: tuple[str, ...]) -> bool:
    source = tmp_path / "exists.c"
    source.write_text(f'#include "mssanitizer_wire.h"\nint probe = {expression};\n')
    done = subprocess.run([compiler("cc"), "-std=c11", "-fsyntax-only", *flags, "-I", str(NATIVE), str(source)],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    return done.returncode == 0


@pytest.mark.parametrize("name", sorted(WIRES))
def test_the_header_compiles_as_cpp(tmp_path: Path, name: str) -> None:
    source = tmp_path / "use.cpp"
    size = wire.LAYOUTS[name].config.size
    source.write_text(
        f'#include "mssanitizer_wire.h"\nint main() {{ return sizeof(msop_config) == {size} ? 0 : 1; }}\n'
    )
    out = tmp_path / "use"
    compile_checked([compiler("c++"), "-std=c++17", "-Wall", "-Werror", wire_flag(name), "-I", str(NATIVE), "-o",
                     str(out), str(source)])  # fmt: skip
    assert subprocess.run([str(out)], timeout=30).returncode == 0
