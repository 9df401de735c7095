/*
 * msop_add_client: the demo add kernel (examples/add_custom.py) sent the way CANN's msSanitizer hook and injection
 * libraries send a launch, to the abstract Unix socket named in MSOP_SOCKET_PATH (or, April's wire only,
 * MSSANITIZER_PID).
 *
 *     cc -std=c11 -O1 -o msop_add_client msop_add_client.c                                 (April's wire)
 *     cc -std=c11 -O1 -DMSOP_WIRE=MSOP_WIRE_26_1_0 -o msop_add_client msop_add_client.c    (26.1.0; or _MASTER)
 *     msop_add_client add_custom_kernel.elf
 *
 * Built for one wire (mssanitizer_wire.h's MSOP_WIRE), it speaks only that one, as a release's hooks do: its
 * Config size, its SANITIZER_RECORD number and MemOpRecord, its heads (from 26.1.0 with
 * ProtocolOffsetInfo.blockHeadSize set), its socket variable.
 *
 * The argument is the kernel ELF built from add_custom_kernel.cpp: it is sent as the KERNEL_BINARY, and the pc of
 * each record is the address of one of its msop_pc_* symbols plus PC_START, so the server's call stacks come from
 * that ELF's DWARF. The same four planted bugs as examples/add_custom.py:
 *   1. x is allocated 224 bytes short, so block 7's last tile reads 224 bytes past it;
 *   2. block 0 copies a 13-byte tail (DataCopyPad, MOV_ALIGN) into UB at offset 6: misaligned for UB;
 *   3. y is freed twice;
 *   4. the workspace is never freed.
 *
 * The order is the injection library's for one launch (docs/mssanitizer-compat.md, reference section 1.9):
 * DEVICE_SUMMARY; host records; the Config, read at the first launch; KERNEL_SUMMARY; KERNEL_BINARY; one
 * KERNEL_RECORD per sub-block slot (3 x blockDim on 910B: vector block b in slot b + b/2, the cube slots and the
 * slots past the last block empty); a blocking read of the KERNEL_RECORD_RESPONSE; the frees; DEVICE_SUMMARY again.
 * Host operations go as SANITIZER_RECORD MEMORY_RECORDs, as the ACL hooks send them, because only those carry a
 * file and line. Their serial numbers follow the server's count (one per host record, one per kernel record, one
 * per slot's BLOCK_FINISH and one FINISH per launch), so the two numberings agree whichever the server keeps.
 *
 * The Config is polled for 10 x 100 ms, as the hooks poll for it (reference section 1.1). When it has not arrived
 * whole by then (a server of another wire writes a shorter one), the client says so on stderr and goes on with
 * msSanitizer's default options, so that the server still sees the launch and can refuse it by its heads.
 *
 * Exit status: 0 after a clean run, 1 when the server misbehaves (no whole Config, a wrong reply, the connection
 * ended), 2 on a usage or ELF error. Messages go to stderr.
 */
#define _POSIX_C_SOURCE 200809L
#include <elf.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "mssanitizer_wire.h"

/* The kernel: 8 vector blocks, 2048 fp16 elements each, in tiles of 256 (as examples/add_custom.py). */
enum { BLOCKS = 8, BLOCK_LENGTH = 2048, TILE_LENGTH = 256, TILES = BLOCK_LENGTH / TILE_LENGTH, ELEMENT = 2 };
enum { TILE_BYTES = TILE_LENGTH * ELEMENT, TOTAL_BYTES = BLOCKS * BLOCK_LENGTH * ELEMENT, SHORT_BY = 224 };
enum { SLOTS_PER_BLOCK = 3, TOTAL_SLOTS = SLOTS_PER_BLOCK * BLOCKS, PAD_BYTES = 13 };

