/* The msSanitizer record-buffer decoder's per-record loops (sanitizerd/compat/records/slots.py, issue 29).
 *
 * A slot's record region is [u32 type][payload] back to back; numpy walks it by predicting loops and walking ~1 024
 * speculative segments in lockstep, then numbers the records (record_serials), groups them by type, gathers each
 * type's payloads and, after the converters, merges the types' events back into program order. Here each of those
 * is one plain pass, with the GIL released:
 *
 *   walk(words, limit, steps, starts) -> (count, stop)       the true path from word 0 (slots.walk)
 *   group(words, starts, count, steps, codes, rule_records, rule_after, last_type, next_serial,
 *         serials, order, offsets)                            record_serials, and the records grouped by type code
 *   gather(words, starts, size, out)                          slots._gather: each record's payload bytes, in order
 *   merge(parts, first, span, out) -> bool                    the types' events in serial order (stable)
 *   direct(words, starts, plan_of, plans, ...) -> bytearray    a window whose every record is in its converter's
 *                                                              usual case, straight to its events in program order
 *
 * Every value read from the records is checked against the table or array it indexes; every buffer's length is
 * checked here (the Python wrapper also checks dtypes and contiguity). Words are read as little-endian bytes (the
 * wire's order) whatever the host's, and without alignment assumptions.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define EVENT_SIZE 56
#define EVENT_SERIAL_AT 8

static inline uint32_t word_at(const unsigned char *words, Py_ssize_t i) {
    const unsigned char *p = words + 4 * i;
#if PY_LITTLE_ENDIAN
    uint32_t v;
    memcpy(&v, p, 4); /* one load (the byte form below is not always recognised as one) */
    return v;
#else
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
#endif
}

static inline uint64_t u64_at(const unsigned char *p) {
#if PY_LITTLE_ENDIAN
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
#else
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) {
        v = (v << 8) | p[i];
    }
    return v;
#endif
}

static int whole(Py_buffer *b, Py_ssize_t itemsize, const char *what) {
    if (b->len % itemsize) {
        PyErr_Format(PyExc_ValueError, "%s must be whole %zd-byte items", what, itemsize);
        return 0;
    }
    return 1;
}

/* walk(words, limit, steps, starts) -> (count, stop): record starts (word indices) of the true path from word 0
 * through words[:limit], written to ``starts`` (int64) until it is full, and the first word not walked: a word
 * that is no type the table can step over (past the table, or step 0), a record not all there, the limit, or the
 * record after the last that ``starts`` holds. */
static PyObject *walk(PyObject *Py_UNUSED(module), PyObject *args) {
    Py_buffer words, steps, starts;
    Py_ssize_t limit;
    if (!PyArg_ParseTuple(args, "y*ny*w*", &words, &limit, &steps, &starts)) {
        return NULL;
    }
    PyObject *result = NULL;
    if (!whole(&words, 4, "words") || !whole(&steps, 8, "steps") || !whole(&starts, 8, "starts")) {
        goto done;
    }
    {
        const unsigned char *w = (const unsigned char *)words.buf;
        const int64_t *step_of = (const int64_t *)steps.buf;
        int64_t *out = (int64_t *)starts.buf;
        Py_ssize_t n = words.len / 4, top = steps.len / 8, room = starts.len / 8, count = 0, at = 0;
        if (limit < n) {
            n = limit < 0 ? 0 : limit;
        }
        Py_BEGIN_ALLOW_THREADS
        while (at < n && count < room) {
            uint32_t t = word_at(w, at);
            int64_t step = (Py_ssize_t)t < top ? step_of[t] : 0;
            if (step <= 0 || step > n - at) { /* no type, or a record not all there */
                break;
            }
            out[count++] = at;
            at += (Py_ssize_t)step;
        }
        Py_END_ALLOW_THREADS
        result = Py_BuildValue("nn", count, at);
    }
done:
    PyBuffer_Release(&words);
    PyBuffer_Release(&steps);
    PyBuffer_Release(&starts);
    return result;
}

/* group(words, starts, count, codes, rule_records, rule_after, last_type, next_serial, serials, order, offsets):
 * for the first ``count`` records of ``starts`` (each a start of a known type: the walk's), their serial numbers
 * (record_serials: a record whose type has a rule bit in ``rule_records`` and whose record before, ``last_type``
 * for the first, has the same bit in ``rule_after`` takes the number of the record before; the others the next one
 * from ``next_serial``, mod 2**64 as numpy's int64 cumsum cast to uint64), and the records grouped by their type's
 * code (``codes``, intp by wire type): ``order`` the record indices code by code, each group in record order, and
 * ``offsets`` (ncodes + 1) where each group begins. */
static PyObject *group(PyObject *Py_UNUSED(module), PyObject *args) {
    Py_buffer words, starts, codes, rule_records, rule_after, serials, order, offsets;
    Py_ssize_t count;
    long long last_type;
    unsigned long long next_serial;
    if (!PyArg_ParseTuple(args, "y*y*ny*y*y*LKw*w*w*", &words, &starts, &count, &codes, &rule_records, &rule_after,
                          &last_type, &next_serial, &serials, &order, &offsets)) {
        return NULL;
    }
    PyObject *result = NULL;
    if (!whole(&words, 4, "words") || !whole(&starts, 8, "starts") || !whole(&codes, sizeof(Py_ssize_t), "codes") ||
        !whole(&rule_records, 4, "rule_records") || !whole(&rule_after, 4, "rule_after") ||
        !whole(&serials, 8, "serials") || !whole(&order, 8, "order") || !whole(&offsets, 8, "offsets")) {
        goto done;
    }
    {
        Py_ssize_t nwords = words.len / 4, ntypes = codes.len / (Py_ssize_t)sizeof(Py_ssize_t);
        Py_ssize_t nrules_records = rule_records.len / 4, nrules_after = rule_after.len / 4;
        Py_ssize_t ncodes = offsets.len / 8 - 1;
        if (count < 0 || count > starts.len / 8 || count > serials.len / 8 || count > order.len / 8 || ncodes < 0) {
            PyErr_SetString(PyExc_ValueError, "count is past starts, serials or order, or offsets is empty");
            goto done;
        }
        const unsigned char *w = (const unsigned char *)words.buf;
        const int64_t *at = (const int64_t *)starts.buf;
        const Py_ssize_t *code_of = (const Py_ssize_t *)codes.buf;
        const uint32_t *records_bits = (const uint32_t *)rule_records.buf;
        const uint32_t *after_bits = (const uint32_t *)rule_after.buf;
        uint64_t *serial = (uint64_t *)serials.buf;
        int64_t *ordered = (int64_t *)order.buf;
        int64_t *begin = (int64_t *)offsets.buf;
        const char *bad = NULL;
        Py_BEGIN_ALLOW_THREADS
        memset(begin, 0, (size_t)(ncodes + 1) * sizeof(int64_t));
        uint64_t number = (uint64_t)next_serial - 1u;
        uint32_t before_bits = (last_type >= 0 && last_type < nrules_after) ? after_bits[last_type] : 0;
        for (Py_ssize_t i = 0; i < count; i++) {
            int64_t start = at[i];
            if (start < 0 || start >= nwords) {
                bad = "a record start is past the words";
                break;
            }
            uint32_t t = word_at(w, start);
            if ((Py_ssize_t)t >= ntypes) {
                bad = "a record's type is past the code table";
                break;
            }
            Py_ssize_t code = code_of[t];
            if (code < 0 || code >= ncodes) {
                bad = "a record's type code is past the groups";
                break;
            }
            uint32_t mine = (Py_ssize_t)t < nrules_records ? records_bits[t] : 0;
            if (!(mine & before_bits)) {
                number++;
            }
            serial[i] = number;
            before_bits = (Py_ssize_t)t < nrules_after ? after_bits[t] : 0;
            begin[code + 1]++;
        }
        if (!bad) {
            for (Py_ssize_t c = 0; c < ncodes; c++) {
                begin[c + 1] += begin[c];
            }
            /* Second pass: each record to its group's next place (begin[c] is moved on, then put back). Its
             * reads are checked again: nothing read from a buffer is trusted across passes. */
            for (Py_ssize_t i = 0; i < count; i++) {
                int64_t start = at[i];
                uint32_t t = start >= 0 && start < nwords ? word_at(w, start) : UINT32_MAX;
                Py_ssize_t code = (Py_ssize_t)t < ntypes ? code_of[t] : -1;
                if (code < 0 || code >= ncodes || begin[code] < 0 || begin[code] >= count) {
                    bad = "the records changed while they were grouped";
                    break;
                }
                ordered[begin[code]++] = i;
            }
            for (Py_ssize_t c = ncodes; c > 0; c--) {
                begin[c] = begin[c - 1];
            }
            begin[0] = 0;
        }
        Py_END_ALLOW_THREADS
        if (bad) {
            PyErr_SetString(PyExc_ValueError, bad);
            goto done;
        }
        Py_INCREF(Py_None);
        result = Py_None;
    }
done:
    PyBuffer_Release(&words);
    PyBuffer_Release(&starts);
    PyBuffer_Release(&codes);
    PyBuffer_Release(&rule_records);
    PyBuffer_Release(&rule_after);
    PyBuffer_Release(&serials);
    PyBuffer_Release(&order);
    PyBuffer_Release(&offsets);
    return result;
}

