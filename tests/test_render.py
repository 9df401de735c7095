"""Report text in msSanitizer's format (reference §2.5) and JSON.

The deliberate differences the render module documents are expected here: no trailing space after
``illegal free()`` and ``N byte(s)`` with a space in the unused-memory summary.
"""

from __future__ import annotations

import json

import pytest

from sanitizerd.findings.render import block_list, blocks_text, render_json, render_text
from sanitizerd_protocol.model import Finding, Frame, RaceAccess, make_finding

STACK = [
    Frame(
        file="${ASCEND_HOME_PATH}/compiler/tikcpp/tikcfw/impl/dav_c220/kernel_operator_data_copy_impl.h",
        line=58,
        column=9,
    ),
    Frame(
        file="${ASCEND_HOME_PATH}/compiler/tikcpp/tikcfw/inner_interface/inner_kernel_operator_data_copy_intf.cppm",
        line=58,
        column=9,
    ),
    Frame(
        file="${ASCEND_HOME_PATH}/compiler/tikcpp/tikcfw/inner_interface/inner_kernel_operator_data_copy_intf.cppm",
        line=443,
        column=5,
    ),
    Frame(file="illegal_read_and_write/add_custom.cpp", line=18, column=5),
]


def kernel_finding(kind: str, **fields: object) -> Finding:
    values: dict[str, object] = {"kernel": "add_custom_kernel", "device": 0, "blocks": {"aiv": [0]}}
    values.update(fields)
    return make_finding(kind, **values)


def lines(text: str) -> list[str]:
    """The lines of one report, which msSanitizer ends with a blank line (asserted, then left out)."""
    assert text.endswith("\n\n")
    return text[:-2].split("\n")


