/* Compiled fold of MESSAGE records (optional: recovery.image.StoreImage._add_message is the
 * reference and the fallback; tests/recovery/test_fold_compiled.py checks that both leave the
 * same tables, counts and ledger).
 *
 * fold_messages(buf, base, sequence, frames, index, from_lsn, limit, message_kind, queues,
 *               paging, deleted, msg_dirty, msg_fresh, ref_dirty, ref_fresh, new_keys)
 *     -> (next index, folded, last lsn, highest message id, {queue id: refs added},
 *         {address: [messages, body bytes]})
 *
 * Folds frames[index:] (journal.segment.FrameInfo tuples: file offset, frame length, kind,
 * lsn, synced lsn; the frame at file offset o lies at buf[o - base:]) while they are MESSAGE
 * records (kind ``message_kind``) of the plain shape: a map of the known fields only (mid,
 * addr, q, body, props, ts, exp, prio, pg) with integer ids and times, a str address, a bin
 * body, no properties, not paged, every queue id known (a key of ``queues``) and none twice,
 * an address that does not page (not a key of ``paging``). Frames with an LSN below from_lsn are passed over. It stops
 * at the first frame it does not fold (another kind, another shape: the Python fold takes that
 * one) or after ``limit`` folded records. For each folded record it puts into the overlays,
 * as Table.put(..., fresh=True) and OrderedTable.put would, the message's entry (key: id as
 * 8-byte big-endian; value: the stored form of recovery.entries._enc_msg, i.e. the msgpack
 * body and its CRC-32C continued from the key's, 4 bytes little-endian) and one reference per
 * queue (key: queue id, lane << 58 | lsn, 0 as three 8-byte big-endian, the lane being
 * 9 - priority; value: [mid, lane << 58 | lsn, 0] stored the same way). Overlay values are the stored bytes; Table decodes them when read. The caller
 * applies the returned counts (table counts, queue counts, segment holds, the address
 * ledger, next id, last lsn). On an exception the overlays are partly written and the image
 * must be dropped (as for any failed replay).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "crc32c.h"

#define FRAME_HEAD 32
#define LANE_SHIFT 58  /* recovery.entries.LANE_SHIFT */
#define MAX_QUEUES 64

/* ---- reading msgpack (only the forms a plain MESSAGE payload uses) ---------------------- */

typedef struct {
    const uint8_t *p, *end;
} Reader;

static uint64_t be(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int k = 0; k < n; k++) v = (v << 8) | p[k];
    return v;
}

/* An integer in [INT64_MIN, INT64_MAX]; 0 when the next value is anything else. */
static int read_int(Reader *r, int64_t *out) {
    if (r->p >= r->end) return 0;
    uint8_t t = *r->p;
    int n;
    int sign = 0;
    if (t <= 0x7f) { *out = t; r->p++; return 1; }
    if (t >= 0xe0) { *out = (int8_t)t; r->p++; return 1; }
    switch (t) {
    case 0xcc: n = 1; break;
    case 0xcd: n = 2; break;
    case 0xce: n = 4; break;
    case 0xcf: n = 8; break;
    case 0xd0: n = 1; sign = 1; break;
    case 0xd1: n = 2; sign = 1; break;
    case 0xd2: n = 4; sign = 1; break;
    case 0xd3: n = 8; sign = 1; break;
    default: return 0;
    }
    if (r->end - r->p < 1 + n) return 0;
    uint64_t v = be(r->p + 1, n);
    if (sign) {
        if (n < 8) {  /* sign-extend */
            uint64_t m = 1ull << (8 * n - 1);
            v = (v ^ m) - m;
        }
        *out = (int64_t)v;
    } else {
        if (v > (uint64_t)INT64_MAX) return 0;
        *out = (int64_t)v;
    }
    r->p += 1 + n;
    return 1;
}

/* A header of a str (kind 's'), bin ('b'), array ('a') or map ('m'): its length; 0 when the
 * next value is not of that kind or is cut short. */