/* gather(words, starts, size, out): the ``size`` payload bytes after the type word of each record at ``starts``
 * (int64 word indices), one after another in ``out`` (len(starts) * size bytes). IndexError for a record not all
 * within ``words``, as numpy's take raises. */
static PyObject *gather(PyObject *Py_UNUSED(module), PyObject *args) {
    Py_buffer words, starts, out;
    Py_ssize_t size;
    if (!PyArg_ParseTuple(args, "y*y*nw*", &words, &starts, &size, &out)) {
        return NULL;
    }
    PyObject *result = NULL;
    if (!whole(&words, 4, "words") || !whole(&starts, 8, "starts")) {
        goto done;
    }
    {
        Py_ssize_t nwords = words.len / 4, count = starts.len / 8;
        if (size < 0 || size % 4 || (count && size > out.len / count) || out.len != count * size) {
            PyErr_SetString(PyExc_ValueError, "size must be whole words and out len(starts) * size bytes");
            goto done;
        }
        Py_ssize_t payload_words = size / 4;
        const unsigned char *w = (const unsigned char *)words.buf;
        const int64_t *at = (const int64_t *)starts.buf;
        unsigned char *to = (unsigned char *)out.buf;
        int outside = 0;
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t i = 0; i < count; i++) {
            int64_t start = at[i];
            if (start < 0 || start >= nwords - payload_words) {
                outside = 1;
                break;
            }
            memcpy(to + i * size, w + 4 * (start + 1), (size_t)size);
        }
        Py_END_ALLOW_THREADS
        if (outside) {
            PyErr_SetString(PyExc_IndexError, "a record runs past the words");
            goto done;
        }
        Py_INCREF(Py_None);
        result = Py_None;
    }
done:
    PyBuffer_Release(&words);
    PyBuffer_Release(&starts);
    PyBuffer_Release(&out);
    return result;
}

/* merge(parts, first, span, out) -> bool: the events of ``parts`` (a sequence of contiguous event arrays, each in
 * serial order) into ``out`` in serial order, stable (a serial's events in the order of the parts, then of each
 * part): what a stable argsort of their concatenated serials gives. A counting sort over the serials ``first`` ..
 * ``first + span - 1``; False, with ``out`` untouched, when some event's serial is outside them. */
#define MAX_PARTS 256
static PyObject *merge(PyObject *Py_UNUSED(module), PyObject *args) {
    PyObject *parts_arg;
    unsigned long long first;
    Py_ssize_t span;
    Py_buffer out;
    if (!PyArg_ParseTuple(args, "OKnw*", &parts_arg, &first, &span, &out)) {
        return NULL;
    }
    PyObject *result = NULL;
    Py_buffer parts[MAX_PARTS];
    Py_ssize_t nparts = 0, total = 0;
    int64_t *next = NULL;
    PyObject *seq = PySequence_Fast(parts_arg, "parts must be a sequence of event arrays");
    if (seq == NULL) {
        goto done;
    }
    if (PySequence_Fast_GET_SIZE(seq) > MAX_PARTS || span < 0 || span > PY_SSIZE_T_MAX / 8 - 1) {
        PyErr_SetString(PyExc_ValueError, "too many parts, or a span out of range");
        goto done;
    }
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); i++) {
        if (PyObject_GetBuffer(PySequence_Fast_GET_ITEM(seq, i), &parts[nparts], PyBUF_SIMPLE) < 0) {
            goto done;
        }
        nparts++;
        if (!whole(&parts[i], EVENT_SIZE, "each part")) {
            goto done;
        }
        total += parts[i].len;
    }
    if (total != out.len) {
        PyErr_SetString(PyExc_ValueError, "out must hold every part's events");
        goto done;
    }
    next = PyMem_Calloc((size_t)span + 1, sizeof(int64_t));
    if (next == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    {
        int inside = 1;
        unsigned char *to = (unsigned char *)out.buf;
        int64_t events = (int64_t)(total / EVENT_SIZE);
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t p = 0; p < nparts && inside; p++) {
            const unsigned char *e = (const unsigned char *)parts[p].buf;
            Py_ssize_t n = parts[p].len / EVENT_SIZE;
            for (Py_ssize_t i = 0; i < n; i++) {
                uint64_t key = u64_at(e + i * EVENT_SIZE + EVENT_SERIAL_AT) - (uint64_t)first;
                if (key >= (uint64_t)span) { /* below first wraps past span too */
                    inside = 0;
                    break;
                }
                next[key + 1]++;
            }
        }
        if (inside) {
            for (Py_ssize_t k = 0; k < span; k++) {
                next[k + 1] += next[k];
            }
            for (Py_ssize_t p = 0; p < nparts && inside; p++) {
                const unsigned char *e = (const unsigned char *)parts[p].buf;
                Py_ssize_t n = parts[p].len / EVENT_SIZE;
                for (Py_ssize_t i = 0; i < n; i++) {
                    uint64_t key = u64_at(e + i * EVENT_SIZE + EVENT_SERIAL_AT) - (uint64_t)first;
                    /* checked again (nothing read is trusted across passes): never a write past out */
                    if (key >= (uint64_t)span || next[key] < 0 || next[key] >= events) {
                        inside = 0;
                        break;
                    }
                    memcpy(to + (next[key]++) * EVENT_SIZE, e + i * EVENT_SIZE, EVENT_SIZE);
                }
            }
        }
        Py_END_ALLOW_THREADS
        result = PyBool_FromLong(inside);
    }
