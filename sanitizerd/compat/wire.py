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

import enum
import functools
import struct
from dataclasses import dataclass
from typing import Final

import numpy as np

from sanitizerd.protocol import messages as m


class PacketType(enum.IntEnum):
    """``[u32 PacketType]`` starts every packet (reference §1.1)."""

    DEVICE_SUMMARY = 0
    KERNEL_SUMMARY = 1
    KERNEL_BINARY = 2
    LOG_STRING = 3
    HOST_RECORD = 1000
    KERNEL_RECORD = 1001
    IPC_RECORD = 1002
    SANITIZER_RECORD = 1003
    IPC_RESPONSE = 3000  # server -> client
    KERNEL_RECORD_RESPONSE = 3001  # server -> client


# Packets whose payload is ``[u64 length][bytes]``, and the client's packets that are one raw struct each.
VARIABLE_PACKETS: Final = frozenset({PacketType.KERNEL_BINARY, PacketType.LOG_STRING, PacketType.KERNEL_RECORD})
FIXED_PACKETS: Final = (
    PacketType.DEVICE_SUMMARY,
    PacketType.KERNEL_SUMMARY,
    PacketType.HOST_RECORD,
    PacketType.IPC_RECORD,
    PacketType.SANITIZER_RECORD,
)


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
    """One C struct: (field, byte offset, numpy format) in offset order, and its sizeof."""

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
        code = f"{fmt[1:]}s" if fmt.startswith("S") else _STRUCT_CODES[fmt]
        parts.append(code)
        at = offset + (int(fmt[1:]) if fmt.startswith("S") else struct.calcsize("<" + code))
    parts.append(f"{layout.size - at}x" if layout.size > at else "")
    return struct.Struct("".join(parts))


CONFIG = Layout(
    "Config",
    2584,
    (
        ("defaultCheck", 0, "?"),
        ("memCheck", 1, "?"),
        ("raceCheck", 2, "?"),
        ("initCheck", 3, "?"),
        ("syncCheck", 4, "?"),
        ("registerCheck", 5, "?"),
        ("checkDeviceHeap", 6, "?"),
        ("checkCannHeap", 7, "?"),
        ("leakCheck", 8, "?"),
        ("checkUnusedMemory", 9, "?"),
        ("checkCrossNpuRaces", 10, "?"),
        ("isPrintFullStack", 11, "?"),
        ("checkBlockId", 12, "<i2"),
        ("cacheSize", 16, "<u4"),
        ("demangleMode", 20, "u1"),
        ("pluginPath", 21, "S256"),
        ("kernelName", 277, "S2048"),
        ("dumpPath", 2325, "S256"),
    ),
)
DEVICE_INFO_SUMMARY = Layout(
    "DeviceInfoSummary",
    16,
    (("device", 0, "<u4"), ("blockSize", 4, "<u4"), ("blockNum", 8, "<u4"), ("deviceId", 12, "<i4")),
)
KERNEL_SUMMARY = Layout(
    "KernelSummary",
    2064,
    (
        ("pcStartAddr", 0, "<u8"),
        ("blockDim", 8, "<u4"),
        ("kernelType", 12, "u1"),
        ("isKernelWithDBI", 13, "u1"),
        ("hasDebugLine", 14, "u1"),
        ("kernelName", 15, "S2048"),
    ),
)
HOST_MEM_RECORD = Layout(
    "HostMemRecord",
    48,
    (
        ("type", 0, "<u4"),
        ("infoSrc", 4, "u1"),
        ("infoDesc", 5, "u1"),
        ("srcAddr", 8, "<u8"),
        ("dstAddr", 16, "<u8"),
        ("memSize", 24, "<u8"),
        ("paramsNo", 32, "<u8"),
        ("rootAddr", 40, "<u8"),
    ),
)
MEM_OP_RECORD = Layout(
    "MemOpRecord",
    168,
    (
        ("serialNo", 0, "<u8"),
        ("type", 8, "<u4"),
        ("coreId", 12, "<i4"),
        ("moduleId", 16, "<i4"),
        ("srcAddr", 24, "<u8"),
        ("dstAddr", 32, "<u8"),
        ("srcSpace", 40, "<i4"),
        ("dstSpace", 44, "<i4"),
        ("memSize", 48, "<u8"),
        ("lineNo", 56, "<i4"),
        ("fileName", 60, "S64"),
        ("blockType", 124, "u1"),
        ("pc", 128, "<u8"),
        ("infoSrc", 136, "u1"),
        ("infoDesc", 137, "u1"),
        ("side", 138, "u1"),
        ("paramsNo", 144, "<u8"),
        ("rootAddr", 152, "<u8"),
        ("ignoreIllegalCheck", 160, "u1"),
    ),
)
# IPCMemRecord: u32 type, then a union at 8 of {addr, size, name[64]} (set), {name[64]} (destroy),
# {addr, name[64]} (map), {addr} (unmap). One view per member; every view is the whole 88 bytes.
IPC_MEM_RECORD_SIZE: Final = 88
IPC_SET = Layout(
    "IPCMemRecord.setInfo", 88, (("type", 0, "<u4"), ("addr", 8, "<u8"), ("size", 16, "<u8"), ("name", 24, "S64"))
)
IPC_DESTROY = Layout("IPCMemRecord.destroyInfo", 88, (("type", 0, "<u4"), ("name", 8, "S64")))
IPC_MAP = Layout("IPCMemRecord.mapInfo", 88, (("type", 0, "<u4"), ("addr", 8, "<u8"), ("name", 16, "S64")))
IPC_UNMAP = Layout("IPCMemRecord.unmapInfo", 88, (("type", 0, "<u4"), ("addr", 8, "<u8")))
# KernelRecord: u32 recordType, u8 blockType at 4, u64 serialNo at 8, the payload union from 16 (272 bytes).
KERNEL_RECORD_HEAD = Layout(
    "KernelRecord", 288, (("recordType", 0, "<u4"), ("blockType", 4, "u1"), ("serialNo", 8, "<u8"))
)
KERNEL_RECORD_PAYLOAD_OFFSET: Final = 16
# SanitizerRecord: a 4-byte RecordVersion, then the union {MemOpRecord; KernelRecord; IPCMemRecord} at 8.
SANITIZER_RECORD_HEAD = Layout("SanitizerRecord", 296, (("version", 0, "<u4"),))
SANITIZER_RECORD_PAYLOAD_OFFSET: Final = 8
IPC_RESPONSE = Layout("IPCResponse", 8, (("type", 0, "<u4"), ("status", 4, "<u4")))
KERNEL_RECORD_RESPONSE = Layout("KernelRecordResponse", 8, (("blockIdx", 0, "<u4"), ("status", 4, "<u4")))

