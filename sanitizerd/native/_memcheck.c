/* memcheck's hot loops (issue 29), each the twin of a numpy function that stays the reference path:
 *
 *   extents(records)                                 sanitizerd_protocol.patterns.extents
 *   scan(records, ext, live, limits, align, starts, ends, all_gm)
 *                                                    memcheck's bounds and alignment pass over the batch
 *   list_touching(records, index, ext, starts, ends) _runs.listed_touching (with _patterns.ranges/expand)
 *   merge_by_block(keys, lo, hi)                     _stomping._merge_by_block
 *   merge_ranges(starts, ends)                       _intervals.merge_ranges (uint64 inputs)
 *   keyed_claims(keys, lo, hi, chosen, held_lo, held_hi)
 *                                                    _stomping._keyed_claims_numpy
 *   covered_by(starts, ends, cumulative, lo, hi)     _intervals._covered_by_numpy
 *   page_note(owners, lo, hi, pages, table_owners, max_pages)
 *                                                    _page_owners.PageOwners.note
 *
 * Every buffer is checked here (lengths, whole items) and in the Python wrappers (dtype, C-contiguity); every index
 * read from the caller is checked against its table; additions that a hostile 64-bit value can overflow saturate
 * at 2**64 - 1 exactly where numpy's code does, and products wrap where numpy's uint64 products wrap. Outputs are
 * bytearrays (the wrappers view them with np.frombuffer), sized before the GIL is released and shrunk after. The
 * loops run without the GIL: detector threads check other sessions meanwhile.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define RECORD_SIZE 56
#define U64MAX UINT64_MAX
#define ADDRESS_MASK ((UINT64_C(1) << 49) - 1)
#define SATURATE (UINT64_C(1) << 62)
#define SPACE_GM 1 /* sanitizerd_protocol.records.Space.GM */
#define SHARED_PAGE (-1)
#define NOBODY_PAGE (-2)

/* ---- little-endian field reads (the wire's order, whatever the host's) ---- */

#if defined(__BYTE_ORDER__) && defined(__ORDER_LITTLE_ENDIAN__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
/* the host's order is the wire's: one load each */
static inline uint64_t rd64(const unsigned char *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}
static inline uint32_t rd32(const unsigned char *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}
static inline uint16_t rd16(const unsigned char *p) {
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}
#else
static inline uint64_t rd64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}
static inline uint32_t rd32(const unsigned char *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static inline uint16_t rd16(const unsigned char *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
#endif

#define F_ADDRESS(r) rd64((r) + 0)
#define F_BLOCK_SIZE(r) ((uint64_t)rd32((r) + 24))
#define F_BLOCK_NUM(r) rd16((r) + 32)
#define F_BLOCK_STRIDE(r) rd16((r) + 34)
#define F_REPEAT(r) rd16((r) + 36)
#define F_REPEAT_STRIDE(r) rd16((r) + 38)
#define F_SPACE(r) ((r)[45])
#define F_ALIGN(r) rd16((r) + 50)

static inline uint64_t sat_add(uint64_t a, uint64_t b) {
    uint64_t s = a + b;
    return s < a ? U64MAX : s;
}

/* ---- buffers ---- */

typedef struct {
    Py_buffer view;
    int held;
} buf_t;

static void release(buf_t *b, int n) {
    for (int i = 0; i < n; i++)
        if (b[i].held) {
            PyBuffer_Release(&b[i].view);
            b[i].held = 0;
        }
}

/* A read-only (or writable) C-contiguous buffer of whole ``item``-byte items; its item count in *count. */
static int get_buffer(PyObject *obj, buf_t *b, Py_ssize_t item, int writable, Py_ssize_t *count, const char *name) {
    if (PyObject_GetBuffer(obj, &b->view, writable ? (PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) : PyBUF_C_CONTIGUOUS) < 0)
        return -1;
    b->held = 1;
    if (b->view.len % item) {
        PyErr_Format(PyExc_ValueError, "%s: %zd bytes are not whole %zd-byte items", name, b->view.len, item);
        return -1;
    }
    *count = b->view.len / item;
    return 0;
}

static PyObject *new_bytes(Py_ssize_t items, Py_ssize_t item) {
    if (items < 0 || items > PY_SSIZE_T_MAX / item / 2) {
        PyErr_NoMemory();
        return NULL;
    }
    return PyByteArray_FromStringAndSize(NULL, items * item);
}

/* ---- scratch memory: one block kept between calls, taken and given back under the GIL ----
 * A fresh allocation of a few hundred KiB per call costs more in page faults than the loop itself (the allocator
 * hands such blocks back to the kernel when freed). One block, at most SCRATCH_KEPT bytes, is kept for the next
 * call; a call that finds it taken (another thread's) allocates its own. 64 MiB holds list_merged's scratch at
 * LIST_AT_ONCE pieces (~88 bytes a piece): at 32 MiB a batch of scattered writes near that bound took a fresh
 * mmap, page-faulted in, every call (strided_memcheck.py --gm-writes scattered: 1.3-1.4x with the block kept). */

#define SCRATCH_KEPT ((size_t)64 << 20)
static void *kept_scratch = NULL;
static size_t kept_size = 0;

/* with the GIL held */
static void *take_scratch(size_t size, size_t *got) {
    if (size == 0) size = 1;
    if (kept_scratch && kept_size >= size) {
        void *p = kept_scratch;
        *got = kept_size;
        kept_scratch = NULL;
        kept_size = 0;
        return p;
    }
    *got = size;
    return malloc(size);
}

/* with the GIL held */
static void give_scratch(void *p, size_t size) {
    if (!p) return;
    if (size > SCRATCH_KEPT) {
        free(p);
        return;
    }
    if (kept_scratch && kept_size >= size) {
        free(p);
        return;
    }
    free(kept_scratch);
    kept_scratch = p;
    kept_size = size;
}

/* ---- a stable LSD radix sort of (key, value) pairs on (key - min), 11 bits a pass, skipped when sorted ---- */

typedef struct {
    uint64_t k, v;
} pair_t;

static void sort_pairs(pair_t *a, size_t n, pair_t *tmp) {
    if (n < 2) return;
    uint64_t lo = a[0].k, hi = a[0].k;
    int sorted = 1;
    for (size_t i = 1; i < n; i++) {
        uint64_t k = a[i].k;
        if (k < a[i - 1].k) sorted = 0;
        if (k < lo) lo = k;
        if (k > hi) hi = k;
    }
    if (sorted) return;
    if (n < 32) { /* insertion sort: stable */
        for (size_t i = 1; i < n; i++) {
            pair_t x = a[i];
            size_t j = i;
            while (j > 0 && a[j - 1].k > x.k) {
                a[j] = a[j - 1];
                j--;
            }
            a[j] = x;
        }
        return;
    }
    uint64_t span = hi - lo;
    int bits = 0;
    while (bits < 64 && (span >> bits)) bits++;
    enum { DIGIT = 8, BUCKETS = 1 << DIGIT };
    size_t count[BUCKETS];
    if (bits > 32 && n > 4096) {
        /* Wide keys (an owner above 49 address bits): split once on the top digit, stably, then sort each part
         * apart, on its own narrower span (a block's ranges lie near each other). */
        int shift = bits - DIGIT;
        memset(count, 0, sizeof count);
        for (size_t i = 0; i < n; i++) count[(a[i].k - lo) >> shift]++;
        size_t bounds[BUCKETS + 1], total = 0;
        for (size_t d = 0; d < BUCKETS; d++) {
            bounds[d] = total;
            total += count[d];
            count[d] = bounds[d];
        }
        bounds[BUCKETS] = total;
        for (size_t i = 0; i < n; i++) tmp[count[(a[i].k - lo) >> shift]++] = a[i];
        memcpy(a, tmp, n * sizeof(pair_t));
        for (size_t d = 0; d < BUCKETS; d++)
            if (bounds[d + 1] - bounds[d] > 1) sort_pairs(a + bounds[d], bounds[d + 1] - bounds[d], tmp + bounds[d]);
        return;
    }
    pair_t *src = a, *dst = tmp;
    /* 8-bit digits; 11-bit ones where the pairs are many enough to pay for the wider counters (one pass fewer) */
    int digit = n >= 16384 && bits > 16 ? 11 : DIGIT;
    if (digit == DIGIT) {
        /* Every digit's counts in one read of the pairs, and a digit all pairs share is no pass at all: a block's
         * pieces in four buffers far apart differ in the low bits and the buffer's, rarely in those between. */
        enum { PASSES = 8 };
        size_t counts[PASSES][BUCKETS];
        int passes = (bits + DIGIT - 1) / DIGIT;
        memset(counts, 0, (size_t)passes * sizeof counts[0]);
        for (size_t i = 0; i < n; i++) {
            uint64_t k = a[i].k - lo;
            for (int p = 0; p < passes; p++) counts[p][(k >> (p * DIGIT)) & (BUCKETS - 1)]++;
        }
        for (int p = 0; p < passes; p++) {
            size_t *c = counts[p];
            if (c[(((src[0].k - lo) >> (p * DIGIT)) & (BUCKETS - 1))] == n) continue; /* one digit for all */
            size_t total = 0;
            for (size_t d = 0; d < BUCKETS; d++) {
                size_t here = c[d];
                count[d] = total;
                total += here;
            }
            for (size_t i = 0; i < n; i++) dst[count[((src[i].k - lo) >> (p * DIGIT)) & (BUCKETS - 1)]++] = src[i];
            pair_t *t = src;
            src = dst;
            dst = t;
        }
        if (src != a) memcpy(a, src, n * sizeof(pair_t));
        return;
    }
    size_t buckets = (size_t)1 << digit, wide[1 << 11], *counter = wide;
    for (int shift = 0; shift < bits; shift += digit) {
        memset(counter, 0, buckets * sizeof(size_t));
        for (size_t i = 0; i < n; i++) counter[((src[i].k - lo) >> shift) & (buckets - 1)]++;
        if (counter[((src[0].k - lo) >> shift) & (buckets - 1)] == n) continue; /* one digit for all: no pass */
        size_t total = 0;
        for (size_t d = 0; d < buckets; d++) {
            size_t c = counter[d];
            counter[d] = total;
            total += c;
        }
        for (size_t i = 0; i < n; i++) dst[counter[((src[i].k - lo) >> shift) & (buckets - 1)]++] = src[i];
        pair_t *t = src;
        src = dst;
        dst = t;
    }
    if (src != a) memcpy(a, src, n * sizeof(pair_t));
}

static int cmp_u64(const void *x, const void *y) {
    uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
    return a < b ? -1 : a > b;
}

/* index of the last element <= x in sorted a[0..m), or -1 (numpy's searchsorted(a, x, "right") - 1) */
static inline Py_ssize_t last_at_or_below(const uint64_t *a, Py_ssize_t m, uint64_t x) {
    if (m <= 0) return -1;
    const uint64_t *p = a;
    Py_ssize_t n = m;
    while (n > 1) { /* branchless: the comparison picks the half (a conditional move), never a jump */
        Py_ssize_t half = n / 2;
        p = (p[half] <= x) ? p + half : p;
        n -= half;
    }
    return (p - a) + (*p <= x) - 1;
}

/* The ranges ``range_at`` found lately, each as [lo, lo + span): the addresses whose last range starting at or
 * before them is that range (span reaches the next range's start). A kernel streams through a few buffers at once
 * (reads of x and y, writes of z, event by event), so the last range alone missed on most records and a binary
 * search per record was most of the first look at a batch. span 0: an empty slot, which no address hits. */
#define RECENT_RANGES 4
typedef struct {
    uint64_t lo[RECENT_RANGES], span[RECENT_RANGES], end[RECENT_RANGES];
    unsigned next; /* the slot the next miss takes, round robin */
} recent_t;

/* Whether some range of sorted s[0..m) starts at or before x; the last such range's end in *end. */
static inline int range_at(recent_t *c, const uint64_t *s, const uint64_t *e, Py_ssize_t m, uint64_t x,
                           uint64_t *end) {
    /* x - lo wraps past span for x < lo (span <= 2**64 - 1 - lo): one comparison a slot */
    for (int k = 0; k < RECENT_RANGES; k++)
        if (x - c->lo[k] < c->span[k]) {
            *end = c->end[k];
            return 1;
        }
    Py_ssize_t j = last_at_or_below(s, m, x);
    if (j < 0) return 0;
    unsigned k = c->next++ % RECENT_RANGES;
    c->lo[k] = s[j];
    c->span[k] = (j + 1 < m ? s[j + 1] : U64MAX) - s[j];
    c->end[k] = e[j];
    *end = e[j];
    return 1;
}

/* IntervalSet.covered(lo, hi) > 0 for sorted, disjoint, non-empty ranges: the first range ending past lo starts
 * before hi */
static inline int meets(const uint64_t *s, const uint64_t *e, Py_ssize_t m, uint64_t lo, uint64_t hi) {
    if (hi <= lo) return 0;
    Py_ssize_t a = 0, b = m;
    while (a < b) {
        Py_ssize_t mid = a + (b - a) / 2;
        if (e[mid] <= lo)
            a = mid + 1;
        else
            b = mid;
    }
    return a < m && s[a] < hi;
}

/* ---- extents ---- */

static inline uint64_t units_of(const unsigned char *r) {
    uint64_t repeat = F_REPEAT(r), block_num = F_BLOCK_NUM(r);
    uint64_t units = ((repeat ? repeat : 1) - 1) * (uint64_t)F_REPEAT_STRIDE(r);
    units += ((block_num ? block_num : 1) - 1) * (uint64_t)F_BLOCK_STRIDE(r);
    return units + 1;
}

/* the extent of one record, given whether the batch takes numpy's float path */
static inline uint64_t extent_of(const unsigned char *r, int floats) {
    if (F_REPEAT(r) == 0 || F_BLOCK_NUM(r) == 0) return 0;
    if (floats) {
        double span = (double)units_of(r) * (double)F_BLOCK_SIZE(r);
        if (span > (double)SATURATE) span = (double)SATURATE;
        return (uint64_t)span;
    }
    return units_of(r) * F_BLOCK_SIZE(r);
}

/* whether numpy's extents takes its float path for the batch: its largest units x its largest block_size reach
 * 2**62 (units < 2**33, sizes < 2**32: no overflow) */
static inline int floats_for(uint64_t max_units, uint64_t max_size) {
    return max_size && max_units >= (SATURATE + max_size - 1) / max_size;
}

/* floats_for over the batch's records, given the OR of their units and of their sizes: the maxima are taken only
 * where those bound the product at 2**62 or more (bit lengths summing past 62) */
static int floats_possible(const unsigned char *base, Py_ssize_t n, uint64_t any_units, uint64_t any_size) {
    if (!any_size || (64 - __builtin_clzll(any_units | 1)) + (64 - __builtin_clzll(any_size)) <= 62) return 0;
    uint64_t max_units = 0, max_size = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        const unsigned char *r = base + i * RECORD_SIZE;
        uint64_t u = units_of(r), sz = F_BLOCK_SIZE(r);
        if (u > max_units) max_units = u;
        if (sz > max_size) max_size = sz;
    }
    return floats_for(max_units, max_size);
}

/* extents(records) -> bytearray of uint64: sanitizerd_protocol.patterns.extents, bit for bit (its float
 * saturation, for the whole batch once one record's units x the batch's largest block_size reaches 2**62, too) */
static PyObject *extents(PyObject *Py_UNUSED(m), PyObject *args) {
    PyObject *records_obj;
    if (!PyArg_ParseTuple(args, "O", &records_obj)) return NULL;
    buf_t b[1] = {{{0}, 0}};
    Py_ssize_t n;
    if (get_buffer(records_obj, &b[0], RECORD_SIZE, 0, &n, "records") < 0) {
        release(b, 1);
        return NULL;
    }
    PyObject *out = new_bytes(n, 8);
    if (!out) {
        release(b, 1);
        return NULL;
    }
    const unsigned char *base = b[0].view.buf;
    uint64_t *ext = (uint64_t *)PyByteArray_AS_STRING(out);
    Py_BEGIN_ALLOW_THREADS
    uint64_t max_units = 0, max_size = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        const unsigned char *r = base + i * RECORD_SIZE;
        uint64_t u = units_of(r), s = F_BLOCK_SIZE(r);
        if (u > max_units) max_units = u;
        if (s > max_size) max_size = s;
    }
    /* int(units.max()) * int(block_size.max()) >= 2**62, without overflow (units < 2**33, sizes < 2**32) */
    int floats = floats_for(max_units, max_size);
    for (Py_ssize_t i = 0; i < n; i++) ext[i] = extent_of(base + i * RECORD_SIZE, floats);
    Py_END_ALLOW_THREADS
    release(b, 1);
    return out;
}