static int read_head(Reader *r, char kind, uint64_t *len) {
    if (r->p >= r->end) return 0;
    uint8_t t = *r->p;
    int n = -1;
    if (kind == 's') {
        if ((t & 0xe0) == 0xa0) { *len = t & 0x1f; r->p++; return 1; }
        n = t == 0xd9 ? 1 : t == 0xda ? 2 : t == 0xdb ? 4 : -1;
    } else if (kind == 'b') {
        n = t == 0xc4 ? 1 : t == 0xc5 ? 2 : t == 0xc6 ? 4 : -1;
    } else if (kind == 'a') {
        if ((t & 0xf0) == 0x90) { *len = t & 0x0f; r->p++; return 1; }
        n = t == 0xdc ? 2 : t == 0xdd ? 4 : -1;
    } else {
        if ((t & 0xf0) == 0x80) { *len = t & 0x0f; r->p++; return 1; }
        n = t == 0xde ? 2 : t == 0xdf ? 4 : -1;
    }
    if (n < 0 || r->end - r->p < 1 + n) return 0;
    *len = be(r->p + 1, n);
    r->p += 1 + n;
    return 1;
}

/* A str or bin's bytes: the header then ``len`` bytes that must be there. */
static int read_bytes(Reader *r, char kind, const uint8_t **data, uint64_t *len) {
    if (!read_head(r, kind, len) || (uint64_t)(r->end - r->p) < *len) return 0;
    *data = r->p;
    r->p += *len;
    return 1;
}

/* ---- writing msgpack as msgpack-python's Packer(use_bin_type=True) does ----------------- */

static uint8_t *put_be(uint8_t *p, uint64_t v, int n) {
    for (int k = n - 1; k >= 0; k--) { p[k] = (uint8_t)v; v >>= 8; }
    return p + n;
}

static uint8_t *put_int(uint8_t *p, int64_t v) {
    if (v >= 0) {
        if (v < 128) { *p++ = (uint8_t)v; return p; }
        if (v < 256) { *p++ = 0xcc; return put_be(p, (uint64_t)v, 1); }
        if (v < 65536) { *p++ = 0xcd; return put_be(p, (uint64_t)v, 2); }
        if (v < 4294967296LL) { *p++ = 0xce; return put_be(p, (uint64_t)v, 4); }
        *p++ = 0xcf;
        return put_be(p, (uint64_t)v, 8);
    }
    if (v >= -32) { *p++ = (uint8_t)(int8_t)v; return p; }
    if (v >= -128) { *p++ = 0xd0; return put_be(p, (uint64_t)v, 1); }
    if (v >= -32768) { *p++ = 0xd1; return put_be(p, (uint64_t)v, 2); }
    if (v >= -2147483648LL) { *p++ = 0xd2; return put_be(p, (uint64_t)v, 4); }
    *p++ = 0xd3;
    return put_be(p, (uint64_t)v, 8);
}

static uint8_t *put_str(uint8_t *p, const uint8_t *s, uint64_t n) {
    if (n < 32) *p++ = (uint8_t)(0xa0 | n);
    else if (n < 256) { *p++ = 0xd9; p = put_be(p, n, 1); }
    else if (n < 65536) { *p++ = 0xda; p = put_be(p, n, 2); }
    else { *p++ = 0xdb; p = put_be(p, n, 4); }
    memcpy(p, s, (size_t)n);
    return p + n;
}

/* The stored form: body, then CRC-32C(key, body) little-endian. */
static PyObject *stored(const uint8_t *key, size_t klen, const uint8_t *body, size_t blen) {
    PyObject *out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(blen + 4));
    if (out == NULL) return NULL;
    uint8_t *p = (uint8_t *)PyBytes_AS_STRING(out);
    memcpy(p, body, blen);
    uint32_t c = crc32c_from(crc32c(key, klen), body, blen);
    for (int k = 0; k < 4; k++) p[blen + k] = (uint8_t)(c >> (8 * k));
    return out;
}

/* ---- one payload ------------------------------------------------------------------------ */

typedef struct {
    int64_t mid, ts, exp, prio;
    const uint8_t *addr;
    uint64_t addr_len, body_len;
    int64_t queues[MAX_QUEUES];
    int nqueues;
} Plain;

