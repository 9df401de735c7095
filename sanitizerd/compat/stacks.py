"""Call stacks of device records, from the kernel's ELF as msSanitizer gets them: the KERNEL_BINARY packet.

How msSanitizer does it (csrc/core/framework/kernel_block.cpp, call_stack.cpp, file_mapping.cpp, command.cpp):

* a record's ``Location.pc`` is the device's absolute pc. The tool turns it into an offset in the ELF before any
  detector sees it: ``pc - pcStartAddr`` (KERNEL_SUMMARY) when ``pc >= pcStartAddr``, the pc unchanged when it is
  smaller, and "invalid" (no stack) when ``pcStartAddr`` is 0;
* the offset is an address of the ELF: the tool writes the binary to ``kernel.o.<pid>_<tid>`` and runs
  ``llvm-symbolizer --inlines --functions --demangle --output-style=JSON -e kernel.o <offsets>``. Each frame is
  (function, file, line, column), innermost first, inlined frames included; a first frame with line 0 and column 0
  is dropped. Reports print ``#i file:line:column``;
* ``Location.fileNo`` / ``lineNo`` are a second, coarser source position: ``fileNo`` is a key into the ELF section
  ``.init_array_sanitizer_file_mapping`` (entries ``<file name>\\0<u64 key>``, leading NULs skipped, the first name
  of a key wins; unknown keys print as ``unknown``), used by the "code in file:line" lines of sync and race reports.

``KernelBinary`` does both without a subprocess: pyelftools reads the DWARF line table (.debug_line) and the
subprogram / inlined-subroutine tree (.debug_info), as llvm-symbolizer does with ``--inlines``; C++ names are
demangled with ``sanitizerd.demangle`` (c++filt). The ELF comes from the program under test, so it is hostile input:
anything that cannot be read raises ``KernelBinaryError`` from the constructor, and damage found later, in the part of
the DWARF a lookup reads, makes that lookup return ``[]`` and sets ``problem``. Work is bounded: section, unit and
relocation counts, line-program bytes and DIEs read per binary, range-list entries, inline depth, the mapping size
and the pc cache (constants below).

Interface: ``KernelBinary(elf)``; ``frames(pc, pc_start)`` -> [(file, line, column, function)], innermost first,
cached per pc; ``has_line_info``; ``files`` / ``file_name(file_no)`` (the file mapping); ``problem`` (the first
damage a lookup met, "" if none).
"""

from __future__ import annotations

import bisect
import io
import os
import struct
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass

from elftools.common.exceptions import ELFError
from elftools.dwarf.compileunit import CompileUnit
from elftools.dwarf.die import DIE
from elftools.elf.elffile import ELFFile

from sanitizerd.demangle import demangle_many, function_name

Frame = tuple[str, int, int, str]  # (file, line, column, function)

MAX_ELF_BYTES = 1 << 30  # msSanitizer's own limit for the mapping section, applied to the whole ELF
MAX_SECTIONS = 1 << 14  # a device kernel has tens; e_shnum may claim 65 535 (or more, with extended numbering)
MAX_UNITS = 1 << 14  # compile units looked at
# pyelftools is pure Python: about 5.5 us per byte of line program and 15 us per DIE on a 2026 x86 core, so these
# bound one hostile binary to about 10 s of decoding each (once per distinct binary; lookups after are cached).
MAX_LINE_PROGRAM_BYTES = 2 << 20  # line program bytes decoded over the binary's life (a unit's whole, at its first
# lookup: one unit may use it all, many units share it)
MAX_DIES = 500_000  # DIEs read over the binary's life (pyelftools parses each once and keeps it)
MAX_DEBUG_RELOCATIONS = 1 << 20  # a relocatable object's relocations of its .debug sections, applied at load
MAX_ABBREV_BYTES = 4 << 20  # .debug_abbrev: a unit's table is parsed whole at its first DIE
MAX_RANGE_ENTRIES = 4096  # entries of one DW_AT_ranges list (read here, not by pyelftools, to stop there)
MAX_INLINE_DEPTH = 64
MAX_CACHED_PCS = 1 << 16
MAX_MAPPING_BYTES = 16 << 20
MAX_NAME = 4096
MAX_DEMANGLED = 1 << 16  # names kept demangled per binary
FILE_MAPPING_SECTION = ".init_array_sanitizer_file_mapping"