class TestKernelSideText:
    def test_illegal_read_with_stack(self) -> None:
        """An illegal read prints the reference example exactly: header, at, block, pc and #i stack lines."""
        finding = kernel_finding(
            "illegal_read", address=0x12C0C0015000, size=224, serial=10, pc=0x77C, stack=STACK, location=STACK[0]
        )
        assert lines(render_text([finding])) == [
            "====== ERROR: illegal read of size 224",
            "======    at 0x12c0c0015000 on GM in add_custom_kernel",
            "======    in block aiv(0) on device 0",
            "======    code in pc current 0x77c (serialNo:10)",
            "======    #0 ${ASCEND_HOME_PATH}/compiler/tikcpp/tikcfw/impl/dav_c220/"
            "kernel_operator_data_copy_impl.h:58:9",
            "======    #1 ${ASCEND_HOME_PATH}/compiler/tikcpp/tikcfw/inner_interface/"
            "inner_kernel_operator_data_copy_intf.cppm:58:9",
            "======    #2 ${ASCEND_HOME_PATH}/compiler/tikcpp/tikcfw/inner_interface/"
            "inner_kernel_operator_data_copy_intf.cppm:443:5",
            "======    #3 illegal_read_and_write/add_custom.cpp:18:5",
        ]

    def test_illegal_write(self) -> None:
        """An illegal write prints like an illegal read with its own title."""
        finding = kernel_finding("illegal_write", address=0x12C0C0015000, size=32, serial=11, pc=0x780, stack=STACK[3:])
        assert lines(render_text([finding])) == [
            "====== ERROR: illegal write of size 32",
            "======    at 0x12c0c0015000 on GM in add_custom_kernel",
            "======    in block aiv(0) on device 0",
            "======    code in pc current 0x780 (serialNo:11)",
            "======    #0 illegal_read_and_write/add_custom.cpp:18:5",
        ]

    def test_misaligned_access(self) -> None:
        """A misaligned access prints the reference example: size, short hex address, space UB."""
        finding = kernel_finding(
            "misaligned_access", space="UB", address=0x6, size=13, serial=33, pc=0x780, stack=STACK[3:]
        )
        assert lines(render_text([finding])) == [
            "====== ERROR: misaligned access of size 13",
            "======    at 0x6 on UB in add_custom_kernel",
            "======    in block aiv(0) on device 0",
            "======    code in pc current 0x780 (serialNo:33)",
            "======    #0 illegal_read_and_write/add_custom.cpp:18:5",
        ]

    def test_out_of_bounds_is_a_warning_when_writing_data(self) -> None:
        """Out of bounds is a WARNING whose at line says "when writing data" before the kernel."""
        finding = kernel_finding(
            "out_of_bounds", address=0x12C0C00150FC, size=256, serial=22, pc=0x7B8, blocks={"aiv": [9]}, stack=STACK[3:]
        )
        assert lines(render_text([finding])) == [
            "====== WARNING: out of bounds of size 256",
            "======    at 0x12c0c00150fc on GM when writing data in add_custom_kernel",
            "======    in block aiv(9) on device 0",
            "======    code in pc current 0x7b8 (serialNo:22)",
            "======    #0 illegal_read_and_write/add_custom.cpp:18:5",
        ]

    def test_uninitialized_read(self) -> None:
        """An uninitialized read prints the reference example."""
        finding = kernel_finding(
            "uninitialized_read", address=0x12C0C0015000, size=224, serial=10, pc=0x77C, stack=STACK[3:]
        )
        assert lines(render_text([finding])) == [
            "====== ERROR: uninitialized read of size 224",
            "======    at 0x12c0c0015000 on GM in add_custom_kernel",
            "======    in block aiv(0) on device 0",
            "======    code in pc current 0x77c (serialNo:10)",
            "======    #0 illegal_read_and_write/add_custom.cpp:18:5",
        ]

    def test_without_pc_uses_the_source_line(self) -> None:
        """With no pc the location line is ``code in file:line (serialNo:n)``, further frames numbered on."""
        finding = kernel_finding(
            "illegal_read",
            address=0x100,
            size=4,
            serial=5,
            device=3,
            stack=[Frame(file="add_custom.cpp", line=18, column=5), Frame(file="main.cpp", line=40, column=1)],
        )
        assert lines(render_text([finding]))[2:] == [
            "======    in block aiv(0) on device 3",
            "======    code in add_custom.cpp:18 (serialNo:5)",
            "======    #1 main.cpp:40:1",
        ]

    def test_folded_finding_prints_like_mssanitizer(self) -> None:
        """A site hit by three blocks (count 3, as memcheck folds it) prints msSanitizer's lines, no more."""
        finding = kernel_finding(
            "illegal_read",
            address=0x2000,
            size=8,
            serial=4,
            pc=0x10,
            blocks={"aiv": [0, 1, 3]},
            count=3,
            stack=STACK[3:],
        )
        assert lines(render_text([finding])) == [
            "====== ERROR: illegal read of size 8",
            "======    at 0x2000 on GM in add_custom_kernel",
            "======    in block aiv(0-1,3) on device 0",
            "======    code in pc current 0x10 (serialNo:4)",
            "======    #0 illegal_read_and_write/add_custom.cpp:18:5",
        ]