/* ---- an access's pieces ---- */

typedef struct {
    uint64_t address, block_size, row_length, ext;
    unsigned block_num, block_stride, repeat, repeat_stride;
    int kind; /* 0 dense, 1 rows, 2 scattered */
    uint64_t pieces;
} shape_t;

static inline void shape_of(const unsigned char *r, uint64_t ext, shape_t *s) {
    s->address = F_ADDRESS(r);
    s->block_size = F_BLOCK_SIZE(r);
    s->block_num = F_BLOCK_NUM(r);
    s->block_stride = F_BLOCK_STRIDE(r);
    s->repeat = F_REPEAT(r);
    s->repeat_stride = F_REPEAT_STRIDE(r);
    s->ext = ext;
    int row_is_range = s->block_num <= 1 || s->block_stride <= 1;
    s->row_length =
        (s->block_num <= 1 || s->block_stride == 0) ? s->block_size : (uint64_t)s->block_num * s->block_size;
    int dense = row_is_range && (s->repeat <= 1 || (uint64_t)s->repeat_stride * s->block_size <= s->row_length);
    if (dense) {
        s->kind = 0;
        s->pieces = 1;
    } else if (row_is_range) {
        s->kind = 1;
        s->pieces = s->repeat;
    } else {
        s->kind = 2;
        /* expand(): dense there too when the extent is empty */
        s->pieces = ext == 0 ? 1 : (uint64_t)s->repeat * s->block_num;
    }
}

static inline uint64_t block_key_of(const unsigned char *r) {
    /* _stomping._piece_block_keys: (block_type & 3) << 16 | block_id | thread << 18 */
    return ((uint64_t)(r[48] & 3) << 16) | (uint64_t)rd16(r + 40) | ((uint64_t)rd16(r + 54) << 18);
}

/* ---- list_merged's usual case: each block's pieces in address order ----
 *
 * A kernel's block writes its slice front to back: each block key's pieces come in address order, each access
 * inside one heap range below 2**49, none in atomic mode. There list_merged's answer is each key's pieces joined as
 * they come (a piece starting at or before the key's open range's end extends it; one past it closes that range and
 * opens the next) and the few ranges that leaves put out by key: one pass, without the pieces' arrays, their
 * touching test or merge_core's sort. It holds while no piece starts before its key's open range (every closed
 * range then lies below it, a gap apart, so no later piece could join one), so that is what is checked, with the
 * rest, as the pieces come; the first that fails makes the caller take the general listing. batch() runs it on its
 * live GM writes as it meets them (the records already read). */
#define ORDER_SLOTS 256 /* the open ranges' table, by key hash; a power of two */
#define ORDER_KEYS 64   /* block keys past which the general path merges */
typedef struct {
    uint64_t key, lo, hi; /* lo == hi: nothing open yet */
    int used;
} open_range_t;

typedef struct {
    open_range_t table[ORDER_SLOTS];
    unsigned char which[ORDER_KEYS]; /* the used slots, in the order their keys came */
    unsigned keys;
    int failed;
    size_t closed, room;                  /* the ranges closed so far, and room for them */
    uint64_t *closed_lo, *closed_hi;      /* each closed range, in the order closed */
    unsigned char *closed_slot;           /* and its key's slot */
} in_order_t;

/* Closed ranges the merger has room for over ``n`` accesses (rows make several a record; past this many the general
 * path merges), and the scratch that room takes */
#define IN_ORDER_ROOM(n) ((size_t)(n) * 4 + ORDER_KEYS)
#define IN_ORDER_BYTES(n) (IN_ORDER_ROOM(n) * 17)

/* ``scratch``: IN_ORDER_BYTES(n) for n accesses */
static void in_order_start(in_order_t *m, unsigned char *scratch, size_t n) {
    size_t room = IN_ORDER_ROOM(n);
    memset(m->table, 0, sizeof m->table);
    m->keys = 0;
    m->failed = 0;
    m->closed = 0;
    m->room = room;
    m->closed_lo = (uint64_t *)scratch;
    m->closed_hi = m->closed_lo + room;
    m->closed_slot = (unsigned char *)(m->closed_hi + room);
}

static inline int in_order_close(in_order_t *m, unsigned h) {
    if (m->closed == m->room) return -1;
    m->closed_lo[m->closed] = m->table[h].lo;
    m->closed_hi[m->closed] = m->table[h].hi;
    m->closed_slot[m->closed++] = (unsigned char)h;
    return 0;
}

