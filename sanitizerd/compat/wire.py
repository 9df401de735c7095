"""msSanitizer's packet layer as facts: packet types, the fixed payload structs, the Config struct, and a versioned
table of their sizes (docs/mssanitizer-compat.md).

Every offset here was measured with ``offsetof``/``sizeof`` on msSanitizer's own headers of the release named in
``LAYOUTS`` (reference §1.9), for an LP64 little-endian host (x86_64 and aarch64 alike). The structs are written
out field by field with explicit offsets, never derived from C alignment rules, so that a reader can check each one
against the C declaration, and so that a second release can be described without touching the first.

msSanitizer and its injection library (msopcom) change these structs together between releases, and a client of
another release cannot be recognised from its bytes before it is misread: the layout is chosen for the hooks that
``sanitizerd run`` preloads, and a mismatch that does show (a record slot shorter than this release's heads) is
refused with a message that names both releases' sizes.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import json
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any, Final

import numpy as np

from sanitizerd_protocol import messages as m


class PacketType(enum.Enum):
    """What a packet is, whatever its number: ``[u32 PacketType]`` starts every packet (reference §1.1), and the
    numbers moved between releases (26.1.0 renamed 1000 MEMORY_RECORD and made 1003 MEM_REGION_PERMISSION), so each
    ``WireLayout`` maps its numbers to these names (``packet_types``, ``packet_number``)."""

    DEVICE_SUMMARY = "DEVICE_SUMMARY"
    KERNEL_SUMMARY = "KERNEL_SUMMARY"
    KERNEL_BINARY = "KERNEL_BINARY"
    LOG_STRING = "LOG_STRING"
    HOST_RECORD = "HOST_RECORD"  # a HostMemRecord (releases up to 26.0.0)
    # 26.1.0 on: HOST_RECORD renamed, still a HostMemRecord (what msopcom sends and the tool reads: its protocol.cpp
    # GetPayLoad); a MemOpRecord travels inside a SANITIZER_RECORD, whose RecordVersion is also named MEMORY_RECORD
    MEMORY_RECORD = "MEMORY_RECORD"
    KERNEL_RECORD = "KERNEL_RECORD"
    IPC_RECORD = "IPC_RECORD"
    MEM_REGION_PERMISSION = "MEM_REGION_PERMISSION"
    SANITIZER_RECORD = "SANITIZER_RECORD"
    GM_ADDR_OUT_OF_BOUND_RECORD = "GM_ADDR_OUT_OF_BOUND_RECORD"
    IPC_RESPONSE = "IPC_RESPONSE"  # server -> client
    KERNEL_RECORD_RESPONSE = "KERNEL_RECORD_RESPONSE"  # server -> client


# Packets whose payload is ``[u64 length][bytes]``; the client's others are one raw struct each.
VARIABLE_PACKETS: Final = frozenset({PacketType.KERNEL_BINARY, PacketType.LOG_STRING, PacketType.KERNEL_RECORD})
SERVER_PACKETS: Final = frozenset({PacketType.IPC_RESPONSE, PacketType.KERNEL_RECORD_RESPONSE})
# The struct each fixed packet carries, by its name in the measured layout.
PACKET_STRUCTS: Final = {
    PacketType.DEVICE_SUMMARY: "DeviceInfoSummary",
    PacketType.KERNEL_SUMMARY: "KernelSummary",
    PacketType.HOST_RECORD: "HostMemRecord",
    PacketType.MEMORY_RECORD: "HostMemRecord",
    PacketType.IPC_RECORD: "IPCMemRecord",
    PacketType.MEM_REGION_PERMISSION: "MemRegionPermissionDesc",
    PacketType.SANITIZER_RECORD: "SanitizerRecord",
    PacketType.GM_ADDR_OUT_OF_BOUND_RECORD: "GMAddrOutOfBoundRecord",
}


class MemOpType(enum.IntEnum):
    MALLOC = 0
    FREE = 1
    MEMCPY_BLOCKS = 2
    LOAD = 3
    STORE = 4


class MemInfoSrc(enum.IntEnum):
    BYPASS = 0
    HAL = 1
    RT = 2
    ACL = 3
    EXTRA = 4
    MANUAL = 5
    MSTX_HEAP = 6
    MSTX_REGION = 7


class MemInfoDesc(enum.IntEnum):
    DEFAULT = 0
    INPUT = 1
    TILING = 2
    DOUBLE_PTR = 3
    HCCL_MC2_CONTEXT = 4
    SECTION = 5
    IPC_MEMORY = 6
    OVERFLOW_ADDR = 7
    PARA_BASE = 8


class KernelType(enum.IntEnum):
    AICPU = 0
    AIVEC = 1
    AICUBE = 2
    MIX = 3


class RecordVersion(enum.IntEnum):
    """Which member of ``SanitizerRecord``'s union follows its version."""

    MEMORY_RECORD = 0
    KERNEL_RECORD = 1
    IPC_RECORD = 2


