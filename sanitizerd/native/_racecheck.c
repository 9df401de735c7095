/* racecheck's per-batch hold in one pass over the records (sanitizerd/detectors/_race_columns.py, racecheck.py).
 *
 * Every batch racecheck keeps is split, as it arrives, into the columns its check reads: per kept event its block
 * key and kind, per access fifteen fields, per sync event eleven. numpy gathers each field with its own
 * compress over the 56-byte records (27 passes over the batch, each striding through all of it); this reads each
 * record once and writes every column it feeds, with the GIL released. It copies bytes only: what it writes is
 * what numpy's compress writes, bit for bit. ``ranges_beyond`` is _race_pairs.pieces summed over a mask (the
 * byte ranges a batch's accesses become beyond one each, what a launch reserves of the host's budget for).
 *
 * Every buffer is checked here: records whole 56-byte records, masks one byte per record, each column exactly as
 * long as the rows it receives, each field within a record. The field offsets come from the caller, which takes
 * them from EVENT_DTYPE.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define RECORD_SIZE 56
#define BLOCK_ID_AT 40   /* uint16, little-endian */
#define BLOCK_TYPE_AT 48 /* uint8 */
#define KIND_AT 44       /* uint8 */
#define SPACE_AT 45      /* uint8 */
#define BLOCK_NUM_AT 32  /* uint16 */
#define BLOCK_STRIDE_AT 34
#define REPEAT_AT 36
#define REPEAT_STRIDE_AT 38
#define PIPE_AT 46        /* uint8 */
#define DST_PIPE_AT 47    /* uint8 */
#define FLAGS_AT 49       /* uint8 */
#define MODE_AT 52        /* uint8 */
#define THREAD_AT 54      /* uint16 */
#define MAX_FIELDS 32

typedef struct {
    Py_ssize_t offset;
    Py_ssize_t size;
    unsigned char *out;
} Field;

/* Fields in order of size, 8 bytes first, so that copying them takes one loop per size with a constant width
 * (``copy_counted``); ``of_size``: how many of 8, 4, 2 and 1 bytes. */
typedef struct {
    Field field[MAX_FIELDS];
    int count;
    int of_size[4];
} FieldSet;

static void release_all(Py_buffer *views, int count) {
    for (int i = 0; i < count; i++) {
        PyBuffer_Release(&views[i]);
    }
}

/* Parse ``spec``, a tuple of (offset, out) with ``out`` a writable C-contiguous buffer of ``rows`` items of 1, 2, 4
 * or 8 bytes, into ``fields`` (its views held in ``views`` from ``*held`` on). */
static int parse_fields(PyObject *spec, Py_ssize_t rows, FieldSet *set, Py_buffer *views, int *held) {
    if (!PyTuple_Check(spec)) {
        PyErr_SetString(PyExc_TypeError, "fields must be a tuple of (offset, out)");
        return -1;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(spec);
    if (n > MAX_FIELDS || *held + n + 2 > 3 * MAX_FIELDS) {
        PyErr_SetString(PyExc_ValueError, "too many fields");
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyTuple_GET_ITEM(spec, i);
        Py_ssize_t offset;
        PyObject *out;
        if (!PyTuple_Check(item) || !PyArg_ParseTuple(item, "nO", &offset, &out)) {
            if (!PyErr_Occurred()) {
                PyErr_SetString(PyExc_TypeError, "each field must be (offset, out)");
            }
            return -1;
        }
        Py_buffer *view = &views[*held];
        if (PyObject_GetBuffer(out, view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
            return -1;
        }
        (*held)++;
        Py_ssize_t size = view->itemsize;
        if (size != 1 && size != 2 && size != 4 && size != 8) {
            PyErr_SetString(PyExc_ValueError, "a column's items must be 1, 2, 4 or 8 bytes");
            return -1;
        }
        if (offset < 0 || offset > RECORD_SIZE - size) {
            PyErr_SetString(PyExc_ValueError, "a field must lie within a 56-byte record");
            return -1;
        }
        if (view->len != rows * size) {
            PyErr_SetString(PyExc_ValueError, "a column must have exactly one item per row it receives");
            return -1;
        }
        Field field = {offset, size, (unsigned char *)view->buf};
        Py_ssize_t at = i; /* placed among those before it: larger sizes first, the order given kept within one */
        while (at > 0 && set->field[at - 1].size < size) {
            set->field[at] = set->field[at - 1];
            at--;
        }
        set->field[at] = field;
    }
    set->count = (int)n;
    for (int w = 0; w < 4; w++) {
        set->of_size[w] = 0;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t size = set->field[i].size;
        set->of_size[size == 8 ? 0 : size == 4 ? 1 : size == 2 ? 2 : 3]++;
    }
    return 0;
}

/* The whole 56-byte records of ``obj`` held in ``views[*held]`` (``flags`` as PyObject_GetBuffer takes them): their
 * count, or -1 with an exception set. */
static Py_ssize_t get_records(PyObject *obj, int flags, Py_buffer *views, int *held) {
    if (PyObject_GetBuffer(obj, &views[*held], flags | PyBUF_C_CONTIGUOUS) < 0) {
        return -1;
    }
    Py_ssize_t len = views[(*held)++].len;
    if (len % RECORD_SIZE) {
        PyErr_SetString(PyExc_ValueError, "records must be whole 56-byte records");
        return -1;
    }
    return len / RECORD_SIZE;
}

/* One byte per record of ``obj`` (``name`` says which in the error), held in ``views[*held]``, into ``*out``;
 * None, where ``optional``, gives NULL. 0, or -1 with an exception set. */
static int get_record_bytes(PyObject *obj, Py_ssize_t n, const char *name, int optional, Py_buffer *views, int *held,
                            const unsigned char **out) {
    *out = NULL;
    if (optional && obj == Py_None) {
        return 0;
    }
    if (PyObject_GetBuffer(obj, &views[*held], PyBUF_C_CONTIGUOUS) < 0) {
        return -1;
    }
    Py_buffer *view = &views[(*held)++];
    if (view->len != n) {
        PyErr_Format(PyExc_ValueError, "%s must have one byte per record", name);
        return -1;
    }
    *out = (const unsigned char *)view->buf;
    return 0;
}

/* The writable key (uint32) and kind (uint8) columns of held events, as many of each, held in ``views[*held]``:
 * their length, or -1 with an exception set. */
static Py_ssize_t get_key_kind(PyObject *key_obj, PyObject *kind_obj, Py_buffer *views, int *held, uint32_t **key,
                               unsigned char **kind) {
    const int flags = PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS | PyBUF_FORMAT;
    if (PyObject_GetBuffer(key_obj, &views[*held], flags) < 0) {
        return -1;
    }
    Py_buffer *key_view = &views[(*held)++];
    if (PyObject_GetBuffer(kind_obj, &views[*held], flags) < 0) {
        return -1;
    }
    Py_buffer *kind_view = &views[(*held)++];
    if (key_view->itemsize != 4 || kind_view->itemsize != 1 || key_view->len != 4 * kind_view->len) {
        PyErr_SetString(PyExc_ValueError, "the key column must be uint32, the kind column uint8, as many of each");
        return -1;
    }
    *key = (uint32_t *)key_view->buf;
    *kind = (unsigned char *)kind_view->buf;
    return kind_view->len;
}

/* An access's and a sync event's held fields, as ``parse_fields`` reads them from gather's two specs. */
typedef struct {
    FieldSet access, sync;
} HeldFields;

static int parse_held_fields(PyObject *access_spec, Py_ssize_t accesses, PyObject *sync_spec, Py_ssize_t syncs,
                             HeldFields *fields, Py_buffer *views, int *held) {
    return parse_fields(access_spec, accesses, &fields->access, views, held) < 0 ||
                   parse_fields(sync_spec, syncs, &fields->sync, views, held) < 0
               ? -1
               : 0;
}

/* Each field of ``record`` into its column's row ``row``: a loop per size, each of a constant width; ``c8`` to ``c1``
 * the fields of each size (set->of_size), constants where the caller knows them, so that the loops unroll (a
 * switch per field per record cost 17 ns a record, these loops 13, unrolled 11). */
static inline __attribute__((always_inline)) void copy_counted(const unsigned char *record, const FieldSet *set,
                                                               Py_ssize_t row, int c8, int c4, int c2, int c1) {
    const Field *field = set->field;
    for (int f = 0; f < c8; f++, field++) {
        memcpy(field->out + 8 * row, record + field->offset, 8);
    }
    for (int f = 0; f < c4; f++, field++) {
        memcpy(field->out + 4 * row, record + field->offset, 4);
    }
    for (int f = 0; f < c2; f++, field++) {
        memcpy(field->out + 2 * row, record + field->offset, 2);
    }
    for (int f = 0; f < c1; f++, field++) {
        field->out[row] = record[field->offset];
    }
}

/* Whether ``set`` has these many fields of 8, 4, 2 and 1 bytes. */
static int has_sizes(const FieldSet *set, int c8, int c4, int c2, int c1) {
    return set->of_size[0] == c8 && set->of_size[1] == c4 && set->of_size[2] == c2 && set->of_size[3] == c1;
}

static inline void copy_fields(const unsigned char *record, const FieldSet *set, Py_ssize_t row) {
    copy_counted(record, set, row, set->of_size[0], set->of_size[1], set->of_size[2], set->of_size[3]);
}

/* copy_fields' inverse: the fields of column row ``row`` written into ``record``. */
static inline void scatter_fields(unsigned char *record, const FieldSet *set, Py_ssize_t row) {
    const Field *field = set->field;
    for (int f = 0; f < set->of_size[0]; f++, field++) {
        memcpy(record + field->offset, field->out + 8 * row, 8);
    }
    for (int f = 0; f < set->of_size[1]; f++, field++) {
        memcpy(record + field->offset, field->out + 4 * row, 4);
    }
    for (int f = 0; f < set->of_size[2]; f++, field++) {
        memcpy(record + field->offset, field->out + 2 * row, 2);
    }
    for (int f = 0; f < set->of_size[3]; f++, field++) {
        record[field->offset] = field->out[row];
    }
}

/* gather(records, keep, access, key, kind, access_fields, sync_fields[, copy]) -> None
 *
 * ``records``: n whole 56-byte records. ``keep``: None (every record) or n bytes, nonzero = kept. ``access``: n
 * bytes, nonzero = an access (always kept). For the kept records in order: ``key`` (uint32) gets block_type << 16 |
 * block_id, ``kind`` (uint8) the kind; the accesses' fields go to ``access_fields``, the other kept records' to
 * ``sync_fields``, each a tuple of (offset in the record, out column); ``copy`` (optional, None: none), a writable
 * buffer of exactly the kept records' bytes, gets each kept record whole. Every column must be exactly as long as
 * the rows it receives; an access not kept is refused (ValueError), before anything is written. */
static PyObject *gather(PyObject *Py_UNUSED(module), PyObject *args) {
    PyObject *records_obj, *keep_obj, *access_obj, *key_obj, *kind_obj, *access_spec, *sync_spec, *copy_obj = Py_None;
    if (!PyArg_ParseTuple(args, "OOOOOOO|O", &records_obj, &keep_obj, &access_obj, &key_obj, &kind_obj, &access_spec,
                          &sync_spec, &copy_obj)) {
        return NULL;
    }
    Py_buffer views[3 * MAX_FIELDS];
    int held = 0;
    HeldFields fields;
    PyObject *result = NULL;
    const unsigned char *keep, *access;
    Py_ssize_t n = get_records(records_obj, PyBUF_SIMPLE, views, &held);
    if (n < 0 || get_record_bytes(keep_obj, n, "keep", 1, views, &held, &keep) < 0 ||
        get_record_bytes(access_obj, n, "access", 0, views, &held, &access) < 0) {
        goto done;
    }
    const unsigned char *base = (const unsigned char *)views[0].buf;

    Py_ssize_t kept = 0, accesses = 0, stray = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        int k = keep == NULL || keep[i] != 0;
        int a = access[i] != 0;
        kept += k;
        accesses += a;
        stray += a & !k;
    }
    Py_END_ALLOW_THREADS
    if (stray) {
        PyErr_SetString(PyExc_ValueError, "an access must be kept");
        goto done;
    }
    Py_ssize_t syncs = kept - accesses;

    uint32_t *key_out;
    unsigned char *kind_out;
    Py_ssize_t rows = get_key_kind(key_obj, kind_obj, views, &held, &key_out, &kind_out);
    if (rows < 0) {
        goto done;
    }
    if (rows != kept) {
        PyErr_SetString(PyExc_ValueError, "key must be one uint32, kind one uint8, per kept record");
        goto done;
    }
    if (parse_held_fields(access_spec, accesses, sync_spec, syncs, &fields, views, &held) < 0) {
        goto done;
    }
    unsigned char *copy = NULL;
    if (copy_obj != Py_None) {
        if (PyObject_GetBuffer(copy_obj, &views[held], PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) {
            goto done;
        }
        if (views[held++].len != kept * RECORD_SIZE) {
            PyErr_SetString(PyExc_ValueError, "copy must have room for exactly the kept records");
            goto done;
        }
        copy = views[held - 1].buf;
    }
    const int access_held = has_sizes(&fields.access, 3, 2, 5, 5), sync_held = has_sizes(&fields.sync, 3, 1, 3, 4);
    Py_BEGIN_ALLOW_THREADS
    Py_ssize_t e = 0, a = 0, s = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (keep != NULL && !keep[i]) {
            continue;
        }
        const unsigned char *record = base + i * RECORD_SIZE;
        if (copy != NULL) {
            memcpy(copy + e * RECORD_SIZE, record, RECORD_SIZE);
        }
        uint32_t block_id = (uint32_t)record[BLOCK_ID_AT] | ((uint32_t)record[BLOCK_ID_AT + 1] << 8);
        key_out[e] = ((uint32_t)record[BLOCK_TYPE_AT] << 16) | block_id;
        kind_out[e] = record[KIND_AT];
        e++;
        if (access[i]) {
            if (access_held) { /* racecheck's own fields: the loops unrolled */
                copy_counted(record, &fields.access, a++, 3, 2, 5, 5);
            } else {
                copy_fields(record, &fields.access, a++);
            }
        } else if (sync_held) {
            copy_counted(record, &fields.sync, s++, 3, 1, 3, 4);
        } else {
            copy_fields(record, &fields.sync, s++);
        }
    }
    Py_END_ALLOW_THREADS
    result = Py_None;
    Py_INCREF(result);

done:
    release_all(views, held);
    return result;
}

static inline int64_t u16_at(const unsigned char *record, int at) {
    return (int64_t)record[at] | ((int64_t)record[at + 1] << 8);
}

/* The byte ranges an access record becomes in racecheck's sweep (_race_pairs.pieces) less one: below 2**32. */
static inline int64_t record_ranges_beyond(const unsigned char *record) {
    int64_t block_num = u16_at(record, BLOCK_NUM_AT), block_stride = u16_at(record, BLOCK_STRIDE_AT);
    int64_t repeat = u16_at(record, REPEAT_AT), repeat_stride = u16_at(record, REPEAT_STRIDE_AT);
    int row_is_range = block_num <= 1 || block_stride <= 1;
    int64_t row_length = (block_num <= 1 || block_stride == 0) ? 1 : block_num;
    int dense = row_is_range && (repeat <= 1 || repeat_stride <= row_length);
    int64_t pieces = dense ? 1 : (repeat > 1 ? repeat : 1) * (row_is_range ? 1 : block_num);
    return pieces - 1;
}

/* ranges_beyond(records, mask) -> int: over the records ``mask`` marks (one byte each, nonzero), the byte ranges
 * each becomes in racecheck's sweep (_race_pairs.pieces) less one, summed. Every term is below 2**32. */
static PyObject *ranges_beyond(PyObject *Py_UNUSED(module), PyObject *args) {
    Py_buffer records, mask;
    if (!PyArg_ParseTuple(args, "y*y*", &records, &mask)) {
        return NULL;
    }
    if (records.len % RECORD_SIZE || mask.len != records.len / RECORD_SIZE) {
        PyBuffer_Release(&records);
        PyBuffer_Release(&mask);
        PyErr_SetString(PyExc_ValueError, "records must be whole 56-byte records, mask one byte per record");
        return NULL;
    }
    const unsigned char *base = (const unsigned char *)records.buf, *marked = (const unsigned char *)mask.buf;
    Py_ssize_t n = mask.len;
    int64_t total = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!marked[i]) {
            continue;
        }
        total += record_ranges_beyond(base + i * RECORD_SIZE);
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&records);
    PyBuffer_Release(&mask);
    return PyLong_FromLongLong(total);
}