static const uint64_t GM_X = 0x12C0C0000000ULL, GM_Y = 0x12C0C0010000ULL;
static const uint64_t GM_Z = 0x12C0C0020000ULL, GM_WORKSPACE = 0x12C0C0030000ULL;
static const uint64_t UB_X = 0x0, UB_Y = 0x200, UB_Z = 0x400, UB_PAD = 0x6;
static const uint64_t PC_START = 0x124080000000ULL; /* where the "device" loaded the kernel ELF */
static const char KERNEL_NAME[] = "add_custom_kernel";
#define FILE_ADD_CUSTOM 0x2aU /* keys of add_custom_kernel.cpp's file mapping (Location.fileNo) */
#define FILE_DATA_COPY 0x2bU

/* The phases of a tile: their pc (an ELF symbol) and the source line msSanitizer's Location carries. */
enum phase { COPY_IN, COMPUTE, COPY_OUT, PAD, PHASES };
static const char *const PHASE_SYMBOL[PHASES] = {"msop_pc_copy_in", "msop_pc_compute", "msop_pc_copy_out",
                                                 "msop_pc_pad"};
static const uint64_t PHASE_FILE[PHASES] = {FILE_DATA_COPY, FILE_ADD_CUSTOM, FILE_ADD_CUSTOM, FILE_ADD_CUSTOM};
static const uint64_t PHASE_LINE[PHASES] = {58, 30, 40, 24};
static uint64_t phase_pc[PHASES];

static int sock = -1;
static uint64_t serial; /* the server's count: host records, kernel records, BLOCK_FINISH, FINISH */

static void die(int status, const char *format, ...)
{
    va_list args;
    va_start(args, format);
    fputs("msop_add_client: ", stderr);
    vfprintf(stderr, format, args);
    fputc('\n', stderr);
    va_end(args);
    exit(status);
}

/* ---- the kernel ELF ---------------------------------------------------------------------------------------- */

static unsigned char *read_file(const char *path, size_t *size)
{
    FILE *file = fopen(path, "rb");
    if (file == NULL) die(2, "cannot open %s: %s", path, strerror(errno));
    if (fseek(file, 0, SEEK_END) != 0) die(2, "cannot seek %s", path);
    long length = ftell(file);
    if (length <= 0 || length > (1L << 30)) die(2, "%s: unreasonable size %ld", path, length);
    rewind(file);
    unsigned char *data = malloc((size_t)length);
    if (data == NULL || fread(data, 1, (size_t)length, file) != (size_t)length) die(2, "cannot read %s", path);
    fclose(file);
    *size = (size_t)length;
    return data;
}

/* The address of each msop_pc_* symbol in the ELF's .symtab (a 64-bit little-endian ELF, as the compiler made). */
static void find_phase_pcs(const unsigned char *elf, size_t size)
{
    Elf64_Ehdr header;
    if (size < sizeof header || memcmp(elf, ELFMAG, SELFMAG) != 0 || elf[EI_CLASS] != ELFCLASS64)
        die(2, "the kernel is not a 64-bit ELF");
    memcpy(&header, elf, sizeof header);
    if (header.e_shentsize != sizeof(Elf64_Shdr) || header.e_shoff > size ||
        (size - header.e_shoff) / sizeof(Elf64_Shdr) < header.e_shnum)
        die(2, "the kernel's section headers are out of the file");
    for (unsigned i = 0; i < header.e_shnum; ++i) {
        Elf64_Shdr symtab, strtab;
        memcpy(&symtab, elf + header.e_shoff + i * sizeof symtab, sizeof symtab);
        if (symtab.sh_type != SHT_SYMTAB || symtab.sh_link >= header.e_shnum) continue;
        memcpy(&strtab, elf + header.e_shoff + symtab.sh_link * sizeof strtab, sizeof strtab);
        if (symtab.sh_offset > size || symtab.sh_size > size - symtab.sh_offset || strtab.sh_offset > size ||
            strtab.sh_size > size - strtab.sh_offset)
            die(2, "the kernel's symbol table is out of the file");
        for (uint64_t at = 0; at + sizeof(Elf64_Sym) <= symtab.sh_size; at += sizeof(Elf64_Sym)) {
            Elf64_Sym symbol;
            memcpy(&symbol, elf + symtab.sh_offset + at, sizeof symbol);
            if (symbol.st_name >= strtab.sh_size) continue;
            const char *name = (const char *)elf + strtab.sh_offset + symbol.st_name;
            size_t room = strtab.sh_size - symbol.st_name;
            for (int p = 0; p < PHASES; ++p)
                if (strnlen(name, room) < room && strcmp(name, PHASE_SYMBOL[p]) == 0) phase_pc[p] = symbol.st_value;
        }
    }
    for (int p = 0; p < PHASES; ++p)
        if (phase_pc[p] == 0) die(2, "the kernel has no symbol %s (build it from add_custom_kernel.cpp)", PHASE_SYMBOL[p]);
}

