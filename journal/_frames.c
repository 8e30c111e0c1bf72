/* Compiled journal.format.encode_run and journal.segment.decode_run (optional: the Python
 * functions are the reference and the fallback; tests/journal/test_frames_compiled.py checks
 * both give the same bytes, return values, frames and locations).
 *
 * encode_run(buf, records, index, lsn, generation, synced_lsn, offset, limit, sequence,
 *            locations, location_type) -> int
 *
 * Encodes records[index:] ((kind, packed payload bytes) pairs) as consecutive frames into the
 * bytearray buf, the first at file offset ``offset`` with LSN ``lsn``, while the next frame
 * ends at or before ``limit``; appends location_type(sequence, offset, frame length) to the
 * list ``locations`` for each; returns the index of the first record not encoded. The frame
 * layout is journal/format.py's: u32 frame_len, u8 kind, u8 flags (0), u16 reserved (0),
 * u64 lsn, u64 generation, u64 synced_lsn, payload, u32 CRC-32C of everything before it; all
 * little-endian. buf grows once, to its final size; on an error nothing is appended to buf or
 * locations.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "crc32c.h"

#define FRAME_HEAD 32
#define FRAME_OVERHEAD 36

static void put_le(uint8_t *p, uint64_t v, int n) {
    for (int k = 0; k < n; k++) p[k] = (uint8_t)(v >> (8 * k));
}

/* A non-negative int argument as a uint64 (OverflowError, as struct.pack would, otherwise). */
static int u64_arg(PyObject *o, uint64_t *out) {
    unsigned long long v = PyLong_AsUnsignedLongLong(o);
    if (v == (unsigned long long)-1 && PyErr_Occurred()) return -1;
    *out = v;
    return 0;
}