/* A read-only buffer of exactly ``count`` items of ``size`` bytes (C-contiguous), or -1 with an exception. */
static int input(PyObject *obj, Py_buffer *view, Py_ssize_t size, const char *what) {
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        return -1;
    }
    if (view->itemsize != size) {
        PyBuffer_Release(view);
        PyErr_Format(PyExc_ValueError, "%s must have items of %zd bytes", what, size);
        return -1;
    }
    return 0;
}

enum { T_ONE_NODE, T_FLAG_WAIT, T_OWN_PIPE_WAIT, T_MEMBER, T_TABLES };
enum { C_S, C_S_CAL, C_ALL, C_SET_FLAG, C_WRITE, C_PIPE_BARRIER, C_SOFT_SYNC_ALL, C_CROSS_SET, C_SOFT_SET, C_COUNT };

/* place(kind, block_start, sync_pipe, sync_dst, access_pipe, access_serial, tables, constants, seg, issued,
 *       barriers, pipe_index) -> None
 *
 * _block_parts.place in one pass over complete blocks' events (``kind`` uint8, ``block_start`` one byte each, the
 * first set), their sync events' pipes (uint8), their accesses' pipes (uint8) and serials (uint64). ``tables``:
 * four 256-byte tables by kind or pipe (_IS_ONE_NODE, _IS_FLAG_WAIT, _IS_OWN_PIPE_WAIT by kind; _MEMBER by
 * pipe); ``constants``: Pipe.S, Pipe.S_CAL, Pipe.ALL and the kinds SET_FLAG, WRITE, PIPE_BARRIER, SOFT_SYNC_ALL,
 * CROSS_SET, SOFT_SET. Per access, into int64 columns: the nodes of its pipe before it in its block, the PIPE_S
 * nodes before it, the barrier marks on its pipe before it, and the running count of distinct instructions on its
 * pipe. The counts of sync events and accesses must be those ``kind`` has. */
static PyObject *place(PyObject *Py_UNUSED(module), PyObject *args) {
    PyObject *obj[12];
    if (!PyArg_ParseTuple(args, "OOOOOOOOOOOO", &obj[0], &obj[1], &obj[2], &obj[3], &obj[4], &obj[5], &obj[6],
                          &obj[7], &obj[8], &obj[9], &obj[10], &obj[11])) {
        return NULL;
    }
    static const Py_ssize_t sizes[7] = {1, 1, 1, 1, 1, 8, 1};
    static const char *names[7] = {"kind", "block_start", "sync_pipe", "sync_dst", "access_pipe", "access_serial",
                                   "tables"};
    Py_buffer views[11];
    int held = 0;
    PyObject *result = NULL;
    long constant[C_COUNT];
    for (; held < 7; held++) {
        if (input(obj[held], &views[held], sizes[held], names[held]) < 0) {
            goto done;
        }
    }
    if (!PyTuple_Check(obj[7]) || PyTuple_GET_SIZE(obj[7]) != C_COUNT) {
        PyErr_SetString(PyExc_TypeError, "constants must be a tuple of 9 ints");
        goto done;
    }
    for (int c = 0; c < C_COUNT; c++) {
        constant[c] = PyLong_AsLong(PyTuple_GET_ITEM(obj[7], c));
        if (constant[c] == -1 && PyErr_Occurred()) {
            goto done;
        }
        if (constant[c] < 0 || constant[c] > 255) {
            PyErr_SetString(PyExc_ValueError, "a constant is a pipe or a kind: 0 to 255");
            goto done;
        }
    }
    for (; held < 11; held++) {
        if (PyObject_GetBuffer(obj[held + 1], &views[held], PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
            goto done;
        }
        if (views[held].itemsize != 8) {
            held++;
            PyErr_SetString(PyExc_ValueError, "the outputs must be int64");
            goto done;
        }
    }
    Py_ssize_t n = views[0].len, syncs = views[2].len, accesses = views[4].len;
    if (views[1].len != n || views[3].len != syncs || views[5].len != 8 * accesses || views[6].len != 256 * T_TABLES) {
        PyErr_SetString(PyExc_ValueError, "place: the columns' lengths do not agree");
        goto done;
    }
    for (int o = 7; o < 11; o++) {
        if (views[o].len != 8 * accesses) {
            PyErr_SetString(PyExc_ValueError, "place: each output must have one int64 per access");
            goto done;
        }
    }
    const unsigned char *kind = views[0].buf, *start = views[1].buf, *sync_pipe = views[2].buf;
    const unsigned char *sync_dst = views[3].buf, *access_pipe = views[4].buf, *table = views[6].buf;
    Py_ssize_t seen_syncs = 0, seen_accesses = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        seen_syncs += kind[i] >= constant[C_SET_FLAG];
        seen_accesses += kind[i] <= constant[C_WRITE];
    }
    if (seen_syncs != syncs || seen_accesses != accesses || (n && !start[0])) {
        PyErr_SetString(PyExc_ValueError, "place: the sync events and accesses are not those of kind, or the first "
                                          "event does not start a block");
        goto done;
    }
    const uint64_t *serial = views[5].buf;
    int64_t *seg = views[7].buf, *issued = views[8].buf, *barriers = views[9].buf, *pipe_index = views[10].buf;
    const unsigned char *one_node = table + 256 * T_ONE_NODE, *flag_wait = table + 256 * T_FLAG_WAIT;
    const unsigned char *own_pipe_wait = table + 256 * T_OWN_PIPE_WAIT, *member = table + 256 * T_MEMBER;
    const int S = (int)constant[C_S], S_CAL = (int)constant[C_S_CAL], ALL = (int)constant[C_ALL];

    Py_BEGIN_ALLOW_THREADS
    int64_t nodes[256], marks[256], index[256], issued_now = 0;
    uint64_t last_serial[256];
    unsigned char any_on[256];
    memset(index, 0, sizeof index);
    memset(any_on, 0, sizeof any_on);
    Py_ssize_t s = 0, a = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (start[i]) {
            memset(nodes, 0, sizeof nodes);
            memset(marks, 0, sizeof marks);
            issued_now = 0;
        }
        int k = kind[i];
        if (k >= constant[C_SET_FLAG]) {
            int p = sync_pipe[s], d = sync_dst[s];
            s++;
            int one = -1; /* make_nodes's node pipe of a one-node event */
            if (one_node[k]) {
                one = p == S ? S_CAL : p;
                if (flag_wait[k]) {
                    one = d;
                }
                if (own_pipe_wait[k]) {
                    one = p;
                }
                if (k == constant[C_SOFT_SET]) {
                    one = S_CAL;
                }
            }
            int every = k == constant[C_PIPE_BARRIER] && p == ALL;
            int sync_all = k == constant[C_SOFT_SYNC_ALL];
            /* each pipe counts an event once, whichever of the rules names it */
            if (one >= 0) {
                nodes[one]++;
            }
            if (every) {
                for (int q = 0; q < 256; q++) {
                    if (member[q] && q != one) {
                        nodes[q]++;
                    }
                }
            }
            if (sync_all && S_CAL != one && !(every && member[S_CAL])) {
                nodes[S_CAL]++;
            }
            issued_now += (one == S) || every || sync_all;
            if ((k == constant[C_PIPE_BARRIER] && p != ALL) || k == constant[C_CROSS_SET]) {
                marks[p == S ? S_CAL : p]++;
            }
        } else if (k <= constant[C_WRITE]) {
            int p = access_pipe[a] == S ? S_CAL : access_pipe[a];
            seg[a] = nodes[p];
            issued[a] = issued_now;
            barriers[a] = marks[p];
            if (!any_on[p] || serial[a] != last_serial[p]) {
                index[p]++;
            }
            any_on[p] = 1;
            last_serial[p] = serial[a];
            pipe_index[a] = index[p];
            a++;
        }
    }
    Py_END_ALLOW_THREADS
    result = Py_None;
    Py_INCREF(result);

done:
    release_all(views, held);
    return result;
}


/* select(records, tables, constants, keep, access) -> (kept, off_pipe, simt_seen, last_finish, records_ended,
 *                                                      ranges)
 *
 * racecheck.check's choice of the events it holds, in one pass: ``tables`` is three 256-byte tables by kind (_KEEP,
 * _TO_PIPE, _simt.SECTION_MARKS); ``constants`` is (GET_BUF, GET_BUF_NONBLOCK, FLAG_SIMT_ENTRY, NPIPES, WRITE,
 * BLOCK_FINISH, BLOCK_RECORDS_ENDED). An event is held when _KEEP names its kind, it is not a non-blocking GET_BUF,
 * it is not a SIMT thread's (thread 0, or the call's entry record), and its pipe (and, for the kinds _TO_PIPE names,
 * its destination pipe) is below NPIPES; one that passes all but the last is counted in ``off_pipe``. ``keep`` and
 * ``access`` (one byte per record) get the held events, and those of them that are accesses (kind <= WRITE).
 * ``simt_seen``: whether any record is a SIMT section's mark (a kind SECTION_MARKS names) or a SIMT thread's (thread
 * not 0, not the call's entry record): where none is, and no section is open, SimtSections.feed has nothing to do
 * with the batch. ``last_finish``: the last BLOCK_FINISH record's index (-1: none); ``records_ended``: whether a
 * BLOCK_FINISH says its block's records ended (mode BLOCK_RECORDS_ENDED). ``ranges``: ranges_beyond of the held
 * accesses, in the same pass. */
static PyObject *select_held(PyObject *Py_UNUSED(module), PyObject *args) {
    PyObject *records_obj, *tables_obj, *constants, *keep_obj, *access_obj;
    if (!PyArg_ParseTuple(args, "OOOOO", &records_obj, &tables_obj, &constants, &keep_obj, &access_obj)) {
        return NULL;
    }
    Py_buffer views[4];
    int held = 0;
    PyObject *result = NULL;
    long constant[7];
    if (!PyTuple_Check(constants) || PyTuple_GET_SIZE(constants) != 7) {
        PyErr_SetString(PyExc_TypeError, "constants must be a tuple of 7 ints");
        return NULL;
    }
    for (int c = 0; c < 7; c++) {
        constant[c] = PyLong_AsLong(PyTuple_GET_ITEM(constants, c));
        if (constant[c] == -1 && PyErr_Occurred()) {
            return NULL;
        }
        if (constant[c] < 0 || constant[c] > 255) {
            PyErr_SetString(PyExc_ValueError, "a constant is a kind, a mode, a flag or a pipe count: 0 to 255");
            return NULL;
        }
    }
    if (PyObject_GetBuffer(records_obj, &views[held], PyBUF_C_CONTIGUOUS) < 0) {
        goto done;
    }
    held++;
    if (input(tables_obj, &views[held], 1, "tables") < 0) {
        goto done;
    }
    held++;
    for (int o = 0; o < 2; o++) {
        if (PyObject_GetBuffer(o ? access_obj : keep_obj, &views[held], PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) {
            goto done;
        }
        held++;
    }
    if (views[0].len % RECORD_SIZE || views[1].len != 3 * 256 || views[2].len != views[0].len / RECORD_SIZE ||
        views[3].len != views[2].len) {
        PyErr_SetString(PyExc_ValueError, "select: records must be whole 56-byte records, tables 768 bytes, keep and "
                                          "access one byte per record");
        goto done;
    }
    const unsigned char *base = views[0].buf, *keep_table = views[1].buf, *to_pipe = keep_table + 256;
    const unsigned char *simt_mark = keep_table + 512;
    unsigned char *keep = views[2].buf, *access = views[3].buf;
    Py_ssize_t n = views[2].len, kept = 0, off_pipe = 0, last_finish = -1;
    int64_t ranges = 0;
    int simt_seen = 0, records_ended = 0;
    const int get_buf = (int)constant[0], nonblock = (int)constant[1], simt_entry = (int)constant[2];
    const int npipes = (int)constant[3], write = (int)constant[4], finish = (int)constant[5];
    const int ended = (int)constant[6];
    /* What each kind is, in one look-up a record. */
    enum { HELD = 1, ACCESS = 2, TO_PIPE = 4, MARK = 8, GET_BUF = 16, FINISH = 32 };
    unsigned char what[256];
    for (int kind = 0; kind < 256; kind++) {
        what[kind] = (unsigned char)((keep_table[kind] ? HELD : 0) | (kind <= write ? ACCESS : 0) |
                                     (to_pipe[kind] ? TO_PIPE : 0) | (simt_mark[kind] ? MARK : 0) |
                                     (kind == get_buf ? GET_BUF : 0) | (kind == finish ? FINISH : 0));
    }
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        const unsigned char *record = base + i * RECORD_SIZE;
        int is = what[record[KIND_AT]];
        int simt_thread = (record[THREAD_AT] | record[THREAD_AT + 1]) && !(record[FLAGS_AT] & simt_entry);
        simt_seen |= (is & MARK) | simt_thread;
        int k = (is & HELD) && !simt_thread && !((is & GET_BUF) && record[MODE_AT] == nonblock);
        int off = k && (record[PIPE_AT] >= npipes || ((is & TO_PIPE) && record[DST_PIPE_AT] >= npipes));
        off_pipe += off;
        k &= !off;
        kept += k;
        int is_access = k && (is & ACCESS);
        keep[i] = (unsigned char)k;
        access[i] = (unsigned char)is_access;
        if (is_access) {
            ranges += record_ranges_beyond(record);
        }
        if (is & FINISH) {
            last_finish = i;
            records_ended |= record[MODE_AT] == ended;
        }
    }
    Py_END_ALLOW_THREADS
    result = Py_BuildValue("nnOnOL", kept, off_pipe, simt_seen ? Py_True : Py_False, last_finish,
                           records_ended ? Py_True : Py_False, (long long)ranges);

done:
    release_all(views, held);
    return result;
}