class TestLocations:
    """msSanitizer's location cases (reference §2.5, mem_error_def.h, race_info_display.h, sync_info_display.h of
    the release the reference describes): ``pc current`` and the stack only where the pc resolved to one, else
    the record's own ``file:line``."""

    def test_pc_with_a_stack(self) -> None:
        """A resolved pc: its line, then every frame as file:line:column (column 0 printed too)."""
        stack = [Frame(file="/src/add_custom.cpp", line=18, column=5), Frame(file="/src/add_custom.cpp", line=54)]
        finding = kernel_finding(
            "illegal_read", address=0x100, size=4, serial=10, pc=0x77C, location=stack[0], stack=stack
        )
        assert lines(render_text([finding]))[3:] == [
            "======    code in pc current 0x77c (serialNo:10)",
            "======    #0 /src/add_custom.cpp:18:5",
            "======    #1 /src/add_custom.cpp:54:0",
        ]

    def test_pc_without_a_stack_prints_the_records_file_and_line(self) -> None:
        """A pc no stack resolves for: the record's place, not the bare pc; memcheck prints the file's name only."""
        place = Frame(file="/src/ops/add_custom.cpp", line=18)
        finding = kernel_finding("illegal_read", address=0x100, size=4, serial=10, pc=0x77C, location=place)
        assert lines(render_text([finding]))[3:] == ["======    code in add_custom.cpp:18 (serialNo:10)"]

    def test_file_missing_with_a_line(self) -> None:
        """A record whose file the kernel's mapping does not name: ``unknown`` and its line."""
        place = Frame(file="unknown", line=18)
        finding = kernel_finding("uninitialized_read", address=0x100, size=4, serial=7, pc=0x77C, location=place)
        assert lines(render_text([finding]))[3:] == ["======    code in unknown:18 (serialNo:7)"]

    def test_kernel_record_without_any_location(self) -> None:
        """No place at all (a native client's event without a location): msSanitizer's empty mapping answer."""
        finding = kernel_finding("illegal_write", address=0x100, size=4, serial=7)
        assert lines(render_text([finding]))[3:] == ["======    code in unknown:0 (serialNo:7)"]

    def test_host_record(self) -> None:
        """A host record's file and line as the hook sent them, the whole path; none: ``code in :0``."""
        site = Frame(file="/src/main.cpp", line=84)
        named = make_finding("illegal_free", address=0x1000, serial=63, location=site)
        bare = make_finding("illegal_free", address=0x1000, serial=64)
        assert lines(render_text([named]))[2] == "======    code in /src/main.cpp:84 (serialNo:63)"
        assert lines(render_text([bare]))[2] == "======    code in :0 (serialNo:64)"

    def test_race_sides(self) -> None:
        """Each side of a race on its own: a stack, or ``at <whole path>:<line>``."""
        stack = [
            Frame(file="/src/racecheck.asc", line=34, column=15),
            Frame(file="/src/racecheck.asc", line=48, column=8),
        ]
        with_stack = RaceAccess(
            pipe="PIPE_S", op="Write", address=0x40, block_type="aiv", blocks=[0], serial=9, pc=0x168,
            location=stack[0], stack=stack,
        )  # fmt: skip
        without = RaceAccess(
            pipe="PIPE_MTE2", op="Read", address=0x40, block_type="aiv", blocks=[1], serial=16, pc=0x700,
            location=Frame(file="/src/racecheck.asc", line=35),
        )  # fmt: skip
        finding = make_finding(
            "race_raw", kernel="k", device=0, space="GM", serial=16, accesses=[with_stack, without], location=None
        )
        assert lines(render_text([finding])) == [
            "====== ERROR: Potential RAW hazard detected at GM in k:",
            "======    PIPE_S Write at RAW()+0x40 in block 0 (aiv) on device 0 at pc current 0x168 (serialNo:9)",
            "======    #0 /src/racecheck.asc:34:15",
            "======    #1 /src/racecheck.asc:48:8",
            "======    PIPE_MTE2 Read at RAW()+0x40 in block 1 (aiv) on device 0 at /src/racecheck.asc:35 "
            "(serialNo:16)",
        ]

    def test_sync_prints_the_whole_path(self) -> None:
        finding = kernel_finding(
            "unpaired_set_flag", pipe="PIPE_S", dst_pipe="PIPE_MTE3", serial=31, pc=0x2C94,
            location=Frame(file="/home/Ascend/kernel_event.h", line=785),
        )  # fmt: skip
        assert lines(render_text([finding]))[3] == "======    code in /home/Ascend/kernel_event.h:785 (serialNo:31)"