/* the open range of block key ``key``, NULL (and failed) past ORDER_KEYS keys */
static inline open_range_t *in_order_open(in_order_t *m, uint64_t key, unsigned *slot) {
    unsigned h = (unsigned)((key * UINT64_C(0x9E3779B97F4A7C15)) >> 56);
    while (m->table[h].used && m->table[h].key != key) h = (h + 1) & (ORDER_SLOTS - 1);
    open_range_t *o = &m->table[h];
    if (!o->used) {
        if (m->keys == ORDER_KEYS) {
            m->failed = 1;
            return NULL;
        }
        o->used = 1;
        o->key = key;
        o->lo = o->hi = 0;
        m->which[m->keys++] = (unsigned char)h;
    }
    *slot = h;
    return o;
}

/* One dense access [lo, hi) of block key ``key`` inside one heap range (the caller's test, with lo < hi): the usual
 * record, taken without its shape */
static inline void in_order_add_dense(in_order_t *m, uint64_t key, uint64_t lo, uint64_t hi) {
    unsigned h;
    open_range_t *o = hi > ADDRESS_MASK ? (m->failed = 1, NULL) : in_order_open(m, key, &h);
    if (!o) return;
    if (lo < o->lo) {
        m->failed = 1;
    } else if (o->hi > o->lo && lo <= o->hi) {
        if (hi > o->hi) o->hi = hi;
    } else if (o->hi > o->lo && in_order_close(m, h) < 0) {
        m->failed = 1;
    } else {
        o->lo = lo;
        o->hi = hi;
    }
}

/* One access's pieces, given that it lies inside one heap range (the caller's test): 0, or -1 (and failed) where
 * the batch leaves the usual case */
static inline int in_order_add(in_order_t *m, const unsigned char *r, const shape_t *s) {
    if (s->kind == 2 || s->ext == 0 || sat_add(s->address, s->ext) > ADDRESS_MASK) goto fail;
    unsigned h;
    open_range_t *o = in_order_open(m, block_key_of(r), &h);
    if (!o) return -1;
    uint64_t step = s->kind == 0 ? 0 : (uint64_t)s->repeat_stride * s->block_size;
    uint64_t length = s->kind == 0 ? s->ext : s->row_length, pieces = s->kind == 0 ? 1 : s->repeat;
    for (uint64_t p = 0; p < pieces; p++) {
        uint64_t lo = s->address + p * step, hi = lo + length; /* inside the extent, below 2**49: no wrap */
        if (lo < o->lo) goto fail; /* out of address order */
        if (o->hi > o->lo && lo <= o->hi) {
            if (hi > o->hi) o->hi = hi;
            continue;
        }
        if (o->hi > o->lo && in_order_close(m, h) < 0) goto fail;
        o->lo = lo;
        o->hi = hi;
    }
    return 0;
fail:
    m->failed = 1;
    return -1;
}

/* The ranges left open closed: every range is then closed, -1 where the batch left the usual case */
static Py_ssize_t in_order_close_all(in_order_t *m) {
    for (unsigned k = 0; k < m->keys && !m->failed; k++)
        if (m->table[m->which[k]].hi > m->table[m->which[k]].lo && in_order_close(m, m->which[k]) < 0) m->failed = 1;
    return m->failed ? -1 : (Py_ssize_t)m->closed;
}

/* The closed ranges into ko/lo_out/ho by key (keys sorted: at most ORDER_KEYS of them), each key's in the order
 * closed, which is address order */
static void in_order_put(in_order_t *m, uint64_t *ko, uint64_t *lo_out, uint64_t *ho) {
    unsigned char *which = m->which;
    for (unsigned a = 1; a < m->keys; a++)
        for (unsigned b = a; b > 0 && m->table[which[b - 1]].key > m->table[which[b]].key; b--) {
            unsigned char t = which[b];
            which[b] = which[b - 1];
            which[b - 1] = t;
        }
    size_t at[ORDER_SLOTS] = {0}, total = 0;
    for (size_t c = 0; c < m->closed; c++) at[m->closed_slot[c]]++;
    for (unsigned k = 0; k < m->keys; k++) {
        size_t here = at[which[k]];
        at[which[k]] = total;
        total += here;
    }
    for (size_t c = 0; c < m->closed; c++) {
        size_t w = at[m->closed_slot[c]]++;
        ko[w] = m->table[m->closed_slot[c]].key;
        lo_out[w] = m->closed_lo[c];
        ho[w] = m->closed_hi[c];
    }
}

/* The merged ranges as (keys, lo, hi) bytes, or None where the batch left the usual case; with the GIL */
static PyObject *in_order_result(in_order_t *m) {
    Py_ssize_t out = in_order_close_all(m);
    if (out < 0) Py_RETURN_NONE;
    PyObject *k_out = new_bytes(out, 8), *l_out = new_bytes(out, 8), *h_out = new_bytes(out, 8);
    if (!k_out || !l_out || !h_out) {
        Py_XDECREF(k_out);
        Py_XDECREF(l_out);
        Py_XDECREF(h_out);
        return NULL;
    }
    in_order_put(m, (uint64_t *)PyByteArray_AS_STRING(k_out), (uint64_t *)PyByteArray_AS_STRING(l_out),
                 (uint64_t *)PyByteArray_AS_STRING(h_out));
    return Py_BuildValue("NNN", k_out, l_out, h_out);
}

/* ---- the bounds and alignment pass ---- */

typedef struct {
    const uint64_t *limits, *align_by_space, *starts, *ends;
    Py_ssize_t m;
    recent_t recent; /* the ranges GM accesses fell in lately */
    int all_gm;      /* every record of the batch is GM; -1: not known yet (gm_over then says if it matters) */
    int gm_over;     /* a GM record passed GM's own limit while all_gm was not known */
} bounds_t;

/* one live record's bounds (bad) and alignment (misaligned, first misaligned block's address) */
static inline void check_one(const unsigned char *r, uint64_t ext, bounds_t *c, unsigned char *bad,
                             unsigned char *mis, uint64_t *first) {
    uint64_t address = F_ADDRESS(r);
    unsigned space = F_SPACE(r);
    uint64_t hi = sat_add(address, ext);
    /* on-chip spaces start at 0; GM's limit is "none" unless a chip names one, and counts only in a batch that is
     * not all GM (numpy's check skips the limits there) */
    if (hi > c->limits[space]) {
        if (space != SPACE_GM || c->all_gm == 0)
            *bad = 1;
        else if (c->all_gm < 0)
            c->gm_over = 1;
    }
    if (space == SPACE_GM) {
        uint64_t end;
        if (!range_at(&c->recent, c->starts, c->ends, c->m, address, &end) || hi > end) *bad = 1;
    }
    uint64_t align = F_ALIGN(r);
    if (align) {
        uint64_t p = 1;
        while (p < align) p <<= 1;
        align = p;
    } else {
        align = c->align_by_space[space];
    }
    if (align <= 1) return;
    uint64_t mask = align - 1, block_size = F_BLOCK_SIZE(r);
    uint64_t block_step = F_BLOCK_NUM(r) > 1 ? (uint64_t)F_BLOCK_STRIDE(r) * block_size : 0;
    uint64_t repeat_step = F_REPEAT(r) > 1 ? (uint64_t)F_REPEAT_STRIDE(r) * block_size : 0;
    if (((address | block_step | repeat_step) & mask) != 0) {
        *mis = 1;
        *first = (address & mask) ? address : (block_step & mask) ? address + block_step : address + repeat_step;
    }
}

/* scan(records, ext, live, limits, align_by_space, starts, ends) -> (bad bounds u8, misaligned u8,
 * first misaligned address u64): per record, memcheck's _check_bounds without block tensors (on-chip: the extent's
 * end past the space's limit, skipped where every record is GM; GM: not inside one legal range) and
 * _check_alignment (first_misaligned with the space's alignment or the record's own, rounded up to a power of
 * two); both only for live records. */
static PyObject *scan(PyObject *Py_UNUSED(m), PyObject *args) {
    PyObject *o[7];
    if (!PyArg_ParseTuple(args, "OOOOOOO", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &o[6])) return NULL;
    buf_t b[7] = {{{0}, 0}};
    Py_ssize_t n, n_ext, n_live, n_limits, n_align, m, m2;
    if (get_buffer(o[0], &b[0], RECORD_SIZE, 0, &n, "records") < 0 ||
        get_buffer(o[1], &b[1], 8, 0, &n_ext, "ext") < 0 || get_buffer(o[2], &b[2], 1, 0, &n_live, "live") < 0 ||
        get_buffer(o[3], &b[3], 8, 0, &n_limits, "limits") < 0 ||
        get_buffer(o[4], &b[4], 8, 0, &n_align, "align") < 0 || get_buffer(o[5], &b[5], 8, 0, &m, "starts") < 0 ||
        get_buffer(o[6], &b[6], 8, 0, &m2, "ends") < 0) {
        release(b, 7);
        return NULL;
    }
    if (n_ext != n || n_live != n || n_limits != 256 || n_align != 256 || m != m2) {
        release(b, 7);
        PyErr_SetString(PyExc_ValueError, "scan: ext and live per record, 256 limits and alignments, paired ranges");
        return NULL;
    }
    PyObject *bad = new_bytes(n, 1), *mis = new_bytes(n, 1), *first = new_bytes(n, 8);
    if (!bad || !mis || !first) {
        Py_XDECREF(bad);
        Py_XDECREF(mis);
        Py_XDECREF(first);
        release(b, 7);
        return NULL;
    }
    const unsigned char *base = b[0].view.buf, *live = b[2].view.buf;
    const uint64_t *ext = b[1].view.buf, *limits = b[3].view.buf, *align_by_space = b[4].view.buf;
    const uint64_t *starts = b[5].view.buf, *ends = b[6].view.buf;
    unsigned char *bad_out = (unsigned char *)PyByteArray_AS_STRING(bad);
    unsigned char *mis_out = (unsigned char *)PyByteArray_AS_STRING(mis);
    uint64_t *first_out = (uint64_t *)PyByteArray_AS_STRING(first);
    Py_BEGIN_ALLOW_THREADS
    int all_gm = 1;
    for (Py_ssize_t i = 0; i < n && all_gm; i++) all_gm = F_SPACE(base + i * RECORD_SIZE) == SPACE_GM;
    bounds_t c = {limits, align_by_space, starts, ends, m, {{0}, {0}, {0}, 0}, all_gm, 0};
    for (Py_ssize_t i = 0; i < n; i++) {
        const unsigned char *r = base + i * RECORD_SIZE;
        first_out[i] = F_ADDRESS(r);
        bad_out[i] = 0;
        mis_out[i] = 0;
        if (live[i]) check_one(r, ext[i], &c, bad_out + i, mis_out + i, first_out + i);
    }
    Py_END_ALLOW_THREADS
    release(b, 7);
    return Py_BuildValue("NNN", bad, mis, first);
}

#define KIND_WRITE 1        /* EventKind.WRITE: READ and WRITE are the accesses */
#define KIND_SET_ATOMIC 21  /* EventKind.SET_ATOMIC */
#define FLAG_ATOMIC_BIT 0x01 /* records.FLAG_ATOMIC */
#define FLAG_CLAIM_BIT 0x02 /* records.FLAG_CLAIM */
#define FLAG_SIMT_BIT 0x04  /* records.FLAG_SIMT_ENTRY */