done:
    PyMem_Free(next);
    for (Py_ssize_t i = 0; i < nparts; i++) {
        PyBuffer_Release(&parts[i]);
    }
    Py_XDECREF(seq);
    PyBuffer_Release(&out);
    return result;
}

/* One column of pack: its buffer, and how it reads (itemsize 1, 2, 4 or 8; signed; a bool). */
typedef struct {
    Py_buffer view;
    int held;
    int size;
    int is_signed;
    int is_bool;
    int word;
    int shift;
    uint64_t mask;
} Column;

/* A column's values in the host's order (column_kind refuses any other) */
static inline uint64_t load_u64(const unsigned char *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

static inline uint32_t load_u32(const unsigned char *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static inline uint16_t load_u16(const unsigned char *p) {
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}

#define PACK_BLOCK 256

/* Reads a column's format: native or little-endian integers and bools only (anything else: 0, the caller packs
 * with numpy). */
static int column_kind(Column *c) {
    const char *f = c->view.format ? c->view.format : "B";
    if (*f == '<' || *f == '=' || *f == '@') {
#if PY_BIG_ENDIAN
        if (*f == '<') {
            return 0;
        }
#endif
        f++;
    }
    if (f[0] == '\0' || f[1] != '\0' || strchr("bBhHiIlLqQ?", f[0]) == NULL) {
        return 0;
    }
    Py_ssize_t size = c->view.itemsize;
    if (size != 1 && size != 2 && size != 4 && size != 8) {
        return 0;
    }
    c->size = (int)size;
    c->is_bool = f[0] == '?';
    c->is_signed = f[0] >= 'a' && f[0] <= 'z';
    return 1;
}

#define EVENT_WORDS 7

/* pack(out, constants, columns) -> bool: base.pack's events: every row of ``out`` (n x 7 u64, any row stride,
 * columns 8 bytes apart) set to ``constants`` (7 u64) OR-ed with each column's value cut to its field (``mask``,
 * after the value is read as a u64: sign-extended for a signed type, 0 or 1 for a bool) and shifted to it.
 * ``columns``: (array of n, word, shift, mask) each. False, with ``out`` untouched, for a column that is not a 1-D
 * array of n integers or bools (numpy packs it). */
#define MAX_COLUMNS 32
static PyObject *pack(PyObject *Py_UNUSED(module), PyObject *args) {
    PyObject *out_arg, *columns_arg;
    Py_buffer constants;
    if (!PyArg_ParseTuple(args, "Oy*O", &out_arg, &constants, &columns_arg)) {
        return NULL;
    }
    PyObject *result = NULL, *seq = NULL;
    Py_buffer out;
    int out_held = 0;
    Column columns[MAX_COLUMNS];
    Py_ssize_t ncolumns = 0;
    if (constants.len != EVENT_WORDS * 8) {
        PyErr_SetString(PyExc_ValueError, "constants must be 7 u64");
        goto done;
    }
    if (PyObject_GetBuffer(out_arg, &out, PyBUF_STRIDES | PyBUF_WRITABLE) < 0) {
        goto done;
    }
    out_held = 1;
    if (out.ndim != 2 || out.itemsize != 8 || out.shape[1] != EVENT_WORDS || (out.shape[0] > 0 && out.strides[1] != 8) ||
        out.shape[0] < 0) {
        PyErr_SetString(PyExc_ValueError, "out must be n rows of 7 u64, each row's words adjacent");
        goto done;
    }
    Py_ssize_t n = out.shape[0];
    seq = PySequence_Fast(columns_arg, "columns must be a sequence");
    if (seq == NULL) {
        goto done;
    }
    if (PySequence_Fast_GET_SIZE(seq) > MAX_COLUMNS) {
        result = PyBool_FromLong(0);
        goto done;
    }
    for (Py_ssize_t k = 0; k < PySequence_Fast_GET_SIZE(seq); k++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, k), *array;
        Column *c = &columns[ncolumns];
        unsigned long long mask;
        if (!PyArg_ParseTuple(item, "OiiK", &array, &c->word, &c->shift, &mask)) {
            goto done;
        }
        if (c->word < 0 || c->word >= EVENT_WORDS || c->shift < 0 || c->shift > 63) {
            PyErr_SetString(PyExc_ValueError, "a column's word or shift is outside the event");
            goto done;
        }
        c->mask = mask;
        if (PyObject_GetBuffer(array, &c->view, PyBUF_STRIDES | PyBUF_FORMAT) < 0) {
            PyErr_Clear();
            result = PyBool_FromLong(0);
            goto done;
        }
        c->held = 1;
        ncolumns++;
        if (c->view.ndim != 1 || c->view.shape[0] != n || !column_kind(c)) {
            result = PyBool_FromLong(0);
            goto done;
        }
    }
    {
        uint64_t constant[EVENT_WORDS];
        memcpy(constant, constants.buf, sizeof(constant));
        unsigned char *base = (unsigned char *)out.buf;
        Py_ssize_t row = out.strides[0];
        Py_BEGIN_ALLOW_THREADS
        /* Blocks of rows that stay in the core's first cache while every column is OR-ed in. */
        for (Py_ssize_t first = 0; first < n; first += PACK_BLOCK) {
            Py_ssize_t last = first + PACK_BLOCK < n ? first + PACK_BLOCK : n;
            for (Py_ssize_t i = first; i < last; i++) {
                memcpy(base + i * row, constant, sizeof(constant));
            }
            for (Py_ssize_t k = 0; k < ncolumns; k++) {
                const Column *c = &columns[k];
                unsigned char *at = base + 8 * c->word;
                const unsigned char *from = (const unsigned char *)c->view.buf;
                Py_ssize_t stride = c->view.strides[0];
                uint64_t mask = c->mask;
                int shift = c->shift;
#define OR_IN(READ)                                                                                                  \
    for (Py_ssize_t i = first; i < last; i++) {                                                                      \
        const unsigned char *p = from + i * stride;                                                                  \
        uint64_t w;                                                                                                  \
        memcpy(&w, at + i * row, 8);                                                                                 \
        w |= ((uint64_t)(READ) & mask) << shift;                                                                     \
        memcpy(at + i * row, &w, 8);                                                                                 \
    }
                if (c->is_bool) {
                    OR_IN(*p != 0)
                } else if (c->size == 8) {
                    OR_IN(load_u64(p))
                } else if (c->size == 4) {
                    if (c->is_signed) {
                        OR_IN((int64_t)(int32_t)load_u32(p))
                    } else {
                        OR_IN(load_u32(p))
                    }
                } else if (c->size == 2) {
                    if (c->is_signed) {
                        OR_IN((int64_t)(int16_t)load_u16(p))
                    } else {
                        OR_IN(load_u16(p))
                    }
                } else if (c->is_signed) {
                    OR_IN((int64_t)(int8_t)*p)
                } else {
                    OR_IN(*p)
                }
#undef OR_IN
            }
        }
        Py_END_ALLOW_THREADS
        result = PyBool_FromLong(1);
    }
done:
    for (Py_ssize_t k = 0; k < ncolumns; k++) {
        if (columns[k].held) {
            PyBuffer_Release(&columns[k].view);
        }
    }
    Py_XDECREF(seq);
    if (out_held) {
        PyBuffer_Release(&out);
    }
    PyBuffer_Release(&constants);
    return result;
}

/* Reads an unsigned little-endian field of 1, 2, 4 or 8 bytes (the wire's order) at p. */
static inline uint64_t field_at(const unsigned char *p, int size) {
#if PY_LITTLE_ENDIAN
    switch (size) { /* the usual sizes as one load each */
    case 1:
        return p[0];
    case 2:
        return load_u16(p);
    case 4:
        return load_u32(p);
    case 8:
        return load_u64(p);
    default:
        break;
    }
#endif
    uint64_t v = 0;
    for (int i = size - 1; i >= 0; i--) {
        v = (v << 8) | p[i];
    }
    return v;
}

static int fits(Py_ssize_t at, Py_ssize_t size, Py_ssize_t itemsize) {
    return at >= 0 && size >= 1 && size <= 8 && at <= itemsize - size;
}

/* A converter's member offsets (``count`` i64, from its Python record dtype) into ``at``, each checked against its
 * size and the record's: 0 with a ValueError naming ``who`` where one is outside the record. */
static int member_offsets(const Py_buffer *offsets, const int *sizes, int count, Py_ssize_t itemsize, Py_ssize_t *at,
                          const char *who) {
    for (int k = 0; k < count; k++) {
        int64_t offset;
        memcpy(&offset, (const unsigned char *)offsets->buf + 8 * k, 8);
        if (!fits((Py_ssize_t)offset, sizes[k], itemsize)) {
            PyErr_Format(PyExc_ValueError, "%s: a member is outside the record", who);
            return 0;
        }
        at[k] = (Py_ssize_t)offset;
    }
    return 1;
}

/* One record field of ``fields``: where it is in a record, its size, the top it is saturated at, where it goes. */
typedef struct {
    Py_ssize_t at;
    int size;
    uint64_t top;
    int word;
    int shift;
    uint64_t mask;
} Field;

#define MAX_FIELDS 16

/* fields(out, records, itemsize, serials, constants, fields) -> None: one event per record (base.record_events
 * with saturated columns, the synchronization converters' shape): each row of ``out`` (n x 7 u64, contiguous) is
 * ``constants`` (7 u64), the record's serial (u64, word 1), and each of ``fields`` -- (offset, size, top, word,
 * shift, mask): the record's unsigned little-endian field of ``size`` bytes at ``offset``, min(value, top), cut
 * to ``mask`` and shifted -- OR-ed in. ``records``: n records of ``itemsize`` bytes back to back. */
static PyObject *fields(PyObject *Py_UNUSED(module), PyObject *args) {
    Py_buffer out, records, serials, constants;
    Py_ssize_t itemsize;
    PyObject *fields_arg;
    if (!PyArg_ParseTuple(args, "w*y*ny*y*O", &out, &records, &itemsize, &serials, &constants, &fields_arg)) {
        return NULL;
    }
    PyObject *result = NULL, *seq = NULL;
    Field spec[MAX_FIELDS];
    Py_ssize_t nfields = 0;
    if (itemsize <= 0 || records.len % itemsize || !whole(&serials, 8, "serials") ||
        !whole(&out, 8 * EVENT_WORDS, "out")) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_ValueError, "records must be whole items of a positive itemsize");
        }
        goto done;
    }
    Py_ssize_t n = records.len / itemsize;
    if (serials.len / 8 != n || out.len / (8 * EVENT_WORDS) != n || constants.len != 8 * EVENT_WORDS) {
        PyErr_SetString(PyExc_ValueError, "serials, out and records must have one item per record, constants 7 u64");
        goto done;
    }
    seq = PySequence_Fast(fields_arg, "fields must be a sequence");
    if (seq == NULL) {
        goto done;
    }
    nfields = PySequence_Fast_GET_SIZE(seq);
    if (nfields > MAX_FIELDS) {
        PyErr_SetString(PyExc_ValueError, "too many fields");
        goto done;
    }
    for (Py_ssize_t k = 0; k < nfields; k++) {
        Field *f = &spec[k];
        unsigned long long top, mask;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, k), "niKiiK", &f->at, &f->size, &top, &f->word, &f->shift,
                              &mask)) {
            goto done;
        }
        if (!fits(f->at, f->size, itemsize) || f->word < 0 || f->word >= EVENT_WORDS || f->shift < 0 ||
            f->shift > 63) {
            PyErr_SetString(PyExc_ValueError, "a field is outside the record or the event");
            goto done;
        }
        f->top = top;
        f->mask = mask;
    }
    {
        uint64_t constant[EVENT_WORDS];
        memcpy(constant, constants.buf, sizeof(constant));
        const unsigned char *rec = (const unsigned char *)records.buf;
        const unsigned char *ser = (const unsigned char *)serials.buf;
        unsigned char *o = (unsigned char *)out.buf;
        Py_BEGIN_ALLOW_THREADS
        /* A block of rows at a time (in the core's first cache), one field at a time with its size's load. */
        for (Py_ssize_t first = 0; first < n; first += PACK_BLOCK) {
            Py_ssize_t last = first + PACK_BLOCK < n ? first + PACK_BLOCK : n;
            for (Py_ssize_t i = first; i < last; i++) {
                uint64_t w[EVENT_WORDS], serial;
                memcpy(w, constant, sizeof(w));
                memcpy(&serial, ser + 8 * i, 8);
                w[1] |= serial;
                memcpy(o + i * 8 * EVENT_WORDS, w, sizeof(w));
            }
            for (Py_ssize_t k = 0; k < nfields; k++) {
                const Field *f = &spec[k];
                const unsigned char *from = rec + f->at;
                unsigned char *to = o + 8 * f->word;
                uint64_t top = f->top, mask = f->mask;
                int shift = f->shift;
#define FIELD_IN(SIZE)                                                                                               \
    for (Py_ssize_t i = first; i < last; i++) {                                                                      \
        uint64_t v = field_at(from + i * itemsize, SIZE), w;                                                         \
        v = v > top ? top : v;                                                                                       \
        memcpy(&w, to + i * 8 * EVENT_WORDS, 8);                                                                     \
        w |= (v & mask) << shift;                                                                                    \
        memcpy(to + i * 8 * EVENT_WORDS, &w, 8);                                                                     \
    }
                switch (f->size) {
                case 1:
                    FIELD_IN(1)
                    break;
                case 2:
                    FIELD_IN(2)
                    break;
                case 4:
                    FIELD_IN(4)
                    break;
                case 8:
                    FIELD_IN(8)
                    break;
                default:
                    FIELD_IN(f->size)
                    break;
                }
#undef FIELD_IN
            }
        }
        Py_END_ALLOW_THREADS
        Py_INCREF(Py_None);
        result = Py_None;
    }