static PyObject *encode_run(PyObject *self, PyObject *args) {
    PyObject *buf, *records, *locations, *loc_type, *seq, *o_lsn, *o_gen, *o_synced;
    Py_ssize_t index;
    uint64_t lsn, generation, synced;
    long long offset, limit;
    if (!PyArg_ParseTuple(args, "O!O!nO!O!O!LLOO!O!", &PyByteArray_Type, &buf, &PyList_Type,
                          &records, &index, &PyLong_Type, &o_lsn, &PyLong_Type, &o_gen,
                          &PyLong_Type, &o_synced, &offset, &limit, &seq, &PyList_Type,
                          &locations, &PyType_Type, &loc_type) ||
        u64_arg(o_lsn, &lsn) < 0 || u64_arg(o_gen, &generation) < 0 ||
        u64_arg(o_synced, &synced) < 0)
        return NULL;
    PyTypeObject *lt = (PyTypeObject *)loc_type;
    if (!PyType_IsSubtype(lt, &PyTuple_Type) || index < 0 || offset < 0) {
        PyErr_SetString(PyExc_ValueError, "bad encode_run arguments");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(records), end = index, total = 0;
    long long at = offset;
    /* pass 1: check the records and find how many fit */
    for (; end < n; end++) {
        PyObject *rec = PyList_GET_ITEM(records, end);
        if (!PyTuple_CheckExact(rec) || PyTuple_GET_SIZE(rec) != 2 ||
            !PyLong_Check(PyTuple_GET_ITEM(rec, 0)) ||
            !PyBytes_CheckExact(PyTuple_GET_ITEM(rec, 1))) {
            PyErr_SetString(PyExc_TypeError, "records must be (int kind, bytes payload) tuples");
            return NULL;
        }
        long kind = PyLong_AsLong(PyTuple_GET_ITEM(rec, 0));
        if (kind < 0 || kind > 255) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "kind out of range 0..255");
            return NULL;
        }
        long long flen = (long long)PyBytes_GET_SIZE(PyTuple_GET_ITEM(rec, 1)) + FRAME_OVERHEAD;
        if (flen > 0xFFFFFFFFLL) {
            PyErr_SetString(PyExc_ValueError, "frame longer than 4 GiB");
            return NULL;
        }
        if (at + flen > limit) break;
        at += flen;
        total += (Py_ssize_t)flen;
    }
    if (end == index) return PyLong_FromSsize_t(index);
    if ((uint64_t)(end - index) - 1 > UINT64_MAX - lsn) {
        PyErr_SetString(PyExc_OverflowError, "LSN beyond 64 bits");
        return NULL;
    }
    /* the locations first (they can fail to allocate; buf is not touched yet) */
    Py_ssize_t nloc = PyList_GET_SIZE(locations);
    at = offset;
    for (Py_ssize_t i = index; i < end; i++) {
        PyObject *payload = PyTuple_GET_ITEM(PyList_GET_ITEM(records, i), 1);
        long long flen = (long long)PyBytes_GET_SIZE(payload) + FRAME_OVERHEAD;
        PyObject *loc = lt->tp_alloc(lt, 3);
        PyObject *o_off = PyLong_FromLongLong(at), *o_len = PyLong_FromLongLong(flen);
        int ok = loc != NULL && o_off != NULL && o_len != NULL;
        if (ok) {
            Py_INCREF(seq);
            PyTuple_SET_ITEM(loc, 0, seq);
            PyTuple_SET_ITEM(loc, 1, o_off);
            PyTuple_SET_ITEM(loc, 2, o_len);
            ok = PyList_Append(locations, loc) == 0;
        } else {
            Py_XDECREF(o_off);
            Py_XDECREF(o_len);
        }
        Py_XDECREF(loc);
        if (!ok) {
            PyList_SetSlice(locations, nloc, PyList_GET_SIZE(locations), NULL);
            return NULL;
        }
        at += flen;
    }
    /* pass 2: the frames, into buf grown once */
    Py_ssize_t old = PyByteArray_GET_SIZE(buf);
    if (PyByteArray_Resize(buf, old + total) < 0) {
        PyList_SetSlice(locations, nloc, PyList_GET_SIZE(locations), NULL);
        return NULL;
    }
    uint8_t *p = (uint8_t *)PyByteArray_AS_STRING(buf) + old;
    for (Py_ssize_t i = index; i < end; i++, lsn++) {
        PyObject *rec = PyList_GET_ITEM(records, i);
        PyObject *payload = PyTuple_GET_ITEM(rec, 1);
        Py_ssize_t plen = PyBytes_GET_SIZE(payload);
        uint32_t flen = (uint32_t)(plen + FRAME_OVERHEAD);
        put_le(p, flen, 4);
        p[4] = (uint8_t)PyLong_AsLong(PyTuple_GET_ITEM(rec, 0));
        p[5] = 0;
        p[6] = p[7] = 0;
        put_le(p + 8, lsn, 8);
        put_le(p + 16, generation, 8);
        put_le(p + 24, synced, 8);
        memcpy(p + FRAME_HEAD, PyBytes_AS_STRING(payload), (size_t)plen);
        put_le(p + FRAME_HEAD + plen, crc32c(p, (size_t)(FRAME_HEAD + plen)), 4);
        p += flen;
    }
    return PyLong_FromSsize_t(end);
}

static uint64_t get_le(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int k = n - 1; k >= 0; k--) v = (v << 8) | p[k];
    return v;
}

/* decode_run(buf, pos, end, generation, max_frame, last_lsn, base, frame_type, need_more,
 *            zero_end) -> (frames, pos, status, last_lsn)
 *
 * journal.segment.decode_run: the valid frames of buf[pos:end] as frame_type(file offset,
 * frame length, kind, lsn, synced lsn) tuples (file offset = base + position), the position
 * where decoding stopped, the status (need_more, zero_end, or why the frame there is invalid,
 * in the reference's words) and the last LSN. */