/* An access's pieces as lists_few_pieces and the sessions' cuts bound them: its rows (repeat, at least one), times
 * its blocks (at least one) where a row scatters them; below 2**32 */
static inline uint64_t access_pieces(const unsigned char *r) {
    uint64_t pieces = F_REPEAT(r) ? F_REPEAT(r) : 1, blocks = F_BLOCK_NUM(r);
    return F_BLOCK_STRIDE(r) > 1 && blocks ? pieces * blocks : pieces;
}

/* batch's pass over the records: what it reads, and what it finds */
typedef struct {
    const unsigned char *base;
    Py_ssize_t n;
    uint64_t *ext;
    unsigned char *live, *kind;
    int64_t *claim_at, *bad_at, *mis_at;
    uint64_t *mis_first;
    int64_t *write_at;
    in_order_t *order;
    bounds_t c;
    size_t claims, bads, miss, writes;
    uint64_t pieces_bound; /* held at 2**62 and above once it gets there: only its place against a bound counts */
    uint64_t widest, walked; /* the GM writes' and claims' pieces, each at most widest (sessions' cuts, gm_writes) */
    uint64_t any_units, any_size; /* ORed, not maxed (no compare chained through the loop): floats_possible */
    int all_gm, any_thread, any_atomic;
    unsigned highest_kind;
} first_look_t;

/* One pass of batch over the records; ``floats``: numpy's float extents (the second pass of a hostile batch, which
 * finds again all but the fields the first copied out). Inlined with ``floats`` a constant, so that the common
 * pass carries no test of it, and its sums in locals (registers), not in *l. */
static inline __attribute__((always_inline)) void first_look(first_look_t *l, const int floats) {
    const unsigned char *base = l->base;
    uint64_t *ext = l->ext;
    unsigned char *live = l->live, *kind = l->kind;
    int64_t *claim_at = l->claim_at, *bad_at = l->bad_at, *mis_at = l->mis_at, *write_at = l->write_at;
    uint64_t *mis_first = l->mis_first;
    /* the bounds' state and the merger in locals too: behind l they could be the outputs' bytes, to the compiler */
    bounds_t c_local = l->c, *c = &c_local;
    in_order_t order_local = *l->order, *order = &order_local;
    size_t claims = 0, bads = 0, miss = 0, writes = 0;
    uint64_t pieces_bound = 0, any_units = 0, any_size = 0, walked = 0;
    const uint64_t widest = l->widest;
    int all_gm = 1, any_thread = 0, any_atomic = 0;
    unsigned highest_kind = 0;
    c->gm_over = 0;
    if (floats) order->failed = 1; /* a hostile batch: list_merged's general path */
    const Py_ssize_t n = l->n;
    for (Py_ssize_t i = 0; i < n; i++) {
        const unsigned char *r = base + i * RECORD_SIZE;
        /* the fields in locals: the outputs are bytes, which may alias anything, so reading them back would be a
         * load after every store */
        unsigned char k = r[44], sp = r[45], fl = r[49];
        if (!floats) {
            any_units |= units_of(r);
            any_size |= F_BLOCK_SIZE(r);
            all_gm &= sp == SPACE_GM;
            kind[i] = k;
            any_thread |= rd16(r + 54) != 0;
            highest_kind = k > highest_kind ? k : highest_kind;
            any_atomic |= (fl & FLAG_ATOMIC_BIT) | (k == KIND_SET_ATOMIC);
        }
        uint64_t e = extent_of(r, floats);
        ext[i] = e;
        int access = e > 0 && k <= KIND_WRITE && !(fl & FLAG_SIMT_BIT);
        int claim = access && (fl & FLAG_CLAIM_BIT);
        int is_live = access && !claim;
        live[i] = (unsigned char)is_live;
        if (claim) claim_at[claims++] = i;
        if (!is_live) {
            if (!floats && sp == SPACE_GM && (k == KIND_WRITE || (fl & FLAG_CLAIM_BIT))) {
                uint64_t pieces = access_pieces(r);
                walked += pieces < widest ? pieces : widest;
            }
            continue;
        }
        int gm_write = k == KIND_WRITE && sp == SPACE_GM;
        if (gm_write) {
            write_at[writes++] = i;
            uint64_t pieces = access_pieces(r);
            /* below 2**32 a record: the sum passes 2**63 only past 2**31 records, and stays there */
            if (pieces_bound < SATURATE) pieces_bound += pieces;
            if (!floats) walked += pieces < widest ? pieces : widest;
        }
        unsigned char bad = 0, mis = 0;
        uint64_t first = 0;
        check_one(r, e, c, &bad, &mis, &first);
        if (gm_write && !order->failed) {
            if (bad) { /* not bad: inside one heap range, the merger's own condition */
                order->failed = 1;
            } else if ((F_BLOCK_NUM(r) <= 1 || F_BLOCK_STRIDE(r) <= 1) && F_REPEAT(r) <= 1) {
                /* one piece (shape_of's dense), the extent itself */
                uint64_t a = F_ADDRESS(r);
                in_order_add_dense(order, block_key_of(r), a, sat_add(a, e));
            } else {
                shape_t s;
                shape_of(r, e, &s);
                in_order_add(order, r, &s);
            }
        }
        if (bad) bad_at[bads++] = i;
        if (mis) {
            mis_at[miss] = i;
            mis_first[miss++] = first;
        }
    }
    l->c = c_local;
    *l->order = order_local;
    l->claims = claims;
    l->bads = bads;
    l->miss = miss;
    l->writes = writes;
    l->pieces_bound = pieces_bound;
    if (!floats) {
        l->walked = walked;
        l->any_units = any_units;
        l->any_size = any_size;
        l->all_gm = all_gm;
        l->any_thread = any_thread;
        l->any_atomic = any_atomic;
        l->highest_kind = highest_kind;
    }
}

/* batch(records, limits, align_by_space, starts, ends, widest) -> (ext, live, kind, claims, bad, misaligned,
 * first, gm_writes, (pieces_bound, any_thread, any_atomic, highest_kind, walked), merged): memcheck's first look at a
 * batch in one pass over its records (numpy's takes one per field): the extents (patterns.extents), which records
 * are live (an access with bytes, not a SIMT call's entry, not a claim), scan's bounds and alignment of the live
 * ones, and ``kind``, the one field the rest of the check reads on a common batch, copied out for BatchFields (any
 * other is copied there when first asked for), with its largest value (BatchFields.highest_kind). The few claims,
 * out-of-bounds and misaligned records come as positions (int64, ascending), with the first misaligned block's
 * address of each misaligned one. Then what stomping would scan the batch again for (_stomping.BatchWrites): the
 * live GM writes' positions, lists_few_pieces' upper bound of their pieces (repeat, times block_num for a scattered
 * row), whether any record has a SIMT thread, whether any is flagged atomic or switches the atomic mode, ``walked``
 * (the pieces of every GM write and claim, each at most ``widest``: what the sessions' cuts count for memcheck), and
 * ``merged``: list_merged's (keys, lo, hi) of those writes, for a batch where no record is in atomic mode, where
 * they are its usual case (in_order_t); None where they are not. */
static PyObject *batch(PyObject *Py_UNUSED(m), PyObject *args) {
    PyObject *o[5];
    unsigned long long widest;
    if (!PyArg_ParseTuple(args, "OOOOOK", &o[0], &o[1], &o[2], &o[3], &o[4], &widest)) return NULL;
    buf_t b[5] = {{{0}, 0}};
    Py_ssize_t n, n_limits, n_align, m, m2;
    if (get_buffer(o[0], &b[0], RECORD_SIZE, 0, &n, "records") < 0 ||
        get_buffer(o[1], &b[1], 8, 0, &n_limits, "limits") < 0 || get_buffer(o[2], &b[2], 8, 0, &n_align, "align") < 0 ||
        get_buffer(o[3], &b[3], 8, 0, &m, "starts") < 0 || get_buffer(o[4], &b[4], 8, 0, &m2, "ends") < 0) {
        release(b, 5);
        return NULL;
    }
    if (n_limits != 256 || n_align != 256 || m != m2) {
        release(b, 5);
        PyErr_SetString(PyExc_ValueError, "batch: 256 limits and alignments, paired ranges");
        return NULL;
    }
    /* per record: ext, live, kind */
    static const Py_ssize_t size[3] = {8, 1, 1};
    PyObject *out[8] = {NULL};
    int failed = 0;
    for (int i = 0; i < 3; i++) {
        out[i] = failed ? NULL : new_bytes(n, size[i]);
        if (!out[i]) failed = 1;
    }
    /* the claims, bad and misaligned positions and the misaligned ones' first addresses, in kept scratch first */
    size_t got = 0;
    unsigned char *scratch = failed ? NULL : take_scratch((size_t)n * 48 + IN_ORDER_BYTES(n), &got);
    if (!scratch) {
        for (int i = 0; i < 8; i++) Py_XDECREF(out[i]);
        release(b, 5);
        return PyErr_Occurred() ? NULL : PyErr_NoMemory();
    }
#define OUT(i, type) ((type *)PyByteArray_AS_STRING(out[i]))
    uint64_t *ext = OUT(0, uint64_t);
    unsigned char *live = OUT(1, unsigned char), *kind = OUT(2, unsigned char);
#undef OUT
    int64_t *claim_at = (int64_t *)scratch, *bad_at = claim_at + n, *mis_at = bad_at + n;
    uint64_t *mis_first = (uint64_t *)(mis_at + n);
    int64_t *write_at = (int64_t *)(mis_first + 2 * n); /* after the joined bad positions' room */
    in_order_t order; /* the live GM writes merged per block, as list_merged would (its usual case) */
    in_order_start(&order, (unsigned char *)(write_at + n), (size_t)n);
    const unsigned char *base = b[0].view.buf;
    first_look_t look = {base, n, ext, live, kind, claim_at, bad_at, mis_at, mis_first, write_at, &order,
                         {b[1].view.buf, b[2].view.buf, b[3].view.buf, b[4].view.buf, m, {{0}, {0}, {0}, 0}, -1, 0}};
    look.widest = widest;
    size_t bads;
    Py_BEGIN_ALLOW_THREADS
    /* One pass, as if no record needed numpy's float extents; a batch where one does (hostile) is passed again. */
    first_look(&look, 0);
    if (floats_possible(base, n, look.any_units, look.any_size)) first_look(&look, 1);
    bads = look.bads;
    if (look.c.gm_over && !look.all_gm) {
        /* GM records past a limit a chip set for GM, in a batch that is not all GM: joined to the bad ones, in
         * position order, into the scratch's last part */
        int64_t *joined = (int64_t *)(mis_first + n);
        size_t was = bads, p = 0, w = 0;
        for (Py_ssize_t i = 0; i < n; i++) {
            int listed = p < was && bad_at[p] == i;
            if (listed) p++;
            int over = live[i] && F_SPACE(base + i * RECORD_SIZE) == SPACE_GM &&
                       sat_add(F_ADDRESS(base + i * RECORD_SIZE), ext[i]) > look.c.limits[SPACE_GM];
            if (listed || over) joined[w++] = i;
        }
        bad_at = joined;
        bads = w;
    }
    Py_END_ALLOW_THREADS
    release(b, 5);
    size_t claims = look.claims, miss = look.miss, writes = look.writes;
    out[3] = new_bytes((Py_ssize_t)claims, 8);
    out[4] = new_bytes((Py_ssize_t)bads, 8);
    out[5] = new_bytes((Py_ssize_t)miss, 8);
    out[6] = new_bytes((Py_ssize_t)miss, 8);
    out[7] = new_bytes((Py_ssize_t)writes, 8);
    if (!out[3] || !out[4] || !out[5] || !out[6] || !out[7]) {
        for (int i = 0; i < 8; i++) Py_XDECREF(out[i]);
        give_scratch(scratch, got);
        return NULL;
    }
    memcpy(PyByteArray_AS_STRING(out[3]), claim_at, claims * 8);
    memcpy(PyByteArray_AS_STRING(out[4]), bad_at, bads * 8);
    memcpy(PyByteArray_AS_STRING(out[5]), mis_at, miss * 8);
    memcpy(PyByteArray_AS_STRING(out[6]), mis_first, miss * 8);
    memcpy(PyByteArray_AS_STRING(out[7]), write_at, writes * 8);
    PyObject *merged = in_order_result(&order);
    give_scratch(scratch, got);
    if (!merged) {
        for (int i = 0; i < 8; i++) Py_DECREF(out[i]);
        return NULL;
    }
    return Py_BuildValue("NNNNNNNN(KNNIK)N", out[0], out[1], out[2], out[3], out[4], out[5], out[6], out[7],
                         (unsigned long long)look.pieces_bound, PyBool_FromLong(look.any_thread),
                         PyBool_FromLong(look.any_atomic), look.highest_kind, (unsigned long long)look.walked, merged);
}