/* A read-only int64 or int32 vector (C-contiguous) of any length; -1 with an exception if not. */
static int vector(PyObject *obj, Py_buffer *view, Py_ssize_t itemsize, const char *what) {
    return input(obj, view, itemsize, what);
}

/* Every index in ``rows`` (``count`` int64) within [0, n). */
static int rows_within(const int64_t *rows, Py_ssize_t count, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < count; i++) {
        if (rows[i] < 0 || rows[i] >= n) {
            return 0;
        }
    }
    return 1;
}

/* Room for ``n`` int64 rows (one at least, so that none is NULL for nothing), or NULL with MemoryError set. */
static int64_t *rows_alloc(Py_ssize_t n) {
    int64_t *rows = malloc((size_t)(n > 0 ? n : 1) * sizeof(int64_t));
    if (rows == NULL) {
        PyErr_NoMemory();
    }
    return rows;
}

/* Views of ``obj[*held..count)``: the first ``inputs`` read-only vectors, the rest writable outputs, each of items
 * of ``sizes[i]`` bytes (C-contiguous); -1 with an exception if one is not. ``*held`` counts the views taken, for
 * release_all. */
static int get_views(PyObject *const *obj, int count, int inputs, const Py_ssize_t *sizes, Py_buffer *views,
                     int *held, const char *what) {
    for (; *held < count; (*held)++) {
        int i = *held;
        if (i < inputs) {
            if (vector(obj[i], &views[i], sizes[i], what) < 0) {
                return -1;
            }
        } else {
            if (PyObject_GetBuffer(obj[i], &views[i], PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
                return -1;
            }
            if (views[i].itemsize != sizes[i]) {
                (*held)++;
                PyErr_Format(PyExc_ValueError, "%s: output %d must have items of %zd bytes", what, i - inputs,
                             sizes[i]);
                return -1;
            }
        }
    }
    return 0;
}

/* One list of edges (src[j] -> dst[j], j in [lo, hi)), as numpy applies it: every source's published clock
 * (its row, with its own pipe's column raised to its ordinal) read before any row is written; then either
 * ``K[dst] = max(K[dst], published)`` with the last write to a row winning (``accumulate`` 0: fancy assignment),
 * or ``np.maximum.at`` (``accumulate`` 1: every edge counts). ``scratch`` has room for hi - lo rows. */
static inline __attribute__((always_inline)) void pull(int32_t *K, Py_ssize_t w, const int64_t *ordinal,
                                                       const int64_t *own_col, const int64_t *src, const int64_t *dst,
                                                       Py_ssize_t lo, Py_ssize_t hi, int accumulate, int32_t *scratch) {
    for (Py_ssize_t j = lo; j < hi; j++) {
        int32_t *row = scratch + (j - lo) * w;
        const int32_t *from = K + src[j] * w;
        memcpy(row, from, (size_t)w * sizeof(int32_t));
        int64_t own = own_col[src[j]];
        if ((int64_t)row[own] < ordinal[src[j]]) {
            row[own] = (int32_t)ordinal[src[j]];
        }
        if (!accumulate) {
            const int32_t *old = K + dst[j] * w;
            for (Py_ssize_t c = 0; c < w; c++) {
                if (old[c] > row[c]) {
                    row[c] = old[c];
                }
            }
        }
    }
    for (Py_ssize_t j = lo; j < hi; j++) {
        int32_t *to = K + dst[j] * w;
        const int32_t *row = scratch + (j - lo) * w;
        if (accumulate) {
            for (Py_ssize_t c = 0; c < w; c++) {
                if (row[c] > to[c]) {
                    to[c] = row[c];
                }
            }
        } else {
            memcpy(to, row, (size_t)w * sizeof(int32_t));
        }
    }
}

/* fixpoint's inputs, checked (below). */
typedef struct {
    int32_t *K;
    const int64_t *chain, *ordinal, *own_col, *src, *dst, *ends, *msrc, *mdst, *mends, *x;
    const int32_t *inj;
    Py_ssize_t n, lists, mlists, xs;
    int32_t *before, *scratch;
} FixpointInput;

/* fixpoint's rounds on rows of ``w`` columns; the rounds it took. */
static inline __attribute__((always_inline)) long fixpoint_rounds(const FixpointInput *in, Py_ssize_t w) {
    int32_t *K = in->K, *before = in->before, *scratch = in->scratch;
    const int64_t *chain = in->chain, *ordinal = in->ordinal, *own_col = in->own_col, *src = in->src;
    const int64_t *dst = in->dst, *ends = in->ends, *msrc = in->msrc, *mdst = in->mdst, *mends = in->mends;
    const int64_t *x = in->x;
    const int32_t *inj = in->inj;
    const Py_ssize_t n = in->n, lists = in->lists, mlists = in->mlists, xs = in->xs;
    long rounds = 0;
    for (;;) {
        memcpy(before, K, (size_t)(n * w) * sizeof(int32_t));
        for (Py_ssize_t k = 0; k < lists; k++) {
            pull(K, w, ordinal, own_col, src, dst, k ? ends[k - 1] : 0, ends[k], 0, scratch);
        }
        for (Py_ssize_t k = 0; k < mlists; k++) {
            pull(K, w, ordinal, own_col, msrc, mdst, k ? mends[k - 1] : 0, mends[k], 1, scratch);
        }
        if (xs) { /* K[x] = max(K[x], inj): every value read before any written, the last write to a row winning */
            for (Py_ssize_t j = 0; j < xs; j++) {
                const int32_t *old = K + x[j] * w, *add = inj + j * w;
                for (Py_ssize_t c = 0; c < w; c++) {
                    scratch[j * w + c] = old[c] > add[c] ? old[c] : add[c];
                }
            }
            for (Py_ssize_t j = 0; j < xs; j++) {
                memcpy(K + x[j] * w, scratch + j * w, (size_t)w * sizeof(int32_t));
            }
        }
        for (Py_ssize_t i = 1; i < n; i++) {
            if (chain[i] != chain[i - 1]) {
                continue;
            }
            int32_t *row = K + i * w;
            const int32_t *up = row - w;
            for (Py_ssize_t c = 0; c < w; c++) {
                if (up[c] > row[c]) {
                    row[c] = up[c];
                }
            }
        }
        rounds++;
        if (memcmp(before, K, (size_t)(n * w) * sizeof(int32_t)) == 0) {
            break;
        }
    }
    return rounds;
}

#define FIXPOINT_OF_WIDTH(W) \
    static long fixpoint_rounds_##W(const FixpointInput *in) { return fixpoint_rounds(in, W); }
FIXPOINT_OF_WIDTH(1)
FIXPOINT_OF_WIDTH(2)
FIXPOINT_OF_WIDTH(3)
FIXPOINT_OF_WIDTH(4)
FIXPOINT_OF_WIDTH(5)
FIXPOINT_OF_WIDTH(6)
FIXPOINT_OF_WIDTH(7)
FIXPOINT_OF_WIDTH(8)

/* fixpoint(K, width, chain, ordinal, own_col, src, dst, ends, multi_src, multi_dst, multi_ends, x, inj) -> rounds
 *
 * _happens_before._fixpoint in place on ``K`` (int32, rows x ``width``, C-contiguous): rounds of pulling along
 * every edge list (``src``/``dst`` int64, list k being [ends[k-1], ends[k])), then every pipe_barrier(PIPE_ALL)
 * list (``multi_*``, as np.maximum.at), then the cross-block knowledge ``inj`` (int32, len(x) x width) into rows
 * ``x``, then a running maximum down each column within each chain (``chain`` int64, non-decreasing), until a
 * round changes nothing; the rounds it took. ``ordinal`` (int64) and ``own_col`` (int64, the column of the node's
 * own pipe) per row. Every row index and column is checked; a chain that decreases is refused. With clocks of
 * ordinals (-1 to the largest ordinal), the running maximum is numpy's lifted one. */
static PyObject *fixpoint(PyObject *Py_UNUSED(module), PyObject *args) {
    PyObject *obj[13];
    Py_ssize_t w;
    if (!PyArg_ParseTuple(args, "OnOOOOOOOOOOO", &obj[0], &w, &obj[1], &obj[2], &obj[3], &obj[4], &obj[5], &obj[6],
                          &obj[7], &obj[8], &obj[9], &obj[10], &obj[11])) {
        return NULL;
    }
    /* views: 0 K, 1 chain, 2 ordinal, 3 own_col, 4 src, 5 dst, 6 ends, 7 msrc, 8 mdst, 9 mends, 10 x, 11 inj */
    Py_buffer views[12];
    int held = 0;
    PyObject *result = NULL;
    int32_t *before = NULL, *scratch = NULL;
    if (PyObject_GetBuffer(obj[0], &views[0], PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        return NULL;
    }
    held = 1;
    if (views[0].itemsize != 4) {
        PyErr_SetString(PyExc_ValueError, "fixpoint: K must be int32");
        goto done;
    }
    for (; held < 12; held++) {
        if (vector(obj[held], &views[held], held == 11 ? 4 : 8, "fixpoint's inputs") < 0) {
            goto done;
        }
    }
    Py_ssize_t n = views[1].len / 8;
    if (w < 0 || w > 4096 || views[0].len != n * w * 4 || views[2].len != n * 8 || views[3].len != n * 8 ||
        views[4].len != views[5].len || views[7].len != views[8].len || views[11].len != (views[10].len / 8) * w * 4) {
        PyErr_SetString(PyExc_ValueError, "fixpoint: the arrays' lengths do not agree");
        goto done;
    }
    int32_t *K = views[0].buf;
    const int64_t *chain = views[1].buf, *ordinal = views[2].buf, *own_col = views[3].buf;
    const int64_t *src = views[4].buf, *dst = views[5].buf, *ends = views[6].buf;
    const int64_t *msrc = views[7].buf, *mdst = views[8].buf, *mends = views[9].buf, *x = views[10].buf;
    const int32_t *inj = views[11].buf;
    Py_ssize_t edges = views[4].len / 8, multis = views[7].len / 8, lists = views[6].len / 8;
    Py_ssize_t mlists = views[9].len / 8, xs = views[10].len / 8;
    Py_ssize_t widest = xs;
    int ok = rows_within(src, edges, n) && rows_within(dst, edges, n) && rows_within(msrc, multis, n) &&
             rows_within(mdst, multis, n) && rows_within(x, xs, n) && rows_within(own_col, n, w);
    for (Py_ssize_t k = 0; ok && k < lists; k++) {
        Py_ssize_t lo = k ? ends[k - 1] : 0;
        ok = ends[k] >= lo && ends[k] <= edges && (k + 1 < lists || ends[k] == edges);
        widest = ends[k] - lo > widest ? ends[k] - lo : widest;
    }
    ok = ok && (lists || !edges);
    for (Py_ssize_t k = 0; ok && k < mlists; k++) {
        Py_ssize_t lo = k ? mends[k - 1] : 0;
        ok = mends[k] >= lo && mends[k] <= multis && (k + 1 < mlists || mends[k] == multis);
        widest = mends[k] - lo > widest ? mends[k] - lo : widest;
    }
    ok = ok && (mlists || !multis);
    for (Py_ssize_t i = 0; ok && i < n; i++) {
        ok = ordinal[i] >= -1 && ordinal[i] <= INT32_MAX && (i == 0 || chain[i] >= chain[i - 1]);
    }
    if (!ok) {
        PyErr_SetString(PyExc_ValueError, "fixpoint: a row, column or list bound out of range, or chains unsorted");
        goto done;
    }
    before = malloc((size_t)(n * w > 0 ? n * w : 1) * sizeof(int32_t));
    scratch = malloc((size_t)(widest * w > 0 ? widest * w : 1) * sizeof(int32_t));
    if (before == NULL || scratch == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    FixpointInput input = {K, chain, ordinal, own_col, src, dst, ends, msrc, mdst, mends, x, inj, n, lists, mlists,
                           xs, before, scratch};
    long rounds = 0;
    Py_BEGIN_ALLOW_THREADS
    switch (w) { /* a clock row of a few pipes: loops of a constant width, unrolled, without memcpy calls */
    case 1: rounds = fixpoint_rounds_1(&input); break;
    case 2: rounds = fixpoint_rounds_2(&input); break;
    case 3: rounds = fixpoint_rounds_3(&input); break;
    case 4: rounds = fixpoint_rounds_4(&input); break;
    case 5: rounds = fixpoint_rounds_5(&input); break;
    case 6: rounds = fixpoint_rounds_6(&input); break;
    case 7: rounds = fixpoint_rounds_7(&input); break;
    case 8: rounds = fixpoint_rounds_8(&input); break;
    default: rounds = fixpoint_rounds(&input, w);
    }
    Py_END_ALLOW_THREADS
    result = PyLong_FromLong(rounds);

done:
    free(before);
    free(scratch);
    release_all(views, held);
    return result;
}

#define EXTENT_SATURATE ((uint64_t)1 << 62)

/* extents(repeat, block_num, block_size, block_stride, repeat_stride, out) -> None
 *
 * sanitizerd_protocol.patterns.extents over gathered access columns (uint16 but block_size, uint32), into ``out``
 * (uint64), bit for bit: ``units`` = (max(repeat, 1) - 1) * repeat_stride + (max(block_num, 1) - 1) *
 * block_stride + 1 (below 2**33), the extent units * block_size, 0 where repeat or block_num is 0. As numpy
 * does, the whole batch saturates together: if its largest units times its largest block_size reaches 2**62,
 * every extent is min(double(units) * block_size, 2**62) converted back (numpy's float64 path). */
static PyObject *extents(PyObject *Py_UNUSED(module), PyObject *args) {
    PyObject *obj[6];
    if (!PyArg_ParseTuple(args, "OOOOOO", &obj[0], &obj[1], &obj[2], &obj[3], &obj[4], &obj[5])) {
        return NULL;
    }
    static const Py_ssize_t sizes[6] = {2, 2, 4, 2, 2, 8};
    static const char *names[6] = {"repeat", "block_num", "block_size", "block_stride", "repeat_stride", "out"};
    Py_buffer views[6];
    int held = 0;
    PyObject *result = NULL;
    for (int i = 0; i < 6; i++) {
        int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (i == 5 ? PyBUF_WRITABLE : 0);
        if (PyObject_GetBuffer(obj[i], &views[i], flags) < 0) {
            goto done;
        }
        held++;
        if (views[i].itemsize != sizes[i] || views[i].len != views[0].len / 2 * sizes[i]) {
            PyErr_Format(PyExc_ValueError, "%s must have as many items as repeat, of %zd bytes", names[i], sizes[i]);
            goto done;
        }
    }
    {
        Py_ssize_t n = views[0].len / 2;
        const uint16_t *repeat = views[0].buf, *block_num = views[1].buf, *block_stride = views[3].buf;
        const uint16_t *repeat_stride = views[4].buf;
        const uint32_t *block_size = views[2].buf;
        uint64_t *out = views[5].buf;
        Py_BEGIN_ALLOW_THREADS
        uint64_t units_max = 0, size_max = 0;
        for (Py_ssize_t i = 0; i < n; i++) {
            uint64_t r = repeat[i] > 1 ? (uint64_t)repeat[i] - 1 : 0, b = block_num[i] > 1 ? (uint64_t)block_num[i] - 1 : 0;
            uint64_t units = r * repeat_stride[i] + b * block_stride[i] + 1;
            out[i] = units;
            units_max = units > units_max ? units : units_max;
            size_max = block_size[i] > size_max ? block_size[i] : size_max;
        }
        int saturate = n > 0 && size_max != 0 && units_max > (EXTENT_SATURATE - 1) / size_max;
        for (Py_ssize_t i = 0; i < n; i++) {
            if (repeat[i] == 0 || block_num[i] == 0) {
                out[i] = 0;
            } else if (saturate) {
                double span = (double)out[i] * (double)block_size[i];
                out[i] = span < (double)EXTENT_SATURATE ? (uint64_t)span : EXTENT_SATURATE;
            } else {
                out[i] *= block_size[i];
            }
        }
        Py_END_ALLOW_THREADS
    }
    Py_INCREF(Py_None);
    result = Py_None;
done:
    release_all(views, held);
    return result;
}

/* first_of_kind(records, kind) -> int
 *
 * The index of the first record of ``kind`` (0 to 255), or -1: a batch's first BLOCK_FINISH, without a mask of them. */
static PyObject *first_of_kind(PyObject *Py_UNUSED(module), PyObject *args) {
    PyObject *records_obj, *result = NULL;
    int kind;
    if (!PyArg_ParseTuple(args, "Oi", &records_obj, &kind)) {
        return NULL;
    }
    if (kind < 0 || kind > 255) {
        PyErr_SetString(PyExc_ValueError, "first_of_kind: a kind is 0 to 255");
        return NULL;
    }
    Py_buffer views[1];
    int held = 0;
    Py_ssize_t n = get_records(records_obj, PyBUF_SIMPLE, views, &held), found = -1;
    if (n < 0) {
        goto done;
    }
    const unsigned char *base = views[0].buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        if (base[i * RECORD_SIZE + KIND_AT] == kind) {
            found = i;
            break;
        }
    }
    Py_END_ALLOW_THREADS
    result = PyLong_FromSsize_t(found);
done:
    release_all(views, held);
    return result;
}

/* block_start(records, keep, start, key) -> int
 *
 * The first record at or after ``start`` that ``keep`` marks (None: every record) and whose block key (block_type
 * << 16 | block_id) is not ``key``: where the next block begins; the records' count if none. */
static PyObject *block_start(PyObject *Py_UNUSED(module), PyObject *args) {
    PyObject *records_obj, *keep_obj, *result = NULL;
    Py_ssize_t start;
    long long key;
    if (!PyArg_ParseTuple(args, "OOnL", &records_obj, &keep_obj, &start, &key)) {
        return NULL;
    }
    Py_buffer views[2];
    int held = 0;
    const unsigned char *kept;
    Py_ssize_t n = get_records(records_obj, PyBUF_SIMPLE, views, &held), i = start;
    if (n < 0 || get_record_bytes(keep_obj, n, "keep", 1, views, &held, &kept) < 0) {
        goto done;
    }
    if (start < 0 || start > n) {
        PyErr_SetString(PyExc_ValueError, "start must lie within the records");
        goto done;
    }
    const unsigned char *base = views[0].buf;
    Py_BEGIN_ALLOW_THREADS
    for (; i < n; i++) {
        if (kept != NULL && !kept[i]) {
            continue;
        }
        const unsigned char *record = base + i * RECORD_SIZE;
        long long k = ((long long)record[BLOCK_TYPE_AT] << 16) | (long long)u16_at(record, BLOCK_ID_AT);
        if (k != key) {
            break;
        }
    }
    Py_END_ALLOW_THREADS
    result = PyLong_FromSsize_t(i);
done:
    release_all(views, held);
    return result;
}

/* scatter(kind, access_fields, sync_fields, write_kind, records) -> None
 *
 * gather's inverse over held columns: for each event in order (its kind in ``kind``, uint8), its access's fields
 * (kind <= ``write_kind``) or its sync event's fields, from the next row of ``access_fields`` or ``sync_fields``
 * ((offset in the record, column) as gather takes them), written into its 56-byte record in ``records`` (one per
 * kind; bytes of no field left as they were). The columns must have exactly the accesses' and the sync events'
 * rows. */
static PyObject *scatter(PyObject *Py_UNUSED(module), PyObject *args) {
    PyObject *kind_obj, *access_spec, *sync_spec, *records_obj;
    int write_kind;
    if (!PyArg_ParseTuple(args, "OOOiO", &kind_obj, &access_spec, &sync_spec, &write_kind, &records_obj)) {
        return NULL;
    }
    Py_buffer views[3 * MAX_FIELDS];
    int held = 0;
    HeldFields fields;
    PyObject *result = NULL;
    const unsigned char *kind;
    Py_ssize_t n = get_records(records_obj, PyBUF_WRITABLE, views, &held), accesses = 0;
    if (n < 0 || get_record_bytes(kind_obj, n, "kind", 0, views, &held, &kind) < 0) {
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        accesses += kind[i] <= write_kind;
    }
    if (parse_held_fields(access_spec, accesses, sync_spec, n - accesses, &fields, views, &held) < 0) {
        goto done;
    }
    unsigned char *records = views[0].buf;
    Py_BEGIN_ALLOW_THREADS
    Py_ssize_t a = 0, s = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char *record = records + i * RECORD_SIZE;
        if (kind[i] <= write_kind) {
            scatter_fields(record, &fields.access, a++);
        } else {
            scatter_fields(record, &fields.sync, s++);
        }
    }
    Py_END_ALLOW_THREADS
    Py_INCREF(Py_None);
    result = Py_None;
done:
    release_all(views, held);
    return result;
}

#define WORDS (RECORD_SIZE / 8)
#define ADDRESS_WORD 0
#define SERIAL_WORD 1

/* The ``w``th 8-byte word of a record, as one load (a record's memcpy into a local array compiles to a slow
 * ``rep movs``). */
static inline uint64_t word_at(const unsigned char *record, int w) {
    uint64_t word;
    memcpy(&word, record + 8 * w, sizeof word);
    return word;
}
enum { MIRROR_BATCH_END, MIRROR_BLOCK_END, MIRROR_MISMATCH };
enum { REF_NO_MATCH, REF_ACCESS, REF_SYNC };

#define MIRROR_RUN 32 /* records compared together, without a branch between them */

/* Two words of a record, as one vector (GCC's vector extension: SSE2 on x86-64, NEON on AArch64). */
typedef uint64_t word_pair __attribute__((vector_size(16)));

#define BYTES_1 0x0101010101010101ULL

static inline word_pair pair_at(const unsigned char *bytes) {
    word_pair pair;
    memcpy(&pair, bytes, sizeof pair);
    return pair;
}

/* The mirror's common case without a branch per record: runs of MIRROR_RUN kept records, each compared with the
 * reference's as pairs of words, their differences OR-ed over the run, once the serial offset is known. Compares
 * what the one-record loop compares (the key, the class, the held fields, both offsets), the same way. Returns how
 * many records it matched (whole runs); the caller compares the run that stopped it (a record that differs, is not
 * kept, has no room, or the end) one record at a time, which learns the GM offset, or finds where the block ends or
 * differs. ``a`` counts the accesses among the matched. */
static Py_ssize_t mirror_run(const unsigned char *base, const unsigned char *keep, const unsigned char *access,
                             Py_ssize_t i, Py_ssize_t n, const unsigned char *ref, const unsigned char *ref_class,
                             Py_ssize_t p, Py_ssize_t ref_events, Py_ssize_t room, long long key,
                             const uint64_t masks[2][WORDS], int gm, int has_gm, uint64_t gm_offset, int has_serial,
                             uint64_t serial_offset, uint32_t *key_out, unsigned char *kind_out, Py_ssize_t *a) {
    if (!has_serial || key < 0 || key > 0xffffff) { /* a key no record has: the one-record loop says how it ends */
        return 0;
    }
    /* Bytes 0-15 (address, serial) against the reference's plus the offsets; 16-47 and 48-55 under the class's
     * mask; 40-41 and 48 (block id and type) against the key. */
    word_pair mask_16[2], mask_32[2], mask_48[2];
    for (int c = 0; c < 2; c++) {
        mask_16[c] = (word_pair){masks[c][2], masks[c][3]};
        mask_32[c] = (word_pair){masks[c][4], masks[c][5]};
        mask_48[c] = (word_pair){0, masks[c][6]};
    }
    const word_pair key_40 = {(uint64_t)key & 0xffff, (uint64_t)key >> 16}, key_mask_40 = {0xffff, 0xff};
    const word_pair offset[2] = {{0, serial_offset}, {gm_offset, serial_offset}};
    const unsigned gm_unknown = !has_gm;
    Py_ssize_t done = 0;
    while (i + done + MIRROR_RUN <= n && p + done + MIRROR_RUN <= ref_events && done + MIRROR_RUN <= room) {
        const unsigned char *record = base + (i + done) * RECORD_SIZE, *ref_record = ref + (p + done) * RECORD_SIZE;
        const unsigned char *is_access = access + i + done, *class = ref_class + p + done;
        /* Per 8 records: accesses marked 1 and sync events 0 (the one-record loop takes any other mark), each of the
         * class the reference's record is (class + mark == REF_SYNC), and kept. */
        uint64_t other = 0;
        for (int j = 0; j < MIRROR_RUN; j += 8) {
            uint64_t marks = word_at(is_access + j, 0);
            other |= (marks & ~BYTES_1) | ((word_at(class + j, 0) + marks) ^ (REF_SYNC * BYTES_1));
            if (keep != NULL) {
                other |= word_at(keep + i + done + j, 0) ^ BYTES_1;
            }
        }
        word_pair differ = {0, 0};
        for (int j = 0; j < MIRROR_RUN; j++) {
            const unsigned char *r = record + j * RECORD_SIZE, *q = ref_record + j * RECORD_SIZE;
            unsigned acc = is_access[j], in_gm = acc & (r[SPACE_AT] == gm), c = !acc;
            other |= in_gm & gm_unknown;
            word_pair at_40 = pair_at(r + 40);
            differ |= ((pair_at(r) - offset[in_gm]) ^ pair_at(q)) | ((pair_at(r + 16) ^ pair_at(q + 16)) & mask_16[c]) |
                      ((pair_at(r + 32) ^ pair_at(q + 32)) & mask_32[c]) | ((at_40 ^ pair_at(q + 40)) & mask_48[c]) |
                      ((at_40 ^ key_40) & key_mask_40);
        }
        if (differ[0] | differ[1] | other) {
            break;
        }
        uint64_t accesses = 0; /* the marks are 0 or 1 here: a byte-wise sum, 8 at a time */
        for (int j = 0; j < MIRROR_RUN; j += 8) {
            accesses += (word_at(is_access + j, 0) * BYTES_1) >> 56;
        }
        for (int j = 0; j < MIRROR_RUN; j++) {
            key_out[done + j] = key;
            kind_out[done + j] = record[j * RECORD_SIZE + KIND_AT];
        }
        *a += (Py_ssize_t)accesses;
        done += MIRROR_RUN;
    }
    return done;
}

/* mirror(records, keep, access, start, key, key_out, kind_out, ref_records, ref_class, access_mask, sync_mask, gm,
 *        state) -> (stop, status, state)
 *
 * Compares the records of one block, from ``start``, with a reference block already held, instead of gathering
 * them: the kept records in order, while their block key is ``key``, each with the reference's record ``p`` (its
 * 56-byte ``ref_records``, as ``scatter`` wrote them from its columns). ``ref_class`` says, per reference record, whether
 * it is an access (REF_ACCESS), a sync event (REF_SYNC) or matches nothing (REF_NO_MATCH); a record must be of the
 * same class (``access``: one byte per record). Every byte the class's mask (56 bytes, ``access_mask`` or
 * ``sync_mask``) marks must hold the reference's, the first two words aside: the serial (bytes 8-15) is always the
 * reference's plus the block's serial offset, and an access's address (bytes 0-7) in GM (space ``gm``) the
 * reference's plus the block's GM offset (each offset learned from the block's first record that has one, modulo
 * 2**64); the address of anything else is the reference's.
 *
 * Each record matched writes its key and kind to ``key_out`` and ``kind_out`` (from their start), as gather does.
 * ``state`` and the state returned: (p, a, s, has_gm, gm_offset, has_serial, serial_offset), ``a`` and ``s`` the
 * accesses and sync events matched. Stops at the end of the records (MIRROR_BATCH_END), at a kept record of another
 * key (MIRROR_BLOCK_END), or at one that does not match or that the reference has no record for (MIRROR_MISMATCH);
 * ``stop`` is that record's index (the records' count at their end). Offsets learned from a record that does not
 * match are not returned. */
static PyObject *mirror(PyObject *Py_UNUSED(module), PyObject *args) {
    PyObject *records_obj, *keep_obj, *access_obj, *key_out_obj, *kind_out_obj, *ref_obj, *class_obj;
    Py_buffer access_mask_view, sync_mask_view;
    Py_ssize_t start, p, a, s;
    long long key;
    int gm, has_gm, has_serial;
    unsigned long long gm_offset, serial_offset;
    if (!PyArg_ParseTuple(args, "OOOnLOOOOy*y*i(nnniKiK)", &records_obj, &keep_obj, &access_obj, &start, &key,
                          &key_out_obj, &kind_out_obj, &ref_obj, &class_obj, &access_mask_view, &sync_mask_view, &gm,
                          &p, &a, &s, &has_gm, &gm_offset, &has_serial, &serial_offset)) {
        return NULL;
    }
    Py_buffer views[9]; /* the two masks, records, keep, access, key_out, kind_out, ref_records, ref_class */
    views[0] = access_mask_view;
    views[1] = sync_mask_view;
    int held = 2;
    PyObject *result = NULL;
    if (access_mask_view.len != RECORD_SIZE || sync_mask_view.len != RECORD_SIZE) {
        PyErr_SetString(PyExc_ValueError, "a mask is 56 bytes");
        goto done;
    }
    const unsigned char *keep, *access;
    Py_ssize_t n = get_records(records_obj, PyBUF_SIMPLE, views, &held);
    if (n < 0 || get_record_bytes(keep_obj, n, "keep", 1, views, &held, &keep) < 0 ||
        get_record_bytes(access_obj, n, "access", 0, views, &held, &access) < 0) {
        goto done;
    }
    if (start < 0 || start > n) {
        PyErr_SetString(PyExc_ValueError, "start must lie within the records");
        goto done;
    }
    const unsigned char *base = views[2].buf;
    uint32_t *key_out;
    unsigned char *kind_out;
    Py_ssize_t room = get_key_kind(key_out_obj, kind_out_obj, views, &held, &key_out, &kind_out);
    if (room < 0) {
        goto done;
    }
    const unsigned char *ref_class;
    int ref_at = held;
    Py_ssize_t ref_events = get_records(ref_obj, PyBUF_SIMPLE, views, &held);
    if (ref_events < 0 || get_record_bytes(class_obj, ref_events, "ref_class", 0, views, &held, &ref_class) < 0) {
        goto done;
    }
    const unsigned char *ref = views[ref_at].buf;
    if (p < 0 || a < 0 || s < 0 || p > ref_events || a + s != p) {
        PyErr_SetString(PyExc_ValueError, "the state lies beyond the reference");
        goto done;
    }
    uint64_t masks[2][WORDS];
    memcpy(masks[0], access_mask_view.buf, RECORD_SIZE);
    memcpy(masks[1], sync_mask_view.buf, RECORD_SIZE);
    Py_ssize_t e = 0, i = start, slow_until = start;
    int status = MIRROR_BATCH_END, overflow = 0;

    Py_BEGIN_ALLOW_THREADS
    for (; i < n; i++) {
        if (i >= slow_until) {
            Py_ssize_t accesses_before = a;
            Py_ssize_t run = mirror_run(base, keep, access, i, n, ref, ref_class, p, ref_events, room - e,
                                        key, masks, gm, has_gm, gm_offset, has_serial, serial_offset,
                                        key_out + e, kind_out + e, &a);
            i += run;
            p += run;
            e += run;
            s += run - (a - accesses_before);
            slow_until = i + MIRROR_RUN; /* a run that stopped: its records one by one */
            if (i >= n) {
                break;
            }
        }
        if (keep != NULL && !keep[i]) {
            continue;
        }
        const unsigned char *record = base + i * RECORD_SIZE;
        uint32_t k = ((uint32_t)record[BLOCK_TYPE_AT] << 16) | (uint32_t)u16_at(record, BLOCK_ID_AT);
        if ((long long)k != key) {
            status = MIRROR_BLOCK_END;
            break;
        }
        int is_access = access[i] != 0;
        if (p >= ref_events || ref_class[p] != (is_access ? REF_ACCESS : REF_SYNC)) {
            status = MIRROR_MISMATCH;
            break;
        }
        if (e >= room) {
            overflow = 1;
            break;
        }
        const unsigned char *ref_record = ref + p * RECORD_SIZE;
        uint64_t word[2] = {word_at(record, ADDRESS_WORD), word_at(record, SERIAL_WORD)};
        uint64_t ref_word[2] = {word_at(ref_record, ADDRESS_WORD), word_at(ref_record, SERIAL_WORD)};
        const uint64_t *mask = masks[!is_access];
        uint64_t differ = 0;
        for (int w = SERIAL_WORD + 1; w < WORDS; w++) {
            differ |= (word_at(record, w) ^ word_at(ref_record, w)) & mask[w];
        }
        uint64_t new_gm = gm_offset, new_serial = serial_offset;
        int learn_gm = 0, learn_serial = !has_serial;
        if (learn_serial) {
            new_serial = word[SERIAL_WORD] - ref_word[SERIAL_WORD];
        }
        differ |= word[SERIAL_WORD] - (ref_word[SERIAL_WORD] + new_serial);
        if (is_access && record[SPACE_AT] == gm) {
            learn_gm = !has_gm;
            if (learn_gm) {
                new_gm = word[ADDRESS_WORD] - ref_word[ADDRESS_WORD];
            }
            differ |= word[ADDRESS_WORD] - (ref_word[ADDRESS_WORD] + new_gm);
        } else {
            differ |= word[ADDRESS_WORD] ^ ref_word[ADDRESS_WORD];
        }
        if (differ) {
            status = MIRROR_MISMATCH;
            break;
        }
        if (learn_gm) {
            has_gm = 1;
            gm_offset = new_gm;
        }
        if (learn_serial) {
            has_serial = 1;
            serial_offset = new_serial;
        }
        key_out[e] = k;
        kind_out[e] = record[KIND_AT];
        e++;
        p++;
        if (is_access) {
            a++;
        } else {
            s++;
        }
    }
    Py_END_ALLOW_THREADS
    if (overflow) {
        PyErr_SetString(PyExc_ValueError, "key_out and kind_out have no room for every record matched");
        goto done;
    }
    result = Py_BuildValue("nn(nnniKiK)", i, (Py_ssize_t)status, p, a, s, has_gm, (unsigned long long)gm_offset,
                           has_serial, (unsigned long long)serial_offset);

done:
    release_all(views, held);
    return result;
}

/* A clock ``table`` row named as numpy names it: -1 is the last row (the padded one: no node). */
static inline Py_ssize_t table_row(int64_t r, Py_ssize_t rows) {
    return r < 0 ? (Py_ssize_t)(r + rows) : (Py_ssize_t)r;
}

/* What access ``r`` knows of column ``col``: the larger of what its last node on its pipe and its PIPE_S issuer
 * know (``Model.knowledge``). */
static inline int64_t knows(const int32_t *table, Py_ssize_t width, Py_ssize_t rows, const int64_t *prev,
                            const int64_t *issuer, int64_t r, int64_t col) {
    int32_t x = table[table_row(prev[r], rows) * width + col], y = table[table_row(issuer[r], rows) * width + col];
    return x > y ? x : y;
}

/* unordered(a, b, mem, serial, pipe, mblock, seg, prev, issuer, pipe_index, barrier_no, write, atomic, table,
 *           width, column, in_order, s_cal, distance, out) -> pairs of two blocks
 *
 * racecheck.Kernel._unordered for the pairs (a[j], b[j]) of accesses of one block, into ``out`` (one byte per
 * pair, 1: they race), bit for bit as its numpy path: an instruction never races with itself; two atomic writes
 * off the scalar pipe never race; on one pipe, neither an in-order pipe (bit ``pipe`` of ``in_order``), nor more
 * than ``distance`` instructions apart, nor a pipe_barrier between, nor a hand-over back (``_single_pipe_unordered``);
 * on two pipes, neither knows the other completed. Pairs of two blocks get only the first two rules, and are
 * counted: their cross-block knowledge is the caller's. Per access: int64 vectors but ``write`` and ``atomic``
 * (one byte each); ``table``: the padded clocks (int32, rows of ``width``), ``column`` (int64, one per pipe) the
 * column of each pipe's clock in it. Every index is checked. */
static PyObject *unordered(PyObject *Py_UNUSED(module), PyObject *args) {
    PyObject *obj[16];
    Py_ssize_t width;
    unsigned long long in_order;
    long long s_cal, distance;
    if (!PyArg_ParseTuple(args, "OOOOOOOOOOOOOOnOKLLO", &obj[0], &obj[1], &obj[2], &obj[3], &obj[4], &obj[5],
                          &obj[6], &obj[7], &obj[8], &obj[9], &obj[10], &obj[11], &obj[12], &obj[13], &width,
                          &obj[14], &in_order, &s_cal, &distance, &obj[15])) {
        return NULL;
    }
    /* views: 0 a, 1 b, 2 mem, 3 serial, 4 pipe, 5 mblock, 6 seg, 7 prev, 8 issuer, 9 pipe_index, 10 barrier_no,
     * 11 write, 12 atomic, 13 table, 14 column, 15 out */
    static const Py_ssize_t sizes[16] = {8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 1, 1, 4, 8, 1};
    Py_buffer views[16];
    int held = 0;
    PyObject *result = NULL;
    if (get_views(obj, 16, 15, sizes, views, &held, "unordered") < 0) {
        goto done;
    }
    Py_ssize_t pairs = views[0].len / 8, n = views[2].len / 8, columns = views[14].len / 8;
    int ok = views[1].len == views[0].len && views[15].len == pairs && width > 0 && views[13].len % (width * 4) == 0;
    for (int k = 3; ok && k < 11; k++) {
        ok = views[k].len == n * 8;
    }
    ok = ok && views[11].len == n && views[12].len == n;
    Py_ssize_t rows = ok ? views[13].len / (width * 4) : 0;
    const int64_t *a = views[0].buf, *b = views[1].buf, *mem = views[2].buf, *serial = views[3].buf;
    const int64_t *pipe = views[4].buf, *mblock = views[5].buf, *seg = views[6].buf, *prev = views[7].buf;
    const int64_t *issuer = views[8].buf, *pipe_index = views[9].buf, *barrier_no = views[10].buf;
    const unsigned char *write = views[11].buf, *atomic = views[12].buf;
    const int32_t *table = views[13].buf;
    const int64_t *column = views[14].buf;
    unsigned char *out = views[15].buf;
    ok = ok && rows > 0 && rows_within(a, pairs, n) && rows_within(b, pairs, n) && rows_within(column, columns, width);
    for (Py_ssize_t i = 0; ok && i < n; i++) {
        Py_ssize_t p = table_row(prev[i], rows), s = table_row(issuer[i], rows);
        ok = pipe[i] >= 0 && pipe[i] < columns && pipe[i] < 64 && p >= 0 && p < rows && s >= 0 && s < rows;
    }
    if (!ok) {
        PyErr_SetString(PyExc_ValueError, "unordered: an index out of range, or the arrays' lengths do not agree");
        goto done;
    }
    Py_ssize_t cross = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t j = 0; j < pairs; j++) {
        int64_t x = a[j], y = b[j], px = pipe[x], py = pipe[y];
        int same_block = mblock[x] == mblock[y];
        int race = !same_block || serial[x] != serial[y];
        int scalar = px == s_cal || py == s_cal;
        if (write[x] && write[y] && atomic[x] && atomic[y] && !scalar) {
            race = 0;
        }
        if (!same_block) {
            cross++;
        } else if (race && px == py) {
            int64_t first = mem[x] < mem[y] ? x : y, second = first == x ? y : x;
            int in_order_pipe = (int)((in_order >> px) & 1);
            int apart = pipe_index[second] - pipe_index[first] > distance;
            int barrier = barrier_no[first] != barrier_no[second];
            int returned = knows(table, width, rows, prev, issuer, second, column[px]) >= seg[first];
            race = !(in_order_pipe || apart || barrier || returned);
        } else if (race) {
            race = !(knows(table, width, rows, prev, issuer, y, column[px]) >= seg[x] ||
                     knows(table, width, rows, prev, issuer, x, column[py]) >= seg[y]);
        }
        out[j] = (unsigned char)race;
    }
    Py_END_ALLOW_THREADS
    result = PyLong_FromSsize_t(cross);

done:
    release_all(views, held);
    return result;
}

