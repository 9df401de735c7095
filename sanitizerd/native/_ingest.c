/* A session's batch cut into the detectors' batches of bounded pieces (sanitizerd/sessions/work.py), in one pass.
 *
 * numpy's exact count reads three strided fields of every 56-byte record in several passes (widening, a masked
 * product, a cumulative sum, a search per cut): on the ingest stream, where rows repeat and scatter, that was four
 * tenths of the daemon's whole CPU with no detector at all. This reads the three fields once, record by record,
 * with the GIL released, and makes the same cuts.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#define RECORD_SIZE 56
#define BLOCK_NUM_AT 32    /* uint16, little-endian (the wire's order) */
#define BLOCK_STRIDE_AT 34 /* uint16 */
#define REPEAT_AT 36       /* uint16 */
#define KIND_AT 44         /* uint8: EventKind, WRITE = 1 */
#define SPACE_AT 45        /* uint8: Space, GM = 1 */
#define FLAGS_AT 49        /* uint8: FLAG_CLAIM = 0x02 */

static inline int64_t u16_at(const unsigned char *record, int at) {
    return (int64_t)record[at] | ((int64_t)record[at + 1] << 8);
}

/* cuts(records, limit, widest, gm_writes) -> list[int]: where the batch is cut so that each part lists at most
 * ``limit`` pieces (an access's pieces: max(repeat, 1), times max(block_num, 1) where block_stride > 1, at most
 * ``widest``; with ``gm_writes``, only GM writes' and claims' count), each part holding at least one record; the
 * empty list where the batch is one part. */
static PyObject *cuts(PyObject *Py_UNUSED(module), PyObject *args) {
    Py_buffer records;
    long long limit, widest;
    int gm_writes;
    if (!PyArg_ParseTuple(args, "y*LLp", &records, &limit, &widest, &gm_writes)) {
        return NULL;
    }
    if (records.len % RECORD_SIZE || limit <= 0 || limit > ((int64_t)1 << 62) || widest <= 0 || widest > ((int64_t)1 << 32)) {
        PyBuffer_Release(&records);
        PyErr_SetString(PyExc_ValueError, "records must be whole 56-byte records, 0 < limit <= 2**62, 0 < widest <= 2**32");
        return NULL;
    }
    const unsigned char *base = (const unsigned char *)records.buf;
    Py_ssize_t n = records.len / RECORD_SIZE;
    /* At most one cut per record: the cut positions are gathered in C, then made a list with the GIL held. */
    Py_ssize_t *at = NULL, found = 0;
    int64_t in_part = 0;
    Py_ssize_t start = 0;
    int failed = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        const unsigned char *record = base + i * RECORD_SIZE;
        int64_t repeat = u16_at(record, REPEAT_AT), pieces = repeat > 1 ? repeat : 1;
        if (u16_at(record, BLOCK_STRIDE_AT) > 1) {
            int64_t blocks = u16_at(record, BLOCK_NUM_AT);
            pieces *= blocks > 1 ? blocks : 1; /* at most 65535 x 65535: no overflow */
        }
        if (pieces > widest) {
            pieces = widest;
        }
        if (gm_writes && !(record[SPACE_AT] == 1 && (record[KIND_AT] == 1 || (record[FLAGS_AT] & 0x02)))) {
            pieces = 0;
        }
        if (in_part + pieces > limit && i > start) {
            if (at == NULL) {
                at = (Py_ssize_t *)malloc(sizeof(Py_ssize_t) * (size_t)n);
                if (at == NULL) {
                    failed = 1;
                    break;
                }
            }
            at[found++] = i;
            start = i;
            in_part = 0;
        }
        in_part += pieces;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&records);
    if (failed) {
        return PyErr_NoMemory();
    }
    PyObject *list = PyList_New(found);
    for (Py_ssize_t k = 0; list != NULL && k < found; k++) {
        PyObject *index = PyLong_FromSsize_t(at[k]);
        if (index == NULL) {
            Py_CLEAR(list);
            break;
        }
        PyList_SET_ITEM(list, k, index);
    }
    free(at);
    return list;
}

static PyMethodDef methods[] = {
    {"cuts", cuts, METH_VARARGS, "cuts(records, limit, widest, gm_writes) -> the indices where the batch is cut"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_ingest", NULL, -1, methods};

PyMODINIT_FUNC PyInit__ingest(void) { return PyModule_Create(&module); }