done:
    Py_XDECREF(seq);
    PyBuffer_Release(&out);
    PyBuffer_Release(&records);
    PyBuffer_Release(&serials);
    PyBuffer_Release(&constants);
    return result;
}

/* DMA_MOV's record: where each member is (offsets from moves.DMA_MOV, checked against the record size here) and
 * its size. */
enum { D_DST, D_SRC, D_NBURST, D_LEN, D_SSTRIDE, D_DSTRIDE, D_DMEM, D_SMEM, D_PAD, D_BYTE, D_PC, D_BLOCK, D_COUNT };
static const int dma_size[D_COUNT] = {8, 8, 2, 2, 2, 2, 1, 1, 1, 1, 8, 2};
#define NO_TABLE_VALUE 0xFF

/* BinaryOpRecord's members, operand by operand (src0, src1, dst: address, block count, block size, block stride,
 * repeat stride, data bits), then the mask, mask mode, repeat, pc and block id; offsets from vector.BINARY_DTYPE. */
enum { B_ADDR, B_NUM, B_SIZE, B_BSTRIDE, B_RSTRIDE, B_BITS, B_OPERAND };
enum { B_MASK0 = 3 * B_OPERAND, B_MASK1, B_MODE, B_REPEAT, B_PC, B_BLOCK, B_COUNT };
static const int binary_size[B_COUNT] = {8, 1, 2, 2, 2, 1, 8, 1, 2, 2, 2, 1, 8, 1, 2, 2, 2, 1, 8, 8, 1, 1, 8, 2};