/* The incidence before ``p`` of its own key in a segment of at most two keys that begins at ``first``: the one
 * before it, or, where ``p`` begins its run, the one before the other key's run (-1: none). */
static inline int64_t before_of_same_key(int64_t p, int64_t first, const int64_t *run_start) {
    int64_t q = p - 1;
    if (q >= first && q < run_start[p]) {
        q = run_start[q] - 1;
    }
    return q >= first ? q : -1;
}

/* ``p``, or where it is the same instruction as ``t`` (a vector op reading what it writes) the one of its key
 * before it, twice at most. */
static inline int64_t skip_same_instruction(int64_t p, int64_t t, int64_t first, const int64_t *run_start,
                                            const int64_t *instruction, const int64_t *who) {
    for (int i = 0; i < 2 && p >= 0 && instruction[who[p]] == instruction[who[t]]; i++) {
        p = before_of_same_key(p, first, run_start);
    }
    return p;
}

/* site_pairs(seg, who, key, is_write, instruction, general, pairs) -> (other pairs, own pairs)
 *
 * _race_pairs._site_pairs's segments of one or two keys, bit for bit as its numpy path: incidences sorted by
 * (segment, rank), ``seg`` and ``who`` (int64, the access of each); per access ``key`` and ``instruction``
 * (int64) and ``is_write`` (one byte). Marks ``general`` (one byte per incidence) where a segment has three keys
 * or more (left to the general search); elsewhere pairs each incidence with the one just before its run (the
 * other key's latest, if either writes) and each write with its own key's latest before it, skipping an
 * instruction's own other events: into ``pairs`` (int64, 4 x incidences) rows 0/1 the other key's (earlier,
 * later), rows 2/3 the own key's, each in incidence order. Every access index is checked. */
