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
#include <string.h>

#define RECORD_SIZE 56
#define BLOCK_ID_AT 40   /* uint16, little-endian */
#define BLOCK_TYPE_AT 48 /* uint8 */
#define KIND_AT 44       /* uint8 */
#define BLOCK_NUM_AT 32  /* uint16 */
#define BLOCK_STRIDE_AT 34
#define REPEAT_AT 36
#define REPEAT_STRIDE_AT 38
#define MAX_FIELDS 32

typedef struct {
    Py_ssize_t offset;
    Py_ssize_t size;
    unsigned char *out;
} Field;

static void release_all(Py_buffer *views, int count) {
    for (int i = 0; i < count; i++) {
        PyBuffer_Release(&views[i]);
    }
}

/* Parse ``spec``, a tuple of (offset, out) with ``out`` a writable C-contiguous buffer of ``rows`` items of 1, 2, 4
 * or 8 bytes, into ``fields`` (its views held in ``views`` from ``*held`` on). */
static int parse_fields(PyObject *spec, Py_ssize_t rows, Field *fields, int *count, Py_buffer *views, int *held) {
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
        fields[i].offset = offset;
        fields[i].size = size;
        fields[i].out = (unsigned char *)view->buf;
    }
    *count = (int)n;
    return 0;
}

static inline void copy_fields(const unsigned char *record, const Field *fields, int count, Py_ssize_t row) {
    for (int f = 0; f < count; f++) {
        const unsigned char *from = record + fields[f].offset;
        switch (fields[f].size) {
        case 1:
            fields[f].out[row] = *from;
            break;
        case 2:
            memcpy(fields[f].out + 2 * row, from, 2);
            break;
        case 4:
            memcpy(fields[f].out + 4 * row, from, 4);
            break;
        default:
            memcpy(fields[f].out + 8 * row, from, 8);
            break;
        }
    }
}

/* gather(records, keep, access, key, kind, access_fields, sync_fields) -> None
 *
 * ``records``: n whole 56-byte records. ``keep``: None (every record) or n bytes, nonzero = kept. ``access``: n
 * bytes, nonzero = an access (always kept). For the kept records in order: ``key`` (uint32) gets block_type << 16 |
 * block_id, ``kind`` (uint8) the kind; the accesses' fields go to ``access_fields``, the other kept records' to
 * ``sync_fields``, each a tuple of (offset in the record, out column). Every column must be exactly as long as the
 * rows it receives; an access not kept is refused (ValueError), before anything is written. */
static PyObject *gather(PyObject *Py_UNUSED(module), PyObject *args) {
    PyObject *records_obj, *keep_obj, *access_obj, *key_obj, *kind_obj, *access_spec, *sync_spec;
    if (!PyArg_ParseTuple(args, "OOOOOOO", &records_obj, &keep_obj, &access_obj, &key_obj, &kind_obj, &access_spec,
                          &sync_spec)) {
        return NULL;
    }
    Py_buffer views[3 * MAX_FIELDS];
    int held = 0;
    Field access_fields[MAX_FIELDS], sync_fields[MAX_FIELDS];
    int access_count = 0, sync_count = 0;
    PyObject *result = NULL;

    if (PyObject_GetBuffer(records_obj, &views[held], PyBUF_C_CONTIGUOUS) < 0) {
        return NULL;
    }
    Py_buffer *records = &views[held++];
    if (records->len % RECORD_SIZE) {
        PyErr_SetString(PyExc_ValueError, "records must be whole 56-byte records");
        goto done;
    }
    Py_ssize_t n = records->len / RECORD_SIZE;
    const unsigned char *keep = NULL;
    if (keep_obj != Py_None) {
        if (PyObject_GetBuffer(keep_obj, &views[held], PyBUF_C_CONTIGUOUS) < 0) {
            goto done;
        }
        if (views[held++].len != n) {
            PyErr_SetString(PyExc_ValueError, "keep must have one byte per record");
            goto done;
        }
        keep = (const unsigned char *)views[held - 1].buf;
    }
    if (PyObject_GetBuffer(access_obj, &views[held], PyBUF_C_CONTIGUOUS) < 0) {
        goto done;
    }
    if (views[held++].len != n) {
        PyErr_SetString(PyExc_ValueError, "access must have one byte per record");
        goto done;
    }
    const unsigned char *access = (const unsigned char *)views[held - 1].buf;
    const unsigned char *base = (const unsigned char *)records->buf;

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

    if (PyObject_GetBuffer(key_obj, &views[held], PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        goto done;
    }
    Py_buffer *key_view = &views[held++];
    if (PyObject_GetBuffer(kind_obj, &views[held], PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        goto done;
    }
    Py_buffer *kind_view = &views[held++];
    if (key_view->itemsize != 4 || key_view->len != 4 * kept || kind_view->itemsize != 1 || kind_view->len != kept) {
        PyErr_SetString(PyExc_ValueError, "key must be one uint32, kind one uint8, per kept record");
        goto done;
    }
    if (parse_fields(access_spec, accesses, access_fields, &access_count, views, &held) < 0 ||
        parse_fields(sync_spec, syncs, sync_fields, &sync_count, views, &held) < 0) {
        goto done;
    }
    uint32_t *key_out = (uint32_t *)key_view->buf;
    unsigned char *kind_out = (unsigned char *)kind_view->buf;

    Py_BEGIN_ALLOW_THREADS
    Py_ssize_t e = 0, a = 0, s = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (keep != NULL && !keep[i]) {
            continue;
        }
        const unsigned char *record = base + i * RECORD_SIZE;
        uint32_t block_id = (uint32_t)record[BLOCK_ID_AT] | ((uint32_t)record[BLOCK_ID_AT + 1] << 8);
        key_out[e] = ((uint32_t)record[BLOCK_TYPE_AT] << 16) | block_id;
        kind_out[e] = record[KIND_AT];
        e++;
        if (access[i]) {
            copy_fields(record, access_fields, access_count, a++);
        } else {
            copy_fields(record, sync_fields, sync_count, s++);
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
        const unsigned char *record = base + i * RECORD_SIZE;
        int64_t block_num = u16_at(record, BLOCK_NUM_AT), block_stride = u16_at(record, BLOCK_STRIDE_AT);
        int64_t repeat = u16_at(record, REPEAT_AT), repeat_stride = u16_at(record, REPEAT_STRIDE_AT);
        int row_is_range = block_num <= 1 || block_stride <= 1;
        int64_t row_length = (block_num <= 1 || block_stride == 0) ? 1 : block_num;
        int dense = row_is_range && (repeat <= 1 || repeat_stride <= row_length);
        int64_t pieces = dense ? 1 : (repeat > 1 ? repeat : 1) * (row_is_range ? 1 : block_num);
        total += pieces - 1;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&records);
    PyBuffer_Release(&mask);
    return PyLong_FromLongLong(total);
}

static PyMethodDef methods[] = {
    {"gather", gather, METH_VARARGS, "Split a batch's kept records into racecheck's columns in one pass."},
    {"ranges_beyond", ranges_beyond, METH_VARARGS, "The byte ranges of the marked accesses beyond one each."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef definition = {
    PyModuleDef_HEAD_INIT, .m_name = "_racecheck", .m_size = -1, .m_methods = methods,
};

PyMODINIT_FUNC PyInit__racecheck(void) { return PyModule_Create(&definition); }
