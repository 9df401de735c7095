/* initcheck's steady-state batch in one pass (sanitizerd/detectors/initcheck.py, ``Initcheck._check_native``).
 *
 * In a kernel's steady state every read meets bytes defined before its batch and most writes rewrite bytes already
 * defined. numpy establishes that in a dozen passes over the batch (extents, the live and keyed masks, the pieces'
 * bounds, ranges, composite keys, two sorted lookups per level of the defined set, and add_new's sort and lookup);
 * this is one pass over the 56-byte records, with the GIL released, that
 *
 *   - computes each access's extent, liveness and composite key exactly as numpy does (extents, ranges, composite),
 *   - checks every read against the defined set as it was before the batch (both of IntervalSet's levels, by the
 *     same cumulative-length lookup as _intervals._covered_by, in the same wrapping 64-bit arithmetic),
 *   - and lists the writes not wholly inside that set, each with the group (cumulative pieces // CHUNK) numpy's
 *     _check_accesses would check it in.
 *
 * It answers FALLBACK, and the caller runs the numpy path on the whole batch, wherever the batch is not of that
 * shape: an access listing more than one range (strided rows or blocks), a batch whose extents saturate, or a read
 * with a byte the set does not hold (a finding, or bytes written earlier in the same batch: the in-order recheck
 * stays numpy's). Nothing read from a record is used as an index.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define RECORD_SIZE 56
#define ADDRESS_AT 0        /* uint64 */
#define BLOCK_SIZE_AT 24    /* uint32 */
#define BLOCK_NUM_AT 32     /* uint16 */
#define BLOCK_STRIDE_AT 34  /* uint16 */
#define REPEAT_AT 36        /* uint16 */
#define REPEAT_STRIDE_AT 38 /* uint16 */
#define BLOCK_ID_AT 40      /* uint16 */
#define KIND_AT 44          /* uint8 */
#define SPACE_AT 45         /* uint8 */
#define BLOCK_TYPE_AT 48    /* uint8 */
#define FLAGS_AT 49         /* uint8 */

#define KIND_READ 0
#define KIND_WRITE 1
#define KIND_BLOCK_FINISH 23
#define KIND_SIMT_START 37
#define SPACE_GM 1
#define SPACE_LAST 8      /* PRIVATE .. FB: the spaces a composite key has room for */
#define BLOCK_TYPE_LAST 2 /* AIV, AIC, AICORE */
#define FLAG_CLAIM 2

#define SATURATE ((uint64_t)1 << 62)
#define GM_ADDRESS_TOP (((uint64_t)1 << 59) - 1)
#define ADDRESS_BITS (((uint64_t)1 << 42) - 1)

#define STATUS_NONE 0     /* no access to check */
#define STATUS_FAST 1     /* every read defined before the batch; the writes to add are listed */
#define STATUS_FALLBACK 2 /* take numpy's path for this batch */