static PyObject *site_pairs(PyObject *Py_UNUSED(module), PyObject *args) {
    PyObject *obj[7];
    if (!PyArg_ParseTuple(args, "OOOOOOO", &obj[0], &obj[1], &obj[2], &obj[3], &obj[4], &obj[5], &obj[6])) {
        return NULL;
    }
    /* views: 0 seg, 1 who, 2 key, 3 is_write, 4 instruction, 5 general, 6 pairs */
    static const Py_ssize_t sizes[7] = {8, 8, 8, 1, 8, 1, 8};
    Py_buffer views[7];
    int held = 0;
    PyObject *result = NULL;
    int64_t *run_start = NULL;
    if (get_views(obj, 7, 5, sizes, views, &held, "site_pairs") < 0) {
        goto done;
    }
    Py_ssize_t size = views[0].len / 8, n = views[2].len / 8;
    const int64_t *seg = views[0].buf, *who = views[1].buf, *key = views[2].buf, *instruction = views[4].buf;
    const unsigned char *is_write = views[3].buf;
    unsigned char *general = views[5].buf;
    int64_t *pairs = views[6].buf;
    if (views[1].len != size * 8 || views[3].len != n || views[4].len != n * 8 || views[5].len != size ||
        views[6].len != 4 * size * 8 || !rows_within(who, size, n)) {
        PyErr_SetString(PyExc_ValueError, "site_pairs: an access out of range, or the arrays' lengths do not agree");
        goto done;
    }
    run_start = rows_alloc(size);
    if (run_start == NULL) {
        goto done;
    }
    int64_t *a_other = pairs, *b_other = pairs + size, *a_own = pairs + 2 * size, *b_own = pairs + 3 * size;
    Py_ssize_t others = 0, owns = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t first = 0, end; first < size; first = end) {
        int64_t k0 = key[who[first]], k1 = k0;
        int many = 0;
        for (end = first; end < size && seg[end] == seg[first]; end++) {
            int64_t k = key[who[end]];
            if (k != k0) {
                if (k1 == k0) {
                    k1 = k;
                } else if (k != k1) {
                    many = 1;
                }
            }
        }
        memset(general + first, many, (size_t)(end - first));
        if (many) {
            continue;
        }
        for (Py_ssize_t t = first; t < end; t++) {
            run_start[t] = t > first && key[who[t]] == key[who[t - 1]] ? run_start[t - 1] : t;
            int64_t p = run_start[t] - 1;
            if (p >= first && (is_write[who[t]] || is_write[who[p]])) {
                p = skip_same_instruction(p, t, first, run_start, instruction, who);
                if (p >= 0) {
                    a_other[others] = p;
                    b_other[others++] = t;
                }
            }
            if (is_write[who[t]]) {
                p = skip_same_instruction(before_of_same_key(t, first, run_start), t, first, run_start, instruction,
                                          who);
                if (p >= 0) {
                    a_own[owns] = p;
                    b_own[owns++] = t;
                }
            }
        }
    }
    Py_END_ALLOW_THREADS
    result = Py_BuildValue("nn", others, owns);