class IpcOperation(enum.IntEnum):
    SET_INFO = 0
    DESTROY_INFO = 1
    MAP_INFO = 2
    UNMAP_INFO = 3


class ResponseStatus(enum.IntEnum):
    SUCCESS = 0
    FAIL = 1000


class DemangleMode(enum.IntEnum):
    FULL = 0
    SIMPLE = 1
    MANGLED = 2


# sanitizerd's names for the enumerations above, as the native messages spell them.
HOST_OP_NAMES: Final = {
    MemOpType.MALLOC: "malloc",
    MemOpType.FREE: "free",
    MemOpType.MEMCPY_BLOCKS: "memcpy",
    MemOpType.LOAD: "load",
    MemOpType.STORE: "store",
}
SOURCE_NAMES: Final = {src: src.name.lower() for src in MemInfoSrc}
DESC_NAMES: Final = {desc: desc.name.lower() for desc in MemInfoDesc}
KERNEL_TYPE_NAMES: Final = {
    KernelType.AICPU: "aicpu",
    KernelType.AIVEC: "aiv",
    KernelType.AICUBE: "aic",
    KernelType.MIX: "mix",
}
IPC_OP_NAMES: Final = {
    IpcOperation.SET_INFO: "set",
    IpcOperation.DESTROY_INFO: "destroy",
    IpcOperation.MAP_INFO: "map",
    IpcOperation.UNMAP_INFO: "unmap",
}
IPC_OP_CODES: Final = {name: int(op) for op, name in IPC_OP_NAMES.items()}
DEMANGLE_CODES: Final = {"full": DemangleMode.FULL, "simple": DemangleMode.SIMPLE, "no": DemangleMode.MANGLED}

# DeviceType (u32, arch_def.h) -> a chip name sanitizerd/chips.py knows. 1 and 6 bracket the 910B family and 10
# starts the 950 family: markers, never a device. The 950 family's 32 variants share one memory model here.
_ASCEND_950_FIRST, _ASCEND_950_END = 11, 43
_DEVICE_CHIPS: Final = {0: "910_premium_a", 2: "910B1", 3: "910B2", 4: "910B3", 5: "910B4", 7: "310P"}


def chip_of_device(device_type: int) -> str | None:
    """The chip name of msSanitizer's ``DeviceType``, or None for a value this release does not define."""
    if _ASCEND_950_FIRST <= device_type < _ASCEND_950_END:
        return "950"
    return _DEVICE_CHIPS.get(device_type)


# --- structs ---------------------------------------------------------------------------------------------------

_STRUCT_CODES = {"u1": "B", "<u2": "H", "<u4": "I", "<u8": "Q", "i1": "b", "<i2": "h", "<i4": "i", "<i8": "q", "?": "?"}