PACKET_HEAD: Final = struct.Struct("<I")
LENGTH: Final = struct.Struct("<Q")


@dataclass(frozen=True, slots=True)
class WireLayout:
    """The wire of one msSanitizer release: every size the packet layer depends on."""

    name: str
    release: str  # what it was measured on
    config: Layout
    device_summary: Layout
    kernel_summary: Layout
    host_mem_record: Layout
    mem_op_record: Layout
    ipc_mem_record_size: int
    kernel_record_size: int
    sanitizer_record_size: int
    record_global_head_size: int
    record_block_head_size: int
    max_block_bytes: int  # msSanitizer's largest per-block record buffer (--cache-size 8192 MB)

    @property
    def heads_size(self) -> int:
        """Bytes before the first record of a KERNEL_RECORD slot."""
        return self.record_global_head_size + self.record_block_head_size

    def fixed_payload_size(self, packet: PacketType) -> int:
        """sizeof the struct a fixed packet carries."""
        return {
            PacketType.DEVICE_SUMMARY: self.device_summary.size,
            PacketType.KERNEL_SUMMARY: self.kernel_summary.size,
            PacketType.HOST_RECORD: self.host_mem_record.size,
            PacketType.IPC_RECORD: self.ipc_mem_record_size,
            PacketType.SANITIZER_RECORD: self.sanitizer_record_size,
        }[packet]


MSSANITIZER_4A419F05 = WireLayout(
    name="mssanitizer-4a419f05",
    release="msSanitizer commit 4a419f05 (2026-04-03) with the msopcom injection library of the same release",
    config=CONFIG,
    device_summary=DEVICE_INFO_SUMMARY,
    kernel_summary=KERNEL_SUMMARY,
    host_mem_record=HOST_MEM_RECORD,
    mem_op_record=MEM_OP_RECORD,
    ipc_mem_record_size=IPC_MEM_RECORD_SIZE,
    kernel_record_size=KERNEL_RECORD_HEAD.size,
    sanitizer_record_size=SANITIZER_RECORD_HEAD.size,
    record_global_head_size=38528,
    record_block_head_size=128,
    max_block_bytes=8192 << 20,
)

LAYOUTS: Final[dict[str, WireLayout]] = {MSSANITIZER_4A419F05.name: MSSANITIZER_4A419F05}
DEFAULT_LAYOUT: Final = MSSANITIZER_4A419F05.name


@dataclass(frozen=True, slots=True)
class OtherRelease:
    """A release whose wire is known only well enough to name it in a refusal: it is not accepted."""

    name: str
    config_size: int
    record_global_head_size: int
    record_block_head_size: int


# The release before: the per-core register array lived in the block head (reference §1.9).
OTHER_RELEASES: Final = (
    OtherRelease(
        "msSanitizer before 4a419f05", config_size=2576, record_global_head_size=128, record_block_head_size=512
    ),
)


def other_releases_text(layout: WireLayout) -> str:
    """The sizes of this layout and of the releases it is not, for a refusal that names both."""
    known = "; ".join(
        f"{r.name}: Config {r.config_size} B, heads {r.record_global_head_size} + {r.record_block_head_size} B"
        for r in OTHER_RELEASES
    )
    mine = (
        f"{layout.name}: Config {layout.config.size} B, heads {layout.record_global_head_size} + "
        f"{layout.record_block_head_size} B"
    )
    return f"this listener speaks {mine} ({known}): are the hooks of another release?"


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
        "checkBlockId": config.block_id,
        "cacheSize": config.cache_size,
        "demangleMode": int(DEMANGLE_CODES.get(config.demangle, DemangleMode.FULL)),
        "pluginPath": b"",
        "kernelName": _c_string(config.kernel_name, 2048),
        "dumpPath": b"",
    }
    layout_struct = layout.config.struct
    return layout_struct.pack(*(values[name] for name in layout.config.names))


def encode_ipc_response(op: int, ok: bool) -> bytes:
    return PACKET_HEAD.pack(PacketType.IPC_RESPONSE) + IPC_RESPONSE.struct.pack(
        op, ResponseStatus.SUCCESS if ok else ResponseStatus.FAIL
    )


def encode_kernel_record_response(total_block_dim: int) -> bytes:
    """What the injection library blocks on after a kernel's last slot: blockIdx is the slot count."""
    return PACKET_HEAD.pack(PacketType.KERNEL_RECORD_RESPONSE) + KERNEL_RECORD_RESPONSE.struct.pack(
        total_block_dim & 0xFFFFFFFF, ResponseStatus.SUCCESS
    )


def c_text(raw: bytes) -> str:
    """A fixed char[] field as text: up to its first NUL, bytes that are not UTF-8 replaced."""
    return raw.split(b"\0", 1)[0].decode("utf-8", "replace")