done:
    free(run_start);
    release_all(views, held);
    return result;
}

enum { N_PIPE_BARRIER, N_SOFT_SYNC_ALL, N_SOFT_SET, N_ALL, N_S, N_S_CAL, N_NPIPES, N_POS_BITS, N_COUNT };

/* The nodes one sync event makes: a PIPE_ALL barrier one per member and its wait, a soft SyncAll two, the kinds
 * _IS_ONE_NODE names one, the others none. */
static inline Py_ssize_t nodes_of(unsigned char kind, int64_t pipe, const int64_t *c, const unsigned char *one_node,
                                  Py_ssize_t members) {
    if (kind == c[N_PIPE_BARRIER] && pipe == c[N_ALL]) {
        return members + 1;
    }
    return kind == c[N_SOFT_SYNC_ALL] ? 2 : one_node[kind] != 0;
}

/* make_nodes(kind, pipe, dst_pipe, block, seq, all_pipes, tables, constants, block_out, pipe_out, pos_out,
 *            ordinal_out, event_out, local_out, kind_out, key_out, chain_out) -> whether it made them
 *
 * _happens_before.make_nodes, bit for bit, where the nodes of each chain (block * NPIPES + pipe) come in the
 * order of their keys as the events make them (events in block-sorted program order do): then a stable sort by
 * key is a count by chain, with no comparison sort. Per sync event ``kind`` (uint8) and int64 ``pipe``,
 * ``dst_pipe``, ``block``, ``seq``; ``all_pipes`` (int64) the members of pipe_barrier(PIPE_ALL); ``tables``:
 * three 256-byte tables by kind (_IS_ONE_NODE, _IS_FLAG_WAIT, _IS_OWN_PIPE_WAIT); ``constants``: the kinds
 * PIPE_BARRIER, SOFT_SYNC_ALL, SOFT_SET, the pipes ALL, S, S_CAL, NPIPES and POS_BITS. The outputs (int64 but
 * ``kind_out``, uint8) have one row per node: as many as numpy's count makes, or refused. False, with nothing
 * promised of the outputs, where the keys are not so ordered (numpy's sort is to run). */
static PyObject *make_nodes(PyObject *Py_UNUSED(module), PyObject *args) {
    PyObject *obj[17];
    if (!PyArg_ParseTuple(args, "OOOOOOOOOOOOOOOOO", &obj[0], &obj[1], &obj[2], &obj[3], &obj[4], &obj[5], &obj[6],
                          &obj[7], &obj[8], &obj[9], &obj[10], &obj[11], &obj[12], &obj[13], &obj[14], &obj[15],
                          &obj[16])) {
        return NULL;
    }
    /* views: 0 kind, 1 pipe, 2 dst_pipe, 3 block, 4 seq, 5 all_pipes, 6 tables, 7 constants, 8.. the outputs */
    static const Py_ssize_t sizes[17] = {1, 8, 8, 8, 8, 8, 1, 8, 8, 8, 8, 8, 8, 8, 1, 8, 8};
    Py_buffer views[17];
    int held = 0;
    PyObject *result = NULL;
    int64_t *scratch = NULL;
    if (get_views(obj, 17, 8, sizes, views, &held, "make_nodes") < 0) {
        goto done;
    }
    Py_ssize_t m = views[0].len, members = views[5].len / 8;
    const unsigned char *kind = views[0].buf, *one_node = views[6].buf, *flag_wait = one_node + 256;
    const unsigned char *own_pipe_wait = one_node + 512;
    const int64_t *pipe = views[1].buf, *dst_pipe = views[2].buf, *block = views[3].buf, *seq = views[4].buf;
    const int64_t *all_pipes = views[5].buf, *c = views[7].buf;
    int ok = views[1].len == m * 8 && views[2].len == m * 8 && views[3].len == m * 8 && views[4].len == m * 8 &&
             views[6].len == 3 * 256 && views[7].len == N_COUNT * 8;
    Py_ssize_t n = 0;
    for (Py_ssize_t i = 0; ok && i < m; i++) {
        n += nodes_of(kind[i], pipe[i], c, one_node, members);
    }
    for (int k = 8; ok && k < 17; k++) {
        ok = views[k].len == n * views[k].itemsize;
    }
    if (!ok || c[N_NPIPES] <= 0 || c[N_POS_BITS] < 0 || c[N_POS_BITS] > 62) {
        PyErr_SetString(PyExc_ValueError, "make_nodes: the arrays' lengths do not agree with the nodes made");
        goto done;
    }
    int64_t *block_out = views[8].buf, *pipe_out = views[9].buf, *pos_out = views[10].buf;
    int64_t *ordinal_out = views[11].buf, *event_out = views[12].buf, *local_out = views[13].buf;
    unsigned char *kind_out = views[14].buf;
    int64_t *key_out = views[15].buf, *chain_out = views[16].buf;
    /* scratch: per node in the order made, its chain, key and event; then per chain its next row (chains are
     * counted only where they span at most n + 4096) */
    scratch = malloc((size_t)(4 * n + 4097) * sizeof(int64_t));
    if (scratch == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    int64_t *made_chain = scratch, *made_key = scratch + n, *made_event = scratch + 2 * n;
    int sorted = 1;
    Py_BEGIN_ALLOW_THREADS
    const int64_t npipes = c[N_NPIPES], pos_bits = c[N_POS_BITS];
    Py_ssize_t j = 0;
    int64_t low = INT64_MAX, high = INT64_MIN;
    for (Py_ssize_t i = 0; i < m; i++) {
        unsigned char k = kind[i];
        int barrier = k == c[N_PIPE_BARRIER], sync_all = k == c[N_SOFT_SYNC_ALL];
        Py_ssize_t count = nodes_of(k, pipe[i], c, one_node, members);
        for (Py_ssize_t part = 0; part < count; part++, j++) {
            int64_t node_pipe = pipe[i] == c[N_S] ? c[N_S_CAL] : pipe[i];
            node_pipe = flag_wait[k] ? dst_pipe[i] : node_pipe;
            node_pipe = own_pipe_wait[k] ? pipe[i] : node_pipe;
            node_pipe = k == c[N_SOFT_SET] ? c[N_S_CAL] : node_pipe;
            node_pipe = sync_all ? (part == 0 ? c[N_S_CAL] : c[N_S]) : node_pipe;
            if (barrier) {
                node_pipe = part < members ? all_pipes[part] : c[N_S];
            }
            int waiting_half = (sync_all && part == 1) || (barrier && part == members);
            int64_t pos = (int64_t)(2 * (uint64_t)seq[i] + (uint64_t)waiting_half);
            int64_t chain = (int64_t)((uint64_t)block[i] * (uint64_t)npipes + (uint64_t)node_pipe);
            made_chain[j] = chain;
            made_key[j] = (int64_t)(((uint64_t)chain << pos_bits) + (uint64_t)pos);
            made_event[j] = i;
            pipe_out[j] = node_pipe; /* by the order made, for now */
            pos_out[j] = pos;
            low = chain < low ? chain : low;
            high = chain > high ? chain : high;
        }
    }
    /* A stable count by chain, where the chains span no more than the nodes and a few thousand (a block's or
     * a kernel's worth of pipes): ``next`` holds each chain's next row. */
    if (n && (uint64_t)high - (uint64_t)low >= (uint64_t)n + 4096) {
        sorted = 0;
    }
    if (sorted && n) {
        Py_ssize_t chains = (Py_ssize_t)((uint64_t)high - (uint64_t)low) + 1;
        int64_t *next = scratch + 3 * n;
        memset(next, 0, (size_t)chains * sizeof(int64_t));
        for (Py_ssize_t x = 0; x < n; x++) {
            next[made_chain[x] - low]++;
        }
        int64_t at = 0;
        for (Py_ssize_t ch = 0; ch < chains; ch++) {
            int64_t count = next[ch];
            next[ch] = at;
            at += count;
        }
        /* rows in sorted order: local_out[row] = the node made x */
        for (Py_ssize_t x = 0; x < n; x++) {
            local_out[next[made_chain[x] - low]++] = x;
        }
        for (Py_ssize_t r = 0; r < n && sorted; r++) {
            int64_t x = local_out[r];
            if (r && (made_key[x] < key_out[r - 1] || (made_key[x] == key_out[r - 1] && x < local_out[r - 1]))) {
                sorted = 0;
            }
            key_out[r] = made_key[x];
        }
    }
    if (sorted) {
        /* Gather by made order into the outputs; pipe_out and pos_out are read before they are written over, so
         * they go through scratch (made_chain, no longer needed, and made_key). */
        for (Py_ssize_t r = 0; r < n; r++) {
            made_chain[r] = pipe_out[local_out[r]];
        }
        memcpy(pipe_out, made_chain, (size_t)n * sizeof(int64_t));
        for (Py_ssize_t r = 0; r < n; r++) {
            made_chain[r] = pos_out[local_out[r]];
        }
        memcpy(pos_out, made_chain, (size_t)n * sizeof(int64_t));
        int64_t start = 0;
        for (Py_ssize_t r = 0; r < n; r++) {
            int64_t i = made_event[local_out[r]];
            chain_out[r] = key_out[r] >> pos_bits;
            if (r && chain_out[r] != chain_out[r - 1]) {
                start = r;
            }
            ordinal_out[r] = r - start;
            block_out[r] = block[i];
            event_out[r] = seq[i];
            kind_out[r] = kind[i];
            local_out[r] = i;
        }
    }
    Py_END_ALLOW_THREADS
    result = PyBool_FromLong(sorted);

done:
    free(scratch);
    release_all(views, held);
    return result;
}

/* ``a + b``, saturating at 2**64 - 1 (_patterns.ends). */
static inline uint64_t saturating_add(uint64_t a, uint64_t b) {
    uint64_t total = a + b;
    return total < a ? UINT64_MAX : total;
}

/* Whether an access whose rows are ranges (block_num <= 1 or block_stride <= 1) is one range: one row, or rows
 * that touch; its row's length and its repeat's step, in bytes (each below 2**48). */
static inline int one_range(uint64_t size, uint64_t num, uint64_t stride, uint64_t repeat, uint64_t repeat_stride,
                            uint64_t *row_length, uint64_t *step) {
    *row_length = (num <= 1 || stride == 0) ? size : num * size;
    *step = repeat_stride * size;
    return repeat <= 1 || *step <= *row_length;
}

/* ranges(address, ext, block_size, block_num, block_stride, repeat, repeat_stride, index, owner, start, stop)
 *     -> pieces
 *
 * _patterns.ranges of the accesses ``index`` (int64 rows of the columns: address and ext uint64, block_size uint32,
 * the rest uint16) where none is scattered (every row one range: block_num <= 1 or block_stride <= 1), else -1
 * and nothing written (numpy's ``expand`` lists those). A dense access (one row, or rows that touch: repeat <= 1
 * or repeat_stride * block_size <= its row's length) is one range, [address, address + ext); the others one per
 * row, [address + r * repeat_stride * block_size, + row length), every end saturating at 2**64 - 1. Dense ones
 * first, then the rows', each in the order of ``index``, as numpy lists them. ``owner`` (int64), ``start`` and
 * ``stop`` (uint64): None to count the pieces only, else exactly that many each. */
static PyObject *ranges(PyObject *Py_UNUSED(module), PyObject *args) {
    PyObject *obj[11];
    if (!PyArg_ParseTuple(args, "OOOOOOOOOOO", &obj[0], &obj[1], &obj[2], &obj[3], &obj[4], &obj[5], &obj[6], &obj[7],
                          &obj[8], &obj[9], &obj[10])) {
        return NULL;
    }
    int count_only = obj[8] == Py_None && obj[9] == Py_None && obj[10] == Py_None;
    static const Py_ssize_t sizes[11] = {8, 8, 4, 2, 2, 2, 2, 8, 8, 8, 8};
    Py_buffer views[11];
    int held = 0;
    PyObject *result = NULL;
    if (get_views(obj, count_only ? 8 : 11, 8, sizes, views, &held, "ranges") < 0) {
        goto done;
    }
    Py_ssize_t n = views[0].len / 8, m = views[7].len / 8;
    const uint64_t *address = views[0].buf, *ext = views[1].buf;
    const uint32_t *block_size = views[2].buf;
    const uint16_t *block_num = views[3].buf, *block_stride = views[4].buf, *repeat = views[5].buf;
    const uint16_t *repeat_stride = views[6].buf;
    const int64_t *index = views[7].buf;
    if (views[1].len != n * 8 || views[2].len != n * 4 || views[3].len != n * 2 || views[4].len != n * 2 ||
        views[5].len != n * 2 || views[6].len != n * 2 || !rows_within(index, m, n)) {
        PyErr_SetString(PyExc_ValueError, "ranges: a row out of range, or the columns' lengths differ");
        goto done;
    }
    Py_ssize_t pieces = 0, dense_count = 0;
    int scattered = 0;
    for (Py_ssize_t j = 0; j < m; j++) {
        int64_t i = index[j];
        if (block_num[i] > 1 && block_stride[i] > 1) {
            scattered = 1;
            break;
        }
        uint64_t row_length, step;
        int dense = one_range(block_size[i], block_num[i], block_stride[i], repeat[i], repeat_stride[i], &row_length,
                              &step);
        dense_count += dense;
        pieces += dense ? 1 : repeat[i];
    }
    if (scattered) {
        result = PyLong_FromLong(-1);
        goto done;
    }
    if (count_only) {
        result = PyLong_FromSsize_t(pieces);
        goto done;
    }
    if (views[8].len != pieces * 8 || views[9].len != pieces * 8 || views[10].len != pieces * 8) {
        PyErr_SetString(PyExc_ValueError, "ranges: owner, start and stop must have one item per piece");
        goto done;
    }
    int64_t *owner = views[8].buf;
    uint64_t *start = views[9].buf, *stop = views[10].buf;
    Py_BEGIN_ALLOW_THREADS
    Py_ssize_t d = 0, r = dense_count;
    for (Py_ssize_t j = 0; j < m; j++) {
        int64_t i = index[j];
        uint64_t row_length, step;
        if (one_range(block_size[i], block_num[i], block_stride[i], repeat[i], repeat_stride[i], &row_length, &step)) {
            owner[d] = i;
            start[d] = address[i];
            stop[d++] = saturating_add(address[i], ext[i]);
            continue;
        }
        for (uint64_t k = 0; k < repeat[i]; k++) { /* k * step < 2**64: both below 2**16 and 2**48 */
            uint64_t row_start = saturating_add(address[i], k * step);
            owner[r] = i;
            start[r] = row_start;
            stop[r++] = saturating_add(row_start, row_length);
        }
    }
    Py_END_ALLOW_THREADS
    Py_INCREF(Py_None);
    result = Py_None;
done:
    release_all(views, held);
    return result;
}

/* placed_nodes(seg, issued, block, pipe, first, npipes, s_pipe, prev, issuer, seg_wide) -> None
 *
 * racecheck.Kernel._placed_in_blocks in one pass: per access, counts of nodes before it in its block (``seg`` on its
 * own pipe, ``issued`` on PIPE_S; int32) as node rows: ``prev`` = first[block * npipes + pipe] + seg - 1 and
 * ``issuer`` = first[block * npipes + s_pipe] + issued - 1, -1 where the count is 0 (``first``: each chain's first
 * node row; ``block``, ``pipe`` int64); ``seg_wide``: seg as int64. ValueError where a chain is not in ``first``. */
static PyObject *placed_nodes(PyObject *Py_UNUSED(module), PyObject *args) {
    PyObject *obj[8];
    long npipes, s_pipe;
    if (!PyArg_ParseTuple(args, "OOOOOllOOO", &obj[0], &obj[1], &obj[2], &obj[3], &obj[4], &npipes, &s_pipe, &obj[5],
                          &obj[6], &obj[7])) {
        return NULL;
    }
    if (npipes < 1 || s_pipe < 0 || s_pipe >= npipes) {
        PyErr_SetString(PyExc_ValueError, "placed_nodes: s_pipe must be one of npipes pipes");
        return NULL;
    }
    static const Py_ssize_t sizes[8] = {4, 4, 8, 8, 8, 8, 8, 8};
    Py_buffer views[8];
    int held = 0;
    PyObject *result = NULL;
    if (get_views(obj, 8, 5, sizes, views, &held, "placed_nodes") < 0) {
        goto done;
    }
    Py_ssize_t n = views[0].len / 4, chains = views[4].len / 8;
    if (views[1].len != n * 4 || views[2].len != n * 8 || views[3].len != n * 8 || views[5].len != n * 8 ||
        views[6].len != n * 8 || views[7].len != n * 8) {
        PyErr_SetString(PyExc_ValueError, "placed_nodes: the columns must be as long");
        goto done;
    }
    const int32_t *seg = views[0].buf, *issued = views[1].buf;
    const int64_t *block = views[2].buf, *pipe = views[3].buf, *first = views[4].buf;
    int64_t *prev = views[5].buf, *issuer = views[6].buf, *seg_wide = views[7].buf;
    int outside = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t j = 0; j < n; j++) {
        int64_t b = block[j], p = pipe[j];
        /* block * npipes + pipe within first, without overflow: each bounded first */
        if (b < 0 || p < 0 || p >= npipes || b >= chains / npipes || b * npipes + p >= chains) {
            outside = 1;
            break;
        }
        int64_t base = b * npipes;
        prev[j] = seg[j] > 0 ? first[base + p] + seg[j] - 1 : -1;
        issuer[j] = issued[j] > 0 ? first[base + s_pipe] + issued[j] - 1 : -1;
        seg_wide[j] = seg[j];
    }
    Py_END_ALLOW_THREADS
    if (outside) {
        PyErr_SetString(PyExc_ValueError, "placed_nodes: an access's block and pipe name no chain of first");
        goto done;
    }
    Py_INCREF(Py_None);
    result = Py_None;
done:
    release_all(views, held);
    return result;
}