@dataclass(frozen=True, slots=True)
class Layout:
    """One C struct: (field, byte offset, numpy format) in offset order, and its sizeof. Field names are the C
    names, nested members dotted (``kernelInfo.totalBlockDim``)."""

    name: str
    size: int
    fields: tuple[tuple[str, int, str], ...]

    @property
    def dtype(self) -> np.dtype:
        return _dtype_of(self)

    @property
    def struct(self) -> struct.Struct:
        """The same layout for ``struct``: pad bytes where C has them, so one record unpacks without numpy."""
        return _struct_of(self)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(field for field, _, _ in self.fields)

    def offset(self, field: str) -> int:
        for name, offset, _ in self.fields:
            if name == field:
                return offset
        raise KeyError(f"{self.name} has no field {field}")

    def has(self, field: str) -> bool:
        return any(name == field for name, _, _ in self.fields)

    def view(self, name: str, fields: Mapping[str, str]) -> Layout:
        """The fields ``fields`` names (C name -> the name to read it by) that this struct has, as a struct of the
        same size: one member of a union, or the few fields of a large head that are read."""
        chosen = [(fields[field], offset, fmt) for field, offset, fmt in self.fields if field in fields]
        return Layout(name, self.size, tuple(sorted(chosen, key=lambda f: f[1])))


@functools.cache
def _dtype_of(layout: Layout) -> np.dtype:
    names, offsets, formats = zip(*layout.fields, strict=True)
    return np.dtype({"names": names, "offsets": offsets, "formats": formats, "itemsize": layout.size})


@functools.cache
def _struct_of(layout: Layout) -> struct.Struct:
    parts = ["<"]
    at = 0
    for field, offset, fmt in layout.fields:
        if offset < at:
            raise ValueError(f"{layout.name}.{field} at {offset} overlaps the field before it")
        parts.append(f"{offset - at}x" if offset > at else "")
        code = f"{fmt[1:]}s" if fmt[0] in "SV" else _STRUCT_CODES[fmt]
        parts.append(code)
        at = offset + struct.calcsize("<" + code)
    parts.append(f"{layout.size - at}x" if layout.size > at else "")
    return struct.Struct("".join(parts))


def _layout(name: str, measured: Mapping[str, Any]) -> Layout:
    """A measured struct. An array of anything but chars is one opaque member (``V<bytes>``): no field of it is
    read, and its bytes keep their place."""
    fields = []
    for field, spec in measured["fields"].items():
        offset, fmt, *count = spec
        if count and count[0] != 1:
            fmt = f"V{np.dtype(fmt).itemsize * int(count[0])}"
        fields.append((field, int(offset), str(fmt)))
    return Layout(name, int(measured["size"]), tuple(sorted(fields, key=lambda f: (f[1], f[0]))))


PACKET_HEAD: Final = struct.Struct("<I")
LENGTH: Final = struct.Struct("<Q")

# The fields of the record buffer's heads that are read, by their C names.
GLOBAL_HEAD_FIELDS: Final = {
    "securityVal": "security",
    "checkParms.cacheSize": "cache_size",
    "checkParms.checkBlockId": "check_block_id",
    "kernelInfo.totalBlockDim": "total_block_dim",
    "kernelInfo.kernelType": "kernel_type",
    "offsetInfo.blockHeadSize": "block_head_size",  # from 2026-04-21 (ProtocolOffsetInfo)
    "offsetInfo.simtErrorInfo.size": "simt_thread_bytes",  # from 2026-05-06: each SIMT thread area's records
    "supportSimt": "support_simt",
}
BLOCK_HEAD_FIELDS: Final = {
    "recordCount": "record_count",
    "recordWriteCount": "record_write_count",
    "offset": "offset",
    "writeOffset": "write_offset",
    "blockInfo.blockId": "block_id",
    "blockInfo.blockType": "block_type",
    "blockInfo.vecSubBlockDim": "vec_sub_block_dim",
    "hostMemoryNum": "host_memory_num",
}
# Head fields a release may lack: the rest every layout must have.
OPTIONAL_HEAD_FIELDS: Final = frozenset({"offsetInfo.blockHeadSize", "offsetInfo.simtErrorInfo.size", "supportSimt"})


def _of_struct(name: str, read: Callable[[Layout], Any] = lambda layout: layout) -> property:
    """A ``WireLayout`` property: ``read`` of the layout of its struct ``name`` (the layout itself by default)."""

    def get(wire_layout: WireLayout) -> Any:
        return read(wire_layout.structs[name])

    return property(get, doc=f"Read from the layout of ``{name}``.")


