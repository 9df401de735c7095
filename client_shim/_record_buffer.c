/* The client's emulated per-block record buffers (client_shim/record_buffer.py), counted in one pass.
 *
 * msSanitizer's device hooks write each block's records into a buffer of cache_size MB; what does not fit is lost.
 * The client emulates that for every batch it sends, so the count runs once per 56-byte record on the sender's hot
 * path. numpy needs two passes over the strided fields and a bincount; this is one pass that reads two bytes and a
 * byte of each record and bumps one counter, with the GIL released.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#define RECORD_SIZE 56
#define BLOCK_ID_AT 40   /* uint16, little-endian (the wire's order) */
#define BLOCK_TYPE_AT 48 /* uint8 */

static inline int64_t block_key(const unsigned char *record) {
    int64_t block_id = (int64_t)record[BLOCK_ID_AT] | ((int64_t)record[BLOCK_ID_AT + 1] << 8);
    return ((int64_t)record[BLOCK_TYPE_AT] << 16) | block_id;
}

/* hold(records, used, capacity) -> bool: add each record to its block's count in ``used`` (int64, indexed by
 * block_type << 16 | block_id) if every block stays within ``capacity``; otherwise leave ``used`` as it was and
 * return False (a block key past the table counts as not fitting: the caller takes the exact path). */
static PyObject *hold(PyObject *Py_UNUSED(module), PyObject *args) {
    Py_buffer records, used;
    long long capacity;
    if (!PyArg_ParseTuple(args, "y*w*L", &records, &used, &capacity)) {
        return NULL;
    }
    if (records.len % RECORD_SIZE || used.len % (Py_ssize_t)sizeof(int64_t)) {
        PyBuffer_Release(&records);
        PyBuffer_Release(&used);
        PyErr_SetString(PyExc_ValueError, "records must be whole 56-byte records, used whole int64 counters");
        return NULL;
    }
    const unsigned char *base = (const unsigned char *)records.buf;
    int64_t *counts = (int64_t *)used.buf;
    Py_ssize_t n = records.len / RECORD_SIZE, keys = used.len / (Py_ssize_t)sizeof(int64_t), done = 0;
    int fits = 1;
    Py_BEGIN_ALLOW_THREADS
    for (; done < n; done++) {
        int64_t key = block_key(base + done * RECORD_SIZE);
        if (key >= keys) {
            fits = 0;
            break;
        }
        if (++counts[key] > capacity) {
            done++; /* this one was counted: take it back too */
            fits = 0;
            break;
        }
    }
    if (!fits) {
        for (Py_ssize_t i = 0; i < done; i++) {
            counts[block_key(base + i * RECORD_SIZE)]--;
        }
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&records);
    PyBuffer_Release(&used);
    return PyBool_FromLong(fits);
}

static PyMethodDef methods[] = {
    {"hold", hold, METH_VARARGS, "Count a batch's records per block if every block stays within capacity."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef definition = {
    PyModuleDef_HEAD_INIT, .m_name = "_record_buffer", .m_size = -1, .m_methods = methods,
};

PyMODINIT_FUNC PyInit__record_buffer(void) { return PyModule_Create(&definition); }