/* issuer(s_key, s_rows, block, pos, npipes, s_pipe, pos_bits, out) -> None
 *
 * _happens_before.issuer_of: for each program position ``pos[j]`` of block ``block[j]`` (int64 each), the row
 * (``s_rows``) of the last PIPE_S node issued before it, or -1: the last of ``s_key`` (the PIPE_S nodes' keys, chain
 * << pos_bits | position, ascending, else ValueError) below ``(block * npipes + s_pipe) << pos_bits | pos`` on the
 * same chain. Where the positions ascend (a chain's nodes, a block's accesses) the search goes on from the answer
 * before, else it starts over. A key past int64 wraps, as numpy's arithmetic does. */
static PyObject *issuer(PyObject *Py_UNUSED(module), PyObject *args) {
    PyObject *obj[5];
    long npipes, s_pipe, pos_bits;
    if (!PyArg_ParseTuple(args, "OOOOlllO", &obj[0], &obj[1], &obj[2], &obj[3], &npipes, &s_pipe, &pos_bits,
                          &obj[4])) {
        return NULL;
    }
    if (pos_bits < 1 || pos_bits > 62 || npipes < 1 || s_pipe < 0 || s_pipe >= npipes) {
        PyErr_SetString(PyExc_ValueError, "issuer: pos_bits is 1 to 62, s_pipe one of npipes pipes");
        return NULL;
    }
    static const Py_ssize_t sizes[5] = {8, 8, 8, 8, 8};
    Py_buffer views[5];
    int held = 0;
    PyObject *result = NULL;
    if (get_views(obj, 5, 4, sizes, views, &held, "issuer") < 0) {
        goto done;
    }
    Py_ssize_t ns = views[0].len / 8, n = views[2].len / 8;
    if (views[1].len != views[0].len || views[3].len != views[2].len || views[4].len != views[2].len) {
        PyErr_SetString(PyExc_ValueError, "issuer: s_key and s_rows, and block, pos and out, must be as long");
        goto done;
    }
    const int64_t *s_key = views[0].buf, *s_rows = views[1].buf, *block = views[2].buf, *pos = views[3].buf;
    int64_t *out = views[4].buf;
    for (Py_ssize_t i = 1; i < ns; i++) {
        if (s_key[i] < s_key[i - 1]) {
            PyErr_SetString(PyExc_ValueError, "issuer: s_key must ascend");
            goto done;
        }
    }
    Py_BEGIN_ALLOW_THREADS
    Py_ssize_t at = -1; /* the last s_key below the previous query's */
    int64_t previous = 0;
    for (Py_ssize_t j = 0; j < n; j++) {
        /* as numpy computes it: int64, wrapping (the module is built with -fwrapv) */
        int64_t want = (int64_t)(((uint64_t)(block[j] * npipes + s_pipe) << pos_bits) + (uint64_t)pos[j]);
        /* The first s_key at or above want lies in [lo, hi]: from 0, or where the last query's answer left it,
         * galloping (each query costs a logarithm of how far its answer moved, whatever the order). */
        Py_ssize_t lo = 0, hi = ns;
        if (j > 0 && want >= previous) {
            lo = at + 1;
            Py_ssize_t step = 1;
            hi = lo;
            while (hi < ns && s_key[hi] < want) {
                lo = hi + 1;
                hi = lo + step;
                step *= 2;
            }
            hi = hi < ns ? hi : ns;
        }
        while (lo < hi) {
            Py_ssize_t mid = lo + (hi - lo) / 2;
            if (s_key[mid] < want) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        at = lo - 1;
        previous = want;
        out[j] = at >= 0 && (s_key[at] >> pos_bits) == (want >> pos_bits) ? s_rows[at] : -1;
    }
    Py_END_ALLOW_THREADS
    Py_INCREF(Py_None);
    result = Py_None;
done:
    release_all(views, held);
    return result;
}

typedef uint32_t key_quad __attribute__((vector_size(16)));
#define KEY_SPAN 64

/* key_steps(key) -> (ascending, last_start)
 *
 * A batch's block keys (uint32) as HeldColumns.append reads them, in one pass: whether they only go up where they
 * change, and where the last block among them begins (0: one block, or none). */
static PyObject *key_steps(PyObject *Py_UNUSED(module), PyObject *args) {
    PyObject *obj[1];
    if (!PyArg_ParseTuple(args, "O", &obj[0])) {
        return NULL;
    }
    static const Py_ssize_t sizes[1] = {4};
    Py_buffer views[1];
    int held = 0;
    PyObject *result = NULL;
    if (get_views(obj, 1, 1, sizes, views, &held, "key_steps") < 0) {
        goto done;
    }
    const uint32_t *key = views[0].buf;
    Py_ssize_t n = views[0].len / 4, last_start = 0;
    int down;
    Py_BEGIN_ALLOW_THREADS
    /* Spans of 64 keys, 4 at a time in GCC's vector extension (SSE2, NEON): whether any key is below the one before,
     * and the last span where one differs from the one before; that span, and the keys after the last whole
     * span, are then read one at a time. A branch a key took 2.5 times as long. */
    key_quad any_down = {0, 0, 0, 0};
    Py_ssize_t changed = -1, i = 1;
    for (; i + KEY_SPAN <= n; i += KEY_SPAN) {
        key_quad differ = {0, 0, 0, 0};
        for (int j = 0; j < KEY_SPAN; j += 4) {
            key_quad now, before;
            memcpy(&now, key + i + j, sizeof now);
            memcpy(&before, key + i + j - 1, sizeof before);
            differ |= (key_quad)(now != before);
            any_down |= (key_quad)(now < before);
        }
        if (differ[0] | differ[1] | differ[2] | differ[3]) {
            changed = i;
        }
    }
    down = (any_down[0] | any_down[1] | any_down[2] | any_down[3]) != 0;
    for (Py_ssize_t j = changed; changed >= 0 && j < changed + KEY_SPAN; j++) {
        last_start = key[j] != key[j - 1] ? j : last_start;
    }
    for (; i < n; i++) {
        last_start = key[i] != key[i - 1] ? i : last_start;
        down |= key[i] < key[i - 1];
    }
    Py_END_ALLOW_THREADS
    result = Py_BuildValue("On", down ? Py_False : Py_True, last_start);
done:
    release_all(views, held);
    return result;
}

/* by_rank(rank, out) -> bool
 *
 * _race_pairs._by_rank's common case: where ``rank`` (int64) holds 0 .. m - 1 each once (every access one range),
 * ``out`` (m int64) gets its inverse, ``out[rank[j]] = j``: what a stable argsort of it is. False where it does not,
 * ``out`` then written in part. */
static PyObject *by_rank(PyObject *Py_UNUSED(module), PyObject *args) {
    PyObject *obj[2];
    if (!PyArg_ParseTuple(args, "OO", &obj[0], &obj[1])) {
        return NULL;
    }
    static const Py_ssize_t sizes[2] = {8, 8};
    Py_buffer views[2];
    int held = 0;
    PyObject *result = NULL;
    if (get_views(obj, 2, 1, sizes, views, &held, "by_rank") < 0) {
        goto done;
    }
    Py_ssize_t m = views[0].len / 8;
    if (views[1].len != views[0].len) {
        PyErr_SetString(PyExc_ValueError, "by_rank: out must be as long as rank");
        goto done;
    }
    const int64_t *rank = views[0].buf;
    int64_t *out = views[1].buf;
    int each_once = 1;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t j = 0; j < m; j++) {
        out[j] = -1;
    }
    for (Py_ssize_t j = 0; j < m; j++) {
        int64_t r = rank[j];
        if (r < 0 || r >= m || out[r] >= 0) {
            each_once = 0;
            break;
        }
        out[r] = j;
    }
    Py_END_ALLOW_THREADS
    result = each_once ? Py_True : Py_False;
    Py_INCREF(result);
done:
    release_all(views, held);
    return result;
}

/* segments(lo, hi, owner, order, seg, who, starts, ends) -> int
 *
 * _race_pairs._segments where every two ranges are equal or disjoint (tiled kernels reuse buffers whole), in one
 * pass over ``order`` (int64 rows of ``lo`` and ``hi``, uint64, and ``owner``, int64, sorted by lo, then rank): the
 * ranges are then the segments. Each incidence's segment (``seg``) and owner (``who``), in that order, and each
 * segment's [start, end) (``starts``, ``ends``: room for one a row); the count of segments. -1 where two ranges
 * overlap otherwise (the outputs then written in part): numpy cuts them at every boundary. */