_SCOPES = {"DW_TAG_subprogram", "DW_TAG_inlined_subroutine", "DW_TAG_lexical_block"}
_CONTAINERS = {"DW_TAG_namespace", "DW_TAG_class_type", "DW_TAG_structure_type", "DW_TAG_union_type", "DW_TAG_module"}


class KernelBinaryError(Exception):
    """The kernel ELF cannot be read: the text says why, for the session's log and the kernel's findings."""


class _Budget(Exception):
    pass


@dataclass(slots=True)
class _Lines:
    """One unit's line table: sequences of sorted row addresses, each row (file, line, column)."""

    starts: list[int]  # first address of each sequence
    ends: list[int]  # end_sequence address
    addresses: list[list[int]]
    rows: list[list[tuple[int, int, int]]]
    files: list[str]  # file-table index -> path (index 0 first, whatever the DWARF version numbers from)
    file_base: int  # 0 for DWARF 5, 1 before: what DW_AT_decl_file / DW_AT_call_file count from


def _text(value: object) -> str:
    if isinstance(value, bytes):
        return value[:MAX_NAME].decode("utf-8", "replace")
    return str(value)[:MAX_NAME]


def _check_header(elf: bytes) -> None:
    """What pyelftools would take on trust: the section header table lies in the file, with few enough entries."""
    if len(elf) > MAX_ELF_BYTES:
        raise KernelBinaryError(f"kernel ELF of {len(elf)} bytes is over the {MAX_ELF_BYTES}-byte limit")
    if len(elf) < 64 or elf[:4] != b"\x7fELF":
        raise KernelBinaryError("kernel binary is not an ELF file")
    if elf[4] not in (1, 2) or elf[5] not in (1, 2):
        raise KernelBinaryError(f"kernel ELF has an unknown class {elf[4]} or data encoding {elf[5]}")
    order = "<" if elf[5] == 1 else ">"
    if elf[4] == 2:
        shoff, shentsize, shnum, shstrndx = struct.unpack_from(order + "Q10xHHH", elf, 0x28)
    else:
        shoff, shentsize, shnum, shstrndx = struct.unpack_from(order + "I10xHHH", elf, 0x20)
    if shoff == 0:
        raise KernelBinaryError("kernel ELF has no section headers")
    if shentsize not in (40, 64) or shoff > len(elf):
        raise KernelBinaryError(f"kernel ELF section headers are damaged (at {shoff}, {shentsize} bytes each)")
    if shnum == 0 or shstrndx == 0xFFFF:  # extended numbering: the real counts are in section 0
        if len(elf) - shoff < shentsize:
            raise KernelBinaryError("kernel ELF section header 0 lies past the end of the file")
        if elf[4] == 2:
            size, link = struct.unpack_from(order + "32xQI", elf, shoff)
        else:
            size, link = struct.unpack_from(order + "20xII", elf, shoff)
        shnum = size if shnum == 0 else shnum
        shstrndx = link if shstrndx == 0xFFFF else shstrndx
    if shnum > MAX_SECTIONS:
        raise KernelBinaryError(f"kernel ELF claims {shnum} sections, over the limit of {MAX_SECTIONS}")
    if (len(elf) - shoff) // shentsize < shnum:
        raise KernelBinaryError(f"kernel ELF is truncated: {shnum} section headers do not fit in the file")
    if shstrndx >= shnum:
        raise KernelBinaryError(f"kernel ELF names its sections with section {shstrndx} of {shnum}")


def parse_file_mapping(data: bytes) -> dict[int, str]:
    """msSanitizer's FileMapping: ``<name>\\0<u64 key>`` pairs after any NULs; a key keeps its first name."""
    files: dict[int, str] = {}
    at = 0
    while True:
        while at < len(data) and data[at] == 0:
            at += 1
        end = data.find(b"\0", at)
        if at >= len(data) or end < 0 or end + 9 > len(data):
            return files
        key = int.from_bytes(data[end + 1 : end + 9], "little")
        files.setdefault(key, _text(data[at:end]))
        at = end + 9