static inline uint64_t u64_at(const unsigned char *p) {
    uint64_t v;
    memcpy(&v, p, sizeof v); /* the wire's little-endian order: the caller loads this module on such hosts only */
    return v;
}
static inline uint32_t u32_at(const unsigned char *p) {
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}
static inline uint16_t u16_at(const unsigned char *p) {
    uint16_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* One level of an IntervalSet: sorted, disjoint starts/ends and cumulative[i] = bytes in ranges before i. */
typedef struct {
    const uint64_t *starts, *ends, *cumulative;
    Py_ssize_t n;
} Level;

/* _intervals._covered_by's below(x): bytes of the level below x. */
static inline uint64_t below(const Level *level, uint64_t x) {
    Py_ssize_t lo = 0, hi = level->n; /* first index whose start is > x (searchsorted side="right") */
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (level->starts[mid] <= x) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    if (lo == 0) {
        return 0;
    }
    Py_ssize_t j = lo - 1;
    uint64_t end = level->ends[j] < x ? level->ends[j] : x;
    uint64_t start = level->starts[j] < x ? level->starts[j] : x;
    return level->cumulative[j] + (end - start);
}

static inline uint64_t covered(const Level *main, const Level *pending, uint64_t lo, uint64_t hi) {
    uint64_t inside = 0;
    if (main->n) {
        inside = below(main, hi) - below(main, lo);
    }
    if (pending->n) {
        inside += below(pending, hi) - below(pending, lo);
    }
    return inside;
}

/* A write not wholly defined before the batch: its key range, its group and its recheck slice. */
typedef struct {
    uint64_t start, stop;
    int64_t group, slice, call;
} Fresh;

static int by_start(const void *a, const void *b) {
    uint64_t x = ((const Fresh *)a)->start, y = ((const Fresh *)b)->start;
    return (x > y) - (x < y);
}

/* The batch's writes so far not wholly defined before it, as sorted, disjoint ranges (touching ones joined): at
 * most ``cap`` of them, past which ``full`` is set and they no longer answer (a read that would need them sends
 * the batch to numpy). */
typedef struct {
    uint64_t *start, *stop;
    Py_ssize_t n, cap;
    int full;
    int64_t moves; /* ranges shifted by insertions so far: past MOVE_BUDGET, full (a hostile order costs no more) */
} Written;

#define MOVE_BUDGET ((int64_t)1 << 24)

static void written_add(Written *w, uint64_t a, uint64_t b) {
    if (w->full) {
        return;
    }
    Py_ssize_t lo = 0, hi = w->n; /* i: the first range whose stop is >= a (touching joins) */
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (w->stop[mid] < a) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    Py_ssize_t i = lo;
    hi = w->n; /* j: the first range whose start is > b */
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (w->start[mid] <= b) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    Py_ssize_t j = lo;
    w->moves += w->n - j + 1;
    if (w->moves > MOVE_BUDGET) {
        w->full = 1;
        return;
    }
    if (i < j) { /* ranges i..j-1 meet [a, b): one range in their place */
        a = w->start[i] < a ? w->start[i] : a;
        b = w->stop[j - 1] > b ? w->stop[j - 1] : b;
        memmove(w->start + i + 1, w->start + j, (size_t)(w->n - j) * sizeof *w->start);
        memmove(w->stop + i + 1, w->stop + j, (size_t)(w->n - j) * sizeof *w->stop);
        w->n -= j - i - 1;
    } else {
        if (w->n == w->cap) {
            w->full = 1;
            return;
        }
        memmove(w->start + i + 1, w->start + i, (size_t)(w->n - i) * sizeof *w->start);
        memmove(w->stop + i + 1, w->stop + i, (size_t)(w->n - i) * sizeof *w->stop);
        w->n++;
    }
    w->start[i] = a;
    w->stop[i] = b;
}

/* How far from x the ranges of sorted, disjoint starts/stops hold every byte: the end of the range holding x, or
 * x where none does. */
static inline uint64_t reach_of(const uint64_t *starts, const uint64_t *stops, Py_ssize_t n, uint64_t x) {
    Py_ssize_t lo = 0, hi = n;
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (starts[mid] <= x) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return (lo && stops[lo - 1] > x) ? stops[lo - 1] : x;
}

/* Whether [lo, hi) lies inside the set's two levels and ``written`` together: 1, 0, or -1 where the walk ran out
 * of its budget (steps left in *budget) or ``written`` is full. Each step moves past one range. */
static int inside_all(const Level *main, const Level *pending, const Written *written, uint64_t lo, uint64_t hi,
                      int64_t *budget) {
    uint64_t x = lo;
    while (x < hi) {
        if (--*budget < 0) {
            return -1;
        }
        uint64_t next = reach_of(main->starts, main->ends, main->n, x);
        uint64_t other = reach_of(pending->starts, pending->ends, pending->n, x);
        next = other > next ? other : next;
        if (!written->full) {
            other = reach_of(written->start, written->stop, written->n, x);
            next = other > next ? other : next;
        }
        if (next == x) {
            return written->full ? -1 : 0;
        }
        x = next;
    }
    return 1;
}

typedef struct {
    Py_buffer view;
    int held;
} Held;

static void release_all(Held *held, int count) {
    for (int i = 0; i < count; i++) {
        if (held[i].held) {
            PyBuffer_Release(&held[i].view);
            held[i].held = 0;
        }
    }
}

/* A level from three buffers of uint64: starts and ends of one length, cumulative one longer. */
static int level_of(Level *level, Py_buffer *starts, Py_buffer *ends, Py_buffer *cumulative) {
    if (starts->len % 8 || ends->len != starts->len || cumulative->len != starts->len + 8) {
        PyErr_SetString(PyExc_ValueError, "a level of the set: starts and ends of n uint64, cumulative of n + 1");
        return -1;
    }
    level->starts = (const uint64_t *)starts->buf;
    level->ends = (const uint64_t *)ends->buf;
    level->cumulative = (const uint64_t *)cumulative->buf;
    level->n = starts->len / 8;
    return 0;
}

#define HELD 11
#define HINTS 64
#define MAX_PIECES ((int64_t)1 << 24) /* pieces a batch lists in this pass */
#define WALK_BUDGET ((int64_t)1 << 22) /* steps of inside_all per batch */

/* scan(events, main_starts, main_ends, main_cumulative, pending_starts, pending_ends, pending_cumulative, chunk,
 *      wide, slice, cap, check, out_keys, out_stops, out_groups, out_calls)
 *   -> (status, unkeyed, listed, simt_start, block_finish)
 *
 * events: whole 56-byte records (EVENT_DTYPE). The defined set's two levels as uint64 arrays. chunk: _runs.CHUNK;
 * wide: initcheck.WIDE_ACCESS; slice: initcheck._SLICE; cap: the batch's own written ranges this pass keeps (see
 * Written). check: false where the detector has given up (only the counts are wanted). out_*: writable, one
 * 8-byte slot per record at least (uint64, uint64, int64, int64).
 *
 * Returns the status (STATUS_*), the accesses whose space or block type has no key (for every status but
 * FALLBACK, where numpy counts them), how many ranges out_* list (FAST only), and whether the batch holds a
 * SIMT_START and a BLOCK_FINISH. The ranges listed are the batch's writes not wholly defined before it, merged per
 * add_new call of numpy's path: out_groups the group of _check_accesses, out_calls the call within the group (one
 * unless the group's reads met bytes written earlier in the batch, where _recheck_in_order adds the writes before
 * each slice of _SLICE events that has such a read, then the rest). */
static PyObject *scan(PyObject *Py_UNUSED(module), PyObject *args) {
    Held held[HELD];
    memset(held, 0, sizeof held);
    long long chunk_arg, wide_arg, slice_arg, cap_arg;
    int check;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*y*y*LLLLpw*w*w*w*", &held[0].view, &held[1].view, &held[2].view,
                          &held[3].view, &held[4].view, &held[5].view, &held[6].view, &chunk_arg, &wide_arg,
                          &slice_arg, &cap_arg, &check, &held[7].view, &held[8].view, &held[9].view,
                          &held[10].view)) {
        return NULL;
    }
    for (int i = 0; i < HELD; i++) {
        held[i].held = 1;
    }
    Py_buffer *records = &held[0].view;
    Level main_level, pending_level;
    if (records->len % RECORD_SIZE) {
        PyErr_SetString(PyExc_ValueError, "events must be whole 56-byte records");
        release_all(held, HELD);
        return NULL;
    }
    if (level_of(&main_level, &held[1].view, &held[2].view, &held[3].view) ||
        level_of(&pending_level, &held[4].view, &held[5].view, &held[6].view)) {
        release_all(held, HELD);
        return NULL;
    }
    Py_ssize_t n = records->len / RECORD_SIZE;
    Py_ssize_t slots = held[7].view.len / 8; /* the pieces this pass may list */
    for (int i = 7; i < HELD; i++) {
        slots = held[i].view.len / 8 < slots ? held[i].view.len / 8 : slots;
    }
    if (slots < n) {
        PyErr_SetString(PyExc_ValueError, "each out_ buffer needs one 8-byte slot per record at least");
        release_all(held, HELD);
        return NULL;
    }
    if (chunk_arg <= 0 || wide_arg < 0 || slice_arg <= 0 || cap_arg < 0 || cap_arg > (1 << 20)) {
        PyErr_SetString(PyExc_ValueError, "chunk and slice must be positive, wide not negative, cap in 0..2**20");
        release_all(held, HELD);
        return NULL;
    }
    const unsigned char *base = (const unsigned char *)records->buf;
    uint64_t *out_keys = (uint64_t *)held[7].view.buf;
    uint64_t *out_stops = (uint64_t *)held[8].view.buf;
    int64_t *out_groups = (int64_t *)held[9].view.buf;
    int64_t *out_calls = (int64_t *)held[10].view.buf;
    int64_t chunk = (int64_t)chunk_arg, wide = (int64_t)wide_arg, slice_length = (int64_t)slice_arg;
    Py_ssize_t cap = (Py_ssize_t)cap_arg;

    int status = STATUS_NONE, simt_start = 0, block_finish = 0;
    long long unkeyed = 0;
    Py_ssize_t writes = 0, merged = 0, doubts = 0;
    /* fresh: the writes; doubt: (group, slice) of each slice holding a read that the set and the earlier groups'
     * writes do not cover, in order; all, before: the batch's written ranges, all and those of earlier groups. */
    Fresh *fresh = PyMem_RawMalloc(slots ? (size_t)slots * sizeof(Fresh) : 1);
    int64_t *doubt = PyMem_RawMalloc(n ? (size_t)n * 2 * sizeof(int64_t) : 1);
    uint64_t *ranges = PyMem_RawMalloc(cap ? (size_t)cap * 4 * sizeof(uint64_t) : 1);
    if (fresh == NULL || doubt == NULL || ranges == NULL) {
        PyMem_RawFree(fresh);
        PyMem_RawFree(doubt);
        PyMem_RawFree(ranges);
        release_all(held, HELD);
        return PyErr_NoMemory();
    }
    Written all = {ranges, ranges + cap, 0, cap, 0, 0}, before = {ranges + 2 * cap, ranges + 3 * cap, 0, cap, 0, 0};

    Py_BEGIN_ALLOW_THREADS
    /* One pass, in batch order. Which of extents()' two formulas numpy takes, and whether it saturates, depends
     * on maxima over the whole batch: they are gathered on the way and judged at the end (a saturating batch is
     * numpy's; below it both formulas agree, and no span passes 2**62). */
    uint64_t repeat_max = 0, stride_max = 0, units_max = 0, size_max = 0;
    int64_t pieces_total = 0, pieces_listed = 0, group = 0, budget = WALK_BUDGET;
    int rechecked = 0; /* some read needed the batch's own writes */
    Py_ssize_t main_hints[HINTS] = {0}; /* indexes into the main level only: each < main_level.n or 0 */
    for (Py_ssize_t i = 0; i < n; i++) {
        const unsigned char *r = base + i * RECORD_SIZE;
        uint64_t repeat = u16_at(r + REPEAT_AT), block_num = u16_at(r + BLOCK_NUM_AT);
        uint64_t block_stride = u16_at(r + BLOCK_STRIDE_AT), block_size = u32_at(r + BLOCK_SIZE_AT);
        uint64_t repeat_stride = u16_at(r + REPEAT_STRIDE_AT);
        uint64_t units = ((repeat ? repeat : 1) - 1) * repeat_stride + ((block_num ? block_num : 1) - 1) * block_stride +
                         1; /* < 2**34 */
        repeat_max = repeat > repeat_max ? repeat : repeat_max;
        stride_max = block_stride > stride_max ? block_stride : stride_max;
        units_max = units > units_max ? units : units_max;
        size_max = block_size > size_max ? block_size : size_max;
        unsigned kind = r[KIND_AT];
        if (kind > KIND_WRITE) {
            simt_start |= kind == KIND_SIMT_START;
            block_finish |= kind == KIND_BLOCK_FINISH;
            continue;
        }
        /* extents: 0 for an empty access; else the span (where the batch does not saturate, as checked below) */
        uint64_t ext = (repeat == 0 || block_num == 0) ? 0 : units * block_size;
        if (ext == 0 || (r[FLAGS_AT] & FLAG_CLAIM)) {
            continue;
        }
        unsigned space = r[SPACE_AT], block_type = r[BLOCK_TYPE_AT];
        if (space > SPACE_LAST || block_type > BLOCK_TYPE_LAST) {
            unkeyed++;
            continue;
        }
        /* _patterns.ranges' pieces: one range (dense), one per repeat (rows of adjacent blocks with gaps between
         * them), or one per block (expand: strided blocks; coinciding ones are listed twice here, which changes no
         * coverage and no merged range). */
        int row_is_range = block_num <= 1 || block_stride <= 1;
        uint64_t row_length = (block_num <= 1 || block_stride == 0) ? block_size : block_num * block_size;
        int dense = row_is_range && (repeat <= 1 || repeat_stride * block_size <= row_length);
        int64_t count = dense ? 1 : (int64_t)(row_is_range ? repeat : repeat * block_num);
        /* _runs.piece_bounds: repeat x block_num, exact (count) above ``wide`` */
        int64_t bound = (int64_t)(repeat ? repeat : 1) * (int64_t)(block_num ? block_num : 1);
        bound = bound > wide ? count : bound;
        if (bound > chunk) {
            status = STATUS_FALLBACK; /* checked alone, in closed form (_check_huge) */
            break;
        }
        pieces_total += bound;
        pieces_listed += count;
        if (pieces_listed > MAX_PIECES) {
            status = STATUS_FALLBACK; /* numpy's path takes such a batch a bounded chunk at a time */
            break;
        }
        status = STATUS_FAST;
        if (!check) {
            continue;
        }
        /* _check_accesses' group (cumsum // CHUNK, as if the batch passed a chunk: judged at the end). A new group
         * is checked against the set with every earlier group's writes in it. */
        if (pieces_total / chunk != group) {
            group = pieces_total / chunk;
            before.n = all.n;
            before.full = all.full;
            memcpy(before.start, all.start, (size_t)all.n * sizeof *all.start);
            memcpy(before.stop, all.stop, (size_t)all.n * sizeof *all.stop);
        }
        uint64_t address = u64_at(r + ADDRESS_AT);
        uint64_t top = ((uint64_t)space << 60);
        if (space != SPACE_GM) {
            top |= ((uint64_t)block_type << 58) | ((uint64_t)u16_at(r + BLOCK_ID_AT) << 42);
        }
        int64_t slice = (int64_t)(i / slice_length);
        for (int64_t piece = 0; piece < count && status != STATUS_FALLBACK; piece++) {
            uint64_t start, stop;
            if (dense) {
                start = address;
                stop = address + ext;
            } else {
                /* offsets stay below 2**62 in a batch that does not saturate */
                uint64_t offset, size;
                if (row_is_range) {
                    offset = (uint64_t)piece * (repeat_stride * block_size);
                    size = row_length;
                } else {
                    uint64_t rep = (uint64_t)piece / block_num, blk = (uint64_t)piece % block_num;
                    offset = (rep * repeat_stride + blk * block_stride) * block_size;
                    size = block_size;
                }
                start = address + offset;
                if (start < address) {
                    start = UINT64_MAX;
                }
                stop = start + size;
                if (stop < start) {
                    stop = UINT64_MAX;
                }
            }
            if (stop < start) {
                stop = UINT64_MAX; /* _patterns.ends saturates */
            }
            uint64_t key = top;
            if (space == SPACE_GM) {
                key |= start < GM_ADDRESS_TOP ? start : GM_ADDRESS_TOP;
            } else {
                key |= start & ADDRESS_BITS;
            }
            uint64_t length = stop - start, key_stop = key + length; /* numpy's wrapping arithmetic */
            uint64_t inside;
            /* Inside the main range that last held a piece of this key's neighbourhood (or found by one search):
             * then the formula's two levels give length and 0 (the levels are disjoint), without four searches. */
            Py_ssize_t *hint = &main_hints[((key >> 60) ^ (key >> 42) ^ (key >> 12)) & (HINTS - 1)];
            if (main_level.n && !(main_level.starts[*hint] <= key && key_stop <= main_level.ends[*hint])) {
                Py_ssize_t lo = 0, hi = main_level.n;
                while (lo < hi) {
                    Py_ssize_t mid = lo + (hi - lo) / 2;
                    if (main_level.starts[mid] <= key) {
                        lo = mid + 1;
                    } else {
                        hi = mid;
                    }
                }
                *hint = lo ? lo - 1 : 0;
            }
            if (main_level.n && main_level.starts[*hint] <= key && key_stop <= main_level.ends[*hint] &&
                key <= key_stop) {
                inside = length;
            } else {
                inside = covered(&main_level, &pending_level, key, key_stop);
            }
            if (kind == KIND_READ) {
                if (length - inside == 0) {
                    continue;
                }
                /* Not defined before the batch. With the earlier groups' writes (what _check_rows checks)? */
                rechecked = 1;
                int found = before.n || before.full
                                ? inside_all(&main_level, &pending_level, &before, key, key_stop, &budget)
                                : 0;
                if (found < 0) {
                    status = STATUS_FALLBACK;
                    break;
                }
                if (!found) {
                    /* _recheck_in_order visits this slice: with every earlier write of the batch, none missing? */
                    if (!doubts || doubt[2 * doubts - 2] != group || doubt[2 * doubts - 1] != slice) {
                        doubt[2 * doubts] = group;
                        doubt[2 * doubts + 1] = slice;
                        doubts++;
                    }
                    if (inside_all(&main_level, &pending_level, &all, key, key_stop, &budget) != 1) {
                        status = STATUS_FALLBACK; /* a finding (or past this pass's bounds): numpy's path decides */
                        break;
                    }
                }
            } else if (length != 0 && inside != length) {
                /* not wholly defined before the batch (an empty range adds nothing in add_new either) */
                if (writes == slots) {
                    status = STATUS_FALLBACK; /* more than this pass lists */
                    break;
                }
                fresh[writes].start = key;
                fresh[writes].stop = key_stop;
                fresh[writes].group = group;
                fresh[writes].slice = slice;
                writes++;
                written_add(&all, key, key_stop);
            }
        }
        if (status == STATUS_FALLBACK) {
            break;
        }
    }
    int one_row = repeat_max <= 1 && stride_max <= 1;
    /* units_max * size_max >= 2**62, without the product (it may pass 2**64) */
    if (!one_row && size_max && units_max >= (SATURATE + size_max - 1) / size_max) {
        status = STATUS_FALLBACK;
    }
    /* A batch whose pieces come to exactly one chunk is one group, not two as counted on the way. */
    if (rechecked && pieces_total == chunk) {
        status = STATUS_FALLBACK;
    }
    if (status == STATUS_FAST) {
        /* Each write's call: its group's, and within the group, how many of the group's doubted slices start at
         * or before its own. Then each call's writes sorted and merged (merge_ranges: touching ranges joined),
         * which add_new adds alike. */
        Py_ssize_t d = 0, group_first = 0;
        for (Py_ssize_t w = 0; w < writes; w++) {
            if (pieces_total <= chunk) {
                fresh[w].group = 0;
            }
            while (d < doubts && doubt[2 * d] < fresh[w].group) {
                d++;
            }
            if (w == 0 || fresh[w].group != fresh[w - 1].group) {
                group_first = d;
            }
            while (d < doubts && doubt[2 * d] == fresh[w].group && doubt[2 * d + 1] <= fresh[w].slice) {
                d++;
            }
            fresh[w].call = (int64_t)(d - group_first);
        }
        Py_ssize_t first = 0;
        while (first < writes) {
            Py_ssize_t last = first;
            while (last < writes && fresh[last].group == fresh[first].group && fresh[last].call == fresh[first].call) {
                last++;
            }
            int64_t run_group = fresh[first].group, run_call = fresh[first].call;
            qsort(fresh + first, (size_t)(last - first), sizeof *fresh, by_start);
            uint64_t run_start = fresh[first].start, reach = fresh[first].stop;
            for (Py_ssize_t w = first + 1; w <= last; w++) {
                if (w == last || fresh[w].start > reach) {
                    out_keys[merged] = run_start;
                    out_stops[merged] = reach;
                    out_groups[merged] = run_group;
                    out_calls[merged] = run_call;
                    merged++;
                    if (w < last) {
                        run_start = fresh[w].start;
                        reach = fresh[w].stop;
                    }
                } else if (fresh[w].stop > reach) {
                    reach = fresh[w].stop;
                }
            }
            first = last;
        }
    }
    Py_END_ALLOW_THREADS

    PyMem_RawFree(fresh);
    PyMem_RawFree(doubt);
    PyMem_RawFree(ranges);
    release_all(held, HELD);
    if (status == STATUS_FALLBACK) {
        unkeyed = 0;
        merged = 0;
    }
    return Py_BuildValue("(iLnii)", status, unkeyed, merged, simt_start, block_finish);
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS, "initcheck's steady-state batch in one pass: see the module's source."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef definition = {
    PyModuleDef_HEAD_INIT, .m_name = "_initcheck", .m_size = -1, .m_methods = methods,
};

PyMODINIT_FUNC PyInit__initcheck(void) { return PyModule_Create(&definition); }