/* ---- the socket -------------------------------------------------------------------------------------------- */

static void set_receive_timeout(long seconds, long microseconds)
{
    struct timeval timeout = {seconds, microseconds};
    setsockopt(sock, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
}

static void connect_server(void)
{
    const char *name = getenv(MSOP_SOCKET_ENV);
#ifdef MSOP_PID_ENV
    if (name == NULL || name[0] == '\0') name = getenv(MSOP_PID_ENV);
    if (name == NULL || name[0] == '\0') die(2, "neither %s nor %s is set", MSOP_SOCKET_ENV, MSOP_PID_ENV);
#else
    if (name == NULL || name[0] == '\0') die(2, "%s is not set", MSOP_SOCKET_ENV); /* the only one from 26.1.0 */
#endif
    struct sockaddr_un address;
    /* Abstract namespace: sun_path[0] = 0, the name, NUL padding, and the FULL length: the hooks bind and connect
       that way, and "\0name" with a short length would be another address. */
    memset(&address, 0, sizeof address);
    address.sun_family = AF_UNIX;
    if (strlen(name) > sizeof address.sun_path - 1) die(2, "socket name too long: %s", name);
    memcpy(address.sun_path + 1, name, strlen(name));
    for (int attempt = 0; attempt < 50; ++attempt) { /* the hooks retry 50 x 100 ms */
        sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (sock < 0) die(1, "socket: %s", strerror(errno));
        if (connect(sock, (struct sockaddr *)&address, sizeof address) == 0) {
            set_receive_timeout(30, 0); /* a reply may wait for a whole kernel's check */
            return;
        }
        close(sock);
        struct timespec pause = {0, 100 * 1000 * 1000};
        nanosleep(&pause, NULL);
    }
    die(1, "cannot connect to %s", name);
}

static void send_all(const void *data, size_t size)
{
    const unsigned char *at = data;
    while (size > 0) {
        ssize_t sent = send(sock, at, size, MSG_NOSIGNAL);
        if (sent < 0 && errno == EINTR) continue;
        if (sent <= 0) die(1, "send: %s", sent < 0 ? strerror(errno) : "closed");
        at += sent;
        size -= (size_t)sent;
    }
}

static void receive_all(void *data, size_t size, const char *what)
{
    unsigned char *at = data;
    while (size > 0) {
        ssize_t got = recv(sock, at, size, 0);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) die(1, "no %s from the server: %s", what, strerror(errno));
        if (got == 0) die(1, "the server closed the connection before the %s", what);
        at += got;
        size -= (size_t)got;
    }
}

/* The Config, polled for as the hooks poll: reads of up to 100 ms, 10 of them. False (said on stderr) when it has not
   arrived whole; a connection the server ended is fatal, as for any other read. */