enum { F_MID = 1, F_ADDR = 2, F_Q = 4, F_BODY = 8, F_PROPS = 16, F_TS = 32, F_EXP = 64,
       F_PRIO = 128, F_PG = 256 };

static int key_is(const uint8_t *k, uint64_t n, const char *name) {
    return strlen(name) == n && memcmp(k, name, (size_t)n) == 0;
}

/* Parse a plain MESSAGE payload into ``m``; 0 when the payload has any other shape. */
static int parse_plain(const uint8_t *p, size_t n, Plain *m) {
    Reader r = {p, p + n};
    uint64_t entries;
    int seen = 0;
    m->mid = -1;
    m->ts = m->exp = 0;
    m->prio = 4;
    m->addr = (const uint8_t *)"";
    m->addr_len = m->body_len = 0;
    m->nqueues = 0;
    if (!read_head(&r, 'm', &entries)) return 0;
    for (uint64_t e = 0; e < entries; e++) {
        const uint8_t *k;
        uint64_t klen;
        int f;
        if (!read_bytes(&r, 's', &k, &klen)) return 0;
        if (key_is(k, klen, "mid")) f = F_MID;
        else if (key_is(k, klen, "addr")) f = F_ADDR;
        else if (key_is(k, klen, "q")) f = F_Q;
        else if (key_is(k, klen, "body")) f = F_BODY;
        else if (key_is(k, klen, "props")) f = F_PROPS;
        else if (key_is(k, klen, "ts")) f = F_TS;
        else if (key_is(k, klen, "exp")) f = F_EXP;
        else if (key_is(k, klen, "prio")) f = F_PRIO;
        else if (key_is(k, klen, "pg")) f = F_PG;
        else return 0;
        if (seen & f) return 0;  /* a repeated key: the Python fold decides */
        seen |= f;
        switch (f) {
        case F_MID:
            if (!read_int(&r, &m->mid) || m->mid < 0) return 0;
            break;
        case F_TS:
            if (!read_int(&r, &m->ts)) return 0;
            break;
        case F_EXP:
            if (!read_int(&r, &m->exp)) return 0;
            break;
        case F_PRIO:
            if (!read_int(&r, &m->prio)) return 0;
            break;
        case F_ADDR:
            if (!read_bytes(&r, 's', &m->addr, &m->addr_len)) return 0;
            break;
        case F_BODY: {
            const uint8_t *b;
            if (!read_bytes(&r, 'b', &b, &m->body_len)) return 0;
            break;
        }
        case F_PROPS: {
            uint64_t len;
            if (r.p < r.end && *r.p == 0xc0) { r.p++; break; }
            if (!read_head(&r, 'm', &len) || len != 0) return 0;
            break;
        }
        case F_PG:
            if (r.p >= r.end || (*r.p != 0xc0 && *r.p != 0xc2)) return 0;
            r.p++;
            break;
        case F_Q: {
            uint64_t len;
            if (!read_head(&r, 'a', &len) || len == 0 || len > MAX_QUEUES) return 0;
            for (uint64_t i = 0; i < len; i++) {
                int64_t q;
                if (!read_int(&r, &q) || q < 0) return 0;
                for (int j = 0; j < m->nqueues; j++)
                    if (m->queues[j] == q) return 0;
                m->queues[m->nqueues++] = q;
            }
            break;
        }
        }
    }
    return r.p == r.end && (seen & F_MID) && (seen & F_Q);
}

/* ---- the overlays ----------------------------------------------------------------------- */

static int key_cmp(PyObject *a, PyObject *b) {
    Py_ssize_t na = PyBytes_GET_SIZE(a), nb = PyBytes_GET_SIZE(b);
    int c = memcmp(PyBytes_AS_STRING(a), PyBytes_AS_STRING(b), (size_t)(na < nb ? na : nb));
    return c != 0 ? c : (na > nb) - (na < nb);
}

/* Put key in the sorted list keys: appended when it is the greatest (a queue's new keys
 * grow within a priority lane), else inserted in order (a higher priority's key), not twice. */