class TestBlockLists:
    @pytest.mark.parametrize(
        ("ids", "text"),
        [
            ([0], "0"),
            ([0, 1, 3], "0-1,3"),
            ([1, 3, 4], "1,3-4"),
            ([4, 0, 2, 1, 5], "0-2,4-5"),
            ([0, 2, 4], "0,2,4"),
            (list(range(40)), "0-39"),
            ([], ""),
        ],
    )
    def test_block_list(self, ids: list[int], text: str) -> None:
        """Block ids print as sorted comma-separated runs."""
        assert block_list(ids) == text

    def test_mixed_block_types(self) -> None:
        """aiv and aic lists print side by side: ``aiv(0-1,3),aic(2)``."""
        assert blocks_text({"aiv": [0, 1, 3], "aic": [2]}) == "aiv(0-1,3),aic(2)"
        finding = kernel_finding("illegal_read", blocks={"aiv": [0, 1, 3], "aic": [2]}, size=1, pc=1)
        assert "======    in block aiv(0-1,3),aic(2) on device 0" in lines(render_text([finding]))

    def test_aiv_before_aic_whatever_the_dict_order(self) -> None:
        """The block line follows msSanitizer's ``aiv(..),aic(..)`` order even if aic was inserted first."""
        assert blocks_text({"aic": [2], "aiv": [0]}) == "aiv(0),aic(2)"

    def test_aicore_blocks(self) -> None:
        """Chips without sub-blocks print ``aicore(...)``."""
        finding = kernel_finding("illegal_write", blocks={"aicore": [0, 1, 2, 7]}, size=1, pc=1)
        assert "======    in block aicore(0-2,7) on device 0" in lines(render_text([finding]))


class TestHostSideText:
    def test_illegal_free(self) -> None:
        """An illegal free has no block line and no kernel; its location is ``code in file:line``."""
        site = Frame(file="add_custom.cpp", line=84)
        finding = make_finding("illegal_free", address=0x124080013000, serial=63, location=site, stack=[site])
        assert lines(render_text([finding])) == [
            "====== ERROR: illegal free()",
            "======    at 0x124080013000 on GM",
            "======    code in add_custom.cpp:84 (serialNo:63)",
        ]

    def test_host_illegal_read_has_no_kernel_or_block(self) -> None:
        """A host-side illegal read names neither kernel nor block; a host record without a file or line prints
        msSanitizer's ``code in :0``."""
        finding = make_finding("illegal_read", address=0x1100, size=1, serial=2)
        assert lines(render_text([finding])) == [
            "====== ERROR: illegal read of size 1",
            "======    at 0x1100 on GM",
            "======    code in :0 (serialNo:2)",
        ]

    def test_leak_block(self) -> None:
        """Leaks share one header and a blank line, each is followed by a blank line, and a SUMMARY totals bytes and
        allocations (msSanitizer's SummaryLeakCheck)."""
        leaks = [
            make_finding(
                "memory_leak",
                address=0x124080013000,
                size=100,
                serial=37,
                stack=[Frame(file="add_custom.cpp", line=14)],
            ),
            make_finding(
                "memory_leak",
                address=0x124080014000,
                size=1000,
                serial=38,
                module=3,
                stack=[Frame(file="add_custom.cpp", line=15)],
            ),
        ]
        assert render_text(leaks).split("\n") == [
            "====== ERROR: LeakCheck: detected memory leaks",
            "",
            "======    Direct leak of 100 byte(s)",
            "======      at 0x124080013000 on GM",
            "======      allocated in add_custom.cpp:14 (serialNo:37)",
            "",
            "======    Direct leak of 1000 byte(s)",
            "======      at 0x124080014000 on GM by module 3",
            "======      allocated in add_custom.cpp:15 (serialNo:38)",
            "",
            "====== SUMMARY: 1100 byte(s) leaked in 2 allocation(s)",
            "",  # the summary ends the message: no blank line after it
        ]

    def test_unused_memory(self) -> None:
        """Unused memory prints a WARNING per block and a SUMMARY of bytes and allocations, each followed by a blank
        line (msSanitizer's SummaryUnusedHeapCheck)."""
        unused = [
            make_finding(
                "unused_memory",
                address=0x1240C0016000,
                size=1000,
                serial=69,
                stack=[Frame(file="add_custom.cpp", line=2)],
            ),
            make_finding(
                "unused_memory",
                address=0x1240C0017000,
                size=100,
                serial=70,
                stack=[Frame(file="add_custom.cpp", line=3)],
            ),
        ]
        assert lines(render_text(unused)) == [
            "====== WARNING: Unused memory of 1000 byte(s)",
            "======    at 0x1240c0016000 on GM",
            "======    code in add_custom.cpp:2 (serialNo:69)",
            "",
            "====== WARNING: Unused memory of 100 byte(s)",
            "======    at 0x1240c0017000 on GM",
            "======    code in add_custom.cpp:3 (serialNo:70)",
            "",
            "====== SUMMARY: 1100 byte(s) unused memory in 2 allocation(s)",
        ]

    def test_groups_split_by_session_and_kind(self) -> None:
        """Leaks of different sessions get their own header and summary; other findings end a group."""
        a = make_finding("memory_leak", session=1, address=0x10, size=1, serial=1)
        b = make_finding("memory_leak", session=2, address=0x20, size=2, serial=2)
        free = make_finding("illegal_free", session=2, address=0x30, serial=3)
        c = make_finding("memory_leak", session=2, address=0x40, size=4, serial=4)
        text = render_text([a, b, free, c]).splitlines()
        assert text.count("====== ERROR: LeakCheck: detected memory leaks") == 3
        assert [line for line in text if "SUMMARY" in line] == [
            "====== SUMMARY: 1 byte(s) leaked in 1 allocation(s)",
            "====== SUMMARY: 2 byte(s) leaked in 1 allocation(s)",
            "====== SUMMARY: 4 byte(s) leaked in 1 allocation(s)",
        ]

    def test_nothing_renders_empty(self) -> None:
        """No findings render to the empty string."""
        assert render_text([]) == ""