static bool receive_config(struct msop_config *config)
{
    unsigned char *at = (unsigned char *)config;
    size_t have = 0;
    set_receive_timeout(0, 100 * 1000);
    for (int poll = 0; poll < 10 && have < sizeof *config; ++poll) {
        ssize_t got = recv(sock, at + have, sizeof *config - have, 0);
        if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) continue;
        if (got < 0) die(1, "no Config from the server: %s", strerror(errno));
        if (got == 0) die(1, "the server closed the connection before the Config (%zu of %zu bytes)", have,
                          sizeof *config);
        have += (size_t)got;
    }
    set_receive_timeout(30, 0);
    if (have == sizeof *config) return true;
    fprintf(stderr, "msop_add_client: no whole Config from the server within 1 s (%zu of the %zu bytes of %s's); "
            "going on with msSanitizer's defaults\n", have, sizeof *config, MSOP_WIRE_LAYOUT);
    return false;
}

/* msSanitizer's defaults for `-t memcheck`: what the launch is sent with when no Config came. */
static void default_config(struct msop_config *config)
{
    memset(config, 0, sizeof *config);
    config->defaultCheck = config->memCheck = config->registerCheck = true;
    config->checkBlockId = -1;
    config->cacheSize = 100;
#if MSOP_WIRE_SINCE_26_1_0
    config->gmBufferGuardSize = 32;
#endif
}

static void send_packet(uint32_t type, const void *payload, size_t size)
{
    send_all(&type, sizeof type);
    send_all(payload, size);
}

static void send_variable(uint32_t type, const void *payload, uint64_t size)
{
    send_all(&type, sizeof type);
    send_all(&size, sizeof size);
    send_all(payload, (size_t)size);
}

/* ---- host records ------------------------------------------------------------------------------------------ */

static void host_record(uint32_t op, uint64_t address, uint64_t size, int line)
{
    struct msop_sanitizer_record record;
    memset(&record, 0, sizeof record);
    record.version = MSOP_VERSION_MEMORY_RECORD;
    struct msop_mem_op_record *memory = &record.payload.memoryRecord;
    memory->serialNo = serial++;
    memory->type = op;
    memory->coreId = -1;
    memory->moduleId = -1;
    memory->srcAddr = op == MSOP_MEM_FREE || op == MSOP_MEM_MALLOC ? 0 : address;
    memory->dstAddr = address;
    memory->srcSpace = MSOP_AS_GM;
    memory->dstSpace = MSOP_AS_GM;
    memory->memSize = size;
    memory->lineNo = line;
    snprintf(memory->fileName, sizeof memory->fileName, "%s", "main.cpp");
    memory->infoSrc = MSOP_SRC_ACL;
    memory->infoDesc = MSOP_DESC_DEFAULT;
    memory->side = MSOP_SIDE_HOST;
    send_packet(MSOP_PACKET_SANITIZER_RECORD, &record, sizeof record);
}

/* ---- the record buffer of one slot ------------------------------------------------------------------------- */

struct buffer {
    unsigned char *data;
    size_t size, capacity;
    uint64_t records;
};

static void append(struct buffer *buffer, const void *data, size_t size)
{
    if (buffer->size + size > buffer->capacity) {
        buffer->capacity = (buffer->size + size) * 2;
        buffer->data = realloc(buffer->data, buffer->capacity);
        if (buffer->data == NULL) die(1, "out of memory");
    }
    memcpy(buffer->data + buffer->size, data, size);
    buffer->size += size;
}

/* [u32 RecordType][payload] with no padding between records: the payload lands unaligned, hence memcpy. */
static void record(struct buffer *buffer, uint32_t type, const void *payload, size_t size)
{
    append(buffer, &type, sizeof type);
    append(buffer, payload, size);
    ++buffer->records;
}

static struct msop_location location(enum phase phase, int block)
{
    struct msop_location where;
    memset(&where, 0, sizeof where);
    where.fileNo = PHASE_FILE[phase];
    where.lineNo = PHASE_LINE[phase];
    where.pc = PC_START + phase_pc[phase];
    where.blockId = (uint16_t)block;
    return where;
}