/* ---- listing a batch's pieces ---- */

/* The record PREFETCH_AHEAD places on in ``index``, asked for early: a batch's writes are a few records apart, too
 * irregular for the hardware to see coming, and a miss per record was most of listing them. Only an index inside
 * the batch is prefetched (a prefetch cannot fault, but the address is never formed past the buffer). */
#define PREFETCH_AHEAD 8
#define PREFETCH_RECORD(base, n, index, k, i)                                                                         \
    do {                                                                                                           \
        if ((i) + PREFETCH_AHEAD < (k)) {                                                                          \
            int64_t ahead_ = (index)[(i) + PREFETCH_AHEAD];                                                        \
            if (ahead_ >= 0 && ahead_ < (n)) __builtin_prefetch((base) + ahead_ * RECORD_SIZE);                    \
        }                                                                                                          \
    } while (0)

/* Pieces of each kind (dense, rows, scattered) of the accesses at ``index``, before coinciding blocks are dropped;
 * -1 for an index past the batch. */
static int count_pieces(const unsigned char *base, Py_ssize_t n, const int64_t *index, Py_ssize_t k,
                        const uint64_t *ext, uint64_t count[3]) {
    count[0] = count[1] = count[2] = 0;
    for (Py_ssize_t i = 0; i < k; i++) {
        PREFETCH_RECORD(base, n, index, k, i);
        if (index[i] < 0 || index[i] >= n) return -1;
        shape_t s;
        shape_of(base + index[i] * RECORD_SIZE, ext[index[i]], &s);
        count[s.kind] += s.pieces; /* at most 2**32 a record: no overflow */
    }
    return 0;
}

/* The listing itself into owner/start/stop (room for count[0] + count[1] + count[2] pieces): each kind's pieces in
 * their own part, in one pass; then those that share no byte with the ranges dropped. Returns the pieces kept.
 * ``key`` (may be NULL): each piece's block key too. ``any_order``: the caller merges the pieces, so a scattered
 * access's blocks are neither sorted nor their coinciding ones dropped (a union is a union). */
static size_t list_pieces(const unsigned char *base, const int64_t *index, Py_ssize_t k, const uint64_t *ext,
                          const uint64_t *starts, const uint64_t *ends, Py_ssize_t m, const uint64_t count[3],
                          int64_t *owner, uint64_t *start, uint64_t *stop, uint64_t *key, int any_order) {
    size_t at[3] = {0, (size_t)count[0], (size_t)(count[0] + count[1])};
    for (Py_ssize_t i = 0; i < k; i++) {
        /* every index was checked against the batch by count_pieces */
        if (i + PREFETCH_AHEAD < k) __builtin_prefetch(base + index[i + PREFETCH_AHEAD] * RECORD_SIZE);
        shape_t s;
        shape_of(base + index[i] * RECORD_SIZE, ext[index[i]], &s);
        size_t w = at[s.kind], began = w;
        if (s.kind == 0) {
            owner[w] = index[i];
            start[w] = s.address;
            stop[w] = sat_add(s.address, s.ext);
            w++;
        } else if (s.kind == 1) {
            uint64_t step = (uint64_t)s.repeat_stride * s.block_size;
            for (uint64_t r = 0; r < s.repeat; r++, w++) {
                uint64_t row = sat_add(s.address, r * step);
                owner[w] = index[i];
                start[w] = row;
                stop[w] = sat_add(row, s.row_length);
            }
        } else if (s.ext == 0) {
            owner[w] = index[i];
            start[w] = s.address;
            stop[w] = s.address;
            w++;
        } else {
            size_t from = w;
            int ascending = 1;
            for (uint64_t r = 0; r < s.repeat; r++)
                for (uint64_t c = 0; c < s.block_num; c++) {
                    uint64_t offset = (r * s.repeat_stride + c * s.block_stride) * s.block_size;
                    uint64_t piece = sat_add(s.address, offset);
                    if (w > from && piece < start[w - 1]) ascending = 0;
                    start[w++] = piece;
                }
            if (any_order) {
                for (size_t p = from; p < w; p++) {
                    stop[p] = sat_add(start[p], s.block_size);
                    owner[p] = index[i];
                }
            } else {
                if (!ascending) qsort(start + from, w - from, sizeof(uint64_t), cmp_u64);
                size_t kept = from;
                for (size_t p = from; p < w; p++) {
                    if (p > from && start[p] == start[kept - 1]) continue; /* coinciding blocks: once */
                    start[kept] = start[p];
                    stop[kept] = sat_add(start[p], s.block_size);
                    owner[kept] = index[i];
                    kept++;
                }
                w = kept;
            }
        }
        if (key) {
            uint64_t block = block_key_of(base + index[i] * RECORD_SIZE);
            for (size_t p = began; p < w; p++) key[p] = block;
        }
        at[s.kind] = w;
    }
    size_t listed = at[2]; /* the scattered part is last: only it shrank */
    if (m == 0) return 0; /* nothing touches an empty set */
    /* touching: all, when one range holds every piece */
    uint64_t low = U64MAX, high = 0;
    for (size_t p = 0; p < listed; p++) {
        if (start[p] < low) low = start[p];
        if (stop[p] > high) high = stop[p];
    }
    Py_ssize_t j = last_at_or_below(starts, m, low);
    if (listed && !(j >= 0 && high <= ends[j])) {
        size_t kept = 0;
        int64_t last_owner = -1;
        int held = 0;
        recent_t recent = {{0}, {0}, {0}, 0};
        uint64_t end;
        for (size_t p = 0; p < listed; p++) {
            int64_t e = owner[p];
            if (p + 4 * PREFETCH_AHEAD < listed) __builtin_prefetch(base + owner[p + 4 * PREFETCH_AHEAD] * RECORD_SIZE);
            if (e != last_owner) { /* held depends on the access alone */
                uint64_t a = F_ADDRESS(base + e * RECORD_SIZE);
                held = ext[e] > 0 && range_at(&recent, starts, ends, m, a, &end) && sat_add(a, ext[e]) <= end;
                last_owner = e;
            }
            if ((held && stop[p] > start[p]) || meets(starts, ends, m, start[p], stop[p])) {
                owner[kept] = owner[p];
                start[kept] = start[p];
                stop[kept] = stop[p];
                if (key) key[kept] = key[p];
                kept++;
            }
        }
        listed = kept;
    }
    return listed;
}

/* the records, index, ext and ranges of list_touching and list_merged, checked */
typedef struct {
    buf_t b[6];
    const unsigned char *base;
    const int64_t *index;
    const uint64_t *ext, *starts, *ends;
    const unsigned char *atomic;
    Py_ssize_t n, k, m;
    uint64_t count[3], total;
} listing_t;

static int listing_args(PyObject *args, listing_t *l, int with_atomic) {
    PyObject *o[6];
    memset(l, 0, sizeof *l);
    if (with_atomic ? !PyArg_ParseTuple(args, "OOOOOO", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5])
                    : !PyArg_ParseTuple(args, "OOOOO", &o[0], &o[1], &o[2], &o[3], &o[4]))
        return -1;
    Py_ssize_t n_ext, m2, n_atomic = 0;
    if (get_buffer(o[0], &l->b[0], RECORD_SIZE, 0, &l->n, "records") < 0 ||
        get_buffer(o[1], &l->b[1], 8, 0, &l->k, "index") < 0 || get_buffer(o[2], &l->b[2], 8, 0, &n_ext, "ext") < 0 ||
        get_buffer(o[3], &l->b[3], 8, 0, &l->m, "starts") < 0 || get_buffer(o[4], &l->b[4], 8, 0, &m2, "ends") < 0 ||
        (with_atomic && get_buffer(o[5], &l->b[5], 1, 0, &n_atomic, "atomic") < 0))
        return -1;
    if (n_ext != l->n || l->m != m2 || (with_atomic && n_atomic != l->n)) {
        PyErr_SetString(PyExc_ValueError, "listing: ext (and atomic) per record, paired ranges");
        return -1;
    }
    l->base = l->b[0].view.buf;
    l->index = l->b[1].view.buf;
    l->ext = l->b[2].view.buf;
    l->starts = l->b[3].view.buf;
    l->ends = l->b[4].view.buf;
    l->atomic = with_atomic ? l->b[5].view.buf : NULL;
    int bad;
    Py_BEGIN_ALLOW_THREADS
    bad = count_pieces(l->base, l->n, l->index, l->k, l->ext, l->count);
    Py_END_ALLOW_THREADS
    if (bad) {
        PyErr_SetString(PyExc_IndexError, "listing: index out of the batch");
        return -1;
    }
    l->total = l->count[0] + l->count[1] + l->count[2];
    if (l->total > (uint64_t)(PY_SSIZE_T_MAX / 64)) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