/* direct's plans: one per wire type that converts whole (slots.DirectPlans builds them from the converters'
 * usual cases), each PLAN_WORDS u64: its kind, the payload's bytes, its fields' count, then the constant rows (up
 * to 3 x 7 u64), the member offsets (dma_mov's D_*, binary's B_*) and the fields (offset, size, top, word, shift,
 * mask each). */
#define PLAN_WORDS 128
#define PLAN_KIND 0
#define PLAN_ITEMSIZE 1
#define PLAN_NFIELDS 2
#define PLAN_CONSTANTS 8
#define PLAN_OFFSETS 32
#define PLAN_FIELDS 56
#define PLAN_MAX_FIELDS 8
#define PLAN_PLACE 104 /* the offsets of the record's Location pc, fileNo and lineNo (u64 each); past it: none */
#define MAX_PLANS 64
enum { KIND_FIELDS = 1, KIND_DMA_MOV = 2, KIND_BINARY = 3 };

typedef struct {
    int kind;
    int events; /* per record */
    Py_ssize_t itemsize;
    uint64_t constant[3][EVENT_WORDS];
    Py_ssize_t at[B_COUNT];
    Field field[PLAN_MAX_FIELDS];
    int nfields;
    int placed; /* the record's place is read (pc, fileNo, lineNo at place[]) */
    Py_ssize_t place[3];
} Plan;

/* The usual-case checks of dma_mov and binary below, for one record (a FIELDS record always is); pipe_of and
 * space_of are read for DMA_MOV only. */
static inline int usual_record(const Plan *plan, const unsigned char *r, const unsigned char *pipe_of,
                               const unsigned char *space_of) {
    const Py_ssize_t *at = plan->at;
    if (plan->kind == KIND_DMA_MOV) {
        uint64_t len = field_at(r + at[D_LEN], 2);
        unsigned smem = r[at[D_SMEM]], dmem = r[at[D_DMEM]];
        return r[at[D_PAD]] == 0 && r[at[D_BYTE]] == 0 && pipe_of[256 * smem + dmem] != NO_TABLE_VALUE &&
               space_of[smem] != NO_TABLE_VALUE && space_of[dmem] != NO_TABLE_VALUE &&
               len + field_at(r + at[D_SSTRIDE], 2) <= 0xFFFF && len + field_at(r + at[D_DSTRIDE], 2) <= 0xFFFF;
    }
    if (plan->kind == KIND_BINARY) {
        int full = field_at(r + at[B_MASK0], 8) == UINT64_MAX && field_at(r + at[B_MASK1], 8) == UINT64_MAX;
        if (r[at[B_MODE]] != 0 || r[at[B_REPEAT]] == 0) {
            return 0;
        }
        for (int k = 0; k < 3; k++) {
            const Py_ssize_t *a = at + k * B_OPERAND;
            uint64_t num = r[a[B_NUM]], size = field_at(r + a[B_SIZE], 2), bits = r[a[B_BITS]];
            int eligible = num == 8 && size == 32 && bits >= 16;
            if (num == 0 || size == 0 || !(full || !eligible)) {
                return 0;
            }
        }
    }
    return 1;
}

static inline void store_u64(unsigned char *p, uint64_t v) { memcpy(p, &v, 8); }

/* One record's events into ``o`` (plan->events rows of 7 u64): what fields, dma_mov and binary write. Each
 * word is made in a register and stored once: OR-ing into an array on the stack and copying it out stalled on
 * every copy (a 16-byte load cannot take its bytes from two 8-byte stores still in flight). */