static void dma_mov(struct buffer *buffer, int block, uint64_t dst, uint8_t dst_mem, uint64_t src, uint8_t src_mem,
                    enum phase phase)
{
    struct msop_dma_mov_record mov;
    memset(&mov, 0, sizeof mov);
    mov.dst = dst;
    mov.src = src;
    mov.location = location(phase, block);
    mov.nBurst = 1;
    mov.lenBurst = TILE_BYTES / 32; /* in 32-byte blocks */
    mov.dstMemType = dst_mem;
    mov.srcMemType = src_mem;
    record(buffer, MSOP_RECORD_DMA_MOV, &mov, sizeof mov);
}

static void sync_record(struct buffer *buffer, uint32_t type, int block, uint32_t src, uint32_t dst, enum phase phase)
{
    struct msop_sync_record flag;
    memset(&flag, 0, sizeof flag);
    flag.location = location(phase, block);
    flag.src = src;
    flag.dst = dst;
    flag.eventID = 0;
    record(buffer, type, &flag, sizeof flag);
}

static void add(struct buffer *buffer, int block)
{
    struct msop_binary_op_record op;
    memset(&op, 0, sizeof op);
    op.dst = UB_Z;
    op.src0 = UB_X;
    op.src1 = UB_Y;
    op.location = location(COMPUTE, block);
    op.vectorMask.mask0 = ~0ULL; /* every fp16 lane of a 256-byte repeat */
    op.vectorMask.mask1 = ~0ULL;
    op.dstBlockStride = op.src0BlockStride = op.src1BlockStride = 1;
    op.dstRepeatStride = op.src0RepeatStride = op.src1RepeatStride = 8;
    op.dstBlockSize = op.src0BlockSize = op.src1BlockSize = 32;
    op.repeat = TILE_BYTES / 256;
    op.dstBlockNum = op.src0BlockNum = op.src1BlockNum = 8;
    op.dstDataBits = op.src0DataBits = op.src1DataBits = 16;
    op.maskMode = MSOP_MASK_NORM;
    record(buffer, MSOP_RECORD_BINARY_OP, &op, sizeof op);
}

/* DataCopyPad of the last 13 bytes of block 0's x into UB at offset 6 (misaligned: UB wants 32 bytes). */
static void pad_tail(struct buffer *buffer, int block)
{
    struct msop_mov_align_record mov;
    memset(&mov, 0, sizeof mov);
    mov.dst = UB_PAD;
    mov.src = GM_X + (uint64_t)BLOCK_LENGTH * ELEMENT - PAD_BYTES;
    mov.location = location(PAD, block);
    mov.lenBurst = PAD_BYTES;
    mov.nBurst = 1;
    mov.dstMemType = MSOP_MEM_UB;
    mov.srcMemType = MSOP_MEM_GM;
    mov.dataType = MSOP_DATA_B8;
    record(buffer, MSOP_RECORD_MOV_ALIGN, &mov, sizeof mov);
}

static void tile(struct buffer *buffer, int block, int index)
{
    uint64_t offset = ((uint64_t)block * BLOCK_LENGTH + (uint64_t)index * TILE_LENGTH) * ELEMENT;
    dma_mov(buffer, block, UB_X, MSOP_MEM_UB, GM_X + offset, MSOP_MEM_GM, COPY_IN);
    dma_mov(buffer, block, UB_Y, MSOP_MEM_UB, GM_Y + offset, MSOP_MEM_GM, COPY_IN);
    sync_record(buffer, MSOP_RECORD_SET_FLAG, block, MSOP_PIPE_MTE2, MSOP_PIPE_V, COPY_IN);
    sync_record(buffer, MSOP_RECORD_WAIT_FLAG, block, MSOP_PIPE_MTE2, MSOP_PIPE_V, COMPUTE);
    add(buffer, block);
    sync_record(buffer, MSOP_RECORD_SET_FLAG, block, MSOP_PIPE_V, MSOP_PIPE_MTE3, COMPUTE);
    sync_record(buffer, MSOP_RECORD_WAIT_FLAG, block, MSOP_PIPE_V, MSOP_PIPE_MTE3, COPY_OUT);
    dma_mov(buffer, block, GM_Z + offset, MSOP_MEM_GM, UB_Z, MSOP_MEM_UB, COPY_OUT);
    sync_record(buffer, MSOP_RECORD_SET_FLAG, block, MSOP_PIPE_MTE3, MSOP_PIPE_MTE2, COPY_OUT);
    sync_record(buffer, MSOP_RECORD_WAIT_FLAG, block, MSOP_PIPE_MTE3, MSOP_PIPE_MTE2, COPY_IN);
    if (block == 0 && index == TILES - 1) pad_tail(buffer, block);
}