static PyObject *segments(PyObject *Py_UNUSED(module), PyObject *args) {
    PyObject *obj[8];
    if (!PyArg_ParseTuple(args, "OOOOOOOO", &obj[0], &obj[1], &obj[2], &obj[3], &obj[4], &obj[5], &obj[6], &obj[7])) {
        return NULL;
    }
    static const Py_ssize_t sizes[8] = {8, 8, 8, 8, 8, 8, 8, 8};
    Py_buffer views[8];
    int held = 0;
    PyObject *result = NULL;
    if (get_views(obj, 8, 4, sizes, views, &held, "segments") < 0) {
        goto done;
    }
    Py_ssize_t n = views[0].len / 8, m = views[3].len / 8;
    if (views[1].len != n * 8 || views[2].len != n * 8 || !rows_within(views[3].buf, m, n)) {
        PyErr_SetString(PyExc_ValueError, "segments: a row out of range, or lo, hi and owner of different lengths");
        goto done;
    }
    for (int o = 4; o < 8; o++) {
        if (views[o].len != m * 8) {
            PyErr_SetString(PyExc_ValueError, "segments: seg, who, starts and ends must be as long as order");
            goto done;
        }
    }
    const uint64_t *lo = views[0].buf, *hi = views[1].buf;
    const int64_t *owner = views[2].buf, *order = views[3].buf;
    int64_t *seg = views[4].buf, *who = views[5].buf;
    uint64_t *starts = views[6].buf, *ends = views[7].buf;
    Py_ssize_t count = 0;
    Py_BEGIN_ALLOW_THREADS
    uint64_t reach = 0; /* the furthest end so far */
    for (Py_ssize_t j = 0; j < m; j++) {
        int64_t i = order[j];
        uint64_t l = lo[i], h = hi[i];
        if (count && l == starts[count - 1]) { /* the segment before, again: the same range, or they overlap */
            if (h != ends[count - 1]) {
                count = -1;
                break;
            }
        } else {
            if (count && l < reach) {
                count = -1;
                break;
            }
            starts[count] = l;
            ends[count++] = h;
        }
        reach = h > reach ? h : reach;
        seg[j] = count - 1;
        who[j] = owner[i];
    }
    Py_END_ALLOW_THREADS
    result = PyLong_FromSsize_t(count);
done:
    release_all(views, held);
    return result;
}

#define DIGIT_BITS 11
#define DIGITS 6 /* enough for every bit of a uint64 key */
#define BUCKETS (1 << DIGIT_BITS)

/* ``rows`` (``m`` rows of ``keys``) sorted stably by their keys, each XORed with ``flip`` (1 << 63 orders int64
 * keys as numbers), into ``out`` (may be ``rows``): a least-significant-digit radix sort of 11-bit digits, each
 * pass a stable scatter by a count; the digits are taken where the keys differ (racecheck's segment starts differ
 * in a few bits: a region's high ones and an address's low ones). 0, or -1 where memory ran out (no exception
 * set: the caller holds no GIL). numpy's stable sort of int64 keys is a merge sort, half again as long on
 * racecheck's segments. */
static int radix_rows(const uint64_t *keys, uint64_t flip, const int64_t *rows, Py_ssize_t m, int64_t *out) {
    size_t room = (size_t)(m > 0 ? m : 1);
    uint64_t *key_buffer = malloc(2 * room * sizeof(uint64_t));
    int64_t *row_buffer = malloc(2 * room * sizeof(int64_t));
    Py_ssize_t *count = calloc((size_t)DIGITS * BUCKETS, sizeof(Py_ssize_t));
    if (key_buffer == NULL || row_buffer == NULL || count == NULL) {
        free(key_buffer);
        free(row_buffer);
        free(count);
        return -1;
    }
    uint64_t *from_key = key_buffer, *to_key = key_buffer + room;
    int64_t *from_row = row_buffer, *to_row = row_buffer + room;
    uint64_t all = ~(uint64_t)0, any = 0;
    for (Py_ssize_t j = 0; j < m; j++) {
        uint64_t k = keys[rows[j]] ^ flip;
        from_key[j] = k;
        from_row[j] = rows[j];
        all &= k;
        any |= k;
    }
    /* Digits are taken where the keys differ: each starts at the lowest bit some keys differ in, above the last. */
    uint64_t differ = all ^ any;
    int shift[DIGITS], digits = 0;
    for (int bit = 0; bit < 64 && digits < DIGITS; bit += DIGIT_BITS) {
        while (bit < 64 && !((differ >> bit) & 1)) {
            bit++;
        }
        if (bit < 64) {
            shift[digits++] = bit;
        }
    }
    for (Py_ssize_t j = 0; j < m; j++) {
        for (int d = 0; d < digits; d++) {
            count[d * BUCKETS + ((from_key[j] >> shift[d]) & (BUCKETS - 1))]++;
        }
    }
    for (int d = 0; d < digits; d++) {
        Py_ssize_t *at = count + d * BUCKETS, sum = 0;
        for (int b = 0; b < BUCKETS; b++) {
            Py_ssize_t c = at[b];
            at[b] = sum;
            sum += c;
        }
        for (Py_ssize_t j = 0; j < m; j++) {
            Py_ssize_t to = at[(from_key[j] >> shift[d]) & (BUCKETS - 1)]++;
            to_key[to] = from_key[j];
            to_row[to] = from_row[j];
        }
        uint64_t *k = from_key;
        from_key = to_key;
        to_key = k;
        int64_t *r = from_row;
        from_row = to_row;
        to_row = r;
    }
    if (m > 0) {
        memmove(out, from_row, (size_t)m * sizeof(int64_t));
    }
    free(key_buffer);
    free(row_buffer);
    free(count);
    return 0;
}

/* sort_by(keys, order, out) -> None
 *
 * ``out`` gets ``order`` (int64 rows of ``keys``, a uint64 vector) sorted stably by their keys (``radix_rows``):
 * numpy's ``order[np.argsort(keys[order], kind="stable")]``. */
static PyObject *sort_by(PyObject *Py_UNUSED(module), PyObject *args) {
    PyObject *obj[3];
    if (!PyArg_ParseTuple(args, "OOO", &obj[0], &obj[1], &obj[2])) {
        return NULL;
    }
    static const Py_ssize_t sizes[3] = {8, 8, 8};
    Py_buffer views[3];
    int held = 0;
    PyObject *result = NULL;
    if (get_views(obj, 3, 2, sizes, views, &held, "sort_by") < 0) {
        goto done;
    }
    Py_ssize_t n = views[0].len / 8, m = views[1].len / 8;
    if (views[2].len != m * 8 || !rows_within(views[1].buf, m, n)) {
        PyErr_SetString(PyExc_ValueError, "sort_by: a row out of range, or out not as long as order");
        goto done;
    }
    int sorted;
    Py_BEGIN_ALLOW_THREADS
    sorted = radix_rows(views[0].buf, 0, views[1].buf, m, views[2].buf);
    Py_END_ALLOW_THREADS
    if (sorted < 0) {
        PyErr_NoMemory();
        goto done;
    }
    Py_INCREF(Py_None);
    result = Py_None;
done:
    release_all(views, held);
    return result;
}

#define SIGNED ((uint64_t)1 << 63) /* flips an int64's sign bit: its bits then order as the number does */

/* ``rows`` (``m`` rows of ``key`` and ``pos``, int64) sorted stably by (key, pos) into ``out``, as radix_rows: by key
 * alone where that leaves each key's rows in pos order (block_edges' rows come in node order, and each flag's sets,
 * and its waits, lie on one pipe: in program order), else by pos, then by key. 0, or -1 where memory ran out. */
static int by_key_then_pos(const int64_t *key, const int64_t *pos, const int64_t *rows, Py_ssize_t m, int64_t *out) {
    if (radix_rows((const uint64_t *)key, SIGNED, rows, m, out) < 0) {
        return -1;
    }
    for (Py_ssize_t j = 1; j < m; j++) {
        if (key[out[j]] == key[out[j - 1]] && pos[out[j]] < pos[out[j - 1]]) {
            return radix_rows((const uint64_t *)pos, SIGNED, rows, m, out) |
                   radix_rows((const uint64_t *)key, SIGNED, out, m, out);
        }
    }
    return 0;
}

/* fifo_match(key, pos, sets, waits, skip_first_wait, out) -> (pairs, unmatched)
 *
 * _happens_before._fifo_match: the k-th wait of each key (``key``, int64 per node; program order by ``pos``,
 * int64) is released by the k-th set of that key; with ``skip_first_wait`` the first wait of a key needs no set
 * (and is neither paired nor unmatched) and the k-th takes the (k-1)-th set. ``sets`` and ``waits`` are int64
 * rows, each sorted here by (key, pos), ties in the order given, as numpy's lexsort. ``out`` (int64, 3 x
 * len(waits), C-contiguous) gets the pairs' sets in its first row, their waits in its second, the waits no set
 * releases in its third, in that order of the waits; the counts of pairs and unmatched waits are returned. */
static PyObject *fifo_match(PyObject *Py_UNUSED(module), PyObject *args) {
    PyObject *obj[5];
    int skip_first;
    if (!PyArg_ParseTuple(args, "OOOOpO", &obj[0], &obj[1], &obj[2], &obj[3], &skip_first, &obj[4])) {
        return NULL;
    }
    static const Py_ssize_t sizes[5] = {8, 8, 8, 8, 8};
    Py_buffer views[5];
    int held = 0;
    PyObject *result = NULL;
    int64_t *set_order = NULL;
    if (get_views(obj, 5, 4, sizes, views, &held, "fifo_match") < 0) {
        goto done;
    }
    Py_ssize_t n = views[0].len / 8, n_sets = views[2].len / 8, n_waits = views[3].len / 8;
    const int64_t *key = views[0].buf, *sets = views[2].buf, *waits = views[3].buf;
    int64_t *out = views[4].buf;
    if (views[1].len != n * 8 || views[4].len != 3 * n_waits * 8 || !rows_within(sets, n_sets, n) ||
        !rows_within(waits, n_waits, n)) {
        PyErr_SetString(PyExc_ValueError, "fifo_match: a row out of range, or the arrays' lengths do not agree");
        goto done;
    }
    set_order = rows_alloc(n_sets);
    if (set_order == NULL) {
        goto done;
    }
    int64_t *src = out, *dst = out + n_waits, *unmatched = out + 2 * n_waits;
    Py_ssize_t pairs = 0, lonely = 0;
    int sorted;
    Py_BEGIN_ALLOW_THREADS
    /* by pos, then by key: each stable, so by (key, pos), ties as given; the waits' order is sorted in ``unmatched``
     * until it is read (each wait is read there before its place is written, as pairs and unmatched count up) */
    sorted = by_key_then_pos(key, views[1].buf, sets, n_sets, set_order) |
             by_key_then_pos(key, views[1].buf, waits, n_waits, unmatched);
    if (sorted == 0) {
        Py_ssize_t group = 0, at_set = 0;
        for (Py_ssize_t j = 0; j < n_waits; j++) {
            int64_t wait = unmatched[j], wkey = key[wait];
            if (j > 0 && key[unmatched[j - 1]] != wkey) {
                group = j;
            }
            Py_ssize_t rank = j - group;
            while (at_set < n_sets && key[set_order[at_set]] < wkey) { /* the first set of this key or after */
                at_set++;
            }
            if (skip_first) {
                if (rank == 0) {
                    continue;
                }
                rank--;
            }
            Py_ssize_t at = at_set + rank;
            if (at < n_sets && key[set_order[at]] == wkey) {
                src[pairs] = set_order[at];
                dst[pairs++] = wait;
            } else {
                unmatched[lonely++] = wait;
            }
        }
    }
    Py_END_ALLOW_THREADS
    if (sorted != 0) {
        PyErr_NoMemory();
        goto done;
    }
    result = Py_BuildValue("nn", pairs, lonely);
done:
    free(set_order);
    release_all(views, held);
    return result;
}

static PyMethodDef methods[] = {
    {"gather", gather, METH_VARARGS, "Split a batch's kept records into racecheck's columns in one pass."},
    {"place", place, METH_VARARGS, "Place complete blocks' accesses among their sync nodes, counted in one pass."},
    {"select", select_held, METH_VARARGS, "Which of a batch's records racecheck holds, and which are accesses."},
    {"fixpoint", fixpoint, METH_VARARGS, "The happens-before clocks' least fixpoint, in place."},
    {"extents", extents, METH_VARARGS, "patterns.extents over gathered access columns, into out."},
    {"ranges_beyond", ranges_beyond, METH_VARARGS, "The byte ranges of the marked accesses beyond one each."},
    {"first_of_kind", first_of_kind, METH_VARARGS, "The index of a batch's first record of a kind, or -1."},
    {"block_start", block_start, METH_VARARGS, "Where the next block's kept records begin."},
    {"scatter", scatter, METH_VARARGS, "Held columns written back into 56-byte records (gather's inverse)."},
    {"unordered", unordered, METH_VARARGS, "Whether each pair of one block's accesses may race (Kernel._unordered)."},
    {"site_pairs", site_pairs, METH_VARARGS, "The pair search's segments of one or two keys (_race_pairs._site_pairs)."},
    {"make_nodes", make_nodes, METH_VARARGS, "A kernel's sync nodes sorted by a count (_happens_before.make_nodes)."},
    {"mirror", mirror, METH_VARARGS, "Compare one block's records with a held block alike, keeping their keys."},
    {"sort_by", sort_by, METH_VARARGS, "Rows sorted stably by their uint64 keys (a radix sort)."},
    {"fifo_match", fifo_match, METH_VARARGS, "The k-th wait of each key paired with its k-th set (_fifo_match)."},
    {"placed_nodes", placed_nodes, METH_VARARGS, "Accesses' counts of nodes before them as node rows (_placed_in_blocks)."},
    {"issuer", issuer, METH_VARARGS, "The last PIPE_S node issued before each position (_happens_before.issuer_of)."},
    {"key_steps", key_steps, METH_VARARGS, "Whether block keys only go up, and where the last block begins."},
    {"by_rank", by_rank, METH_VARARGS, "The inverse of ranks that are 0 .. m - 1 each once (_race_pairs._by_rank)."},
    {"segments", segments, METH_VARARGS, "Ranges equal or disjoint as the segments, in one pass (_race_pairs._segments)."},
    {"ranges", ranges, METH_VARARGS, "The byte ranges of accesses none of which is scattered (_patterns.ranges)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef definition = {
    PyModuleDef_HEAD_INIT, .m_name = "_racecheck", .m_size = -1, .m_methods = methods,
};

PyMODINIT_FUNC PyInit__racecheck(void) { return PyModule_Create(&definition); }