class KernelBinary:
    """One kernel's ELF: pcs to frames (``frames``), and msSanitizer's fileNo keys to file names (``file_name``)."""

    def __init__(self, elf: bytes) -> None:
        _check_header(elf)
        self.problem = ""  # the first damage a lookup met, for the session's log
        self._cache: OrderedDict[int, list[Frame]] = OrderedDict()
        self._lines: dict[int, _Lines | None] = {}
        self._dies_left = MAX_DIES
        self._line_bytes_left = MAX_LINE_PROGRAM_BYTES
        self._scope_index: dict[int, list[tuple[int, int, DIE]]] = {}
        self._demangled: dict[str, str] = {}
        self._range_sections: dict[str, bytes] = {}
        try:
            self._elf = ELFFile(io.BytesIO(elf))
            mapping = self._elf.get_section_by_name(FILE_MAPPING_SECTION)
            self.files: dict[int, str] = {}
            if mapping is not None and mapping["sh_type"] != "SHT_NOBITS":
                if mapping["sh_size"] > MAX_MAPPING_BYTES:
                    raise KernelBinaryError(f"{FILE_MAPPING_SECTION} of {mapping['sh_size']} bytes is over the limit")
                self.files = parse_file_mapping(mapping.data())
            self._dwarf = None
            self._units: list[tuple[int, int, CompileUnit]] = []
            self._check_relocations()
            if self._elf.has_dwarf_info() and self._elf.get_section_by_name(".debug_info") is not None:
                self._dwarf = self._elf.get_dwarf_info()
                self._index_units()
        except KernelBinaryError:
            raise
        except (ELFError, Exception) as error:  # pyelftools raises whatever its parsers meet on damaged input
            raise KernelBinaryError(f"kernel ELF cannot be read: {type(error).__name__}: {error}") from None
        self.has_line_info = bool(self._units) and self._elf.get_section_by_name(".debug_line") is not None

    def _check_relocations(self) -> None:
        """pyelftools applies a relocatable object's .debug relocations when it loads the DWARF: count them first.
        And the sections it parses whole are bounded here."""
        count = 0
        for section in self._elf.iter_sections():
            if section.name == ".debug_abbrev" and section["sh_size"] > MAX_ABBREV_BYTES:
                raise KernelBinaryError(
                    f".debug_abbrev of {section['sh_size']} bytes is over the {MAX_ABBREV_BYTES} limit"
                )
            if section["sh_type"] in ("SHT_REL", "SHT_RELA") and section.name.startswith((".rel.debug", ".rela.debug")):
                count += section["sh_size"] // max(1, section["sh_entsize"] or 1)
        if count > MAX_DEBUG_RELOCATIONS:
            raise KernelBinaryError(
                f"kernel ELF has {count} debug relocations, over the limit of {MAX_DEBUG_RELOCATIONS}"
            )

    def _index_units(self) -> None:
        """Each unit's address ranges, sorted, for finding the unit of a pc."""
        assert self._dwarf is not None
        for n, unit in enumerate(self._dwarf.iter_CUs()):
            if n >= MAX_UNITS:
                raise KernelBinaryError(f"kernel ELF has more than {MAX_UNITS} compile units")
            top = unit.get_top_DIE()
            for low, high in self._ranges(top, unit):
                self._units.append((low, high, unit))
        self._units.sort(key=lambda entry: (entry[0], entry[1]))

    def file_name(self, file_no: int) -> str | None:
        """The file of a record's ``Location.fileNo`` (msSanitizer prints ``unknown`` where this is None)."""
        return self.files.get(file_no)

    def frames(self, pc: int, pc_start: int) -> list[Frame]:
        """The stack of a record's pc, innermost first (inlined frames included); [] when unknown."""
        if pc_start == 0:  # msSanitizer: INVALID_PC_OFFSET, no stack
            return []
        address = pc - pc_start if pc >= pc_start else pc
        cached = self._cache.get(address)
        if cached is not None:
            self._cache.move_to_end(address)
            return cached
        try:
            found = self._resolve(address)
        except _Budget:
            self.problem = self.problem or f"kernel ELF: more than {MAX_DIES} debug entries read; stacks stop here"
            found = []
        except Exception as error:  # damage in the part of the DWARF this pc needs
            self.problem = self.problem or f"kernel ELF debug information is damaged: {type(error).__name__}: {error}"
            found = []
        self._cache[address] = found
        if len(self._cache) > MAX_CACHED_PCS:
            self._cache.popitem(last=False)
        return found

    # --- lookup -----------------------------------------------------------------------------------------------

    def _resolve(self, address: int) -> list[Frame]:
        unit = self._unit_of(address)
        if unit is None:
            return []
        lines = self._line_table(unit)
        row = self._row(lines, address) if lines is not None else None
        chain = self._scopes(unit, address)
        if row is None:
            file, line, column = "", 0, 0
        else:
            file, line, column = row
        frames: list[Frame] = []
        function = self._name(chain[-1]) if chain else ""
        frames.append((file, line, column, function))
        for inner, outer in zip(reversed(chain[1:]), reversed(chain[:-1]), strict=True):
            attributes = inner.attributes
            call_file = attributes["DW_AT_call_file"].value if "DW_AT_call_file" in attributes else -1
            call_line = attributes["DW_AT_call_line"].value if "DW_AT_call_line" in attributes else 0
            call_column = attributes["DW_AT_call_column"].value if "DW_AT_call_column" in attributes else 0
            frames.append((self._file(lines, call_file), int(call_line), int(call_column), self._name(outer)))
        if frames[0][1] == 0 and frames[0][2] == 0:  # as msSanitizer: a first frame without a line is dropped
            frames.pop(0)
        return frames

    def _unit_of(self, address: int) -> CompileUnit | None:
        i = bisect.bisect_right(self._units, address, key=lambda entry: entry[0])
        # Ranges of different units may nest (rarely): look back over the few that start at or before the pc.
        for low, high, unit in reversed(self._units[max(0, i - 8) : i]):
            if low <= address < high:
                return unit
        return None

    def _ranges(self, die: DIE, unit: CompileUnit) -> list[tuple[int, int]]:
        attributes = die.attributes
        if "DW_AT_low_pc" in attributes and "DW_AT_high_pc" in attributes:
            low = attributes["DW_AT_low_pc"].value
            high = attributes["DW_AT_high_pc"]
            # DWARF 4+: a constant-class high_pc is a length, an address-class one an address.
            length = high.form.startswith("DW_FORM_data") or high.form in ("DW_FORM_udata", "DW_FORM_implicit_const")
            end = low + high.value if length else high.value
            return [(low, end)] if end > low else []
        if "DW_AT_ranges" not in attributes:
            return []
        top = unit.get_top_DIE()
        base = top.attributes["DW_AT_low_pc"].value if "DW_AT_low_pc" in top.attributes else 0
        return self._range_list(unit, attributes["DW_AT_ranges"].value, base)

    def _section_bytes(self, version5: bool) -> bytes:
        """.debug_rnglists (DWARF 5) or .debug_ranges, as pyelftools holds it (relocated in an object file)."""
        key = "rnglists" if version5 else "ranges"
        data = self._range_sections.get(key)
        if data is None:
            assert self._dwarf is not None
            section = self._dwarf.debug_rnglists_sec if version5 else self._dwarf.debug_ranges_sec
            data = b""
            if section is not None:
                section.stream.seek(0)
                data = section.stream.read(section.size)
            self._range_sections[key] = data
        return data

    def _range_list(self, unit: CompileUnit, offset: int, base: int) -> list[tuple[int, int]]:
        """A DW_AT_ranges list, read entry by entry up to MAX_RANGE_ENTRIES (pyelftools reads a list whole, and a
        hostile one can be as long as its section)."""
        header = unit.header
        version5 = header["version"] >= 5
        data = self._section_bytes(version5)
        size = header["address_size"]
        if size not in (4, 8):
            raise ValueError(f"address size {size}")
        word = "<I" if size == 4 else "<Q"
        top = (1 << (8 * size)) - 1
        out: list[tuple[int, int]] = []
        at = offset
        for _ in range(MAX_RANGE_ENTRIES):
            if not version5:  # pairs of addresses; (0, 0) ends, (~0, base) sets the base
                begin, end = struct.unpack_from(word, data, at)[0], struct.unpack_from(word, data, at + size)[0]
                at += 2 * size
                if begin == 0 and end == 0:
                    return out
                if begin == top:
                    base = end
                elif end > begin:
                    out.append((base + begin, base + end))
                continue
            kind = data[at]
            at += 1
            if kind == 0:  # DW_RLE_end_of_list
                return out
            if kind in (1, 5):  # base_addressx, base_address
                if kind == 1:
                    index, at = _uleb(data, at)
                    assert self._dwarf is not None
                    base = self._dwarf.get_addr(unit, index)
                else:
                    base = struct.unpack_from(word, data, at)[0]
                    at += size
                continue
            if kind in (2, 3):  # startx_endx, startx_length
                index, at = _uleb(data, at)
                second, at = _uleb(data, at)
                assert self._dwarf is not None
                low = self._dwarf.get_addr(unit, index)
                high = self._dwarf.get_addr(unit, second) if kind == 2 else low + second
            elif kind == 4:  # offset_pair
                first, at = _uleb(data, at)
                second, at = _uleb(data, at)
                low, high = base + first, base + second
            elif kind in (6, 7):  # start_end, start_length
                low = struct.unpack_from(word, data, at)[0]
                at += size
                if kind == 6:
                    high = struct.unpack_from(word, data, at)[0]
                    at += size
                else:
                    length, at = _uleb(data, at)
                    high = low + length
            else:
                raise ValueError(f"range list entry kind {kind} at {at - 1}")
            if high > low:
                out.append((low, high))
        self.problem = self.problem or f"a range list of more than {MAX_RANGE_ENTRIES} entries; its rest ignored"
        return out

    def _children(self, die: DIE) -> Iterator[DIE]:
        """The children of ``die``, each charged to the binary's budget of DIEs."""
        for child in die.iter_children():
            self._dies_left -= 1
            if self._dies_left < 0:
                raise _Budget
            yield child

    def _inner_scopes(self, parent: DIE, unit: CompileUnit) -> list[tuple[int, int, DIE]]:
        """The address ranges of the scopes right inside ``parent`` (for a unit: its functions, also those defined
        in a namespace or a class), sorted; read once per parent, so a lookup costs a bisection per level."""
        key = parent.offset
        known = self._scope_index.get(key)
        if known is not None:
            return known
        found: list[tuple[int, int, DIE]] = []
        functions: list[DIE] = []  # at the unit level: every function, declarations too, to demangle at once
        top = parent.tag == "DW_TAG_compile_unit"
        pending = [parent]
        while pending:
            for child in self._children(pending.pop()):
                if child.tag in _SCOPES:
                    found.extend((low, high, child) for low, high in self._ranges(child, unit))
                    if top and child.tag == "DW_TAG_subprogram":
                        functions.append(child)
                elif top and child.tag in _CONTAINERS and child.has_children:
                    pending.append(child)
        found.sort(key=lambda entry: (entry[0], -entry[1]))
        self._scope_index[key] = found
        if functions:
            self._prefetch_names(functions)
        return found

    def _linkage_name(self, die: DIE) -> tuple[str, str]:
        """(linkage name, plain name) of a function, through abstract origins and specifications (an inlined call
        names its function only there)."""
        plain = ""
        for _ in range(8):
            attributes = die.attributes
            for key in ("DW_AT_linkage_name", "DW_AT_MIPS_linkage_name"):
                if key in attributes:
                    return _text(attributes[key].value), plain
            if not plain and "DW_AT_name" in attributes:
                plain = _text(attributes["DW_AT_name"].value)
            for key in ("DW_AT_abstract_origin", "DW_AT_specification"):
                if key in attributes:
                    die = die.get_DIE_from_attribute(key)
                    break
            else:
                break
        return "", plain

    def _prefetch_names(self, dies: list[DIE]) -> None:
        """Demangle the names of a level's functions with one c++filt, before lookups ask for them one by one."""
        wanted = []
        for die in dies:
            linkage, _plain = self._linkage_name(die)
            if linkage.startswith("_Z") and linkage not in self._demangled:
                wanted.append(linkage)
        if wanted and len(self._demangled) + len(wanted) <= MAX_DEMANGLED:
            self._demangled.update(demangle_many(wanted))

    def _scopes(self, unit: CompileUnit, address: int) -> list[DIE]:
        """The subprogram containing the pc and the inlined subroutines inside it, outermost first."""
        chain: list[DIE] = []
        parent = unit.get_top_DIE()
        while len(chain) < MAX_INLINE_DEPTH:
            inner = self._inner_scopes(parent, unit)
            i = bisect.bisect_right(inner, address, key=lambda entry: entry[0])
            found = None
            # Sibling scopes do not overlap, but one scope's several ranges may enclose another's: look back a few.
            for low, high, die in reversed(inner[max(0, i - 16) : i]):
                if low <= address < high:
                    found = die
                    break
            if found is None:
                break
            if found.tag != "DW_TAG_lexical_block":
                chain.append(found)
            parent = found
        return chain

    def _name(self, die: DIE) -> str:
        """The function's name: its linkage name demangled, else its plain name."""
        linkage, plain = self._linkage_name(die)
        if not linkage:
            return plain
        known = self._demangled.get(linkage)
        return known if known is not None else function_name(linkage)

    # --- the line table -----------------------------------------------------------------------------------------

    def _line_table(self, unit: CompileUnit) -> _Lines | None:
        key = unit.cu_offset
        if key not in self._lines:
            self._lines[key] = self._read_lines(unit)
        return self._lines[key]

    def _read_lines(self, unit: CompileUnit) -> _Lines | None:
        assert self._dwarf is not None
        program = self._dwarf.line_program_for_CU(unit)
        if program is None:
            return None
        length = program.program_end_offset - program.program_start_offset
        if length > self._line_bytes_left:
            raise KernelBinaryError(
                f"a line program of {length} bytes is over the {MAX_LINE_PROGRAM_BYTES} limit of the binary's "
                f"({self._line_bytes_left} left)"
            )
        self._line_bytes_left -= length
        version = program.header["version"]
        top = unit.get_top_DIE()
        comp_dir = _text(top.attributes["DW_AT_comp_dir"].value) if "DW_AT_comp_dir" in top.attributes else ""
        directories = [_text(d) for d in program.header["include_directory"]]
        files = []
        for entry in program.header["file_entry"]:
            name = _text(entry.name)
            index = entry.dir_index
            if version >= 5:
                directory = directories[index] if 0 <= index < len(directories) else ""
            else:  # index 0 is the compile directory, the table's first entry is 1
                directory = comp_dir if index == 0 else directories[index - 1] if index <= len(directories) else ""
            files.append(_join(comp_dir, directory, name))
        sequences: list[tuple[int, int, list[int], list[tuple[int, int, int]]]] = []
        addresses: list[int] = []
        rows: list[tuple[int, int, int]] = []
        for entry in program.get_entries():
            state = entry.state
            if state is None:
                continue
            if state.end_sequence:
                if addresses:
                    order = sorted(range(len(addresses)), key=addresses.__getitem__)
                    ordered = [addresses[i] for i in order]
                    sequences.append((ordered[0], state.address, ordered, [rows[i] for i in order]))
                addresses, rows = [], []
                continue
            addresses.append(state.address)
            rows.append((state.file, state.line, state.column))
        sequences.sort(key=lambda sequence: sequence[0])
        lines = _Lines(
            [q[0] for q in sequences], [q[1] for q in sequences], [q[2] for q in sequences], [q[3] for q in sequences],
            files, 0 if version >= 5 else 1,
        )  # fmt: skip
        return lines

    def _row(self, lines: _Lines, address: int) -> tuple[str, int, int] | None:
        i = bisect.bisect_right(lines.starts, address)
        # Sequences do not overlap in a sane table; look back a few in case a damaged or odd one does.
        for j in range(i - 1, max(-1, i - 9), -1):
            if lines.starts[j] <= address < lines.ends[j]:
                addresses = lines.addresses[j]
                file, line, column = lines.rows[j][bisect.bisect_right(addresses, address) - 1]
                return self._file(lines, file), int(line), int(column)
        return None

    def _file(self, lines: _Lines | None, index: int) -> str:
        if lines is None:
            return ""
        i = index - lines.file_base
        return lines.files[i] if 0 <= i < len(lines.files) else ""


def _uleb(data: bytes, at: int) -> tuple[int, int]:
    """An unsigned LEB128 at ``at``: (value, offset after it); at most 10 bytes (64 bits)."""
    value = shift = 0
    for i in range(10):
        byte = data[at + i]
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, at + i + 1
    raise ValueError(f"LEB128 longer than 10 bytes at {at}")


def _join(comp_dir: str, directory: str, name: str) -> str:
    """A file's path as llvm-symbolizer prints it: absolute names as they are, others under their directory and
    the compile directory."""
    if os.path.isabs(name):
        return name
    if directory and not os.path.isabs(directory) and comp_dir:
        directory = os.path.join(comp_dir, directory)
    return os.path.join(directory or comp_dir, name)