static void send_slot(const struct msop_config *config, int slot)
{
    static struct msop_record_global_head head; /* 38 528 bytes (55 424 from 26.1.0): not on the stack */
    struct msop_record_block_head block_head;
    struct buffer records = {NULL, 0, 0, 0};
    int group = slot / SLOTS_PER_BLOCK, position = slot % SLOTS_PER_BLOCK;
    int cube = position == SLOTS_PER_BLOCK - 1;
    int block = cube ? group : 2 * group + position; /* vector block b sits in slot b + b/2 */
    if (!cube && block < BLOCKS)
        for (int index = 0; index < TILES; ++index) tile(&records, block, index);

    memset(&head, 0, sizeof head);
    head.securityVal = MSOP_SECURITY_VALUE;
    head.checkParms.cacheSize = config->cacheSize;
    head.checkParms.checkBlockId = config->checkBlockId;
    head.checkParms.defaultcheck = config->defaultCheck;
    head.checkParms.racecheck = config->raceCheck;
    head.checkParms.initcheck = config->initCheck;
    head.checkParms.synccheck = config->syncCheck;
    head.checkParms.registerCheck = config->registerCheck;
#if MSOP_WIRE_SINCE_26_1_0
    head.checkParms.memcheck = config->memCheck;
    head.checkParms.gmBufferGuardSize = config->gmBufferGuardSize;
    /* The reader checks this against its own block head; the SIMT regions stay {0, 0}: this kernel has none. */
    head.offsetInfo.blockHeadSize = (uint32_t)sizeof block_head;
#endif
#if MSOP_WIRE == MSOP_WIRE_MASTER
    head.checkParms.outOfBoundCheck = config->outOfBoundCheck;
    head.checkParms.dcciCheck = config->checkDcci;
#endif
    head.kernelInfo.totalBlockDim = TOTAL_SLOTS;
    head.kernelInfo.totalCacheSize = (uint64_t)config->cacheSize * TOTAL_SLOTS << 20;
    head.kernelInfo.kernelType = MSOP_KERNEL_AIVEC;
    for (int core = 0; core < MSOP_CORE_SLOTS; ++core) { /* the hooks' initial register shadow */
        head.registers[core].vectorMask0 = ~0ULL;
        head.registers[core].vectorMask1 = ~0ULL;
        head.registers[core].cmpMaskAddr = ~0ULL;
        head.registers[core].ctrl = 0x8;
    }

    memset(&block_head, 0, sizeof block_head);
    block_head.recordCount = block_head.recordWriteCount = records.records;
    block_head.offset = block_head.writeOffset = records.size;
    block_head.blockInfo.blockId = (uint16_t)block;
    block_head.blockInfo.blockType = cube ? MSOP_BLOCK_AICUBE : MSOP_BLOCK_AIVEC;
    block_head.blockInfo.vecSubBlockDim = 2;

    uint32_t type = MSOP_PACKET_KERNEL_RECORD;
    uint64_t length = sizeof head + sizeof block_head + records.size;
    send_all(&type, sizeof type);
    send_all(&length, sizeof length);
    send_all(&head, sizeof head);
    send_all(&block_head, sizeof block_head);
    if (records.size > 0) send_all(records.data, records.size);
    serial += records.records + 1; /* the records, then the server's BLOCK_FINISH */
    free(records.data);
}