static inline void record_events(const Plan *plan, const unsigned char *r, uint64_t serial,
                                 const unsigned char *pipe_of, const unsigned char *space_of, unsigned char *o) {
    const Py_ssize_t *at = plan->at;
    const uint64_t(*c)[EVENT_WORDS] = plan->constant;
    if (plan->kind == KIND_FIELDS) {
        /* the words in registers: a field's word is a switch (the same for every record of the plan) */
        uint64_t e0 = c[0][0], e1 = c[0][1] | serial, e2 = c[0][2], e3 = c[0][3], e4 = c[0][4], e5 = c[0][5];
        uint64_t e6 = c[0][6];
        for (int k = 0; k < plan->nfields; k++) {
            const Field *f = &plan->field[k];
            uint64_t v = field_at(r + f->at, f->size);
            v = ((v > f->top ? f->top : v) & f->mask) << f->shift;
            switch (f->word) {
            case 0:
                e0 |= v;
                break;
            case 1:
                e1 |= v;
                break;
            case 2:
                e2 |= v;
                break;
            case 3:
                e3 |= v;
                break;
            case 4:
                e4 |= v;
                break;
            case 5:
                e5 |= v;
                break;
            default:
                e6 |= v;
                break;
            }
        }
        store_u64(o, e0);
        store_u64(o + 8, e1);
        store_u64(o + 16, e2);
        store_u64(o + 24, e3);
        store_u64(o + 32, e4);
        store_u64(o + 40, e5);
        store_u64(o + 48, e6);
    } else if (plan->kind == KIND_DMA_MOV) {
        uint64_t len = field_at(r + at[D_LEN], 2), nburst = field_at(r + at[D_NBURST], 2);
        unsigned smem = r[at[D_SMEM]], dmem = r[at[D_DMEM]];
        uint64_t pipe = pipe_of[256 * smem + dmem], block = field_at(r + at[D_BLOCK], 2);
        uint64_t pc = field_at(r + at[D_PC], 8);
        uint64_t address[2] = {field_at(r + at[D_SRC], 8), field_at(r + at[D_DST], 8)};
        uint64_t stride[2] = {field_at(r + at[D_SSTRIDE], 2), field_at(r + at[D_DSTRIDE], 2)};
        uint64_t space[2] = {space_of[smem], space_of[dmem]};
        for (int k = 0; k < 2; k++) {
            unsigned char *to = o + k * EVENT_SIZE;
            store_u64(to, c[k][0] | address[k]);
            store_u64(to + 8, c[k][1] | serial);
            store_u64(to + 16, c[k][2] | pc);
            store_u64(to + 24, c[k][3]);
            store_u64(to + 32, c[k][4] | len | (nburst << 32) | ((len + stride[k]) << 48));
            store_u64(to + 40, c[k][5] | block | (space[k] << 40) | (pipe << 48));
            store_u64(to + 48, c[k][6]);
        }
    } else {
        uint64_t repeat = r[at[B_REPEAT]], pc = field_at(r + at[B_PC], 8), block = field_at(r + at[B_BLOCK], 2);
        for (int k = 0; k < 3; k++) {
            const Py_ssize_t *a = at + k * B_OPERAND;
            unsigned char *to = o + k * EVENT_SIZE;
            store_u64(to, c[k][0] | field_at(r + a[B_ADDR], 8));
            store_u64(to + 8, c[k][1] | serial);
            store_u64(to + 16, c[k][2] | pc);
            store_u64(to + 24, c[k][3] | field_at(r + a[B_SIZE], 2));
            store_u64(to + 32, c[k][4] | (uint64_t)r[a[B_NUM]] | (field_at(r + a[B_BSTRIDE], 2) << 16) |
                                   (repeat << 32) | (field_at(r + a[B_RSTRIDE], 2) << 48));
            store_u64(to + 40, c[k][5] | block);
            store_u64(to + 48, c[k][6]);
        }
    }
}

/* dma_mov(out, records, itemsize, serials, offsets, pipe_of_pair, space_of, read, write) -> bool: moves.dma_mov's
 * usual case -- every record with no pad and no byte mode, a pipe for its pair of memory kinds, a space for each,
 * and read and write strides (lenBurst + stride, in 32-byte blocks) within 16 bits -- as each record's read then
 * its write (``out``: 2n x 7 u64): ``read``/``write`` (7 u64 each: kind, block size, block stride, block type)
 * with the address, serial, pc, block id, lenBurst as the block count, nBurst as the repeat, the stride, the
 * space and the pipe. False, with ``out`` untouched, when any record is not so (numpy converts the batch). */
static PyObject *dma_mov(PyObject *Py_UNUSED(module), PyObject *args) {
    Py_buffer out, records, serials, offsets, pairs, spaces, read, write;
    Py_ssize_t itemsize;
    if (!PyArg_ParseTuple(args, "w*y*ny*y*y*y*y*y*", &out, &records, &itemsize, &serials, &offsets, &pairs, &spaces,
                          &read, &write)) {
        return NULL;
    }
    PyObject *result = NULL;
    if (itemsize <= 0 || records.len % itemsize) {
        PyErr_SetString(PyExc_ValueError, "records must be whole items of a positive itemsize");
        goto done;
    }
    Py_ssize_t n = records.len / itemsize;
    if (serials.len != 8 * n || out.len != 2 * 8 * EVENT_WORDS * n || offsets.len != 8 * D_COUNT ||
        pairs.len != 256 * 256 || spaces.len != 256 || read.len != 8 * EVENT_WORDS || write.len != 8 * EVENT_WORDS) {
        PyErr_SetString(PyExc_ValueError, "dma_mov: a buffer's length does not match the records");
        goto done;
    }
    Plan plan = {.kind = KIND_DMA_MOV, .events = 2, .itemsize = itemsize};
    if (!member_offsets(&offsets, dma_size, D_COUNT, itemsize, plan.at, "dma_mov")) {
        goto done;
    }
    memcpy(plan.constant[0], read.buf, sizeof(plan.constant[0]));
    memcpy(plan.constant[1], write.buf, sizeof(plan.constant[1]));
    {
        const unsigned char *rec = (const unsigned char *)records.buf, *ser = (const unsigned char *)serials.buf;
        const unsigned char *pipe_of = (const unsigned char *)pairs.buf, *space_of = (const unsigned char *)spaces.buf;
        unsigned char *o = (unsigned char *)out.buf;
        int usual = 1;
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t i = 0; i < n && usual; i++) {
            usual = usual_record(&plan, rec + i * itemsize, pipe_of, space_of);
        }
        for (Py_ssize_t i = 0; usual && i < n; i++) {
            uint64_t serial;
            memcpy(&serial, ser + 8 * i, 8);
            record_events(&plan, rec + i * itemsize, serial, pipe_of, space_of, o + i * 2 * EVENT_SIZE);
        }
        Py_END_ALLOW_THREADS
        result = PyBool_FromLong(usual);
    }
done:
    PyBuffer_Release(&out);
    PyBuffer_Release(&records);
    PyBuffer_Release(&serials);
    PyBuffer_Release(&offsets);
    PyBuffer_Release(&pairs);
    PyBuffer_Release(&spaces);
    PyBuffer_Release(&read);
    PyBuffer_Release(&write);
    return result;
}

/* binary(out, records, itemsize, serials, offsets, constants) -> bool: vector.convert_binary's usual case (BINARY_OP
 * and VREDUCEV2_BINARY off the cube, on a chip that aligns by space): every record in MASK_NORM with a repeat, and
 * each operand with blocks of bytes whose mask msSanitizer keeps as it is (all ones, or not 8 x 32-byte blocks of
 * >= 16-bit data) -- one event per operand, src0's, src1's, then dst's (``out``: 3n x 7 u64), each ``constants``'
 * row (3 x 7 u64: kind, space, pipe, block type) with the operand's pattern, the serial, the pc and the block id.
 * False, with ``out`` untouched, when any record is not so (numpy converts the batch). */
