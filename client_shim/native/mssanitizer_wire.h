/*
 * msSanitizer's client wire protocol, as this project understands it: the packets that CANN's hook and injection
 * libraries send to the Unix socket named in MSOP_SOCKET_PATH, and the Config the server answers with.
 *
 * These are sanitizerd's own declarations of the layouts documented in docs/mssanitizer-compat.md and in
 * shared/reference/mssanitizer.md section 1 (msSanitizer and msopcom, source release of 2026-04-03). The sizes and
 * offsets were measured on the real headers with a probe program; the _Static_asserts below pin every field a
 * client or a decoder reads, so that an edit which moves one fails to compile instead of corrupting a stream.
 *
 * Conventions of the wire: host byte order (little endian on every Ascend host), natural C alignment inside each
 * struct, a packet is [uint32_t PacketType][payload]; variable payloads are [uint64_t length][bytes]. In a record
 * buffer the records are [uint32_t RecordType][payload struct] back to back without padding, so a payload sits 4
 * bytes after its type and its fields are unaligned: copy it with memcpy, never cast the buffer.
 *
 * The wire changed between msSanitizer releases (reference section 1.10; sanitizerd/compat/layouts/wires.json has the
 * measured tables). MSOP_WIRE chooses the one declared, at compile time:
 *
 *     (default) MSOP_WIRE_4A419F05   the April release, commit 4a419f05 with its msopcom: the declarations below
 *     -DMSOP_WIRE=MSOP_WIRE_26_1_0   the 26.1.0 branch (layout mssanitizer-74a1ad94)
 *     -DMSOP_WIRE=MSOP_WIRE_MASTER   master (layout mssanitizer-1e040de1)
 *
 * What a later release changes is declared in #if blocks next to April's; the names stay the same, so a client is
 * written once and built per wire. MSOP_WIRE_LAYOUT names the wire as sanitizerd's layout table does.
 *
 * C11; no dependency beyond the C library.
 */
#ifndef SANITIZERD_MSSANITIZER_WIRE_H
#define SANITIZERD_MSSANITIZER_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MSOP_WIRE_4A419F05 1
#define MSOP_WIRE_26_1_0 2
#define MSOP_WIRE_MASTER 3
#ifndef MSOP_WIRE
#define MSOP_WIRE MSOP_WIRE_4A419F05
#endif
#if MSOP_WIRE == MSOP_WIRE_4A419F05
#define MSOP_WIRE_LAYOUT "mssanitizer-4a419f05"
#elif MSOP_WIRE == MSOP_WIRE_26_1_0
#define MSOP_WIRE_LAYOUT "mssanitizer-74a1ad94"
#elif MSOP_WIRE == MSOP_WIRE_MASTER
#define MSOP_WIRE_LAYOUT "mssanitizer-1e040de1"
#else
#error "MSOP_WIRE must be MSOP_WIRE_4A419F05, MSOP_WIRE_26_1_0 or MSOP_WIRE_MASTER"
#endif
/* 26.1.0 and master share most of their changes; this says "a wire with them". */
#define MSOP_WIRE_SINCE_26_1_0 (MSOP_WIRE != MSOP_WIRE_4A419F05)