int main(int argc, char **argv)
{
    if (argc != 2) die(2, "usage: msop_add_client KERNEL_ELF");
    size_t elf_size;
    unsigned char *elf = read_file(argv[1], &elf_size);
    find_phase_pcs(elf, elf_size);
    connect_server();

    struct msop_device_info_summary device = {MSOP_DEVICE_ASCEND_910B1, 0, BLOCKS, 0};
    send_packet(MSOP_PACKET_DEVICE_SUMMARY, &device, sizeof device); /* aclrtSetDevice */

    host_record(MSOP_MEM_MALLOC, GM_X, TOTAL_BYTES - SHORT_BY, 70); /* planted bug 1: x is 224 bytes short */
    host_record(MSOP_MEM_MALLOC, GM_Y, TOTAL_BYTES, 71);
    host_record(MSOP_MEM_MALLOC, GM_Z, TOTAL_BYTES, 72);
    host_record(MSOP_MEM_MALLOC, GM_WORKSPACE, 4096, 73); /* planted bug 4: never freed */
    host_record(MSOP_MEM_STORE, GM_X, TOTAL_BYTES - SHORT_BY, 75); /* aclrtMemcpy host -> device */
    host_record(MSOP_MEM_STORE, GM_Y, TOTAL_BYTES, 76);

    /* The first launch reads the Config the server wrote at accept. */
    struct msop_config config;
    bool config_whole = receive_config(&config);
    if (!config_whole) default_config(&config);

    struct msop_kernel_summary summary;
    memset(&summary, 0, sizeof summary);
    summary.pcStartAddr = PC_START;
    summary.blockDim = BLOCKS;
    summary.kernelType = MSOP_KERNEL_AIVEC;
    summary.hasDebugLine = true;
    snprintf(summary.kernelName, sizeof summary.kernelName, "%s", KERNEL_NAME);
    send_packet(MSOP_PACKET_KERNEL_SUMMARY, &summary, sizeof summary);
    send_variable(MSOP_PACKET_KERNEL_BINARY, elf, elf_size);

    for (int slot = 0; slot < TOTAL_SLOTS; ++slot) send_slot(&config, slot);
    ++serial; /* the server's FINISH */

    uint32_t reply[3];
    receive_all(reply, sizeof reply, "KERNEL_RECORD_RESPONSE");
    if (reply[0] != MSOP_PACKET_KERNEL_RECORD_RESPONSE || reply[1] != TOTAL_SLOTS || reply[2] != MSOP_RESPONSE_SUCCESS)
        die(1, "unexpected reply [%u %u %u], wanted [%u %u %u]", reply[0], reply[1], reply[2],
            MSOP_PACKET_KERNEL_RECORD_RESPONSE, TOTAL_SLOTS, MSOP_RESPONSE_SUCCESS);
    fprintf(stderr, "%s: %d slots sent and checked\n", KERNEL_NAME, TOTAL_SLOTS);

    host_record(MSOP_MEM_LOAD, GM_Z, TOTAL_BYTES, 80); /* aclrtMemcpy device -> host of the result */
    host_record(MSOP_MEM_FREE, GM_X, 0, 84);
    host_record(MSOP_MEM_FREE, GM_Y, 0, 85);
    host_record(MSOP_MEM_FREE, GM_Z, 0, 86);
    host_record(MSOP_MEM_FREE, GM_Y, 0, 87); /* planted bug 3: y freed twice */
    send_packet(MSOP_PACKET_DEVICE_SUMMARY, &device, sizeof device); /* aclrtResetDevice */

    close(sock);
    free(elf);
    return config_whole ? 0 : 1;
}