static PyObject *binary(PyObject *Py_UNUSED(module), PyObject *args) {
    Py_buffer out, records, serials, offsets, constants;
    Py_ssize_t itemsize;
    if (!PyArg_ParseTuple(args, "w*y*ny*y*y*", &out, &records, &itemsize, &serials, &offsets, &constants)) {
        return NULL;
    }
    PyObject *result = NULL;
    if (itemsize <= 0 || records.len % itemsize) {
        PyErr_SetString(PyExc_ValueError, "records must be whole items of a positive itemsize");
        goto done;
    }
    Py_ssize_t n = records.len / itemsize;
    if (serials.len != 8 * n || out.len != 3 * 8 * EVENT_WORDS * n || offsets.len != 8 * B_COUNT ||
        constants.len != 3 * 8 * EVENT_WORDS) {
        PyErr_SetString(PyExc_ValueError, "binary: a buffer's length does not match the records");
        goto done;
    }
    Plan plan = {.kind = KIND_BINARY, .events = 3, .itemsize = itemsize};
    if (!member_offsets(&offsets, binary_size, B_COUNT, itemsize, plan.at, "binary")) {
        goto done;
    }
    memcpy(plan.constant, constants.buf, sizeof(plan.constant));
    {
        const unsigned char *rec = (const unsigned char *)records.buf, *ser = (const unsigned char *)serials.buf;
        unsigned char *o = (unsigned char *)out.buf;
        int usual = 1;
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t i = 0; i < n && usual; i++) {
            usual = usual_record(&plan, rec + i * itemsize, NULL, NULL);
        }
        for (Py_ssize_t i = 0; usual && i < n; i++) {
            uint64_t serial;
            memcpy(&serial, ser + 8 * i, 8);
            record_events(&plan, rec + i * itemsize, serial, NULL, NULL, o + i * 3 * EVENT_SIZE);
        }
        Py_END_ALLOW_THREADS
        result = PyBool_FromLong(usual);
    }
done:
    PyBuffer_Release(&out);
    PyBuffer_Release(&records);
    PyBuffer_Release(&serials);
    PyBuffer_Release(&offsets);
    PyBuffer_Release(&constants);
    return result;
}

/* A plan read from its words, every offset checked against its record and every field against the event: 0 with
 * a ValueError where one is not. */
static int read_plan(const uint64_t *p, Plan *plan) {
    plan->kind = (int)(p[PLAN_KIND] <= 3 ? p[PLAN_KIND] : 0);
    plan->itemsize = p[PLAN_ITEMSIZE] <= (1u << 20) ? (Py_ssize_t)p[PLAN_ITEMSIZE] : 0;
    memcpy(plan->constant, p + PLAN_CONSTANTS, sizeof(plan->constant));
    plan->nfields = 0;
    /* A record whose place is not all within it has none (a window marking places gives such a record back). */
    plan->placed = plan->itemsize > 0;
    for (int k = 0; k < 3; k++) {
        uint64_t offset = p[PLAN_PLACE + k];
        plan->placed = plan->placed && offset <= (uint64_t)plan->itemsize && fits((Py_ssize_t)offset, 8, plan->itemsize);
        plan->place[k] = plan->placed ? (Py_ssize_t)offset : 0;
    }
    const int *sizes = NULL;
    int count = 0;
    if (plan->itemsize <= 0) {
        plan->kind = 0;
    }
    switch (plan->kind) {
    case KIND_FIELDS:
        plan->events = 1;
        if (p[PLAN_NFIELDS] > PLAN_MAX_FIELDS) {
            break;
        }
        plan->nfields = (int)p[PLAN_NFIELDS];
        for (int k = 0; k < plan->nfields; k++) {
            const uint64_t *f = p + PLAN_FIELDS + 6 * k;
            Field *to = &plan->field[k];
            if (f[0] > (uint64_t)plan->itemsize || f[1] < 1 || f[1] > 8 || f[3] >= EVENT_WORDS || f[4] > 63 ||
                !fits((Py_ssize_t)f[0], (Py_ssize_t)f[1], plan->itemsize)) {
                PyErr_SetString(PyExc_ValueError, "direct: a plan's field is outside its record or the event");
                return 0;
            }
            to->at = (Py_ssize_t)f[0];
            to->size = (int)f[1];
            to->top = f[2];
            to->word = (int)f[3];
            to->shift = (int)f[4];
            to->mask = f[5];
        }
        return 1;
    case KIND_DMA_MOV:
        plan->events = 2;
        sizes = dma_size;
        count = D_COUNT;
        break;
    case KIND_BINARY:
        plan->events = 3;
        sizes = binary_size;
        count = B_COUNT;
        break;
    default:
        break;
    }
    if (sizes == NULL) {
        PyErr_SetString(PyExc_ValueError, "direct: a plan of no kind, or of too many fields");
        return 0;
    }
    for (int k = 0; k < count; k++) {
        uint64_t offset = p[PLAN_OFFSETS + k];
        if (offset > (uint64_t)plan->itemsize || !fits((Py_ssize_t)offset, sizes[k], plan->itemsize)) {
            PyErr_SetString(PyExc_ValueError, "direct: a plan's member is outside its record");
            return 0;
        }
        plan->at[k] = (Py_ssize_t)offset;
    }
    return 1;
}

/* direct(words, starts, plan_of, plans, pipe_of_pair, space_of, rule_records, rule_after, last_type, next_serial,
 * serials, sites, location) -> bytearray | None: a whole window's events in program order, converted straight from
 * the words (no grouping, gather or merge), where every record at ``starts`` has a plan (``plan_of``: i64 by wire
 * type, -1 for none; ``plans``: PLAN_WORDS u64 each), is in its converter's usual case and takes a serial of its
 * own (no merge rule of group's joins it to the record before, ``last_type`` for the first): then the records are
 * numbered ``next_serial`` on, one each, into ``serials`` (u64, one per start). With ``location`` (word, shift,
 * mask) not None, every event's location field is set to its record's place's id, where every record's (pc,
 * fileNo, lineNo) is one of ``sites`` (n x 4 u64: pc, fileNo, lineNo, id; sorted by pc, each pc once): base.
 * mark_places where every place is known. None where some record is not so, or a start, type or payload is
 * outside what it indexes (the caller then takes the grouped path, which says why). */