/* list_touching(records, index, ext, starts, ends) -> (owner int64, start u64, stop u64): the pieces of the
 * accesses at ``index`` (_patterns.ranges: dense accesses one piece each, then contiguous rows one piece a repeat,
 * then scattered blocks one piece each, by start, coinciding blocks once), keeping those that share a byte with the
 * sorted, disjoint ranges (_runs.listed_touching: all of them when one range holds them all). */
static PyObject *list_touching(PyObject *Py_UNUSED(m), PyObject *args) {
    listing_t l;
    if (listing_args(args, &l, 0) < 0) {
        release(l.b, 6);
        return NULL;
    }
    PyObject *owner_out = new_bytes((Py_ssize_t)l.total, 8), *start_out = new_bytes((Py_ssize_t)l.total, 8),
             *stop_out = new_bytes((Py_ssize_t)l.total, 8);
    if (!owner_out || !start_out || !stop_out) {
        Py_XDECREF(owner_out);
        Py_XDECREF(start_out);
        Py_XDECREF(stop_out);
        release(l.b, 6);
        return NULL;
    }
    int64_t *owner = (int64_t *)PyByteArray_AS_STRING(owner_out);
    uint64_t *start = (uint64_t *)PyByteArray_AS_STRING(start_out), *stop = (uint64_t *)PyByteArray_AS_STRING(stop_out);
    size_t listed;
    Py_BEGIN_ALLOW_THREADS
    listed = list_pieces(l.base, l.index, l.k, l.ext, l.starts, l.ends, l.m, l.count, owner, start, stop, NULL, 0);
    Py_END_ALLOW_THREADS
    release(l.b, 6);
    if (PyByteArray_Resize(owner_out, (Py_ssize_t)listed * 8) < 0 || PyByteArray_Resize(start_out, (Py_ssize_t)listed * 8) < 0 ||
        PyByteArray_Resize(stop_out, (Py_ssize_t)listed * 8) < 0) {
        Py_DECREF(owner_out);
        Py_DECREF(start_out);
        Py_DECREF(stop_out);
        return NULL;
    }
    return Py_BuildValue("NNN", owner_out, start_out, stop_out);
}

/* ---- merging ranges ---- */

/* Sorts order[0..n) (indices into lo) by (key, lo) when keys is given, by lo alone when not; stable. */
static void order_by(const uint64_t *keys, const uint64_t *lo, uint64_t *order, size_t n, pair_t *a, pair_t *t) {
    for (size_t i = 0; i < n; i++) {
        a[i].k = lo[order[i]];
        a[i].v = order[i];
    }
    sort_pairs(a, n, t);
    if (keys) {
        for (size_t i = 0; i < n; i++) a[i].k = keys[a[i].v];
        sort_pairs(a, n, t);
    }
    for (size_t i = 0; i < n; i++) order[i] = a[i].v;
}

#define KEY_SPAN ((size_t)1 << 16) /* keys this many apart at most take the grouped path */

/* scratch merge_core needs for n ranges: the grouped path's two pair arrays and one counter per key; the general
 * path's order, bounds and pairs */
static size_t merge_scratch(size_t n) {
    size_t grouped = n * 32 + (KEY_SPAN + 1) * sizeof(size_t);
    return n * 56 > grouped ? n * 56 : grouped;
}

/* Each key's non-empty ranges merged into ko/lo_out/ho (room for n), sorted by key then start; every bound clipped to
 * 2**49 - 1 when any end passes it. Returns the merged ranges. */
static size_t merge_core(const uint64_t *keys, const uint64_t *lo, const uint64_t *hi, size_t n, uint64_t *ko,
                         uint64_t *lo_out, uint64_t *ho, unsigned char *scratch) {
    uint64_t *order = (uint64_t *)scratch, *clo = order + n, *chi = clo + n;
    pair_t *pairs = (pair_t *)(chi + n), *pairs_tmp = pairs + n;
    pair_t *grouped = (pair_t *)scratch, *grouped_tmp = grouped + n;
    size_t *at = (size_t *)(grouped_tmp + n);
    size_t out = 0;
    uint64_t top = 0;
    for (size_t i = 0; i < n; i++)
        if (hi[i] > top) top = hi[i];
    int clip = top > ADDRESS_MASK;
#define CLIPPED(x) (clip && (x) > ADDRESS_MASK ? ADDRESS_MASK : (x))
    uint64_t kmin = UINT64_MAX, kmax = 0;
    for (size_t i = 0; i < n; i++)
        if (CLIPPED(hi[i]) > CLIPPED(lo[i])) {
            if (keys[i] < kmin) kmin = keys[i];
            if (keys[i] > kmax) kmax = keys[i];
        }
    if (kmin <= kmax && kmax - kmin < KEY_SPAN) {
        /* Few blocks (the usual case): the ranges grouped by key in one counting pass, each group sorted by start
         * (skipped where it is in order already) and merged; no gathers through an index. */
        size_t span = (size_t)(kmax - kmin) + 1;
        memset(at, 0, (span + 1) * sizeof(size_t));
        for (size_t i = 0; i < n; i++)
            if (CLIPPED(hi[i]) > CLIPPED(lo[i])) at[keys[i] - kmin + 1]++;
        for (size_t d = 1; d <= span; d++) at[d] += at[d - 1];
        for (size_t i = 0; i < n; i++) {
            uint64_t l = CLIPPED(lo[i]), h = CLIPPED(hi[i]);
            if (h > l) {
                pair_t *slot = &grouped[at[keys[i] - kmin]++];
                slot->k = l;
                slot->v = h;
            }
        }
        /* at[d] is now the end of group d */
        size_t from = 0;
        for (size_t d = 0; d < span; d++) {
            size_t to = at[d];
            if (to == from) continue;
            sort_pairs(grouped + from, to - from, grouped_tmp);
            uint64_t key = kmin + d;
            size_t first = out;
            for (size_t p = from; p < to; p++) {
                if (out > first && grouped[p].k <= ho[out - 1]) {
                    if (grouped[p].v > ho[out - 1]) ho[out - 1] = grouped[p].v;
                } else {
                    ko[out] = key;
                    lo_out[out] = grouped[p].k;
                    ho[out] = grouped[p].v;
                    out++;
                }
            }
            from = to;
        }
        return out;
    }
    size_t live = 0;
    int sorted = 1;
    for (size_t i = 0; i < n; i++) {
        uint64_t l = CLIPPED(lo[i]), h = CLIPPED(hi[i]);
        clo[i] = l;
        chi[i] = h;
        if (h <= l) continue;
        if (live && (keys[i] < keys[order[live - 1]] || (keys[i] == keys[order[live - 1]] && l < clo[order[live - 1]])))
            sorted = 0;
        order[live++] = (uint64_t)i;
    }
#undef CLIPPED
    if (!sorted) order_by(keys, clo, order, live, pairs, pairs_tmp);
    for (size_t p = 0; p < live; p++) {
        size_t i = order[p];
        if (out && ko[out - 1] == keys[i] && clo[i] <= ho[out - 1]) {
            if (chi[i] > ho[out - 1]) ho[out - 1] = chi[i];
        } else {
            ko[out] = keys[i];
            lo_out[out] = clo[i];
            ho[out] = chi[i];
            out++;
        }
    }
    return out;
}

static PyObject *merged_result(PyObject *k_out, PyObject *l_out, PyObject *h_out, size_t out, PyObject *extra) {
    if (PyByteArray_Resize(k_out, (Py_ssize_t)out * 8) < 0 || PyByteArray_Resize(l_out, (Py_ssize_t)out * 8) < 0 ||
        PyByteArray_Resize(h_out, (Py_ssize_t)out * 8) < 0) {
        Py_DECREF(k_out);
        Py_DECREF(l_out);
        Py_DECREF(h_out);
        Py_XDECREF(extra);
        return NULL;
    }
    if (extra) return Py_BuildValue("NNNN", k_out, l_out, h_out, extra);
    return Py_BuildValue("NNN", k_out, l_out, h_out);
}

/* merge_by_block(keys, lo, hi) -> (keys, lo, hi): each key's non-empty ranges merged (touching joined), sorted by
 * key then start; every bound clipped to 2**49 - 1 when any end passes it (_stomping._merge_by_block). */
static PyObject *merge_by_block(PyObject *Py_UNUSED(m), PyObject *args) {
    PyObject *o[3];
    if (!PyArg_ParseTuple(args, "OOO", &o[0], &o[1], &o[2])) return NULL;
    buf_t b[3] = {{{0}, 0}};
    Py_ssize_t n, n1, n2;
    if (get_buffer(o[0], &b[0], 8, 0, &n, "keys") < 0 || get_buffer(o[1], &b[1], 8, 0, &n1, "lo") < 0 ||
        get_buffer(o[2], &b[2], 8, 0, &n2, "hi") < 0) {
        release(b, 3);
        return NULL;
    }
    if (n1 != n || n2 != n) {
        release(b, 3);
        PyErr_SetString(PyExc_ValueError, "merge_by_block: keys, lo and hi differ in length");
        return NULL;
    }
    PyObject *k_out = new_bytes(n, 8), *l_out = new_bytes(n, 8), *h_out = new_bytes(n, 8);
    size_t got = 0;
    unsigned char *scratch = (k_out && l_out && h_out) ? take_scratch(merge_scratch((size_t)n), &got) : NULL;
    if (!scratch) {
        Py_XDECREF(k_out);
        Py_XDECREF(l_out);
        Py_XDECREF(h_out);
        release(b, 3);
        return PyErr_Occurred() ? NULL : PyErr_NoMemory();
    }
    const uint64_t *keys = b[0].view.buf, *lo = b[1].view.buf, *hi = b[2].view.buf;
    uint64_t *ko = (uint64_t *)PyByteArray_AS_STRING(k_out), *lo_out = (uint64_t *)PyByteArray_AS_STRING(l_out),
             *ho = (uint64_t *)PyByteArray_AS_STRING(h_out);
    size_t out;
    Py_BEGIN_ALLOW_THREADS
    out = merge_core(keys, lo, hi, (size_t)n, ko, lo_out, ho, scratch);
    Py_END_ALLOW_THREADS
    give_scratch(scratch, got);
    release(b, 3);
    return merged_result(k_out, l_out, h_out, out, NULL);
}

/* list_merged(records, index, ext, starts, ends, atomic) -> (keys, lo, hi, tagged): list_touching's pieces, each
 * keyed by its record's block (_stomping._piece_block_keys: (block_type & 3) << 16 | block_id | thread << 18) and,
 * where any piece's record runs in atomic mode (``atomic``, u8 per record), tagged key << 1 | atomic; then
 * merge_by_block's ranges of them. The pieces themselves are never handed back. */