#ifdef __cplusplus
extern "C" {
#endif

/* ---- enumerations (stored in the width each struct gives them) --------------------------------------------- */

/* PacketType, u32 at the start of every packet. */
#if !MSOP_WIRE_SINCE_26_1_0
enum msop_packet_type {
    MSOP_PACKET_DEVICE_SUMMARY = 0,
    MSOP_PACKET_KERNEL_SUMMARY = 1,
    MSOP_PACKET_KERNEL_BINARY = 2,          /* [u64 length][ELF] */
    MSOP_PACKET_LOG_STRING = 3,             /* [u64 length][text] */
    MSOP_PACKET_HOST_RECORD = 1000,         /* struct msop_host_mem_record */
    MSOP_PACKET_KERNEL_RECORD = 1001,       /* [u64 length][record buffer of one sub-block slot] */
    MSOP_PACKET_IPC_RECORD = 1002,          /* struct msop_ipc_mem_record */
    MSOP_PACKET_SANITIZER_RECORD = 1003,    /* struct msop_sanitizer_record */
    MSOP_PACKET_IPC_RESPONSE = 3000,        /* server -> client: struct msop_ipc_response */
    MSOP_PACKET_KERNEL_RECORD_RESPONSE = 3001, /* server -> client: struct msop_kernel_record_response */
};
#else
/* 26.1.0 renumbered: 1000 carries a MemOpRecord, 1003 is new, SANITIZER_RECORD moved to 1004. */
enum msop_packet_type {
    MSOP_PACKET_DEVICE_SUMMARY = 0,
    MSOP_PACKET_KERNEL_SUMMARY = 1,
    MSOP_PACKET_KERNEL_BINARY = 2,
    MSOP_PACKET_LOG_STRING = 3,
    MSOP_PACKET_MEMORY_RECORD = 1000,       /* a HostMemRecord (48 B): HOST_RECORD renamed */
    MSOP_PACKET_KERNEL_RECORD = 1001,
    MSOP_PACKET_IPC_RECORD = 1002,
    MSOP_PACKET_MEM_REGION_PERMISSION = 1003, /* struct msop_mem_region_permission */
    MSOP_PACKET_SANITIZER_RECORD = 1004,
    MSOP_PACKET_GM_ADDR_OUT_OF_BOUND_RECORD = 1005, /* struct msop_gm_addr_out_of_bound_record */
    MSOP_PACKET_IPC_RESPONSE = 3000,
    MSOP_PACKET_KERNEL_RECORD_RESPONSE = 3001,
};
#endif

/* DeviceType (u32). Only the values a test client needs; the 950 family lies at 10 and above. */
enum msop_device_type {
    MSOP_DEVICE_ASCEND_910_PREMIUM_A = 0,
    MSOP_DEVICE_ASCEND_910B1 = 2,
    MSOP_DEVICE_ASCEND_910B2 = 3,
    MSOP_DEVICE_ASCEND_910B3 = 4,
    MSOP_DEVICE_ASCEND_910B4 = 5,
    MSOP_DEVICE_ASCEND_310P = 7,
};

/* KernelType (u8). */
enum msop_kernel_type { MSOP_KERNEL_AICPU = 0, MSOP_KERNEL_AIVEC = 1, MSOP_KERNEL_AICUBE = 2, MSOP_KERNEL_MIX = 3 };

/* BlockType (u8): the kind of core a record buffer slot belongs to. */
enum msop_block_type { MSOP_BLOCK_AIVEC = 0, MSOP_BLOCK_AICUBE = 1, MSOP_BLOCK_AICORE = 2 };

/* MemOpType (u32) of host records. */
enum msop_mem_op_type {
    MSOP_MEM_MALLOC = 0,
    MSOP_MEM_FREE = 1,
    MSOP_MEM_MEMCPY_BLOCKS = 2,
    MSOP_MEM_LOAD = 3,
    MSOP_MEM_STORE = 4,
};

/* MemInfoSrc (u8): who reported a host operation (priority MANUAL > EXTRA > ACL > RT > HAL; BYPASS outside it). */
enum msop_mem_info_src {
    MSOP_SRC_BYPASS = 0,
    MSOP_SRC_HAL = 1,
    MSOP_SRC_RT = 2,
    MSOP_SRC_ACL = 3,
    MSOP_SRC_EXTRA = 4,
    MSOP_SRC_MANUAL = 5,
    MSOP_SRC_MSTX_HEAP = 6,
    MSOP_SRC_MSTX_REGION = 7,
};

/* MemInfoDesc (u8). */
enum msop_mem_info_desc {
    MSOP_DESC_DEFAULT = 0,
    MSOP_DESC_INPUT = 1,
    MSOP_DESC_TILING = 2,
    MSOP_DESC_DOUBLE_PTR = 3,
    MSOP_DESC_HCCL_MC2_CONTEXT = 4,
    MSOP_DESC_SECTION = 5,
    MSOP_DESC_IPC_MEMORY = 6,
    MSOP_DESC_OVERFLOW_ADDR = 7,
    MSOP_DESC_PARA_BASE = 8,
};

/* AddressSpace (i32) of MemOpRecord and LoadStoreRecord. */
enum msop_address_space {
    MSOP_AS_PRIVATE = 0, MSOP_AS_GM, MSOP_AS_L1, MSOP_AS_L0A, MSOP_AS_L0B, MSOP_AS_L0C, MSOP_AS_UB, MSOP_AS_BT,
    MSOP_AS_FB, MSOP_AS_INVALID = -1,
};

/* MemType (u8) of device records: a different numbering from AddressSpace. */
enum msop_mem_type {
    MSOP_MEM_L1 = 0, MSOP_MEM_L0A, MSOP_MEM_L0B, MSOP_MEM_L0C, MSOP_MEM_UB, MSOP_MEM_BT, MSOP_MEM_GM,
    MSOP_MEM_PRIVATE, MSOP_MEM_FB, MSOP_MEM_INVALID,
};

/* PipeType: u32 in records (the compiler's pipe_t). */
enum msop_pipe {
    MSOP_PIPE_S = 0, MSOP_PIPE_V, MSOP_PIPE_M, MSOP_PIPE_MTE1, MSOP_PIPE_MTE2, MSOP_PIPE_MTE3, MSOP_PIPE_ALL,
    MSOP_PIPE_MTE4, MSOP_PIPE_MTE5, MSOP_PIPE_V2, MSOP_PIPE_FIX, MSOP_PIPE_S_CAL,
};

/* MaskMode (u8), DataType (u8), PadMode (u8), ByteMode (u8), MemOpSide (u8), RecordVersion (int). */
enum msop_mask_mode { MSOP_MASK_NORM = 0, MSOP_MASK_COUNT = 1 };
enum msop_data_type { MSOP_DATA_B4 = 0, MSOP_DATA_B8, MSOP_DATA_B16, MSOP_DATA_B32 };
enum msop_byte_mode { MSOP_BYTE_MODE_DISABLE = 0, MSOP_BYTE_MODE_ENABLE = 1 };
enum msop_mem_op_side { MSOP_SIDE_HOST = 0, MSOP_SIDE_KERNEL = 1 };
enum msop_record_version { MSOP_VERSION_MEMORY_RECORD = 0, MSOP_VERSION_KERNEL_RECORD = 1, MSOP_VERSION_IPC_RECORD = 2 };
enum msop_ipc_op { MSOP_IPC_SET_INFO = 0, MSOP_IPC_DESTROY_INFO, MSOP_IPC_MAP_INFO, MSOP_IPC_UNMAP_INFO };
enum msop_response_status { MSOP_RESPONSE_SUCCESS = 0, MSOP_RESPONSE_FAIL = 1000 };

/* RecordType (u32) of the records this header declares a payload for; docs/mssanitizer-compat.md lists all. */
enum msop_record_type {
    MSOP_RECORD_LOAD = 0,
    MSOP_RECORD_STORE = 1,
    MSOP_RECORD_DMA_MOV = 100,
    MSOP_RECORD_MOV_ALIGN = 101,
    MSOP_RECORD_MOV_ALIGN_V2 = 102,
    MSOP_RECORD_UNARY_OP = 10000,
    MSOP_RECORD_BINARY_OP = 10003,
    MSOP_RECORD_SET_FLAG = 20000,
    MSOP_RECORD_WAIT_FLAG = 20001,
    MSOP_RECORD_PIPE_BARRIER = 20004,
    MSOP_RECORD_BLOCK_FINISH = 100000,  /* synthesised by the server, never sent */
#if !MSOP_WIRE_SINCE_26_1_0
    MSOP_RECORD_FINISH = 100001,        /* likewise */
#else
    MSOP_RECORD_KERNEL_FINISH = 100001, /* inserted in 26.1.0, which moved FINISH up by one */
    MSOP_RECORD_FINISH = 100002,
#endif
};

#define MSOP_KERNEL_NAME_MAX 2048
#define MSOP_PLUGIN_PATH_MAX 256
#define MSOP_DUMP_PATH_MAX 256
#define MSOP_FILE_NAME_MAX 64
#define MSOP_IPC_NAME_MAX 64
#define MSOP_SECURITY_VALUE 0x5a5a5a5a5a5a5a5aULL
#define MSOP_SOCKET_ENV "MSOP_SOCKET_PATH"
#if !MSOP_WIRE_SINCE_26_1_0
#define MSOP_CORE_SLOTS 75                 /* C220 physical cores: the per-core register shadow in the global head */
#define MSOP_PID_ENV "MSSANITIZER_PID"     /* the same name again: the ACL hooks read only this one */
#else
#define MSOP_CORE_SLOTS 108                /* the register shadow grew to 108 cores */
/* 26.1.0's launcher exports MSOP_SOCKET_PATH alone: no MSOP_PID_ENV, so a client that falls back to it is an error */
#endif

/* ---- handshake --------------------------------------------------------------------------------------------- */

/* Config: written by the server, unasked, right after accept (2 584 bytes in April, 2 588 in 26.1.0, 2 592 on
   master). */
struct msop_config {
    bool defaultCheck, memCheck, raceCheck, initCheck, syncCheck, registerCheck;
#if MSOP_WIRE != MSOP_WIRE_MASTER
    bool checkDeviceHeap, checkCannHeap, leakCheck, checkUnusedMemory, checkCrossNpuRaces, isPrintFullStack;
#else
    /* master adds three flags among the others, which moves every field after them by 4 */
    bool checkDeviceHeap, checkCannHeap, leakCheck, checkUnusedMemory, checkCrossNpuRaces, checkDcci;
    bool isPrintFullStack, outOfBoundCheck, traceNonDefaultSprReg;
#endif
    int16_t checkBlockId;   /* -1: every block */
    uint32_t cacheSize;     /* MB of record buffer per block */
    uint8_t demangleMode;   /* 0 full, 1 simple, 2 mangled */
    char pluginPath[MSOP_PLUGIN_PATH_MAX];
    char kernelName[MSOP_KERNEL_NAME_MAX];
    char dumpPath[MSOP_DUMP_PATH_MAX];
#if MSOP_WIRE_SINCE_26_1_0
    uint32_t gmBufferGuardSize; /* bytes of guard around GM buffers (msSanitizer's default 32) */
#endif
};

/* ---- packets the client sends --------------------------------------------------------------------------------- */

struct msop_device_info_summary {
    uint32_t device;        /* enum msop_device_type */
    uint32_t blockSize;
    uint32_t blockNum;
    int32_t deviceId;
};

struct msop_kernel_summary {
    uint64_t pcStartAddr;   /* device address the kernel's ELF is loaded at: a record's pc minus this is an ELF address */
    uint32_t blockDim;
    uint8_t kernelType;     /* enum msop_kernel_type */
    bool isKernelWithDBI;
    bool hasDebugLine;
    char kernelName[MSOP_KERNEL_NAME_MAX];
};

/* HOST_RECORD: what the HAL/RT/ACL hooks report; it has no source location. */
struct msop_host_mem_record {
    uint32_t type;          /* enum msop_mem_op_type */
    uint8_t infoSrc;        /* enum msop_mem_info_src */
    uint8_t infoDesc;       /* enum msop_mem_info_desc */
    uint64_t srcAddr;
    uint64_t dstAddr;
    uint64_t memSize;
    uint64_t paramsNo;
    uint64_t rootAddr;
};

#if MSOP_WIRE_SINCE_26_1_0
/* GMAddrOutOfBoundRecord (26.1.0): a GM access past a buffer's guard, alone (packet 1005) or in a MemOpRecord. */
struct msop_gm_addr_out_of_bound_record {
    uint64_t userAddr;
    uint32_t userSize;
    uint64_t outAddr;
    uint32_t outSize;
};

/* MEM_REGION_PERMISSION's payload (26.1.0). */
struct msop_mem_region_permission {
    uint64_t addr;
    uint64_t size;
    uint32_t deviceId;
    uint32_t flags;
};
#endif

/* MemOpRecord, the MEMORY_RECORD variant of SanitizerRecord: a host record with a serial number and a location. */
struct msop_mem_op_record {
    uint64_t serialNo;
    uint32_t type;          /* enum msop_mem_op_type */
    int32_t coreId;
    int32_t moduleId;
    uint64_t srcAddr;
    uint64_t dstAddr;
    int32_t srcSpace;       /* enum msop_address_space */
    int32_t dstSpace;
    uint64_t memSize;
    int32_t lineNo;
    char fileName[MSOP_FILE_NAME_MAX];
    uint8_t blockType;
    uint64_t pc;
    uint8_t infoSrc;
    uint8_t infoDesc;
    uint8_t side;           /* enum msop_mem_op_side */
    uint64_t paramsNo;
    uint64_t rootAddr;
#if MSOP_WIRE_SINCE_26_1_0
    uint64_t mainScalarPc;
#endif
    bool ignoreIllegalCheck;
#if MSOP_WIRE_SINCE_26_1_0
    bool isSimt;
    struct msop_gm_addr_out_of_bound_record gmAddrOutOfBoundsRecord;
#endif
};

/* The location every device record carries. */
struct msop_location {
    uint64_t fileNo;        /* key into the ELF's .init_array_sanitizer_file_mapping */
    uint64_t lineNo;
    uint64_t pc;            /* absolute device pc; pc - pcStartAddr is an address in the kernel's ELF */
    uint16_t blockId;
};

/* KernelRecord, the KERNEL_RECORD variant of SanitizerRecord: one device record sent alone. */
#define MSOP_KERNEL_RECORD_PAYLOAD_MAX 272
struct msop_kernel_record {
    uint32_t recordType;
    uint8_t blockType;
    uint64_t serialNo;
    union {
        uint64_t align;
        unsigned char bytes[MSOP_KERNEL_RECORD_PAYLOAD_MAX];   /* the largest payload of the release */
    } payload;
};

struct msop_ipc_set_info { uint64_t addr; uint64_t size; char name[MSOP_IPC_NAME_MAX]; };
struct msop_ipc_destroy_info { char name[MSOP_IPC_NAME_MAX]; };
struct msop_ipc_map_info { uint64_t addr; char name[MSOP_IPC_NAME_MAX]; };
struct msop_ipc_unmap_info { uint64_t addr; };

struct msop_ipc_mem_record {
    uint32_t type;          /* enum msop_ipc_op */
    union {
        struct msop_ipc_set_info setInfo;
        struct msop_ipc_destroy_info destroyInfo;
        struct msop_ipc_map_info mapInfo;
        struct msop_ipc_unmap_info unmapInfo;
    } info;
};

struct msop_sanitizer_record {
    int32_t version;        /* enum msop_record_version */
    union {
        struct msop_mem_op_record memoryRecord;
        struct msop_kernel_record kernelRecord;
        struct msop_ipc_mem_record ipcRecord;
    } payload;
};

/* ---- answers of the server ------------------------------------------------------------------------------------ */

struct msop_ipc_response { uint32_t type; uint32_t status; };
struct msop_kernel_record_response { uint32_t blockIdx; uint32_t status; };  /* blockIdx = totalBlockDim */

/* ---- the record buffer of one KERNEL_RECORD packet ------------------------------------------------------------ */

/* One physical core's register shadow; the hooks initialise vectorMask0/1 and cmpMaskAddr to ~0 and ctrl to 8. */
struct msop_register_payload { uint64_t regValType; uint64_t regVal; int64_t regIdx; };
struct msop_registers {
    uint64_t fmatrix, fmatrixB, l3dRpt, vectorMask0, vectorMask1, ndParaConfig, cmpMaskAddr;
    uint8_t maskMode;
    uint64_t va[8][2];      /* VaRegister x 8 */
    uint64_t spr[27];       /* the loop, stride, padding and fmatrix special registers */
    uint64_t ctrl, fftsBaseAddr, fpc, quantPre, quantPost;
    struct msop_register_payload lreluAlpha;
    uint64_t rsv[5];
};

#if !MSOP_WIRE_SINCE_26_1_0
struct msop_check_parms_info {
    uint32_t cacheSize;
    int16_t checkBlockId;
    bool defaultcheck, racecheck, initcheck, synccheck, registerCheck;
};
#elif MSOP_WIRE == MSOP_WIRE_26_1_0
struct msop_check_parms_info {
    uint32_t cacheSize;
    int16_t checkBlockId;
    bool defaultcheck, memcheck, racecheck, initcheck, synccheck, registerCheck;
    uint32_t gmBufferGuardSize;
};
#else
struct msop_check_parms_info {  /* master: 20 bytes, so kernelInfo and everything after it move by 8 */
    uint32_t cacheSize;
    int16_t checkBlockId;
    bool defaultcheck, memcheck, outOfBoundCheck, racecheck, initcheck, synccheck, registerCheck, dcciCheck;
    uint32_t gmBufferGuardSize;
};
#endif

struct msop_kernel_info {
    uint64_t totalBlockDim;  /* sub-block slots: 3 x blockDim on 910B (vec, vec, cube per logical block) */
    uint64_t totalCacheSize;
    uint32_t kernelParamNum;
    uint8_t kernelType;
    uint64_t l2CacheOffset;
};

#if !MSOP_WIRE_SINCE_26_1_0
struct msop_simt_info {
    uint64_t offset, threadByteSize, shadowMemoryOffset, shadowMemoryByteSize;
    uint32_t ubDynamicSize;
};

/* RecordGlobalHead: aligned to 64 bytes as a whole (38 528 bytes). */
struct msop_record_global_head {
    uint64_t securityVal;   /* MSOP_SECURITY_VALUE unless the user program overwrote it */
    struct msop_check_parms_info checkParms;
    struct msop_kernel_info kernelInfo;
    struct msop_simt_info simtInfo;
    bool supportSimt;
    struct msop_registers registers[MSOP_CORE_SLOTS];
    unsigned char tail_padding[24];
};
#else
/* A region of the slot placed after the block head: offset from the block head's start, and size (0: none). */
struct msop_protocol_region { uint64_t offset, size; };

/* ProtocolOffsetInfo (26.1.0): where the SIMT regions lie, and the block head's size, which a reader checks. */
struct msop_protocol_offset_info {
    struct msop_protocol_region simtErrorInfo, shadowMemoryInfo, simtEntryInfo;
    uint32_t blockHeadSize;  /* sizeof(struct msop_record_block_head): a client must set it */
};

struct msop_simt_info {      /* its offsets moved into ProtocolOffsetInfo */
    uint32_t ubDynamicSize;
};

/* RecordGlobalHead: 55 424 bytes (64-byte aligned as a whole). */
struct msop_record_global_head {
    uint64_t securityVal;
    struct msop_check_parms_info checkParms;
    struct msop_kernel_info kernelInfo;
    struct msop_protocol_offset_info offsetInfo;
    struct msop_simt_info simtInfo;
    bool supportSimt;
    struct msop_registers registers[MSOP_CORE_SLOTS];
#if MSOP_WIRE == MSOP_WIRE_26_1_0
    unsigned char tail_padding[8];  /* master's 8 more bytes of checkParms fill it exactly */
#endif
};
#endif

#if !MSOP_WIRE_SINCE_26_1_0
struct msop_block_info {
    uint64_t simtSyncThreadCount;
    uint16_t blockId;
    uint16_t threadXDim, threadYDim, threadZDim;
    uint8_t blockType;      /* enum msop_block_type */
    uint8_t vecSubBlockDim;
};
#define MSOP_BLOCK_HEAD_TAIL 32
#else
struct msop_block_info {    /* 26.1.0: SIMT counters first, the thread dimensions gone (64 bytes) */
    uint64_t simtCallPcArr[2];
    uint64_t simtSyncThreadCount, simtEndThreadCount, simtEndLastThread, simtEntryUseSize;
    uint32_t simtEndCount, simtCallCount;
    uint16_t blockId;
    uint8_t blockType;
    uint8_t vecSubBlockDim;
};
#define MSOP_BLOCK_HEAD_TAIL 56
#endif

/* RecordBlockHead (128 bytes; 192 from 26.1.0), followed by `offset` bytes of records of which `writeOffset` were
   written. */
struct msop_record_block_head {
    uint64_t recordCount;       /* records the block produced */
    uint64_t recordWriteCount;  /* records that fitted: fewer means overflow */
    uint64_t offset;            /* bytes the records needed */
    uint64_t writeOffset;       /* bytes written */
    struct msop_block_info blockInfo;
    uint32_t hostMemoryNum;
    uint64_t hostMemoryInfoPtr;
    uint32_t mstxFuseScopeDepth;
    bool extraWriteSuccess;
    uint64_t paraBase[2];
    unsigned char tail_padding[MSOP_BLOCK_HEAD_TAIL];
};

/* ---- record payloads (each follows its u32 RecordType) -------------------------------------------------------- */

struct msop_load_store_record {    /* LOAD, STORE and the scalar family */
    uint64_t addr;
    uint64_t size;
    struct msop_location location;
    int32_t space;          /* enum msop_address_space */
    uint8_t dataType;       /* DetailedDataType */
    uint8_t alignSize;
};

struct msop_dma_mov_record {       /* DMA_MOV: nBurst bursts of lenBurst 32-byte blocks */
    uint64_t dst;
    uint64_t src;
    struct msop_location location;
    uint16_t nBurst, lenBurst, srcStride, dstStride;
    uint8_t dstMemType, srcMemType;  /* enum msop_mem_type */
    uint8_t padMode, byteMode;
};

struct msop_mov_align_record {     /* MOV_ALIGN: DataCopyPad, byte-granular */
    uint64_t dst;
    uint64_t src;
    struct msop_location location;
    uint32_t srcGap, dstGap, lenBurst;
    uint16_t nBurst;
    uint8_t dstMemType, srcMemType;
    uint8_t dataType;       /* enum msop_data_type */
    uint8_t leftPaddingNum, rightPaddingNum;
};

struct msop_mov_align_record_v2 {  /* MOV_ALIGN_V2: with two outer loops */
    uint64_t dst;
    uint64_t src;
    struct msop_location location;
    uint64_t loop1DstStride, loop2DstStride, dstStride, srcStride, loop1SrcStride, loop2SrcStride;
    uint32_t nBurst, lenBurst, loop1Size, loop2Size;
    uint8_t dstMemType, srcMemType, dataType, leftPaddingNum, rightPaddingNum;
};

struct msop_vector_mask { uint64_t mask0, mask1; };

struct msop_binary_op_record {     /* BINARY_OP: vector Add, Sub, Mul... */
    uint64_t dst, src0, src1;
    struct msop_location location;
    struct msop_vector_mask vectorMask;
    uint16_t dstBlockStride, src0BlockStride, src1BlockStride;
    uint16_t dstRepeatStride, src0RepeatStride, src1RepeatStride;
    uint16_t dstBlockSize, src0BlockSize, src1BlockSize;
    uint8_t repeat;
    uint8_t dstBlockNum, src0BlockNum, src1BlockNum;
    uint8_t dstDataBits, src0DataBits, src1DataBits;
    uint8_t maskMode;       /* enum msop_mask_mode */
#if MSOP_WIRE == MSOP_WIRE_MASTER
    uint8_t instrName;      /* master: which instruction, in what was padding (the size stays 104) */
#endif
};

struct msop_sync_record {          /* SET_FLAG, WAIT_FLAG */
    struct msop_location location;
    uint32_t src, dst;      /* enum msop_pipe */
    uint64_t eventID;
    bool isGenerated;
};

struct msop_pipe_barrier_record {  /* PIPE_BARRIER */
    struct msop_location location;
    uint32_t pipe;
};

/* ---- the layouts, pinned --------------------------------------------------------------------------------------- */

#ifdef __cplusplus
#define MSOP_STATIC_ASSERT static_assert
#else
#define MSOP_STATIC_ASSERT _Static_assert
#endif
#define MSOP_ASSERT_SIZE(T, n) MSOP_STATIC_ASSERT(sizeof(struct T) == (n), "sizeof(" #T ") must be " #n)
#define MSOP_ASSERT_AT(T, f, n) MSOP_STATIC_ASSERT(offsetof(struct T, f) == (n), #T "." #f " must be at " #n)

#if MSOP_WIRE != MSOP_WIRE_MASTER
MSOP_ASSERT_AT(msop_config, isPrintFullStack, 11);
MSOP_ASSERT_AT(msop_config, checkBlockId, 12);
MSOP_ASSERT_AT(msop_config, cacheSize, 16);
MSOP_ASSERT_AT(msop_config, demangleMode, 20);
MSOP_ASSERT_AT(msop_config, pluginPath, 21);
MSOP_ASSERT_AT(msop_config, kernelName, 277);
MSOP_ASSERT_AT(msop_config, dumpPath, 2325);
#endif
#if MSOP_WIRE == MSOP_WIRE_4A419F05
MSOP_ASSERT_SIZE(msop_config, 2584);
#elif MSOP_WIRE == MSOP_WIRE_26_1_0
MSOP_ASSERT_SIZE(msop_config, 2588);
MSOP_ASSERT_AT(msop_config, gmBufferGuardSize, 2584);
#else
MSOP_ASSERT_SIZE(msop_config, 2592);
MSOP_ASSERT_AT(msop_config, checkCrossNpuRaces, 10);
MSOP_ASSERT_AT(msop_config, checkDcci, 11);
MSOP_ASSERT_AT(msop_config, isPrintFullStack, 12);
MSOP_ASSERT_AT(msop_config, outOfBoundCheck, 13);
MSOP_ASSERT_AT(msop_config, traceNonDefaultSprReg, 14);
MSOP_ASSERT_AT(msop_config, checkBlockId, 16);
MSOP_ASSERT_AT(msop_config, cacheSize, 20);
MSOP_ASSERT_AT(msop_config, demangleMode, 24);
MSOP_ASSERT_AT(msop_config, pluginPath, 25);
MSOP_ASSERT_AT(msop_config, kernelName, 281);
MSOP_ASSERT_AT(msop_config, dumpPath, 2329);
MSOP_ASSERT_AT(msop_config, gmBufferGuardSize, 2588);
#endif

MSOP_ASSERT_SIZE(msop_device_info_summary, 16);
MSOP_ASSERT_SIZE(msop_kernel_summary, 2064);
MSOP_ASSERT_AT(msop_kernel_summary, blockDim, 8);
MSOP_ASSERT_AT(msop_kernel_summary, kernelType, 12);
MSOP_ASSERT_AT(msop_kernel_summary, isKernelWithDBI, 13);
MSOP_ASSERT_AT(msop_kernel_summary, hasDebugLine, 14);
MSOP_ASSERT_AT(msop_kernel_summary, kernelName, 15);

MSOP_ASSERT_SIZE(msop_host_mem_record, 48);
MSOP_ASSERT_AT(msop_host_mem_record, infoSrc, 4);
MSOP_ASSERT_AT(msop_host_mem_record, infoDesc, 5);
MSOP_ASSERT_AT(msop_host_mem_record, srcAddr, 8);
MSOP_ASSERT_AT(msop_host_mem_record, dstAddr, 16);
MSOP_ASSERT_AT(msop_host_mem_record, memSize, 24);
MSOP_ASSERT_AT(msop_host_mem_record, paramsNo, 32);
MSOP_ASSERT_AT(msop_host_mem_record, rootAddr, 40);

MSOP_ASSERT_AT(msop_mem_op_record, type, 8);
MSOP_ASSERT_AT(msop_mem_op_record, coreId, 12);
MSOP_ASSERT_AT(msop_mem_op_record, moduleId, 16);
MSOP_ASSERT_AT(msop_mem_op_record, srcAddr, 24);
MSOP_ASSERT_AT(msop_mem_op_record, dstAddr, 32);
MSOP_ASSERT_AT(msop_mem_op_record, srcSpace, 40);
MSOP_ASSERT_AT(msop_mem_op_record, dstSpace, 44);
MSOP_ASSERT_AT(msop_mem_op_record, memSize, 48);
MSOP_ASSERT_AT(msop_mem_op_record, lineNo, 56);
MSOP_ASSERT_AT(msop_mem_op_record, fileName, 60);
MSOP_ASSERT_AT(msop_mem_op_record, blockType, 124);
MSOP_ASSERT_AT(msop_mem_op_record, pc, 128);
MSOP_ASSERT_AT(msop_mem_op_record, infoSrc, 136);
MSOP_ASSERT_AT(msop_mem_op_record, infoDesc, 137);
MSOP_ASSERT_AT(msop_mem_op_record, side, 138);
MSOP_ASSERT_AT(msop_mem_op_record, paramsNo, 144);
MSOP_ASSERT_AT(msop_mem_op_record, rootAddr, 152);
#if !MSOP_WIRE_SINCE_26_1_0
MSOP_ASSERT_SIZE(msop_mem_op_record, 168);
MSOP_ASSERT_AT(msop_mem_op_record, ignoreIllegalCheck, 160);
#else
MSOP_ASSERT_SIZE(msop_mem_op_record, 208);
MSOP_ASSERT_AT(msop_mem_op_record, mainScalarPc, 160);
MSOP_ASSERT_AT(msop_mem_op_record, ignoreIllegalCheck, 168);
MSOP_ASSERT_AT(msop_mem_op_record, isSimt, 169);
MSOP_ASSERT_AT(msop_mem_op_record, gmAddrOutOfBoundsRecord, 176);
MSOP_ASSERT_SIZE(msop_gm_addr_out_of_bound_record, 32);
MSOP_ASSERT_AT(msop_gm_addr_out_of_bound_record, userSize, 8);
MSOP_ASSERT_AT(msop_gm_addr_out_of_bound_record, outAddr, 16);
MSOP_ASSERT_AT(msop_gm_addr_out_of_bound_record, outSize, 24);
MSOP_ASSERT_SIZE(msop_mem_region_permission, 24);
MSOP_ASSERT_AT(msop_mem_region_permission, deviceId, 16);
MSOP_ASSERT_AT(msop_mem_region_permission, flags, 20);
#endif

MSOP_ASSERT_SIZE(msop_location, 32);
MSOP_ASSERT_AT(msop_location, lineNo, 8);
MSOP_ASSERT_AT(msop_location, pc, 16);
MSOP_ASSERT_AT(msop_location, blockId, 24);

MSOP_ASSERT_SIZE(msop_kernel_record, 288);
MSOP_ASSERT_AT(msop_kernel_record, blockType, 4);
MSOP_ASSERT_AT(msop_kernel_record, serialNo, 8);
MSOP_ASSERT_AT(msop_kernel_record, payload, 16);

MSOP_ASSERT_SIZE(msop_ipc_set_info, 80);
MSOP_ASSERT_SIZE(msop_ipc_destroy_info, 64);
MSOP_ASSERT_SIZE(msop_ipc_map_info, 72);
MSOP_ASSERT_SIZE(msop_ipc_unmap_info, 8);
MSOP_ASSERT_SIZE(msop_ipc_mem_record, 88);
MSOP_ASSERT_AT(msop_ipc_mem_record, info, 8);

MSOP_ASSERT_SIZE(msop_sanitizer_record, 296);
MSOP_ASSERT_AT(msop_sanitizer_record, payload, 8);

MSOP_ASSERT_SIZE(msop_ipc_response, 8);
MSOP_ASSERT_SIZE(msop_kernel_record_response, 8);

MSOP_ASSERT_SIZE(msop_registers, 512);
MSOP_ASSERT_AT(msop_registers, vectorMask0, 24);
MSOP_ASSERT_AT(msop_registers, cmpMaskAddr, 48);
MSOP_ASSERT_AT(msop_registers, va, 64);
MSOP_ASSERT_AT(msop_registers, spr, 192);
MSOP_ASSERT_AT(msop_registers, ctrl, 408);
MSOP_ASSERT_AT(msop_registers, lreluAlpha, 448);
MSOP_ASSERT_AT(msop_registers, rsv, 472);
MSOP_ASSERT_SIZE(msop_kernel_info, 32);
MSOP_ASSERT_AT(msop_kernel_info, kernelParamNum, 16);
MSOP_ASSERT_AT(msop_kernel_info, kernelType, 20);
MSOP_ASSERT_AT(msop_kernel_info, l2CacheOffset, 24);
#if !MSOP_WIRE_SINCE_26_1_0
MSOP_ASSERT_SIZE(msop_check_parms_info, 12);
MSOP_ASSERT_AT(msop_check_parms_info, checkBlockId, 4);
MSOP_ASSERT_AT(msop_check_parms_info, defaultcheck, 6);
MSOP_ASSERT_AT(msop_check_parms_info, registerCheck, 10);
MSOP_ASSERT_SIZE(msop_simt_info, 40);
MSOP_ASSERT_SIZE(msop_record_global_head, 38528);
MSOP_ASSERT_AT(msop_record_global_head, checkParms, 8);
MSOP_ASSERT_AT(msop_record_global_head, kernelInfo, 24);
MSOP_ASSERT_AT(msop_record_global_head, simtInfo, 56);
MSOP_ASSERT_AT(msop_record_global_head, supportSimt, 96);
MSOP_ASSERT_AT(msop_record_global_head, registers, 104);

MSOP_ASSERT_SIZE(msop_block_info, 24);
MSOP_ASSERT_AT(msop_block_info, blockId, 8);
MSOP_ASSERT_AT(msop_block_info, blockType, 16);
MSOP_ASSERT_AT(msop_block_info, vecSubBlockDim, 17);
MSOP_ASSERT_SIZE(msop_record_block_head, 128);
MSOP_ASSERT_AT(msop_record_block_head, recordWriteCount, 8);
MSOP_ASSERT_AT(msop_record_block_head, offset, 16);
MSOP_ASSERT_AT(msop_record_block_head, writeOffset, 24);
MSOP_ASSERT_AT(msop_record_block_head, blockInfo, 32);
MSOP_ASSERT_AT(msop_record_block_head, hostMemoryNum, 56);
MSOP_ASSERT_AT(msop_record_block_head, hostMemoryInfoPtr, 64);
MSOP_ASSERT_AT(msop_record_block_head, mstxFuseScopeDepth, 72);
MSOP_ASSERT_AT(msop_record_block_head, extraWriteSuccess, 76);
MSOP_ASSERT_AT(msop_record_block_head, paraBase, 80);
#else
MSOP_ASSERT_SIZE(msop_protocol_offset_info, 56);
MSOP_ASSERT_AT(msop_protocol_offset_info, shadowMemoryInfo, 16);
MSOP_ASSERT_AT(msop_protocol_offset_info, simtEntryInfo, 32);
MSOP_ASSERT_AT(msop_protocol_offset_info, blockHeadSize, 48);
MSOP_ASSERT_SIZE(msop_simt_info, 4);
MSOP_ASSERT_SIZE(msop_record_global_head, 55424);
MSOP_ASSERT_AT(msop_record_global_head, checkParms, 8);
MSOP_ASSERT_AT(msop_check_parms_info, checkBlockId, 4);
MSOP_ASSERT_AT(msop_check_parms_info, defaultcheck, 6);
MSOP_ASSERT_AT(msop_check_parms_info, memcheck, 7);
#if MSOP_WIRE == MSOP_WIRE_26_1_0
MSOP_ASSERT_SIZE(msop_check_parms_info, 16);
MSOP_ASSERT_AT(msop_check_parms_info, racecheck, 8);
MSOP_ASSERT_AT(msop_check_parms_info, registerCheck, 11);
MSOP_ASSERT_AT(msop_check_parms_info, gmBufferGuardSize, 12);
MSOP_ASSERT_AT(msop_record_global_head, kernelInfo, 24);
MSOP_ASSERT_AT(msop_record_global_head, offsetInfo, 56);
MSOP_ASSERT_AT(msop_record_global_head, simtInfo, 112);
MSOP_ASSERT_AT(msop_record_global_head, supportSimt, 116);
MSOP_ASSERT_AT(msop_record_global_head, registers, 120);
#else
MSOP_ASSERT_SIZE(msop_check_parms_info, 20);
MSOP_ASSERT_AT(msop_check_parms_info, outOfBoundCheck, 8);
MSOP_ASSERT_AT(msop_check_parms_info, racecheck, 9);
MSOP_ASSERT_AT(msop_check_parms_info, registerCheck, 12);
MSOP_ASSERT_AT(msop_check_parms_info, dcciCheck, 13);
MSOP_ASSERT_AT(msop_check_parms_info, gmBufferGuardSize, 16);
MSOP_ASSERT_AT(msop_record_global_head, kernelInfo, 32);
MSOP_ASSERT_AT(msop_record_global_head, offsetInfo, 64);
MSOP_ASSERT_AT(msop_record_global_head, simtInfo, 120);
MSOP_ASSERT_AT(msop_record_global_head, supportSimt, 124);
MSOP_ASSERT_AT(msop_record_global_head, registers, 128);
#endif

MSOP_ASSERT_SIZE(msop_block_info, 64);
MSOP_ASSERT_AT(msop_block_info, simtSyncThreadCount, 16);
MSOP_ASSERT_AT(msop_block_info, simtEntryUseSize, 40);
MSOP_ASSERT_AT(msop_block_info, simtEndCount, 48);
MSOP_ASSERT_AT(msop_block_info, simtCallCount, 52);
MSOP_ASSERT_AT(msop_block_info, blockId, 56);
MSOP_ASSERT_AT(msop_block_info, blockType, 58);
MSOP_ASSERT_AT(msop_block_info, vecSubBlockDim, 59);
MSOP_ASSERT_SIZE(msop_record_block_head, 192);
MSOP_ASSERT_AT(msop_record_block_head, recordWriteCount, 8);
MSOP_ASSERT_AT(msop_record_block_head, offset, 16);
MSOP_ASSERT_AT(msop_record_block_head, writeOffset, 24);
MSOP_ASSERT_AT(msop_record_block_head, blockInfo, 32);
MSOP_ASSERT_AT(msop_record_block_head, hostMemoryNum, 96);
MSOP_ASSERT_AT(msop_record_block_head, hostMemoryInfoPtr, 104);
MSOP_ASSERT_AT(msop_record_block_head, mstxFuseScopeDepth, 112);
MSOP_ASSERT_AT(msop_record_block_head, extraWriteSuccess, 116);
MSOP_ASSERT_AT(msop_record_block_head, paraBase, 120);
#endif

MSOP_ASSERT_SIZE(msop_load_store_record, 56);
MSOP_ASSERT_AT(msop_load_store_record, location, 16);
MSOP_ASSERT_AT(msop_load_store_record, space, 48);
MSOP_ASSERT_AT(msop_load_store_record, dataType, 52);
MSOP_ASSERT_AT(msop_load_store_record, alignSize, 53);

MSOP_ASSERT_SIZE(msop_dma_mov_record, 64);
MSOP_ASSERT_AT(msop_dma_mov_record, location, 16);
MSOP_ASSERT_AT(msop_dma_mov_record, nBurst, 48);
MSOP_ASSERT_AT(msop_dma_mov_record, lenBurst, 50);
MSOP_ASSERT_AT(msop_dma_mov_record, srcStride, 52);
MSOP_ASSERT_AT(msop_dma_mov_record, dstStride, 54);
MSOP_ASSERT_AT(msop_dma_mov_record, dstMemType, 56);
MSOP_ASSERT_AT(msop_dma_mov_record, srcMemType, 57);
MSOP_ASSERT_AT(msop_dma_mov_record, padMode, 58);
MSOP_ASSERT_AT(msop_dma_mov_record, byteMode, 59);

MSOP_ASSERT_SIZE(msop_mov_align_record, 72);
MSOP_ASSERT_AT(msop_mov_align_record, srcGap, 48);
MSOP_ASSERT_AT(msop_mov_align_record, dstGap, 52);
MSOP_ASSERT_AT(msop_mov_align_record, lenBurst, 56);
MSOP_ASSERT_AT(msop_mov_align_record, nBurst, 60);
MSOP_ASSERT_AT(msop_mov_align_record, dstMemType, 62);
MSOP_ASSERT_AT(msop_mov_align_record, srcMemType, 63);
MSOP_ASSERT_AT(msop_mov_align_record, dataType, 64);
MSOP_ASSERT_AT(msop_mov_align_record, leftPaddingNum, 65);
MSOP_ASSERT_AT(msop_mov_align_record, rightPaddingNum, 66);

MSOP_ASSERT_SIZE(msop_mov_align_record_v2, 120);
MSOP_ASSERT_AT(msop_mov_align_record_v2, loop1DstStride, 48);
MSOP_ASSERT_AT(msop_mov_align_record_v2, srcStride, 72);
MSOP_ASSERT_AT(msop_mov_align_record_v2, loop2SrcStride, 88);
MSOP_ASSERT_AT(msop_mov_align_record_v2, nBurst, 96);
MSOP_ASSERT_AT(msop_mov_align_record_v2, lenBurst, 100);
MSOP_ASSERT_AT(msop_mov_align_record_v2, loop1Size, 104);
MSOP_ASSERT_AT(msop_mov_align_record_v2, loop2Size, 108);
MSOP_ASSERT_AT(msop_mov_align_record_v2, dstMemType, 112);
MSOP_ASSERT_AT(msop_mov_align_record_v2, rightPaddingNum, 116);

MSOP_ASSERT_SIZE(msop_binary_op_record, 104);
MSOP_ASSERT_AT(msop_binary_op_record, src0, 8);
MSOP_ASSERT_AT(msop_binary_op_record, src1, 16);
MSOP_ASSERT_AT(msop_binary_op_record, location, 24);
MSOP_ASSERT_AT(msop_binary_op_record, vectorMask, 56);
MSOP_ASSERT_AT(msop_binary_op_record, dstBlockStride, 72);
MSOP_ASSERT_AT(msop_binary_op_record, dstRepeatStride, 78);
MSOP_ASSERT_AT(msop_binary_op_record, dstBlockSize, 84);
MSOP_ASSERT_AT(msop_binary_op_record, repeat, 90);
MSOP_ASSERT_AT(msop_binary_op_record, dstBlockNum, 91);
MSOP_ASSERT_AT(msop_binary_op_record, dstDataBits, 94);
MSOP_ASSERT_AT(msop_binary_op_record, maskMode, 97);
#if MSOP_WIRE == MSOP_WIRE_MASTER
MSOP_ASSERT_AT(msop_binary_op_record, instrName, 98);
#endif

MSOP_ASSERT_SIZE(msop_sync_record, 56);
MSOP_ASSERT_AT(msop_sync_record, src, 32);
MSOP_ASSERT_AT(msop_sync_record, dst, 36);
MSOP_ASSERT_AT(msop_sync_record, eventID, 40);
MSOP_ASSERT_AT(msop_sync_record, isGenerated, 48);

MSOP_ASSERT_SIZE(msop_pipe_barrier_record, 40);
MSOP_ASSERT_AT(msop_pipe_barrier_record, pipe, 32);

#undef MSOP_ASSERT_SIZE
#undef MSOP_ASSERT_AT
#undef MSOP_STATIC_ASSERT

#ifdef __cplusplus
}
#endif

#endif /* SANITIZERD_MSSANITIZER_WIRE_H */