static PyObject *direct(PyObject *Py_UNUSED(module), PyObject *args) {
    Py_buffer words, starts, plan_of, plans, pairs, spaces, rule_records, rule_after, serials, sites;
    long long last_type;
    unsigned long long next_serial;
    PyObject *location;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*y*y*y*LKw*y*O", &words, &starts, &plan_of, &plans, &pairs, &spaces,
                          &rule_records, &rule_after, &last_type, &next_serial, &serials, &sites, &location)) {
        return NULL;
    }
    int mark = location != Py_None, loc_word = 0, loc_shift = 0;
    unsigned long long loc_mask = 0;
    PyObject *result = NULL, *out = NULL;
    Plan *plan = NULL;
    if (!whole(&words, 4, "words") || !whole(&starts, 8, "starts") || !whole(&plan_of, 8, "plan_of") ||
        !whole(&plans, 8 * PLAN_WORDS, "plans") || !whole(&serials, 8, "serials") ||
        !whole(&rule_records, 4, "rule_records") || !whole(&rule_after, 4, "rule_after") ||
        !whole(&sites, 32, "sites")) {
        goto done;
    }
    if (mark && (!PyArg_ParseTuple(location, "iiK", &loc_word, &loc_shift, &loc_mask) || loc_word < 0 ||
                 loc_word >= EVENT_WORDS || loc_shift < 0 || loc_shift > 63)) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_ValueError, "direct: the location field is outside the event");
        }
        goto done;
    }
    Py_ssize_t count = starts.len / 8, nplans = plans.len / (8 * PLAN_WORDS), ntypes = plan_of.len / 8;
    if (serials.len != 8 * count || pairs.len != 256 * 256 || spaces.len != 256 || nplans > MAX_PLANS) {
        PyErr_SetString(PyExc_ValueError, "direct: a buffer's length does not match the records, or too many plans");
        goto done;
    }
    plan = PyMem_Calloc((size_t)(nplans ? nplans : 1), sizeof(Plan));
    if (plan == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t k = 0; k < nplans; k++) {
        if (!read_plan((const uint64_t *)plans.buf + k * PLAN_WORDS, &plan[k])) {
            goto done;
        }
    }
    {
        const unsigned char *w = (const unsigned char *)words.buf;
        const int64_t *at = (const int64_t *)starts.buf;
        const int64_t *plan_index = (const int64_t *)plan_of.buf;
        const unsigned char *pipe_of = (const unsigned char *)pairs.buf, *space_of = (const unsigned char *)spaces.buf;
        uint64_t *serial = (uint64_t *)serials.buf;
        const uint32_t *records_bits = (const uint32_t *)rule_records.buf;
        const uint32_t *after_bits = (const uint32_t *)rule_after.buf;
        Py_ssize_t nrules_records = rule_records.len / 4, nrules_after = rule_after.len / 4;
        const uint64_t *site = (const uint64_t *)sites.buf;
        Py_ssize_t nsites = sites.len / 32;
        uint64_t loc_clear = ~((uint64_t)loc_mask << loc_shift);
        Py_ssize_t nbytes = words.len, total = 0;
        int ok = 1;
/* The plan of record i, every index checked (a start past the words, a type past the table, no plan, a payload
 * not all within the words: none) */
#define PLAN_OF(i, P)                                                                                                \
    do {                                                                                                             \
        int64_t start_ = at[i];                                                                                      \
        P = NULL;                                                                                                    \
        if (start_ >= 0 && start_ < nbytes / 4) {                                                                    \
            uint32_t t_ = word_at(w, start_);                                                                        \
            int64_t k_ = (Py_ssize_t)t_ < ntypes ? plan_index[t_] : -1;                                              \
            if (k_ >= 0 && k_ < nplans && plan[k_].itemsize <= nbytes - 4 * (start_ + 1)) {                          \
                P = &plan[k_];                                                                                       \
            }                                                                                                        \
        }                                                                                                            \
    } while (0)
        /* First the events' count and the merge rules, from the type words alone, so that the events are made
         * once into an array of their size. */
        Py_BEGIN_ALLOW_THREADS
        uint32_t before_bits = (last_type >= 0 && last_type < nrules_after) ? after_bits[last_type] : 0;
        for (Py_ssize_t i = 0; i < count; i++) {
            const Plan *p;
            PLAN_OF(i, p);
            if (p == NULL) {
                ok = 0;
                break;
            }
            uint32_t t = word_at(w, at[i]); /* PLAN_OF checked the start */
            uint32_t mine = (Py_ssize_t)t < nrules_records ? records_bits[t] : 0;
            if (mine & before_bits) { /* it shares the number of the record before */
                ok = 0;
                break;
            }
            before_bits = (Py_ssize_t)t < nrules_after ? after_bits[t] : 0;
            total += p->events;
        }
        Py_END_ALLOW_THREADS
        if (!ok) {
            Py_INCREF(Py_None);
            result = Py_None;
            goto done;
        }
        out = PyByteArray_FromStringAndSize(NULL, total * EVENT_SIZE);
        if (out == NULL) {
            goto done;
        }
        unsigned char *o = (unsigned char *)PyByteArray_AS_STRING(out);
        Py_BEGIN_ALLOW_THREADS
        Py_ssize_t made = 0;
        uint64_t number = (uint64_t)next_serial;
        for (Py_ssize_t i = 0; i < count; i++, number++) {
            const Plan *p;
            PLAN_OF(i, p); /* again: nothing read is trusted across passes */
            if (p == NULL || p->events > total - made) {
                ok = 0;
                break;
            }
            const unsigned char *r = w + 4 * (at[i] + 1);
            if (!usual_record(p, r, pipe_of, space_of)) {
                ok = 0;
                break;
            }
            record_events(p, r, number, pipe_of, space_of, o + made * EVENT_SIZE);
            if (mark) {
                if (!p->placed) {
                    ok = 0;
                    break;
                }
                uint64_t pc = u64_at(r + p->place[0]);
                Py_ssize_t lo = 0, hi = nsites; /* the first site whose pc is not below the record's */
                while (lo < hi) {
                    Py_ssize_t mid = lo + (hi - lo) / 2;
                    if (site[4 * mid] < pc) {
                        lo = mid + 1;
                    } else {
                        hi = mid;
                    }
                }
                if (lo == nsites || site[4 * lo] != pc || site[4 * lo + 1] != u64_at(r + p->place[1]) ||
                    site[4 * lo + 2] != u64_at(r + p->place[2])) {
                    ok = 0; /* a place not known yet: the grouped path keys it */
                    break;
                }
                uint64_t id = ((site[4 * lo + 3] & loc_mask) << loc_shift);
                for (int k = 0; k < p->events; k++) {
                    unsigned char *word = o + (made + k) * EVENT_SIZE + 8 * loc_word;
                    store_u64(word, (u64_at(word) & loc_clear) | id);
                }
            }
            made += p->events;
            serial[i] = number;
        }
        if (made != total) {
            ok = 0;
        }
#undef PLAN_OF
        Py_END_ALLOW_THREADS
        if (ok) {
            result = out;
            out = NULL;
        } else {
            Py_INCREF(Py_None);
            result = Py_None;
        }
    }
done:
    Py_XDECREF(out);
    PyMem_Free(plan);
    PyBuffer_Release(&words);
    PyBuffer_Release(&starts);
    PyBuffer_Release(&plan_of);
    PyBuffer_Release(&plans);
    PyBuffer_Release(&pairs);
    PyBuffer_Release(&spaces);
    PyBuffer_Release(&rule_records);
    PyBuffer_Release(&rule_after);
    PyBuffer_Release(&serials);
    PyBuffer_Release(&sites);
    return result;
}

static PyMethodDef methods[] = {
    {"direct", direct, METH_VARARGS, "A window's usual records straight to their events in program order (None: not)."},
    {"binary", binary, METH_VARARGS, "BinaryOpRecords' usual operands as three events each (False: not usual)."},
    {"fields", fields, METH_VARARGS, "One event per record from its fields, each saturated at a top."},
    {"dma_mov", dma_mov, METH_VARARGS, "DMA_MOV's usual records as their reads and writes (False: not usual)."},
    {"pack", pack, METH_VARARGS, "Events from constant words and columns cut and shifted to their fields."},
    {"walk", walk, METH_VARARGS, "Record starts of the true path from word 0, and where the walk stopped."},
    {"group", group, METH_VARARGS, "Records' serial numbers, and the records grouped by type code."},
    {"gather", gather, METH_VARARGS, "Each record's payload bytes, one after another."},
    {"merge", merge, METH_VARARGS, "Events of several arrays in serial order, stable (False: a serial outside)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef definition = {
    PyModuleDef_HEAD_INIT, .m_name = "_records", .m_size = -1, .m_methods = methods,
};

PyMODINIT_FUNC PyInit__records(void) { return PyModule_Create(&definition); }