static int ordered_insert(PyObject *keys, PyObject *key) {
    Py_ssize_t n = PyList_GET_SIZE(keys);
    if (n == 0 || key_cmp(PyList_GET_ITEM(keys, n - 1), key) < 0)
        return PyList_Append(keys, key);
    Py_ssize_t lo = 0, hi = n;
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi) / 2;
        if (key_cmp(PyList_GET_ITEM(keys, mid), key) < 0) lo = mid + 1;
        else hi = mid;
    }
    if (lo < n && key_cmp(PyList_GET_ITEM(keys, lo), key) == 0) return 0;
    return PyList_Insert(keys, lo, key);
}

/* Table.put(key, value, fresh=True); with new_keys, OrderedTable's per-prefix order list. */
static int put_fresh(PyObject *dirty, PyObject *fresh, PyObject *new_keys, PyObject *deleted,
                     PyObject *key, PyObject *value) {
    PyObject *old = PyDict_GetItemWithError(dirty, key);
    if (old == NULL && PyErr_Occurred()) return -1;
    if (old != deleted) {
        if (PySet_Add(fresh, key) < 0) return -1;
        if (new_keys != NULL) {
            PyObject *prefix = PyBytes_FromStringAndSize(PyBytes_AS_STRING(key), 8);
            if (prefix == NULL) return -1;
            PyObject *keys = PyDict_GetItemWithError(new_keys, prefix);
            int rc;
            if (keys != NULL) rc = ordered_insert(keys, key);
            else if (PyErr_Occurred()) rc = -1;
            else {
                PyObject *list = PyList_New(1);
                if (list == NULL) rc = -1;
                else {
                    Py_INCREF(key);
                    PyList_SET_ITEM(list, 0, key);
                    rc = PyDict_SetItem(new_keys, prefix, list);
                    Py_DECREF(list);
                }
            }
            Py_DECREF(prefix);
            if (rc < 0) return -1;
        }
    }
    return PyDict_SetItem(dirty, key, value);
}

static int add_count(PyObject *counts, PyObject *key, long long n) {
    PyObject *old = PyDict_GetItemWithError(counts, key);
    if (old == NULL && PyErr_Occurred()) return -1;
    long long have = old == NULL ? 0 : PyLong_AsLongLong(old);
    if (have == -1 && PyErr_Occurred()) return -1;
    PyObject *v = PyLong_FromLongLong(have + n);
    if (v == NULL) return -1;
    int rc = PyDict_SetItem(counts, key, v);
    Py_DECREF(v);
    return rc;
}

/* Add qadded[t] to qcounts[qids[t]] for the first n queues of the small table. */
static int flush_counts(PyObject *qcounts, const int64_t *qids, const long long *qadded,
                        int n) {
    for (int t = 0; t < n; t++) {
        PyObject *q = PyLong_FromLongLong(qids[t]);
        int rc = q == NULL ? -1 : add_count(qcounts, q, qadded[t]);
        Py_XDECREF(q);
        if (rc < 0) return -1;
    }
    return 0;
}

/* Add (messages, bytes) to sizes[address] = [messages, bytes]. */
static int add_size(PyObject *sizes, PyObject *address, long long n, long long bytes) {
    if (n == 0) return 0;
    PyObject *pair = Py_BuildValue("[LL]", n, bytes);
    if (pair == NULL) return -1;
    PyObject *old = PyDict_GetItemWithError(sizes, address);
    int rc = 0;
    if (old != NULL) {
        long long on = PyLong_AsLongLong(PyList_GET_ITEM(old, 0));
        long long ob = PyLong_AsLongLong(PyList_GET_ITEM(old, 1));
        Py_DECREF(pair);
        pair = Py_BuildValue("[LL]", on + n, ob + bytes);
        if (pair == NULL) return -1;
    } else if (PyErr_Occurred()) rc = -1;
    if (rc == 0) rc = PyDict_SetItem(sizes, address, pair);
    Py_DECREF(pair);
    return rc;
}