def _size(layout: Layout) -> int:
    return layout.size


def _payload_offset(layout: Layout) -> int:
    return layout.offset("payload")


@dataclass(frozen=True, slots=True, eq=False)  # compared and hashed by identity: one object per release
class WireLayout:
    """The wire of one msSanitizer release (with the msopcom injection library of the same release), as measured
    on its headers (``sanitizerd/compat/layouts/<name>.json``; docs/mssanitizer-compat.md §3)."""

    name: str
    aliases: tuple[str, ...]
    release: str  # what it was measured on
    config: Layout
    packet_types: Mapping[int, PacketType]  # the numbers this release uses
    structs: Mapping[str, Layout]  # every struct a packet or a head carries, by its C name
    record_types: Mapping[str, int]  # RecordType enumerator -> its number in this release
    detailed_data_types: Mapping[str, int]  # DetailedDataType enumerator -> its number in this release
    payloads: Mapping[str, tuple[str, int]]  # RecordType enumerator -> (payload struct, sizeof), fixed ones only
    payload_structs: Mapping[str, Mapping[str, Any]]  # the measured payload structs, for comparing releases
    socket_env: tuple[str, ...]  # what the launcher names the socket in
    preload: Mapping[str, tuple[str, ...]]  # "default", "check_device_heap", "check_cann_heap" -> libraries
    max_block_bytes: int = 8192 << 20  # msSanitizer's largest per-block record buffer (--cache-size 8192 MB)
    # KernelErrorType enumerator -> its number (the SIMT ONLINE_ERROR records' error kinds), where measured
    kernel_error_types: Mapping[str, int] = dataclasses.field(default_factory=dict)
    # The tool's first serialNo on a connection: ``serialNo_++`` (0) until aca3f9d, ``++serialNo_`` (1) from it on
    first_serial: int = 0
    # Records that take the serialNo of the record before them in their block's SIMD records, as the tool numbers
    # them (aca3f9d, 99e8c685): (their types, the types of the record before), by this release's enumerator names
    serial_merges: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...] = ()

    def packet_number(self, packet: PacketType) -> int:
        for number, known in self.packet_types.items():
            if known is packet:
                return number
        raise KeyError(f"{self.name} has no {packet.name} packet")

    def has_packet(self, packet: PacketType) -> bool:
        return packet in self.packet_types.values()

    def struct_of(self, packet: PacketType) -> Layout:
        return self.structs[PACKET_STRUCTS[packet]]

    global_head = _of_struct("RecordGlobalHead")
    block_head = _of_struct("RecordBlockHead")

    @property
    def record_global_head_size(self) -> int:
        return self.global_head.size

    @property
    def record_block_head_size(self) -> int:
        return self.block_head.size

    @property
    def heads_size(self) -> int:
        """Bytes before the first record of a KERNEL_RECORD slot."""
        return self.global_head.size + self.block_head.size

    @property
    def has_offset_info(self) -> bool:
        """Whether the global head carries a ProtocolOffsetInfo (26.1.0 on) that can be checked."""
        return self.global_head.has("offsetInfo.blockHeadSize")

    device_summary = _of_struct("DeviceInfoSummary")
    kernel_summary = _of_struct("KernelSummary")
    mem_op_record = _of_struct("MemOpRecord")
    ipc_mem_record_size = _of_struct("IPCMemRecord", _size)
    kernel_record_size = _of_struct("KernelRecord", _size)
    kernel_record_payload_offset = _of_struct("KernelRecord", _payload_offset)
    sanitizer_record_size = _of_struct("SanitizerRecord", _size)
    sanitizer_record_payload_offset = _of_struct("SanitizerRecord", _payload_offset)

    def fixed_payload_size(self, packet: PacketType) -> int:
        """sizeof the struct a fixed packet carries."""
        return self.struct_of(packet).size

    def sizes_text(self) -> str:
        """The sizes a mismatch shows in: Config and the two heads."""
        return f"{self.name}: Config {self.config.size} B, heads {self.global_head.size} + {self.block_head.size} B"


