"""client_shim/native/mssanitizer_wire.h against the daemon's own tables: the C compiler's sizeof and offsetof for
every field the Python side reads (sanitizerd.compat.wire's layouts, the decoder's payload dtypes and sizes) must be
the same numbers, so the header, the daemon and the C client cannot drift apart. Both were written from the probe's
figures independently; this checks them against each other with the system compiler."""

from __future__ import annotations

import subprocess
from pathlib import Path

from sanitizerd.compat import wire
from sanitizerd.compat.convert.base import CONVERTERS
from sanitizerd.compat.record_types import PAYLOAD_SIZE
from tests.native_build import NATIVE, compile_checked, compiler

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


def measured(tmp_path: Path, queries: list[tuple[str, str, str]]) -> dict[tuple[str, str], int]:
    """Compile a program that prints each (struct, field) offset (field "" = sizeof) and run it."""
    lines = ["#include <stdio.h>", '#include "mssanitizer_wire.h"', "int main(void) {"]
    for key, struct, field in queries:
        value = f"sizeof(struct {struct})" if not field else f"offsetof(struct {struct}, {field})"
        lines.append(f'    printf("%s %zu\\n", "{key}", (size_t){value});')
    lines += ["    return 0;", "}"]
    source = tmp_path / "probe.c"
    source.write_text("\n".join(lines) + "\n")
    binary = tmp_path / "probe"
    compile_checked([compiler("cc"), "-std=c11", "-Wall", "-Werror", "-I", str(NATIVE), "-o", str(binary), str(source)])
    out = subprocess.run([str(binary)], capture_output=True, text=True, check=True, timeout=30).stdout
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


def test_the_header_compiles_as_cpp(tmp_path: Path) -> None:
    source = tmp_path / "use.cpp"
    source.write_text('#include "mssanitizer_wire.h"\nint main() { return sizeof(msop_config) == 2584 ? 0 : 1; }\n')
    out = tmp_path / "use"
    compile_checked([compiler("c++"), "-std=c++17", "-Wall", "-Werror", "-I", str(NATIVE), "-o", str(out), str(source)])
    assert subprocess.run([str(out)], timeout=30).returncode == 0
