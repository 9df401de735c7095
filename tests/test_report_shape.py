"""Reports shaped as msSanitizer prints them (issue 26, items 4 and 5): its sample_racecheck's three reports, the
location cases of its memcheck reports, the per-kernel banner with only the tools asked for, the "missed
debug_line" warning and kernel names demangled per ``--demangle``.

Two end-to-end paths through ``sanitizerd run`` and a real daemon: a client_shim program that sends the sample's
events as its kernel makes them (built with ``client_shim.events``), and a program speaking msSanitizer's own wire
to the job's compat socket (the records' fileNo/lineNo and pc, a kernel ELF with DWARF and a file mapping, the
KERNEL_SUMMARY's hasDebugLine).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from sanitizerd.cli.run import tools_text
from sanitizerd.compat.stacks import KernelBinary
from sanitizerd.findings.render import render_text
from sanitizerd_protocol.messages import Location
from tests.conftest import RunningDaemon, program_env, sanitizerd
from tests.detector_helpers import make_detector, run_kernel
from tests.test_hooks import bare_env

needs_cxxfilt = pytest.mark.skipif(shutil.which("c++filt") is None, reason="c++filt (binutils) is not installed")
ROOT = Path(__file__).resolve().parent.parent

SAMPLE_KERNEL = "_Z15raw_hazard_demoPhS_"  # raw_hazard_demo(uint8_t*, uint8_t*), as ascendc mangles it
SAMPLE_NAME = '"raw_hazard_demo(unsigned char*, unsigned char*)"'
ASC = "/path/to/sample_racecheck/racecheck.asc"

# msSanitizer's example/sample_racecheck/README.md: what `mssanitizer -t racecheck ./demo` prints for its two
# blocks, each a PIPE_S write of its own float to GM (SetValue, line 34) and an MTE2 read of the whole buffer
# (DataCopy, line 35) with no flag between them. ``<addr>`` stands where the README elides the address.
SAMPLE_REPORTS = f"""\
====== ERROR: Potential RAW hazard detected at GM in {SAMPLE_NAME}:
======    PIPE_S Write at RAW()+0x<addr> in block 0 (aiv) on device 0 at pc current 0x168 (serialNo:9)
======    #0 {ASC}:34:15
======    #1 {ASC}:48:8
======    PIPE_MTE2 Read at RAW()+0x<addr> in block 0 (aiv) on device 0 at pc current 0x700 (serialNo:11)
======    #0 {ASC}:35:9
======    #1 {ASC}:48:8

====== ERROR: Potential RAW hazard detected at GM in {SAMPLE_NAME}:
======    PIPE_S Write at RAW()+0x<addr> in block 0 (aiv) on device 0 at pc current 0x168 (serialNo:9)
======    #0 {ASC}:34:15
======    #1 {ASC}:48:8
======    PIPE_MTE2 Read at RAW()+0x<addr> in block 1 (aiv) on device 0 at pc current 0x700 (serialNo:16)
======    #0 {ASC}:35:9
======    #1 {ASC}:48:8

====== ERROR: Potential WAR hazard detected at GM in {SAMPLE_NAME}:
======    PIPE_MTE2 Read at WAR()+0x<addr> in block 0 (aiv) on device 0 at pc current 0x700 (serialNo:11)
======    #0 {ASC}:35:9
======    #1 {ASC}:48:8
======    PIPE_S Write at WAR()+0x<addr> in block 1 (aiv) on device 0 at pc current 0x168 (serialNo:14)
======    #0 {ASC}:34:15
======    #1 {ASC}:48:8

"""

# The sample's kernel as events: GM buffer, UB tile, and each block's two instructions with their serial numbers
# (msSanitizer numbers every record of the run: block 0's are 9 and 11, block 1's 14 and 16).
SAMPLE_EVENTS = """\
import numpy as np
from client_shim.events import BlockType, EventKind, Pipe, Space, make_events

GM, UB, FLOATS = 0x12C0C0000000, 0x0, 8


def access(kind, space, address, size, pipe, serial, block, pc, location):
    return make_events(kind=kind, space=space, address=address, block_size=size, block_num=1, block_stride=1,
                       repeat=1, pipe=pipe, serial=serial, block_id=block, block_type=BlockType.AIV, pc=pc,
                       location=location)


def sample_block(block, serial, set_value, data_copy):
    return np.concatenate([
        access(EventKind.WRITE, Space.GM, GM + 4 * block, 4, Pipe.S, serial, block, 0x168, set_value),
        access(EventKind.READ, Space.GM, GM, 4 * FLOATS, Pipe.MTE2, serial + 2, block, 0x700, data_copy),
        access(EventKind.WRITE, Space.UB, UB, 4 * FLOATS, Pipe.MTE2, serial + 2, block, 0x700, data_copy),
    ])