static PyObject *list_merged(PyObject *Py_UNUSED(m), PyObject *args) {
    listing_t l;
    if (listing_args(args, &l, 1) < 0) {
        release(l.b, 6);
        return NULL;
    }
    size_t total = (size_t)l.total, got = 0;
    PyObject *k_out = new_bytes((Py_ssize_t)total, 8), *l_out = new_bytes((Py_ssize_t)total, 8),
             *h_out = new_bytes((Py_ssize_t)total, 8);
    /* the pieces (owner, start, stop, key) ahead of merge_core's own scratch */
    size_t need = total * 32 + merge_scratch(total);
    unsigned char *scratch = (k_out && l_out && h_out) ? take_scratch(need, &got) : NULL;
    if (!scratch) {
        Py_XDECREF(k_out);
        Py_XDECREF(l_out);
        Py_XDECREF(h_out);
        release(l.b, 6);
        return PyErr_Occurred() ? NULL : PyErr_NoMemory();
    }
    int64_t *owner = (int64_t *)scratch;
    uint64_t *start = (uint64_t *)(owner + total), *stop = start + total, *key = stop + total;
    uint64_t *ko = (uint64_t *)PyByteArray_AS_STRING(k_out), *lo_out = (uint64_t *)PyByteArray_AS_STRING(l_out),
             *ho = (uint64_t *)PyByteArray_AS_STRING(h_out);
    size_t out;
    int tagged = 0;
    Py_BEGIN_ALLOW_THREADS
    size_t listed = list_pieces(l.base, l.index, l.k, l.ext, l.starts, l.ends, l.m, l.count, owner, start, stop, key, 1);
    for (size_t p = 0; p < listed && !tagged; p++) tagged = l.atomic[owner[p]] != 0;
    if (tagged)
        for (size_t p = 0; p < listed; p++) key[p] = (key[p] << 1) | (l.atomic[owner[p]] != 0);
    out = merge_core(key, start, stop, listed, ko, lo_out, ho, (unsigned char *)(key + total));
    Py_END_ALLOW_THREADS
    give_scratch(scratch, got);
    release(l.b, 6);
    return merged_result(k_out, l_out, h_out, out, PyBool_FromLong(tagged));
}

#define MAX_RUNS 64 /* runs in order past which merge_ranges sorts instead of merging them */

/* merge_ranges(starts, ends) -> (starts, ends): the union of the non-empty ranges, sorted, disjoint, touching
 * ranges joined (_intervals.merge_ranges). */
static PyObject *merge_ranges(PyObject *Py_UNUSED(m), PyObject *args) {
    PyObject *o[2];
    if (!PyArg_ParseTuple(args, "OO", &o[0], &o[1])) return NULL;
    buf_t b[2] = {{{0}, 0}};
    Py_ssize_t n, n1;
    if (get_buffer(o[0], &b[0], 8, 0, &n, "starts") < 0 || get_buffer(o[1], &b[1], 8, 0, &n1, "ends") < 0) {
        release(b, 2);
        return NULL;
    }
    if (n1 != n) {
        release(b, 2);
        PyErr_SetString(PyExc_ValueError, "merge_ranges: starts and ends differ in length");
        return NULL;
    }
    PyObject *s_out = new_bytes(n, 8), *e_out = new_bytes(n, 8);
    size_t got = 0;
    unsigned char *scratch = (s_out && e_out) ? take_scratch((size_t)n * 40, &got) : NULL;
    if (!scratch) {
        Py_XDECREF(s_out);
        Py_XDECREF(e_out);
        release(b, 2);
        return PyErr_Occurred() ? NULL : PyErr_NoMemory();
    }
    uint64_t *order = (uint64_t *)scratch;
    pair_t *pairs = (pair_t *)(order + n), *pairs_tmp = pairs + n;
    const uint64_t *lo = b[0].view.buf, *hi = b[1].view.buf;
    uint64_t *so = (uint64_t *)PyByteArray_AS_STRING(s_out), *eo = (uint64_t *)PyByteArray_AS_STRING(e_out);
    size_t out = 0;
    int failed = 0;
    Py_BEGIN_ALLOW_THREADS
    /* A run in order first (the ranges merged before, in a log that grows by batches), then the rest: only the
     * rest is sorted, and the two are joined in one pass. Where the whole is a few runs in order (a log of
     * batches, each merged per block in owner order), the runs are merged pairwise instead: no sort at all. */
    size_t live = 0, prefix = 0, run_at[MAX_RUNS + 1];
    int runs = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (hi[i] <= lo[i]) continue;
        if (live == 0 || lo[i] < lo[order[live - 1]]) {
            if (runs < MAX_RUNS) run_at[runs] = live;
            runs++;
        }
        if (prefix == live && runs == 1) prefix++;
        order[live++] = (uint64_t)i;
    }
    if (runs > 1 && runs <= MAX_RUNS) {
        run_at[runs] = live;
        uint64_t *src = order, *dst = (uint64_t *)pairs; /* pairs: room for 2n indices, unused on this path */
        while (runs > 1) {
            int w = 0;
            for (int r = 0; r < runs; r += 2) {
                size_t a = run_at[r], a_end = run_at[r + 1], b = a_end, b_end = r + 1 < runs ? run_at[r + 2] : a_end;
                size_t to = a;
                run_at[w++] = a; /* w <= r: every bound this pair reads lies at r or past it */
                while (a < a_end && b < b_end) dst[to++] = lo[src[b]] < lo[src[a]] ? src[b++] : src[a++];
                while (a < a_end) dst[to++] = src[a++];
                while (b < b_end) dst[to++] = src[b++];
            }
            run_at[w] = live;
            runs = w;
            uint64_t *t = src;
            src = dst;
            dst = t;
        }
        if (src != order) memcpy(order, src, live * sizeof(uint64_t));
        prefix = live;
    }
    if (prefix < live) order_by(NULL, lo, order + prefix, live - prefix, pairs, pairs_tmp);
    size_t p = 0, q = prefix;
    while (p < prefix || q < live) {
        size_t i;
        if (q >= live || (p < prefix && lo[order[p]] <= lo[order[q]]))
            i = order[p++];
        else
            i = order[q++];
        if (out && lo[i] <= eo[out - 1]) {
            if (hi[i] > eo[out - 1]) eo[out - 1] = hi[i];
        } else {
            so[out] = lo[i];
            eo[out] = hi[i];
            out++;
        }
    }
    Py_END_ALLOW_THREADS
    give_scratch(scratch, got);
    release(b, 2);
    if (failed || PyByteArray_Resize(s_out, (Py_ssize_t)out * 8) < 0 || PyByteArray_Resize(e_out, (Py_ssize_t)out * 8) < 0) {
        Py_DECREF(s_out);
        Py_DECREF(e_out);
        return PyErr_Occurred() ? NULL : PyErr_NoMemory();
    }
    return Py_BuildValue("NN", s_out, e_out);
}

/* first index >= from whose e[] passes x, or m, in sorted e[0..m) where every e[< from] is <= x: galloping from
 * ``from`` and then halving, so ascending queries walk the array once instead of searching it whole each time */
static inline Py_ssize_t first_ending_past(const uint64_t *e, Py_ssize_t from, Py_ssize_t m, uint64_t x) {
    Py_ssize_t lo = from, hi = from, step = 1;
    while (hi < m && e[hi] <= x) {
        lo = hi + 1;
        hi = from + step;
        step <<= 1;
    }
    if (hi > m) hi = m;
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (e[mid] <= x)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* keyed_claims(keys, lo, hi, chosen, held_lo, held_hi) -> (lo, hi): the ranges ``chosen`` (u8 per range) keyed by
 * owner (key << 49 | bound, in uint64 arithmetic as numpy's), less those wholly inside one held range (held sorted,
 * disjoint, touching ones joined: stomping's merged log), in their order (_stomping._keyed_claims_numpy). Held
 * bounds never index: out of order, they give wrong answers, never a read outside the arrays. */
static PyObject *keyed_claims(PyObject *Py_UNUSED(m), PyObject *args) {
    PyObject *o[6];
    if (!PyArg_ParseTuple(args, "OOOOOO", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5])) return NULL;
    buf_t b[6] = {{{0}, 0}};
    Py_ssize_t n, n_lo, n_hi, n_chosen, m, m1;
    if (get_buffer(o[0], &b[0], 8, 0, &n, "keys") < 0 || get_buffer(o[1], &b[1], 8, 0, &n_lo, "lo") < 0 ||
        get_buffer(o[2], &b[2], 8, 0, &n_hi, "hi") < 0 || get_buffer(o[3], &b[3], 1, 0, &n_chosen, "chosen") < 0 ||
        get_buffer(o[4], &b[4], 8, 0, &m, "held_lo") < 0 || get_buffer(o[5], &b[5], 8, 0, &m1, "held_hi") < 0) {
        release(b, 6);
        return NULL;
    }
    if (n_lo != n || n_hi != n || n_chosen != n || m1 != m) {
        release(b, 6);
        PyErr_SetString(PyExc_ValueError, "keyed_claims: keys, lo, hi and chosen per range, held paired");
        return NULL;
    }
    PyObject *lo_out = new_bytes(n, 8), *hi_out = new_bytes(n, 8);
    if (!lo_out || !hi_out) {
        Py_XDECREF(lo_out);
        Py_XDECREF(hi_out);
        release(b, 6);
        return NULL;
    }
    const uint64_t *keys = b[0].view.buf, *lo = b[1].view.buf, *hi = b[2].view.buf;
    const unsigned char *chosen = b[3].view.buf;
    const uint64_t *hs = b[4].view.buf, *he = b[5].view.buf;
    uint64_t *lo_o = (uint64_t *)PyByteArray_AS_STRING(lo_out), *hi_o = (uint64_t *)PyByteArray_AS_STRING(hi_out);
    size_t out = 0;
    Py_BEGIN_ALLOW_THREADS
    Py_ssize_t at = 0;
    uint64_t previous = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!chosen[i]) continue;
        uint64_t key = keys[i] << 49, klo = key | lo[i], khi = key | hi[i];
        if (m) {
            /* a range below the one before starts over: the held ranges before ``at`` may end past it */
            at = first_ending_past(he, klo >= previous ? at : 0, m, klo);
            previous = klo;
            if (at < m && hs[at] <= klo && khi <= he[at]) continue;
        }
        lo_o[out] = klo;
        hi_o[out] = khi;
        out++;
    }
    Py_END_ALLOW_THREADS
    release(b, 6);
    if (PyByteArray_Resize(lo_out, (Py_ssize_t)out * 8) < 0 || PyByteArray_Resize(hi_out, (Py_ssize_t)out * 8) < 0) {
        Py_DECREF(lo_out);
        Py_DECREF(hi_out);
        return NULL;
    }
    return Py_BuildValue("NN", lo_out, hi_out);
}