static int frame_field(PyObject *frame, int i, long long *out) {
    if (!PyTuple_Check(frame) || PyTuple_GET_SIZE(frame) < 5) {
        PyErr_SetString(PyExc_TypeError, "frames must hold FrameInfo tuples");
        return -1;
    }
    *out = PyLong_AsLongLong(PyTuple_GET_ITEM(frame, i));
    return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

static PyObject *fold_messages(PyObject *self, PyObject *args) {
    Py_buffer view;
    long long base, seq, from_lsn, limit, message_kind;
    Py_ssize_t index;
    PyObject *frames, *queues, *paging, *deleted, *msg_dirty, *msg_fresh, *ref_dirty,
        *ref_fresh, *new_keys;
    if (!PyArg_ParseTuple(args, "y*LLO!nLLLO!O!OO!O!O!O!O!", &view, &base, &seq, &PyList_Type,
                          &frames, &index, &from_lsn, &limit, &message_kind, &PyDict_Type, &queues,
                          &PyDict_Type, &paging, &deleted, &PyDict_Type, &msg_dirty,
                          &PySet_Type, &msg_fresh, &PyDict_Type, &ref_dirty, &PySet_Type,
                          &ref_fresh, &PyDict_Type, &new_keys))
        return NULL;
    PyObject *qcounts = PyDict_New(), *sizes = PyDict_New(), *address = NULL, *result = NULL;
    const uint8_t *addr_bytes = NULL;  /* the bytes ``address`` was decoded from */
    uint64_t addr_len = 0;
    long long addr_n = 0, addr_size = 0, folded = 0, last_lsn = 0, max_mid = -1;
    long long qadded[MAX_QUEUES] = {0};
    int64_t qids[MAX_QUEUES] = {0};
    int nq_seen = 0;
    uint8_t *body = NULL;
    size_t body_cap = 0;
    Py_ssize_t n_frames = PyList_GET_SIZE(frames);
    const uint8_t *b = (const uint8_t *)view.buf;
    if (qcounts == NULL || sizes == NULL) goto fail;
    for (; index < n_frames && folded < limit; index++) {
        PyObject *frame = PyList_GET_ITEM(frames, index);
        long long off, flen, kind, lsn;
        if (frame_field(frame, 0, &off) < 0 || frame_field(frame, 1, &flen) < 0 ||
            frame_field(frame, 2, &kind) < 0 || frame_field(frame, 3, &lsn) < 0)
            goto fail;
        if (kind != message_kind) break;
        if (lsn < from_lsn) continue;
        if (off - base < 0 || off - base + flen > view.len || flen < FRAME_HEAD + 4) {
            PyErr_SetString(PyExc_ValueError, "a frame lies outside the buffer");
            goto fail;
        }
        Plain m;
        if (!parse_plain(b + (off - base) + FRAME_HEAD, (size_t)(flen - FRAME_HEAD - 4), &m))
            break;
        /* the address: decoded (and checked as UTF-8, as msgpack does) once per run of equal
         * addresses; an address that pages leaves the record to the Python fold */
        if (address == NULL || m.addr_len != addr_len ||
            memcmp(m.addr, addr_bytes, (size_t)addr_len) != 0) {
            PyObject *a = PyUnicode_DecodeUTF8((const char *)m.addr, (Py_ssize_t)m.addr_len,
                                               NULL);
            if (a == NULL) {
                PyErr_Clear();
                break;
            }
            int pages = PyDict_Contains(paging, a);
            if (pages != 0) {
                Py_DECREF(a);
                if (pages < 0) goto fail;
                break;
            }
            if (address != NULL && add_size(sizes, address, addr_n, addr_size) < 0) {
                Py_DECREF(a);
                goto fail;
            }
            Py_XSETREF(address, a);
            addr_bytes = m.addr;
            addr_len = m.addr_len;
            addr_n = addr_size = 0;
        }
        int known = 1;
        for (int j = 0; j < m.nqueues && known; j++) {
            PyObject *q = PyLong_FromLongLong(m.queues[j]);
            if (q == NULL) goto fail;
            known = PyDict_Contains(queues, q);
            Py_DECREF(q);
            if (known < 0) goto fail;
        }
        if (!known) break;
        /* the message entry */
        size_t need = 1 + 9 + 5 + m.addr_len + 1 + 3 * 9 + 1 + 1 + 7 * 9;
        /* its priority lane (recovery.entries.lane_of): 9 - priority, clamped to 0-9 */
        int64_t lane = 9 - (m.prio < 0 ? 0 : m.prio > 9 ? 9 : m.prio);
        int64_t lane_lsn = (int64_t)((uint64_t)lane << LANE_SHIFT | (uint64_t)lsn);
        if (need > body_cap) {
            uint8_t *nb = PyMem_Realloc(body, need);
            if (nb == NULL) { PyErr_NoMemory(); goto fail; }
            body = nb;
            body_cap = need;
        }
        uint8_t key[24], *p = body;
        *p++ = 0x9c;
        p = put_int(p, m.mid);
        p = put_str(p, m.addr, m.addr_len);
        *p++ = 0x93;
        p = put_int(p, seq);
        p = put_int(p, off);
        p = put_int(p, flen);
        *p++ = 0xff;  /* slot -1: a record of its own */
        *p++ = 0x80;  /* no properties */
        p = put_int(p, m.ts);
        p = put_int(p, m.exp);
        p = put_int(p, m.prio);
        p = put_int(p, (int64_t)m.body_len);
        p = put_int(p, m.nqueues);
        p = put_int(p, lsn);
        p = put_int(p, lane);
        put_be(key, (uint64_t)m.mid, 8);
        PyObject *k = PyBytes_FromStringAndSize((const char *)key, 8);
        PyObject *v = k ? stored(key, 8, body, (size_t)(p - body)) : NULL;
        int rc = v ? put_fresh(msg_dirty, msg_fresh, NULL, deleted, k, v) : -1;
        Py_XDECREF(k);
        Py_XDECREF(v);
        if (rc < 0) goto fail;
        /* one reference per queue: [mid, lane | lsn, 0] under (queue, lane | lsn, 0) */
        p = body;
        *p++ = 0x93;
        p = put_int(p, m.mid);
        p = put_int(p, lane_lsn);
        *p++ = 0x00;
        for (int j = 0; j < m.nqueues; j++) {
            put_be(key, (uint64_t)m.queues[j], 8);
            put_be(key + 8, (uint64_t)lane_lsn, 8);
            put_be(key + 16, 0, 8);
            k = PyBytes_FromStringAndSize((const char *)key, 24);
            v = k ? stored(key, 24, body, (size_t)(p - body)) : NULL;
            rc = v ? put_fresh(ref_dirty, ref_fresh, new_keys, deleted, k, v) : -1;
            Py_XDECREF(k);
            Py_XDECREF(v);
            if (rc < 0) goto fail;
            int s = 0;
            while (s < nq_seen && qids[s] != m.queues[j]) s++;
            if (s == nq_seen) {
                if (nq_seen == MAX_QUEUES) {  /* the small table is full: flush it */
                    if (flush_counts(qcounts, qids, qadded, nq_seen) < 0) goto fail;
                    nq_seen = s = 0;
                }
                qids[s] = m.queues[j];
                qadded[s] = 0;
                nq_seen++;
            }
            qadded[s]++;
        }
        addr_n++;
        addr_size += (long long)m.body_len;
        if (m.mid > max_mid) max_mid = m.mid;
        last_lsn = lsn;
        folded++;
    }
    if (flush_counts(qcounts, qids, qadded, nq_seen) < 0) goto fail;
    if (address != NULL && add_size(sizes, address, addr_n, addr_size) < 0) goto fail;
    result = Py_BuildValue("(nLLLOO)", index, folded, last_lsn, max_mid, qcounts, sizes);
fail:
    PyMem_Free(body);
    Py_XDECREF(address);
    Py_XDECREF(qcounts);
    Py_XDECREF(sizes);
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef methods[] = {
    {"fold_messages", fold_messages, METH_VARARGS,
     "Fold a run of plain MESSAGE records into the image's overlays (see the module source)."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fold",
                                    "Compiled fold of MESSAGE records.", -1, methods};

PyMODINIT_FUNC PyInit__fold(void) {
    crc_init();
    return PyModule_Create(&module);
}
