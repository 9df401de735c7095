"""sanitizerd.compat.stacks: kernel ELFs built here with the system compiler (-g), read back as msSanitizer reads
them (llvm-symbolizer --inlines on pc - pcStartAddr), and hostile ELFs that must give KernelBinaryError or nothing."""

from __future__ import annotations

import json
import random
import shutil
import struct
import subprocess
import time
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

from sanitizerd.compat.stacks import MAX_SECTIONS, KernelBinary, KernelBinaryError, parse_file_mapping
from sanitizerd.demangle import demangle_many, function_name
from tests.native_build import KERNEL_SOURCE, build_kernel, compile_checked, compiler

ADD = "/opt/samples/add_custom/add_custom.cpp"
IMPL = "/opt/samples/add_custom/kernel_operator_data_copy_impl.h"
PC_START = 0x124080000000
EXPECTED = {
    "msop_pc_copy_in": [
        (IMPL, 58, 9, "DataCopyImpl()"),
        (ADD, 18, 5, "KernelAdd::CopyIn()"),
        (ADD, 54, 5, "add_custom_kernel"),
    ],
    "msop_pc_compute": [(ADD, 30, 9, "KernelAdd::Compute()"), (ADD, 55, 5, "add_custom_kernel")],
    "msop_pc_copy_out": [(ADD, 40, 5, "KernelAdd::CopyOut()"), (ADD, 56, 5, "add_custom_kernel")],
    "msop_pc_pad": [(ADD, 24, 5, "KernelAdd::CopyTail()"), (ADD, 57, 5, "add_custom_kernel")],
}


def labels(path: Path) -> dict[str, int]:
    with path.open("rb") as f:
        return {s.name: s["st_value"] for s in ELFFile(f).get_section_by_name(".symtab").iter_symbols()
                if s.name.startswith("msop_pc_")}  # fmt: skip


@pytest.fixture(scope="module")
def kernels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    directory = tmp_path_factory.mktemp("kernels")
    shared = build_kernel(directory, shared=True)
    relocatable = build_kernel(directory)
    dwarf4 = directory / "dwarf4.elf"
    flags = ["-gdwarf-4", "-O0", "-fPIC", "-shared", "-nostdlib"]
    compile_checked([compiler("c++"), *flags, "-o", str(dwarf4), str(KERNEL_SOURCE)])
    return {"shared": shared, "relocatable": relocatable, "dwarf4": dwarf4}


@pytest.mark.parametrize("kind", ["shared", "relocatable", "dwarf4"])
def test_the_demo_kernel_gives_the_demo_stacks(kernels: dict[str, Path], kind: str) -> None:
    binary = KernelBinary(kernels[kind].read_bytes())
    assert binary.has_line_info
    for name, address in labels(kernels[kind]).items():
        assert binary.frames(PC_START + address, PC_START) == EXPECTED[name], name
    assert binary.problem == ""


def test_pc_translation_follows_msSanitizer(kernels: dict[str, Path]) -> None:
    binary = KernelBinary(kernels["shared"].read_bytes())
    address = labels(kernels["shared"])["msop_pc_compute"]
    assert binary.frames(address, PC_START) == EXPECTED["msop_pc_compute"]  # below pcStartAddr: already an offset
    assert binary.frames(PC_START + address, 0) == []  # pcStartAddr 0: an invalid offset, no stack
    assert binary.frames(PC_START + 0x7FFF_0000, PC_START) == []  # outside every unit


def test_file_mapping_section(kernels: dict[str, Path]) -> None:
    binary = KernelBinary(kernels["shared"].read_bytes())
    assert binary.files == {0x2A: ADD, 0x2B: IMPL}
    assert binary.file_name(0x2A) == ADD and binary.file_name(7) is None
    raw = b"\0\0a.cpp\0" + (5).to_bytes(8, "little") + b"b.cpp\0" + (5).to_bytes(8, "little") + b"c.cpp\0\1"
    assert parse_file_mapping(raw) == {5: "a.cpp"}  # first name of a key wins; a truncated entry ends it