"""


def sample_locations() -> dict[int, Location]:
    return {
        1: Location(id=1, file=ASC, line=34, column=15, callers=[2]),
        2: Location(id=2, file=ASC, line=48, column=8),
        3: Location(id=3, file=ASC, line=35, column=9, callers=[2]),
    }


def elide_addresses(text: str) -> str:
    return re.sub(r"(RAW|WAR|WAW)\(\)\+0x[0-9a-f]+", r"\1()+0x<addr>", text)


class TestSampleRacecheck:
    def test_three_reports_from_the_detector(self) -> None:
        """The sample's events give msSanitizer's three reports, in its order, byte for byte but the addresses:
        the in-block RAW of block 0 (block 1's own, alike, is folded into it), then the two races between the
        blocks, each naming its blocks."""
        namespace: dict[str, object] = {}
        exec(SAMPLE_EVENTS, namespace)
        sample_block = namespace["sample_block"]
        detector = make_detector("racecheck", locations=sample_locations())
        detector.distance = detector.context.config.single_pipe_distance  # type: ignore[attr-defined]
        findings = run_kernel(detector, sample_block(0, 9, 1, 3), sample_block(1, 14, 1, 3), name=SAMPLE_NAME)  # type: ignore[operator]
        assert elide_addresses(render_text(findings)) == SAMPLE_REPORTS
        in_block = findings[0]
        assert (in_block.blocks, in_block.count) == ({"aiv": [0, 1]}, 2)  # block 1's in-block race is kept here
        assert [a.address for f in findings[1:] for a in f.accesses] == [0x12C0C0000000] * 3 + [0x12C0C0000004]

    def test_race_fold_gives_one_report_per_site_pair(self) -> None:
        """--race-fold yes folds blocks, for kernels of many: the RAW of the two instructions is one report over
        blocks 0-1 (block 0's, block 1's and the one between them: the shape the default avoids)."""
        namespace: dict[str, object] = {}
        exec(SAMPLE_EVENTS, namespace)
        sample_block = namespace["sample_block"]
        detector = make_detector("racecheck", locations=sample_locations())
        detector.context.config.race_fold = True
        detector.distance = detector.context.config.single_pipe_distance  # type: ignore[attr-defined]
        findings = run_kernel(detector, sample_block(0, 9, 1, 3), sample_block(1, 14, 1, 3))  # type: ignore[operator]
        assert [(f.kind, [a.blocks for a in f.accesses], f.count) for f in findings] == [
            ("race_raw", [[0, 1], [0, 1]], 3),
            ("race_war", [[0], [1]], 1),
        ]

    @needs_cxxfilt
    def test_through_sanitizerd_run(self, daemon: RunningDaemon, tmp_path: Path) -> None:
        """End to end: a program sending the sample's kernel (mangled name, source locations with their caller)
        under `sanitizerd run -t racecheck` prints msSanitizer's banner, the three reports and its end banner."""
        program = tmp_path / "sample_racecheck.py"
        program.write_text(
            SAMPLE_EVENTS
            + textwrap.dedent(
                f"""
                from client_shim.attach import connect

                client = connect()
                client.device_summary("Ascend910B1")
                caller = client.location({ASC!r}, 48, 8, "main")
                set_value = client.location({ASC!r}, 34, 15, "raw_hazard_demo", callers=[caller])
                data_copy = client.location({ASC!r}, 35, 9, "raw_hazard_demo", callers=[caller])
                kernel = client.kernel_begin({SAMPLE_KERNEL!r}, 2)
                for block, serial in ((0, 9), (1, 14)):
                    client.events(kernel, sample_block(block, serial, set_value, data_copy))
                client.kernel_end(kernel)
                client.wait_kernel(kernel, timeout=60)
                client.close()
                """
            )
        )
        run = sanitizerd("run", "--socket", str(daemon.socket), "-t", "racecheck", "--", sys.executable,
                         str(program), env=program_env())  # fmt: skip
        assert run.returncode == 0, run.stdout + run.stderr
        start = f"[sanitizerd] Start racecheck sanitizer on kernel {SAMPLE_NAME}\n"
        end = f"[sanitizerd] Sanitizer finished on kernel {SAMPLE_NAME}. See all detected errors above.\n"
        assert start in run.stdout and end in run.stdout, run.stdout
        shown = run.stdout[run.stdout.index(start) + len(start) : run.stdout.index(end)]
        assert elide_addresses(shown) == SAMPLE_REPORTS
        assert "3 error(s), 0 warning(s)" in run.stdout


class TestBanner:
    @pytest.mark.parametrize(
        ("tools", "text"),
        [
            (["memcheck", "registercheck"], "memcheck"),
            (["racecheck"], "racecheck"),
            (["registercheck", "memcheck", "racecheck"], "memcheck and racecheck"),
            (["synccheck", "initcheck", "racecheck", "memcheck", "registercheck"],
             "memcheck, racecheck, initcheck and synccheck"),
        ],
    )  # fmt: skip
    def test_only_the_tools_asked_for_in_mssanitizers_order(self, tools: list[str], text: str) -> None:
        """registercheck runs with memcheck unnamed; the list reads as msSanitizer's HumanReadableListFormat."""
        assert tools_text(tools) == text


# --- msSanitizer's own wire ----------------------------------------------------------------------------------------

LAYOUT = "mssanitizer-4a419f05"
KERNEL_SOURCE = """\
__attribute__((used, section(".init_array_sanitizer_file_mapping")))
static const char mapping[] = "/src/ops/add_custom.cpp\\0\\x34\\x12\\0\\0\\0\\0\\0\\0";
__attribute__((noinline)) static int leaf(int x) {
    return x * 3;
}
extern "C" int kernel_entry(int x) {
    return leaf(x) + 1;
}
"""

# A program that speaks msSanitizer's wire to the socket `sanitizerd run` opens for it (MSOP_SOCKET_PATH): a FREE of
# an address never allocated (host record, no file), then three launches each reading 256 bytes of unallocated GM
# with a DataCopy. Kernel 1 has no binary and no line information: its record's pc resolves to nothing and its
# file number is unknown. Kernel 2 sends its ELF: one record's pc resolves to a stack, the other's does not and
# names a file of the ELF's mapping.
WIRE_PROGRAM = """\
import os, socket, struct, sys
from elftools.elf.elffile import ELFFile
from sanitizerd.compat import wire
from sanitizerd.server.compat_socket import abstract_address
from tests import compat_model as cm

layout = wire.LAYOUTS[sys.argv[1]]
elf = open(sys.argv[2], "rb").read()
entry = next(s for s in ELFFile(open(sys.argv[2], "rb")).get_section_by_name(".symtab").iter_symbols()
             if s.name == "kernel_entry")["st_value"]
client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
client.connect(abstract_address(os.environ["MSOP_SOCKET_PATH"]))


def recv(n):
    data = b""
    while len(data) < n:
        data += client.recv(n - len(data))
    return data


def packet(kind, payload, variable=False):
    head = wire.PACKET_HEAD.pack(layout.packet_number(kind))
    return head + (wire.LENGTH.pack(len(payload)) if variable else b"") + payload


def summary(name, pc_start, debug_line):
    payload = bytearray(layout.kernel_summary.size)
    struct.pack_into("<QIBBB", payload, 0, pc_start, 1, 1, 0, debug_line)
    payload[15 : 15 + len(name)] = name
    return packet(wire.PacketType.KERNEL_SUMMARY, bytes(payload))


def data_copy(src, file_no, line_no, pc):
    record = struct.pack("<IQQ", 100, 0x0, src) + struct.pack("<QQQH6x", file_no, line_no, pc, 0)
    return record + struct.pack("<HHHHBBBB4x", 1, 8, 0, 0, 4, 6, 0, 0)  # 8 blocks of 32 bytes, GM -> UB


def launch(records):
    client.sendall(packet(wire.PacketType.KERNEL_RECORD, cm.slot(records, total_block_dim=1), variable=True))
    assert recv(12) == struct.pack("<III", 3001, 1, 0)


client.sendall(packet(wire.PacketType.DEVICE_SUMMARY, struct.pack("<IIIi", 2, 32, 24, 0)))  # 910B1, device 0
recv(layout.config.size)
free = bytearray(48)
struct.pack_into("<IBB", free, 0, 1, 3, 0)
struct.pack_into("<QQQQQ", free, 8, 0, 0x12C0C0100000, 0, 0, 0)
client.sendall(packet(wire.PacketType.HOST_RECORD, bytes(free)))
client.sendall(summary(b"_Z10add_customPhS_S_", 0, 0))
launch([data_copy(0x12C0C0000000, 0x9999, 18, 0x77C)])
pc_start = 0x1240_0000
client.sendall(summary(b"add_custom_kernel", pc_start, 1) + packet(wire.PacketType.KERNEL_BINARY, elf, variable=True))
launch([data_copy(0x12C0C0001000, 0x9999, 20, pc_start + entry + 4),
        data_copy(0x12C0C0002000, 0x1234, 22, pc_start + 0x90000)])
client.close()
"""


@pytest.fixture(scope="module")
def kernel_elf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    compiler = shutil.which("c++")
    if compiler is None:
        pytest.skip("no c++ on this machine")
    directory = tmp_path_factory.mktemp("kernel")
    source, elf = directory / "kernel.cpp", directory / "kernel.elf"
    source.write_text(KERNEL_SOURCE)
    subprocess.run([compiler, "-g", "-O0", "-fPIC", "-shared", "-nostdlib", "-o", str(elf), str(source)], check=True)
    return elf


def block_after(text: str, first: str, count: int) -> list[str]:
    lines = text.splitlines()
    at = lines.index(first)
    return lines[at : at + count]


@needs_cxxfilt
def test_mssanitizer_wire_locations(daemon: RunningDaemon, kernel_elf: Path, tmp_path: Path) -> None:
    """Each location case of reference §2.5 from msSanitizer's own records: a host record without a file
    (``code in :0``), a pc no stack resolves for and a file the kernel does not map (``unknown:18``), a pc with a
    stack (``pc current`` and ``file:line:column``), a pc without a stack whose file the kernel's mapping names (the
    file's name and the record's line). A kernel without line information gets msSanitizer's warning before its first
    report; its mangled name is shown demangled and quoted."""
    program = tmp_path / "wire_client.py"
    program.write_text(WIRE_PROGRAM)
    env = bare_env(SANITIZERD_COMPAT_LAYOUT=LAYOUT, PYTHONPATH=str(ROOT))
    run = sanitizerd("run", "--socket", str(daemon.socket), "-t", "memcheck", "--", sys.executable, str(program),
                     LAYOUT, str(kernel_elf), env=env)  # fmt: skip
    out = run.stdout
    assert run.returncode == 0, out + run.stderr
    assert block_after(out, "====== ERROR: illegal free()", 3) == [
        "====== ERROR: illegal free()",
        "======    at 0x12c0c0100000 on GM",
        "======    code in :0 (serialNo:0)",
    ]
    name = '"add_custom(unsigned char*, unsigned char*, unsigned char*)"'
    assert block_after(out, f"[sanitizerd] Start memcheck sanitizer on kernel {name}", 8) == [
        f"[sanitizerd] Start memcheck sanitizer on kernel {name}",
        f"[sanitizerd] WARN: Kernel {name} missed debug_line information. Please recompile kernel with `-g' or "
        "`-gline-tables-only' option to enable callstack display.",
        "====== ERROR: illegal read of size 256",
        f"======    at 0x12c0c0000000 on GM in {name}",
        "======    in block aiv(0) on device 0",
        "======    code in unknown:18 (serialNo:1)",
        "",
        f"[sanitizerd] Sanitizer finished on kernel {name}. See all detected errors above.",
    ]
    kernel = "add_custom_kernel"
    stack = KernelBinary(kernel_elf.read_bytes()).frames(0x1240_0000 + _entry(kernel_elf) + 4, 0x1240_0000)
    assert [frame[0] for frame in stack] == [str(kernel_elf.parent / "kernel.cpp")]  # kernel_entry, not inlined
    shown = block_after(out, f"[sanitizerd] Start memcheck sanitizer on kernel {kernel}", 12)
    assert shown[0] == f"[sanitizerd] Start memcheck sanitizer on kernel {kernel}"  # line information: no warning
    assert shown[1:7] == [
        "====== ERROR: illegal read of size 256",
        f"======    at 0x12c0c0001000 on GM in {kernel}",
        "======    in block aiv(0) on device 0",
        f"======    code in pc current {_entry(kernel_elf) + 4:#x} (serialNo:4)",
        *(f"======    #{i} {file}:{line}:{column}" for i, (file, line, column, _) in enumerate(stack)),
        "",
    ]
    assert shown[7:] == [
        "====== ERROR: illegal read of size 256",
        f"======    at 0x12c0c0002000 on GM in {kernel}",
        "======    in block aiv(0) on device 0",
        "======    code in add_custom.cpp:22 (serialNo:5)",
        "",
    ]


def _entry(elf: Path) -> int:
    from elftools.elf.elffile import ELFFile

    with elf.open("rb") as f:
        return next(s for s in ELFFile(f).get_section_by_name(".symtab").iter_symbols() if s.name == "kernel_entry")[
            "st_value"
        ]