/* covered_by(starts, ends, cumulative, lo, hi) -> u64 per range: the bytes of each [lo, hi) inside sorted, disjoint
 * ranges whose running lengths are ``cumulative`` (m + 1 of them), as _intervals._covered_by_numpy computes them:
 * below(hi) - below(lo), below(x) the bytes of the ranges under x, in uint64 arithmetic that wraps where numpy's
 * does (an end before its start). Only the search's result indexes, and it lies in [0, m). */
static PyObject *covered_by(PyObject *Py_UNUSED(m), PyObject *args) {
    PyObject *o[5];
    if (!PyArg_ParseTuple(args, "OOOOO", &o[0], &o[1], &o[2], &o[3], &o[4])) return NULL;
    buf_t b[5] = {{{0}, 0}};
    Py_ssize_t m, m_ends, m_cumulative, n, n_hi;
    if (get_buffer(o[0], &b[0], 8, 0, &m, "starts") < 0 || get_buffer(o[1], &b[1], 8, 0, &m_ends, "ends") < 0 ||
        get_buffer(o[2], &b[2], 8, 0, &m_cumulative, "cumulative") < 0 || get_buffer(o[3], &b[3], 8, 0, &n, "lo") < 0 ||
        get_buffer(o[4], &b[4], 8, 0, &n_hi, "hi") < 0) {
        release(b, 5);
        return NULL;
    }
    if (m_ends != m || m_cumulative != m + 1 || n_hi != n) {
        release(b, 5);
        PyErr_SetString(PyExc_ValueError, "covered_by: starts and ends paired, cumulative one longer, lo and hi paired");
        return NULL;
    }
    PyObject *out = new_bytes(n, 8);
    if (!out) {
        release(b, 5);
        return NULL;
    }
    const uint64_t *starts = b[0].view.buf, *ends = b[1].view.buf, *cumulative = b[2].view.buf;
    const uint64_t *lo = b[3].view.buf, *hi = b[4].view.buf;
    uint64_t *inside = (uint64_t *)PyByteArray_AS_STRING(out);
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        uint64_t below[2];
        for (int side = 0; side < 2; side++) {
            uint64_t x = side ? hi[i] : lo[i];
            Py_ssize_t j = last_at_or_below(starts, m, x);
            if (j < 0) {
                below[side] = 0;
                continue;
            }
            uint64_t end = x < ends[j] ? x : ends[j], start = x < starts[j] ? x : starts[j];
            below[side] = cumulative[j] + (end - start);
        }
        inside[i] = below[1] - below[0];
    }
    Py_END_ALLOW_THREADS
    release(b, 5);
    return out;
}

/* ---- the page table ---- */

/* page_note(owners, lo, hi, pages, table_owners, max_pages, page_shift) -> None | (alone u8 per range, newly shared pages,
 * new pages or None, new owners or None): _page_owners.PageOwners.note for non-empty ranges. Held pages' owners
 * are updated in ``table_owners`` in place; where pages are new, the merged table comes back instead (the caller
 * takes it). None: the pages would pass ``max_pages``, nothing recorded. */
static PyObject *page_note(PyObject *Py_UNUSED(m), PyObject *args) {
    PyObject *o[5];
    long long max_pages;
    int shift;
    if (!PyArg_ParseTuple(args, "OOOOOLi", &o[0], &o[1], &o[2], &o[3], &o[4], &max_pages, &shift)) return NULL;
    if (shift < 0 || shift > 63) {
        PyErr_SetString(PyExc_ValueError, "page_note: a page shift of 0 to 63 bits");
        return NULL;
    }
    buf_t b[5] = {{{0}, 0}};
    Py_ssize_t n, n1, n2, t, t2;
    if (get_buffer(o[0], &b[0], 8, 0, &n, "owners") < 0 || get_buffer(o[1], &b[1], 8, 0, &n1, "lo") < 0 ||
        get_buffer(o[2], &b[2], 8, 0, &n2, "hi") < 0 || get_buffer(o[3], &b[3], 8, 0, &t, "pages") < 0 ||
        get_buffer(o[4], &b[4], 8, 1, &t2, "table_owners") < 0) {
        release(b, 5);
        return NULL;
    }
    const int64_t *owners = b[0].view.buf;
    const uint64_t *lo = b[1].view.buf, *hi = b[2].view.buf, *pages = b[3].view.buf;
    int64_t *table = b[4].view.buf;
    if (n1 != n || n2 != n || t2 != t || n == 0 || max_pages < 0) {
        release(b, 5);
        PyErr_SetString(PyExc_ValueError, "page_note: paired, non-empty ranges and a paired table");
        return NULL;
    }
    uint64_t span_total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (hi[i] <= lo[i]) {
            release(b, 5);
            PyErr_SetString(PyExc_ValueError, "page_note: an empty range");
            return NULL;
        }
        span_total += ((hi[i] - 1) >> shift) - (lo[i] >> shift) + 1;
        if (span_total > (uint64_t)max_pages) break;
    }
    if (span_total + (uint64_t)t > (uint64_t)max_pages) {
        release(b, 5);
        Py_RETURN_NONE;
    }
    size_t entries = (size_t)span_total;
    PyObject *alone = new_bytes(n, 1), *shared = new_bytes((Py_ssize_t)entries, 8);
    PyObject *new_pages = new_bytes(t + (Py_ssize_t)entries, 8), *new_owners = new_bytes(t + (Py_ssize_t)entries, 8);
    /* the entries (page, range) and the radix sort's second buffer; the fresh pages with their owner after */
    size_t got = 0;
    unsigned char *scratch =
        (alone && shared && new_pages && new_owners) ? take_scratch(entries * 48, &got) : NULL;
    if (!scratch) {
        Py_XDECREF(alone);
        Py_XDECREF(shared);
        Py_XDECREF(new_pages);
        Py_XDECREF(new_owners);
        release(b, 5);
        return PyErr_Occurred() ? NULL : PyErr_NoMemory();
    }
    pair_t *e = (pair_t *)scratch, *tmp = e + entries;
    uint64_t *fresh_page = (uint64_t *)(tmp + entries);
    int64_t *fresh_after = (int64_t *)(fresh_page + entries);
    unsigned char *alone_out = (unsigned char *)PyByteArray_AS_STRING(alone);
    uint64_t *shared_out = (uint64_t *)PyByteArray_AS_STRING(shared);
    uint64_t *pages_out = (uint64_t *)PyByteArray_AS_STRING(new_pages);
    int64_t *owners_out = (int64_t *)PyByteArray_AS_STRING(new_owners);
    size_t n_shared = 0, n_fresh = 0;
    Py_BEGIN_ALLOW_THREADS
    size_t p = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        alone_out[i] = 1;
        for (uint64_t page = lo[i] >> shift, last = (hi[i] - 1) >> shift;; page++) {
            e[p].k = page;
            e[p].v = (uint64_t)i;
            p++;
            if (page == last) break;
        }
    }
    sort_pairs(e, entries, tmp);
    for (size_t g = 0; g < entries;) {
        size_t h = g + 1;
        int64_t writer = owners[e[g].v];
        int64_t batch = writer;
        while (h < entries && e[h].k == e[g].k) {
            if (owners[e[h].v] != writer) batch = SHARED_PAGE;
            h++;
        }
        uint64_t page = e[g].k;
        Py_ssize_t at = last_at_or_below(pages, t, page);
        int held = at >= 0 && pages[at] == page;
        int64_t before = held ? table[at] : NOBODY_PAGE;
        int page_alone = batch != SHARED_PAGE && (before == NOBODY_PAGE || before == batch);
        int64_t after = page_alone ? batch : SHARED_PAGE;
        if (before >= 0 && after == SHARED_PAGE) shared_out[n_shared++] = page;
        if (held)
            table[at] = after;
        else {
            fresh_page[n_fresh] = page;
            fresh_after[n_fresh++] = after;
        }
        if (!page_alone)
            for (size_t q = g; q < h; q++) alone_out[e[q].v] = 0;
        g = h;
    }
    if (n_fresh) { /* the table with the fresh pages inserted in order */
        size_t a = 0, c = 0, w = 0;
        while (a < (size_t)t || c < n_fresh) {
            if (c >= n_fresh || (a < (size_t)t && pages[a] < fresh_page[c])) {
                pages_out[w] = pages[a];
                owners_out[w++] = table[a++];
            } else {
                pages_out[w] = fresh_page[c];
                owners_out[w++] = fresh_after[c++];
            }
        }
    }
    Py_END_ALLOW_THREADS
    give_scratch(scratch, got);
    release(b, 5);
    if (PyByteArray_Resize(shared, (Py_ssize_t)n_shared * 8) < 0 ||
        PyByteArray_Resize(new_pages, (t + (Py_ssize_t)n_fresh) * 8) < 0 ||
        PyByteArray_Resize(new_owners, (t + (Py_ssize_t)n_fresh) * 8) < 0) {
        Py_DECREF(alone);
        Py_DECREF(shared);
        Py_DECREF(new_pages);
        Py_DECREF(new_owners);
        return NULL;
    }
    if (!n_fresh) {
        Py_DECREF(new_pages);
        Py_DECREF(new_owners);
        return Py_BuildValue("NNOO", alone, shared, Py_None, Py_None);
    }
    return Py_BuildValue("NNNN", alone, shared, new_pages, new_owners);
}

static PyMethodDef methods[] = {
    {"extents", extents, METH_VARARGS, "Bytes each record's pattern reaches (patterns.extents)."},
    {"scan", scan, METH_VARARGS, "memcheck's bounds and alignment pass over a batch."},
    {"batch", batch, METH_VARARGS, "memcheck's first look at a batch: extents, live records, bounds, fields."},
    {"list_touching", list_touching, METH_VARARGS, "The pieces of some accesses that meet a range set."},
    {"merge_by_block", merge_by_block, METH_VARARGS, "Ranges merged per key, sorted by key then start."},
    {"list_merged", list_merged, METH_VARARGS, "Write pieces listed, keyed by block and merged per block."},
    {"merge_ranges", merge_ranges, METH_VARARGS, "The union of ranges, sorted and disjoint."},
    {"covered_by", covered_by, METH_VARARGS, "Bytes of each range inside a sorted, disjoint range set."},
    {"keyed_claims", keyed_claims, METH_VARARGS, "Chosen ranges keyed by owner, less those a merged set holds."},
    {"page_note", page_note, METH_VARARGS, "Stomping's page table: note a batch's ranges."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef definition = {
    PyModuleDef_HEAD_INIT, .m_name = "_memcheck", .m_size = -1, .m_methods = methods,
};

PyMODINIT_FUNC PyInit__memcheck(void) { return PyModule_Create(&definition); }