class TestJson:
    def test_required_fields(self) -> None:
        """JSON findings carry kind, severity, job, session, device, kernel, blocks, space, address, size, serial."""
        kernel_side = kernel_finding(
            "illegal_read", job="demo", session=3, space="UB", address=0x100, size=8, serial=9, blocks={"aiv": [0, 2]}
        )
        host_side = make_finding("illegal_free", job="demo", session=3, device=1, address=0x200, serial=4)
        decoded = json.loads(render_json([kernel_side, host_side]))
        required = {
            "kind",
            "severity",
            "job",
            "session",
            "device",
            "kernel",
            "blocks",
            "space",
            "address",
            "size",
            "serial",
        }
        assert all(required <= set(item) for item in decoded)
        assert {k: decoded[0][k] for k in required} == {
            "kind": "illegal_read",
            "severity": "error",
            "job": "demo",
            "session": 3,
            "device": 0,
            "kernel": "add_custom_kernel",
            "blocks": {"aiv": [0, 2]},
            "space": "UB",
            "address": 0x100,
            "size": 8,
            "serial": 9,
        }
        assert decoded[1]["kernel"] is None
        assert decoded[1]["blocks"] == {}
        assert decoded[1]["severity"] == "error"

    def test_severities_follow_kind(self) -> None:
        """make_finding fills severity from the kind: unused memory and out of bounds are warnings; a leak, which
        prints as an ERROR, is an error (msSanitizer counts it a warning)."""
        kinds = ["out_of_bounds", "memory_leak", "unused_memory", "illegal_read", "misaligned_access"]
        decoded = json.loads(render_json([make_finding(k) for k in kinds]))
        assert [d["severity"] for d in decoded] == ["warning", "error", "warning", "error", "error"]

    def test_large_addresses_are_exact(self) -> None:
        """64-bit addresses survive JSON as exact integers."""
        decoded = json.loads(render_json([make_finding("illegal_read", address=2**64 - 1)]))
        assert decoded[0]["address"] == 2**64 - 1