def symbolizer(path: Path, addresses: list[int]) -> list[list[tuple[str, int, int, str]]]:
    command = ["llvm-symbolizer", "--inlines", "--functions", "--demangle", "--output-style=JSON", "-e", str(path)]
    done = subprocess.run(command + [hex(a) for a in addresses], capture_output=True, text=True, timeout=60)
    out = []
    for line in done.stdout.splitlines():
        for entry in json.loads(line) if line.startswith("[") else [json.loads(line)]:
            frames = [(s["FileName"], s["Line"], s["Column"], s["FunctionName"]) for s in entry["Symbol"]]
            if frames and frames[0][1] == 0 and frames[0][2] == 0:
                frames.pop(0)
            out.append(frames)
    return out


# Templates and the standard library: thousands of DIEs, deep inlining, names that need c++filt.
LIBRARY_HEAVY = """
#include <algorithm>
#include <map>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>
template <int N> __attribute__((always_inline)) inline int sorted(std::vector<int> &v) {
  std::sort(v.begin(), v.end());
  return int(v.size()) + N;
}
int kernel(std::vector<int> &v, std::map<std::string, int> &m, std::unordered_map<int, std::string> &u) {
  int r = sorted<1>(v) + sorted<2>(v);
  for (auto &[k, x] : m) { r += x; u[x] = k; }
  std::ostringstream os;
  os << r;
  m[os.str()] = r;
  return r;
}
"""


def test_a_library_heavy_binary_is_read_once_and_quickly(tmp_path: Path) -> None:
    """Every byte of .text of a -O2 STL kernel: the unit's functions are indexed and demangled once (one c++filt),
    so thousands of lookups take well under a second each on average and stay within the DIE budget."""
    source = tmp_path / "library.cpp"
    source.write_text(LIBRARY_HEAVY)
    out = tmp_path / "library.so"
    compile_checked([compiler("c++"), "-g", "-O2", "-fPIC", "-shared", "-o", str(out), str(source)])
    with out.open("rb") as f:
        text = ELFFile(f).get_section_by_name(".text")
        start, size = text["sh_addr"], text["sh_size"]
    began = time.perf_counter()
    binary = KernelBinary(out.read_bytes())
    stacks = [binary.frames(PC_START + a, PC_START) for a in range(start, start + size)]
    elapsed = time.perf_counter() - began
    assert binary.problem == "" and sum(1 for s in stacks if len(s) > 1) > size // 4  # inlined frames, many
    assert any(f[3].startswith("std::") for s in stacks for f in s)  # demangled library names
    assert elapsed < 0.002 * size + 5, elapsed


@pytest.mark.skipif(shutil.which("llvm-symbolizer") is None, reason="no llvm-symbolizer to compare with")
def test_every_text_address_agrees_with_llvm_symbolizer(kernels: dict[str, Path], tmp_path: Path) -> None:
    """As msSanitizer would print them (file, line, column of every frame); llvm-symbolizer names the outermost
    function from the symbol table, where the nearest symbol is one of our labels, so that name is not compared."""
    source = tmp_path / "kernel.cpp"
    source.write_text(
        "namespace ops { struct Tile { int v[4]; };\n"
        "__attribute__((always_inline)) inline int Sum(const Tile &t) { int s = 0;\n"
        "  for (int i = 0; i < 4; ++i) s += t.v[i];\n  return s; }\n"
        "__attribute__((always_inline)) inline int Twice(const Tile &t) { return Sum(t) + Sum(t); }\n"
        "int Kernel(Tile t) { int r = Twice(t);\n  { int k = r * 3; r += Sum(t) * k; }\n  return r; } }\n"
    )
    library = tmp_path / "library.cpp"
    library.write_text(LIBRARY_HEAVY)
    built = []
    for flags in (["-O0"], ["-O2"], ["-O1", "-gdwarf-4"]):
        out = tmp_path / f"k{len(built)}.so"
        compile_checked([compiler("c++"), "-g", *flags, "-fPIC", "-shared", "-nostdlib", "-o", str(out), str(source)])
        built.append(out)
    out = tmp_path / "library.so"
    compile_checked([compiler("c++"), "-g", "-O2", "-fPIC", "-shared", "-o", str(out), str(library)])
    built.append(out)
    for path in [*built, kernels["shared"]]:
        with path.open("rb") as f:
            text = ELFFile(f).get_section_by_name(".text")
            start, size = text["sh_addr"], text["sh_size"]
        addresses = list(range(start, start + size))
        binary = KernelBinary(path.read_bytes())
        theirs = symbolizer(path, addresses)
        for address, expected in zip(addresses, theirs, strict=True):
            ours = binary.frames(address + PC_START, PC_START)
            assert [f[:3] for f in ours] == [f[:3] for f in expected], (path.name, hex(address))
            # c++filt and llvm's demangler differ in spacing ("operator< <char" / "operator<<char"), and llvm leaves
            # some names mangled that c++filt demangles: those are not compared.
            names = [(a[3], b[3]) for a, b in zip(ours[:-1], expected[:-1], strict=True) if not b[3].startswith("_Z")]
            assert all(a.replace(" ", "") == b.replace(" ", "") for a, b in names), (path.name, hex(address))