LAYOUT_DIR: Final = "layouts"
# A layout's every Config field must have a value here (encode_config): a release that adds one is not spoken
# until someone decides what sanitizerd sends in it.
CONFIG_FIELDS: Final = frozenset(
    {
        "defaultCheck", "memCheck", "raceCheck", "initCheck", "syncCheck", "registerCheck", "checkDeviceHeap",
        "checkCannHeap", "leakCheck", "checkUnusedMemory", "checkCrossNpuRaces", "checkDcci", "isPrintFullStack",
        "outOfBoundCheck", "traceNonDefaultSprReg", "checkBlockId", "cacheSize", "demangleMode", "pluginPath",
        "kernelName", "dumpPath", "gmBufferGuardSize",
    }
)  # fmt: skip


def parse_layout(data: Mapping[str, Any]) -> WireLayout:
    """A ``WireLayout`` from its measured JSON; ValueError when it lacks what the daemon reads."""
    name = str(data["name"])
    try:
        packets: dict[int, PacketType] = {}
        for packet, number in data["packets"].items():
            if packet in PacketType.__members__:
                packets[int(number)] = PacketType[packet]
        structs = {struct_name: _layout(struct_name, spec) for struct_name, spec in data["structs"].items()}
        config = _layout("Config", data["config"])
        launcher = data["launcher"]
        layout = WireLayout(
            name=name,
            aliases=tuple(data.get("aliases", ())),
            release=f"msSanitizer {data['measured']['mssanitizer'][:8]} ({data['measured']['date']})",
            config=config,
            packet_types=packets,
            structs=structs,
            record_types={str(k): int(v) for k, v in data["enums"]["RecordType"].items()},
            detailed_data_types={str(k): int(v) for k, v in data["enums"]["DetailedDataType"].items()},
            payloads={str(k): (str(v[0]), int(v[1])) for k, v in data["payloads"].items()},
            payload_structs=data.get("payload_structs", {}),
            socket_env=tuple(launcher["socket_env"]),
            preload={str(k): tuple(v) for k, v in launcher["preload"].items()},
            kernel_error_types={str(k): int(v) for k, v in data["enums"].get("KernelErrorType", {}).items()},
            first_serial=int(data["serials"]["first"]),
            serial_merges=tuple(
                (tuple(map(str, rule["records"])), tuple(map(str, rule["after"]))) for rule in data["serials"]["merge"]
            ),
        )
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise ValueError(f"wire layout {name}: {exc!r}") from None
    unknown = set(config.names) - CONFIG_FIELDS
    if unknown:
        raise ValueError(f"wire layout {name}: Config fields with no value rule: {sorted(unknown)}")
    needed = {PacketType.DEVICE_SUMMARY, PacketType.KERNEL_SUMMARY, PacketType.KERNEL_RECORD}
    missing = [p.name for p in needed if not layout.has_packet(p)]
    missing += [f for f in GLOBAL_HEAD_FIELDS if f not in OPTIONAL_HEAD_FIELDS and not layout.global_head.has(f)]
    missing += [f for f in BLOCK_HEAD_FIELDS if not layout.block_head.has(f)]
    if layout.has_offset_info and "HostMemoryInfo" not in layout.structs:
        missing.append("HostMemoryInfo")
    if missing:
        raise ValueError(f"wire layout {name}: lacks {missing}")
    return layout


NESTED_KEYS: Final = ("structs", "enums", "payloads", "payload_structs", "variable_payloads")