static PyObject *decode_run(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t pos, end;
    PyObject *o_gen, *o_last, *frame_type, *need_more, *zero_end;
    long long max_frame, base;
    uint64_t generation, last_lsn;
    if (!PyArg_ParseTuple(args, "y*nnO!LO!LO!OO", &view, &pos, &end, &PyLong_Type, &o_gen,
                          &max_frame, &PyLong_Type, &o_last, &base, &PyType_Type, &frame_type,
                          &need_more, &zero_end))
        return NULL;
    PyTypeObject *ft = (PyTypeObject *)frame_type;
    PyObject *frames = NULL, *status = NULL, *result = NULL;
    if (u64_arg(o_gen, &generation) < 0 || u64_arg(o_last, &last_lsn) < 0) goto done;
    if (!PyType_IsSubtype(ft, &PyTuple_Type) || pos < 0 || end > view.len || base < 0) {
        PyErr_SetString(PyExc_ValueError, "bad decode_run arguments");
        goto done;
    }
    frames = PyList_New(0);
    if (frames == NULL) goto done;
    const uint8_t *b = (const uint8_t *)view.buf;
    while (end - pos >= 4) {
        const uint8_t *p = b + pos;
        uint32_t flen = (uint32_t)get_le(p, 4);
        if (flen == 0) {
            status = zero_end;
            Py_INCREF(status);
            break;
        }
        if (flen < FRAME_OVERHEAD || (long long)flen > max_frame) {
            status = PyUnicode_FromFormat("bad frame length %lu", (unsigned long)flen);
            break;
        }
        if (end - pos < (Py_ssize_t)flen) break;
        uint8_t kind = p[4];
        uint64_t lsn = get_le(p + 8, 8), gen = get_le(p + 16, 8), synced = get_le(p + 24, 8);
        if (kind == 0 || p[5] != 0 || p[6] != 0 || p[7] != 0) {
            status = PyUnicode_FromString("bad kind or flags");
            break;
        }
        if (gen != generation) {
            status = PyUnicode_FromString("generation mismatch (stale or foreign frame)");
            break;
        }
        if (crc32c(p, (size_t)flen - 4) != (uint32_t)get_le(p + flen - 4, 4)) {
            status = PyUnicode_FromString("crc mismatch");
            break;
        }
        if (lsn <= last_lsn) {
            status = PyUnicode_FromFormat("lsn %llu not above previous %llu",
                                          (unsigned long long)lsn, (unsigned long long)last_lsn);
            break;
        }
        PyObject *f = ft->tp_alloc(ft, 5);
        if (f == NULL) goto done;
        PyObject *items[5] = {PyLong_FromLongLong(base + (long long)pos),
                              PyLong_FromUnsignedLong(flen), PyLong_FromLong(kind),
                              PyLong_FromUnsignedLongLong(lsn),
                              PyLong_FromUnsignedLongLong(synced)};
        int ok = 1;
        for (int k = 0; k < 5; k++) {
            if (items[k] == NULL) ok = 0;
            else PyTuple_SET_ITEM(f, k, items[k]);
        }
        if (!ok || PyList_Append(frames, f) < 0) {
            Py_DECREF(f);
            goto done;
        }
        Py_DECREF(f);
        last_lsn = lsn;
        pos += flen;
    }
    if (status == NULL) {
        if (PyErr_Occurred()) goto done;
        status = need_more;
        Py_INCREF(status);
    }
    result = Py_BuildValue("(OnOK)", frames, pos, status, (unsigned long long)last_lsn);
done:
    Py_XDECREF(frames);
    Py_XDECREF(status);
    PyBuffer_Release(&view);
    return result;
}

static PyObject *crc(PyObject *self, PyObject *args) {
    Py_buffer view;
    if (!PyArg_ParseTuple(args, "y*", &view)) return NULL;
    uint32_t v = crc32c(view.buf, (size_t)view.len);
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(v);
}

static PyMethodDef methods[] = {
    {"encode_run", encode_run, METH_VARARGS,
     "Encode records[index:] as frames into a bytearray; see the module source."},
    {"decode_run", decode_run, METH_VARARGS,
     "Decode the valid frames of buf[pos:end]; see the module source."},
    {"crc32c", crc, METH_VARARGS, "CRC-32C of a bytes-like object (for tests)."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_frames",
                                    "Compiled frame encoding and decoding of the journal.", -1, methods};

PyMODINIT_FUNC PyInit__frames(void) {
    crc_init();
    return PyModule_Create(&module);
}