def test_no_debug_information(tmp_path: Path) -> None:
    source = tmp_path / "plain.c"
    source.write_text("int f(int x) { return x + 1; }\n")
    out = tmp_path / "plain.so"
    compile_checked([compiler("cc"), "-O0", "-fPIC", "-shared", "-nostdlib", "-o", str(out), str(source)])
    binary = KernelBinary(out.read_bytes())
    assert not binary.has_line_info and binary.frames(PC_START + 0x1000, PC_START) == [] and binary.files == {}


class TestHostile:
    def refused(self, data: bytes) -> str:
        with pytest.raises(KernelBinaryError) as caught:
            KernelBinary(data)
        return str(caught.value)

    def test_garbage_and_truncation(self, kernels: dict[str, Path]) -> None:
        assert "not an ELF" in self.refused(b"")
        assert "not an ELF" in self.refused(b"MZ" + bytes(100))
        assert "unknown class" in self.refused(b"\x7fELF\x09\x01" + bytes(100))
        data = kernels["shared"].read_bytes()
        for cut in (16, 63, 64, 100, len(data) // 2, len(data) - 1):
            self.refused(data[:cut])

    def test_huge_section_counts_are_refused_at_once(self, kernels: dict[str, Path]) -> None:
        data = bytearray(kernels["shared"].read_bytes())
        struct.pack_into("<H", data, 0x3C, 0xFFFF)  # e_shnum
        assert "truncated" in self.refused(bytes(data)) or "over the limit" in self.refused(bytes(data))
        # Extended numbering: e_shnum 0, the count in section 0's sh_size.
        data = bytearray(kernels["shared"].read_bytes())
        (shoff,) = struct.unpack_from("<Q", data, 0x28)
        struct.pack_into("<H", data, 0x3C, 0)
        struct.pack_into("<Q", data, shoff + 32, 1 << 40)
        assert f"over the limit of {MAX_SECTIONS}" in self.refused(bytes(data))

    def test_each_work_bound_says_which(self, kernels: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
        """The bounds that keep a hostile binary's decoding short: relocations refuse it, the line program and DIE
        budgets leave its lookups without stacks and say why in ``problem``."""
        from sanitizerd.compat import stacks

        address = PC_START + labels(kernels["relocatable"])["msop_pc_compute"]
        monkeypatch.setattr(stacks, "MAX_DEBUG_RELOCATIONS", 1)
        assert "debug relocations, over the limit of 1" in self.refused(kernels["relocatable"].read_bytes())
        monkeypatch.undo()
        monkeypatch.setattr(stacks, "MAX_LINE_PROGRAM_BYTES", 16)
        binary = KernelBinary(kernels["relocatable"].read_bytes())
        assert binary.frames(address, PC_START) == [] and "over the 16 limit" in binary.problem
        monkeypatch.undo()
        monkeypatch.setattr(stacks, "MAX_DIES", 3)
        binary = KernelBinary(kernels["relocatable"].read_bytes())
        assert binary.frames(address, PC_START) == [] and "more than 3 debug entries" in binary.problem
        monkeypatch.undo()
        monkeypatch.setattr(stacks, "MAX_ABBREV_BYTES", 8)
        assert "over the 8 limit" in self.refused(kernels["relocatable"].read_bytes())

    def test_range_lists_are_read_to_a_bound(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """DW_AT_ranges lists (a function split into hot and cold parts, and its unit) are read here entry by
        entry: a list longer than the bound is cut there, and that is said."""
        from sanitizerd.compat import stacks

        source = tmp_path / "split.c"  # a cold part moved to .text.unlikely: the function and its unit have ranges
        source.write_text(
            "__attribute__((noinline, cold)) void fail(int x) { __builtin_trap(); }\n"
            "int f(int x) {\n  if (__builtin_expect(x == 7, 0)) { fail(x); return 1; }\n  return x * 3;\n}\n"
            "int g(int x) { return x + 1; }\n"
        )
        out = tmp_path / "split.so"
        compile_checked([compiler("cc"), "-g", "-O2", "-fPIC", "-shared", "-nostdlib", "-o", str(out), str(source)])
        with out.open("rb") as f:
            symbols = {s.name: s["st_value"] for s in ELFFile(f).get_section_by_name(".symtab").iter_symbols()}
        whole = KernelBinary(out.read_bytes())
        assert whole.frames(PC_START + symbols["g"], PC_START)[0][3] == "g"
        assert whole.frames(PC_START + symbols["f"], PC_START)[0][3] == "f"
        assert whole.problem == ""
        monkeypatch.setattr(stacks, "MAX_RANGE_ENTRIES", 1)
        cut = KernelBinary(out.read_bytes())
        for name in ("f", "g", "fail"):
            cut.frames(PC_START + symbols[name], PC_START)  # whatever the first ranges still cover
        assert "a range list of more than 1 entries" in cut.problem

    def test_random_damage_never_escapes_nor_hangs(self, kernels: dict[str, Path]) -> None:
        """Byte flips anywhere, and in the DWARF sections in particular: KernelBinaryError, or lookups that
        return lists; every case well under a second."""
        original = kernels["shared"].read_bytes()
        with kernels["shared"].open("rb") as f:
            elf = ELFFile(f)
            debug = [(s["sh_offset"], s["sh_size"]) for s in elf.iter_sections() if s.name.startswith(".debug")]
        addresses = list(labels(kernels["shared"]).values())
        rng = random.Random(11)
        slowest = 0.0
        for case in range(300):
            data = bytearray(original)
            for _ in range(rng.randint(1, 8)):
                if case % 3:
                    offset, size = rng.choice(debug)
                    at = offset + rng.randrange(size)
                else:
                    at = rng.randrange(len(data))
                data[at] = rng.randrange(256)
            began = time.perf_counter()
            try:
                binary = KernelBinary(bytes(data))
            except KernelBinaryError:
                pass
            else:
                for address in addresses:
                    frames = binary.frames(PC_START + address, PC_START)
                    assert isinstance(frames, list)
                    assert all(isinstance(f[0], str) and isinstance(f[1], int) for f in frames)
            slowest = max(slowest, time.perf_counter() - began)
        assert slowest < 2.0


def test_demangle_many_matches_one_by_one() -> None:
    names = ["_ZN9KernelAdd6CopyInEv", "add_custom_kernel", "_Z12DataCopyImplv", "_Znot a name", "bad\n_Z1fv"]
    many = demangle_many(names)
    assert many == {name: function_name(name) for name in names}
    if shutil.which("c++filt"):
        assert many["_ZN9KernelAdd6CopyInEv"] == "KernelAdd::CopyIn()"