def unpack_wires(packed: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Each wire's measured JSON from ``wires.json``, where the reference is whole and every other wire is the
    changes from one packed before it: keys replaced, and in the nested tables members set or dropped."""
    wires: dict[str, dict[str, Any]] = {}
    for row in packed["wires"]:
        if row.get("base") is None:
            wire = dict(row["full"])
        else:
            wire = {key: dict(value) if key in NESTED_KEYS else value for key, value in wires[row["base"]].items()}
            for key, change in row["changes"].items():
                if key in NESTED_KEYS:
                    table = wire.setdefault(key, {})
                    table.update(change["set"])
                    for member in change["drop"]:
                        table.pop(member, None)
                else:
                    wire[key] = change
        wire["name"] = row["name"]
        wires[row["name"]] = wire
    return wires


@functools.cache
def _load_layouts() -> dict[str, WireLayout]:
    packed = json.loads((resources.files("sanitizerd.compat") / LAYOUT_DIR / "wires.json").read_text())
    return {name: parse_layout(data) for name, data in unpack_wires(packed).items()}


def layout_named(name: str) -> WireLayout | None:
    """The layout called ``name``, or the one that has it as an alias (a release branch: ``26.1.0``)."""
    layouts = _load_layouts()
    if name in layouts:
        return layouts[name]
    return next((layout for layout in layouts.values() if name in layout.aliases), None)


LAYOUTS: Final[Mapping[str, WireLayout]] = _load_layouts()
DEFAULT_LAYOUT: Final = "mssanitizer-4a419f05"
FIRST_SERIAL_MERGES: Final = "mssanitizer-6e6a3a28"  # the first wire whose tool shares an instruction's serial
MSSANITIZER_4A419F05: Final = LAYOUTS[DEFAULT_LAYOUT]


def same_outer_wire(a: WireLayout, b: WireLayout) -> bool:
    """Whether the injection library of one release writes what the other's listener reads: the Config, the packet
    numbers, the structs the packets carry and the record heads. (msopcom keeps its own copies of these and nothing
    else, so an msopcom commit is measured, and matched, on these alone.)"""
    if a is b:
        return True
    names = {*PACKET_STRUCTS.values(), "RecordGlobalHead", "RecordBlockHead", "HostMemoryInfo"}
    return (
        a.config == b.config
        and dict(a.packet_types) == dict(b.packet_types)
        and all(a.structs.get(name) == b.structs.get(name) for name in names)
    )


def ipc_views(layout: WireLayout) -> dict[int, Layout]:
    """IPCMemRecord's union, one struct per member, by IPCOperationType: each reads ``type`` and its member."""
    record = layout.structs["IPCMemRecord"]
    views = {}
    for op, member in ((0, "setInfo"), (1, "destroyInfo"), (2, "mapInfo"), (3, "unmapInfo")):
        fields = {"type": "type"} | {
            field: field.split(".", 1)[1] for field in record.names if field.startswith(member + ".")
        }
        views[op] = record.view(f"IPCMemRecord.{member}", fields)
    return views


def other_releases_text(layout: WireLayout) -> str:
    """The sizes of this layout and of the other releases sanitizerd knows (each size once, named by a release
    branch where one has it), for a refusal that names both."""
    groups: dict[tuple[int, int, int], list[WireLayout]] = {}
    for other in LAYOUTS.values():
        if other is not layout:
            groups.setdefault((other.config.size, other.global_head.size, other.block_head.size), []).append(other)
    others = "; ".join(
        f"Config {config} B, heads {head} + {block} B ({', '.join(_known_names(members))})"
        for (config, head, block), members in sorted(groups.items())
    )
    return f"this listener speaks {layout.sizes_text()}; other releases: {others}. Are the hooks of another release?"


def _known_names(layouts: list[WireLayout]) -> list[str]:
    """A few names a user would recognise: release branches first, then the layouts themselves."""
    aliases = [layout.name for layout in layouts if layout.name == DEFAULT_LAYOUT]
    aliases += [alias for layout in layouts for alias in layout.aliases if not alias.startswith("br_")]
    names = aliases or [layout.name for layout in layouts]
    return [*names[:3], f"{len(layouts) - 3} more"] if len(names) > 3 and not aliases else names[:3]


# --- encoding ----------------------------------------------------------------------------------------------------


def _c_string(text: str, size: int) -> bytes:
    """``text`` as a NUL-terminated char[size], cut at a character boundary to ``size - 1`` bytes."""
    data = text.encode("utf-8")
    if len(data) >= size:
        # The hooks only use kernelName as a substring filter; the session applies the whole name again, so a
        # shorter filter can only let more kernels through, never hide one.
        data = data[: size - 1].decode("utf-8", "ignore").encode("utf-8")
    return data


def encode_config(config: m.Config, layout: WireLayout) -> bytes:
    """msSanitizer's ``Config`` struct for ``config``, as the server writes it on accept.

    The tool flags follow msSanitizer's CLI (reference §3) from the tools list, which sanitizerd's own CLI has
    already resolved (memcheck added for leak checks, registercheck with memcheck): memcheck sets defaultCheck and
    memCheck, initcheck sets initCheck and defaultCheck, registercheck sets registerCheck.
    """
    tools = set(config.tools)
    if not -1 <= config.block_id <= 0x7FFF:
        raise ValueError(f"block id {config.block_id} does not fit msSanitizer's checkBlockId (int16)")
    if not 0 <= config.cache_size <= 0xFFFFFFFF:
        raise ValueError(f"cache size {config.cache_size} does not fit msSanitizer's cacheSize (uint32)")
    values = {
        "defaultCheck": bool(tools & {"memcheck", "initcheck"}),
        "memCheck": "memcheck" in tools,
        "raceCheck": "racecheck" in tools,
        "initCheck": "initcheck" in tools,
        "syncCheck": "synccheck" in tools,
        "registerCheck": "registercheck" in tools,
        "checkDeviceHeap": config.check_device_heap,
        "checkCannHeap": config.check_cann_heap,
        "leakCheck": config.leak_check,
        "checkUnusedMemory": config.check_unused_memory,
        "checkCrossNpuRaces": config.check_cross_npu_races,
        "isPrintFullStack": config.full_backtrace,
        # 26.1.0 on: the DCCI check with racecheck (the hooks record DCCI either way; msSanitizer's CLI passes it
        # on as given); multi-core stomping is on with memcheck unless only errors are shown, as msSanitizer's CLI
        # sets it; register tracing (master) as asked: its hooks record instrName whatever this says.
        "checkDcci": config.check_dcci,
        "outOfBoundCheck": "memcheck" in tools and config.log_level != "error",
        "traceNonDefaultSprReg": config.trace_non_default_spr_reg,
        "gmBufferGuardSize": config.padding,
        "checkBlockId": config.block_id,
        "cacheSize": config.cache_size,
        "demangleMode": int(DEMANGLE_CODES.get(config.demangle, DemangleMode.FULL)),
        "pluginPath": b"",
        "kernelName": _c_string(config.kernel_name, _char_size(layout.config, "kernelName")),
        "dumpPath": b"",
    }
    layout_struct = layout.config.struct
    return layout_struct.pack(*(values[name] for name in layout.config.names))


def _char_size(layout: Layout, field: str) -> int:
    fmt = next(fmt for name, _, fmt in layout.fields if name == field)
    return int(fmt[1:])


_RESPONSE: Final = struct.Struct("<II")  # IPC_RESPONSE {type, status}; KERNEL_RECORD_RESPONSE {blockIdx, status}


def encode_ipc_response(op: int, ok: bool, layout: WireLayout) -> bytes:
    return PACKET_HEAD.pack(layout.packet_number(PacketType.IPC_RESPONSE)) + _RESPONSE.pack(
        op, ResponseStatus.SUCCESS if ok else ResponseStatus.FAIL
    )


def encode_kernel_record_response(total_block_dim: int, layout: WireLayout) -> bytes:
    """What the injection library blocks on after a kernel's last slot: blockIdx is the slot count."""
    return PACKET_HEAD.pack(layout.packet_number(PacketType.KERNEL_RECORD_RESPONSE)) + _RESPONSE.pack(
        total_block_dim & 0xFFFFFFFF, ResponseStatus.SUCCESS
    )


def c_text(raw: bytes) -> str:
    """A fixed char[] field as text: up to its first NUL, bytes that are not UTF-8 replaced."""
    return raw.split(b"\0", 1)[0].decode("utf-8", "replace")
