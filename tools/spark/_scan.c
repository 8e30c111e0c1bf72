/* Compiled fast path of tools.spark.columns.EntryColumns.scan (optional: the Python code is
 * the reference and the fallback; tests/tools/test_fastscan.py checks both give equal rows).
 *
 * scan(cols, buf, pos, stop, generation, max_frame, seg, base, last_lsn, ctx)
 *     -> (pos, status, last_lsn)
 *
 * Walks the frames starting in [pos, stop) of buf (buf[i] is file offset base + i), checks
 * each exactly as the Python loop does (length bounds, kind, flags, generation, LSN order,
 * CRC-32C) and appends the entry rows of MESSAGE, ACK, DELIVERY and TX records to ``cols``, a
 * list of 18 column lists (the values of the Python builder's 18-tuples, one list per column:
 * no row tuple is built and nothing needs transposing). It stops, appending nothing for
 * that frame, at anything it does not handle itself, and says why:
 *   status 0: reached stop;  1: a valid frame at pos that Python must decode (another kind,
 *   or a payload shape this code does not know);  2: an invalid frame at pos (Python's
 *   tolerant scanner takes over);  3: the zero end marker with only zeros after it (done).
 * ctx = (names: dict int->str, joined: dict bytes->str, kind_names: tuple of 256 str,
 *        with_body, want_message, want_ack, want_delivery, lsn_min, lsn_max)
 * with lsn_min/lsn_max -1 when unset.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define FRAME_HEAD 32
#define FRAME_OVERHEAD 36
#define K_MESSAGE 5
#define K_ACK 6
#define K_DELIVERY 7
#define K_TX 8
#define NCOLS 19  /* the schema's columns, record_bytes last */

#include "crc32c.h"  /* journal/crc32c.h: the frames' CRC-32C, shared with journal._frames */

/* ---- a minimal msgpack reader ----------------------------------------------------------- */
typedef struct { const uint8_t *p, *end; } Rd;

enum { T_BAD, T_NIL, T_BOOL, T_INT, T_UINT, T_FLOAT, T_STR, T_BIN, T_ARR, T_MAP, T_EXT };

typedef struct {
    int type;
    int64_t i;      /* T_INT, T_BOOL */
    uint64_t u;     /* T_UINT (values above INT64_MAX) */
    const uint8_t *s;  /* T_STR, T_BIN: bytes; T_ARR/T_MAP: first element */
    uint32_t n;     /* length, or element count */
} Val;

static uint64_t be(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; i++) v = (v << 8) | p[i];
    return v;
}

/* Strict UTF-8 (what Python's decoder accepts): no overlongs, no surrogates, <= U+10FFFF. */
static int utf8_ok(const uint8_t *s, uint32_t n) {
    uint32_t i = 0;
    while (i < n) {
        uint8_t b = s[i];
        if (b < 0x80) { i++; continue; }
        uint32_t len; uint8_t lo = 0x80, hi = 0xBF;
        if (b >= 0xC2 && b <= 0xDF) len = 2;
        else if (b >= 0xE0 && b <= 0xEF) {
            len = 3;
            if (b == 0xE0) lo = 0xA0;
            if (b == 0xED) hi = 0x9F;
        } else if (b >= 0xF0 && b <= 0xF4) {
            len = 4;
            if (b == 0xF0) lo = 0x90;
            if (b == 0xF4) hi = 0x8F;
        } else return 0;
        if (n - i < len) return 0;
        if (s[i + 1] < lo || s[i + 1] > hi) return 0;
        for (uint32_t k = 2; k < len; k++) if ((s[i + k] & 0xC0) != 0x80) return 0;
        i += len;
    }
    return 1;
}

/* Read one value's head; strings and bins are consumed, containers are not (their elements
 * follow). Returns 0 on malformed or truncated input. */
static int rd(Rd *r, Val *v) {
    if (r->p >= r->end) return 0;
    uint8_t b = *r->p++;
    size_t need = 0;
    v->type = T_BAD;
    if (b <= 0x7f) { v->type = T_INT; v->i = b; return 1; }
    if (b >= 0xe0) { v->type = T_INT; v->i = (int8_t)b; return 1; }
    if ((b & 0xf0) == 0x80) { v->type = T_MAP; v->n = b & 0x0f; return 1; }
    if ((b & 0xf0) == 0x90) { v->type = T_ARR; v->n = b & 0x0f; return 1; }
    if ((b & 0xe0) == 0xa0) { v->type = T_STR; v->n = b & 0x1f; goto bytes; }
    switch (b) {
    case 0xc0: v->type = T_NIL; return 1;
    case 0xc2: v->type = T_BOOL; v->i = 0; return 1;
    case 0xc3: v->type = T_BOOL; v->i = 1; return 1;
    case 0xc4: case 0xc5: case 0xc6:
        need = (size_t)1 << (b - 0xc4);
        if ((size_t)(r->end - r->p) < need) return 0;
        v->type = T_BIN; v->n = (uint32_t)be(r->p, (int)need); r->p += need; goto bytes;
    case 0xd9: case 0xda: case 0xdb:
        need = (size_t)1 << (b - 0xd9);
        if ((size_t)(r->end - r->p) < need) return 0;
        v->type = T_STR; v->n = (uint32_t)be(r->p, (int)need); r->p += need; goto bytes;
    case 0xcc: case 0xcd: case 0xce: case 0xcf: {
        need = (size_t)1 << (b - 0xcc);
        if ((size_t)(r->end - r->p) < need) return 0;
        uint64_t u = be(r->p, (int)need); r->p += need;
        if (u > (uint64_t)INT64_MAX) { v->type = T_UINT; v->u = u; }
        else { v->type = T_INT; v->i = (int64_t)u; }
        return 1;
    }
    case 0xd0: case 0xd1: case 0xd2: case 0xd3: {
        need = (size_t)1 << (b - 0xd0);
        if ((size_t)(r->end - r->p) < need) return 0;
        uint64_t u = be(r->p, (int)need); r->p += need;
        int64_t s;
        if (need == 1) s = (int8_t)u; else if (need == 2) s = (int16_t)u;
        else if (need == 4) s = (int32_t)u; else s = (int64_t)u;
        v->type = T_INT; v->i = s;
        return 1;
    }
    case 0xdc: case 0xdd:
        need = b == 0xdc ? 2 : 4;
        if ((size_t)(r->end - r->p) < need) return 0;
        v->type = T_ARR; v->n = (uint32_t)be(r->p, (int)need); r->p += need; return 1;
    case 0xde: case 0xdf:
        need = b == 0xde ? 2 : 4;
        if ((size_t)(r->end - r->p) < need) return 0;
        v->type = T_MAP; v->n = (uint32_t)be(r->p, (int)need); r->p += need; return 1;
    case 0xca: need = 4; v->type = T_FLOAT; break;
    case 0xcb: need = 8; v->type = T_FLOAT; break;
    case 0xd4: need = 2; v->type = T_EXT; break;
    case 0xd5: need = 3; v->type = T_EXT; break;
    case 0xd6: need = 5; v->type = T_EXT; break;
    case 0xd7: need = 9; v->type = T_EXT; break;
    case 0xd8: need = 17; v->type = T_EXT; break;
    case 0xc7: case 0xc8: case 0xc9: {
        size_t ln = (size_t)1 << (b - 0xc7);
        if ((size_t)(r->end - r->p) < ln + 1) return 0;
        need = (size_t)be(r->p, (int)ln) + ln + 1;
        v->type = T_EXT;
        break;
    }
    default: return 0;
    }
    if ((size_t)(r->end - r->p) < need) return 0;
    r->p += need;
    return 1;
bytes:
    if ((size_t)(r->end - r->p) < v->n) return 0;
    v->s = r->p;
    r->p += v->n;
    return v->type != T_STR || utf8_ok(v->s, v->n);
}

/* Skip one whole value (containers included). */
static int skip(Rd *r, int depth) {
    Val v;
    if (depth > 64 || !rd(r, &v)) return 0;
    if (v.type == T_ARR) { for (uint32_t k = 0; k < v.n; k++) if (!skip(r, depth + 1)) return 0; }
    else if (v.type == T_MAP) { for (uint64_t k = 0; k < 2ull * v.n; k++) if (!skip(r, depth + 1)) return 0; }
    return 1;
}

/* One entry of a map: its key in *k (a scalar), its value's bytes in *span, and the value in
 * *v when it is a scalar. Returns 0 when malformed, 1 for a scalar value, 2 for a container. */
static int entry(Rd *r, Val *k, Val *v, Rd *span) {
    if (!rd(r, k) || k->type == T_ARR || k->type == T_MAP) return 0;
    span->p = r->p;
    if (!rd(r, v)) return 0;
    if (v->type == T_ARR || v->type == T_MAP) {
        r->p = span->p;  /* back over the container's head, then skip it whole */
        if (!skip(r, 0)) return 0;
        span->end = r->p;
        return 2;
    }
    span->end = r->p;
    return 1;
}

static int key_is(const Val *k, const char *name) {
    size_t n = strlen(name);
    return k->type == T_STR && k->n == n && memcmp(k->s, name, n) == 0;
}

/* ---- building rows ---------------------------------------------------------------------- */
typedef struct {
    PyObject **cols, *seg, *names, *joined, *kind_names;
    int with_body, want_msg, want_ack, want_dlv;
    PyObject *flen;  /* the current frame's length: every row of it carries it (record_bytes) */
} Ctx;

/* An int or None (missing/nil); NULL with *bail set for other types. */
static PyObject *int_or_none(const Val *v, int present, int *bail) {
    if (!present || v->type == T_NIL) Py_RETURN_NONE;
    if (v->type == T_INT) return PyLong_FromLongLong(v->i);
    if (v->type == T_UINT) return PyLong_FromUnsignedLongLong(v->u);
    *bail = 1;
    return NULL;
}

/* Python's ``value or None`` for an int field. */
static PyObject *int_or_none_falsy(const Val *v, int present, int *bail) {
    if (present && v->type == T_INT && v->i == 0) Py_RETURN_NONE;
    if (present && v->type == T_BOOL) { *bail = 1; return NULL; }
    return int_or_none(v, present, bail);
}

/* names.get(qid) or f"#{qid}" (the queue name of an id). */
static PyObject *queue_name(Ctx *c, PyObject *qid) {
    PyObject *name = PyDict_GetItemWithError(c->names, qid);
    if (name != NULL && PyObject_IsTrue(name)) { Py_INCREF(name); return name; }
    if (PyErr_Occurred()) return NULL;
    return PyUnicode_FromFormat("#%S", qid);
}

/* A str for a map key or value the way tools.spark.columns._props renders it; NULL with *bail
 * for what this code leaves to Python (floats, containers, extension types). */
static PyObject *as_text(const Val *v, int *bail) {
    switch (v->type) {
    case T_STR: return PyUnicode_DecodeUTF8((const char *)v->s, v->n, NULL);
    case T_INT: return PyUnicode_FromFormat("%lld", (long long)v->i);
    case T_UINT: return PyUnicode_FromFormat("%llu", (unsigned long long)v->u);
    case T_NIL: return PyUnicode_FromString("None");
    case T_BOOL: return PyUnicode_FromString(v->i ? "True" : "False");
    case T_BIN: {
        static const char hex[] = "0123456789abcdef";
        PyObject *s = PyUnicode_New((Py_ssize_t)v->n * 2, 127);
        if (s == NULL) return NULL;
        Py_UCS1 *d = PyUnicode_1BYTE_DATA(s);
        for (uint32_t k = 0; k < v->n; k++) { d[2 * k] = hex[v->s[k] >> 4]; d[2 * k + 1] = hex[v->s[k] & 15]; }
        return s;
    }
    default: *bail = 1; return NULL;
    }
}

/* ``t``, a tuple of (str, str) tuples (or NULL), taken off the cyclic collector's books. */
static PyObject *untracked(PyObject *t) {
    if (t == NULL) return NULL;
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(t); k++) {
        PyObject *pair = PyTuple_GET_ITEM(t, k);
        if (PyObject_GC_IsTracked(pair)) PyObject_GC_UnTrack(pair);
    }
    if (PyObject_GC_IsTracked(t)) PyObject_GC_UnTrack(t);
    return t;
}

/* A dict of str -> str as the tuple of its (key, value) pairs (the map column's row form);
 * steals ``d``. The tuples hold only strings, so they are taken off the cyclic collector's
 * books (as CPython itself does for such tuples at its next collection): a scan makes millions
 * of them, and tracking them made every collection after a scan walk them all. */
static PyObject *pairs(PyObject *d) {
    PyObject *items = PyDict_Items(d);
    Py_DECREF(d);
    if (items == NULL) return NULL;
    PyObject *t = PyList_AsTuple(items);
    Py_DECREF(items);
    return untracked(t);
}

static int push_row(Ctx *c, PyObject *off, PyObject *lsn, int kind, PyObject *tx, PyObject *mid,
                    PyObject *addr, PyObject *queue, PyObject *durable, PyObject *ts,
                    PyObject *exp, PyObject *dc, PyObject *props, PyObject *size, PyObject *body) {
    /* steals every reference but off, lsn, tx (borrowed); on error the columns may differ in
     * length: the caller cuts them back to where the frame started */
    PyObject *items[NCOLS] = {c->seg, off, lsn, PyTuple_GET_ITEM(c->kind_names, kind), tx, mid,
                              addr, queue, durable, ts, exp, Py_None, dc, props, size, body,
                              Py_True, Py_None, c->flen};
    static const int borrowed[NCOLS] = {1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 1, 1};
    int rc = 0;
    for (int k = 0; k < NCOLS; k++) {
        if (items[k] == NULL) rc = -1;
        else if (rc == 0 && PyList_Append(c->cols[k], items[k]) < 0) rc = -1;
        if (!borrowed[k]) Py_XDECREF(items[k]);
    }
    return rc;
}

/* One MESSAGE map (a record, or an element of TX msgs). 0 ok, 1 bail, -1 error. */
static int message(Ctx *c, Rd *r, PyObject *off, PyObject *lsn, PyObject *tx) {
    Val m, k, v, mid = {0}, addr = {0}, ts = {0}, exp = {0}, body = {0};
    int has_mid = 0, has_addr = 0, has_ts = 0, has_exp = 0, has_body = 0, has_props = 0, has_q = 0;
    Rd q_span = {0}, props_r = {0}, span;
    if (!rd(r, &m) || m.type != T_MAP) return 1;
    for (uint32_t i = 0; i < m.n; i++) {
        int e = entry(r, &k, &v, &span);
        if (!e) return 1;
        if (key_is(&k, "q")) { has_q = 1; q_span = span; continue; }
        if (key_is(&k, "props")) { has_props = 1; props_r = span; continue; }
        if (key_is(&k, "at")) return 1;  /* scheduled: the Python builder fills scheduled_time */
        if (e == 2) {
            if (key_is(&k, "mid") || key_is(&k, "addr") || key_is(&k, "ts") ||
                key_is(&k, "exp") || key_is(&k, "body")) return 1;
            continue;
        }
        if (key_is(&k, "mid")) { mid = v; has_mid = 1; }
        else if (key_is(&k, "addr")) { addr = v; has_addr = 1; }
        else if (key_is(&k, "ts")) { ts = v; has_ts = 1; }
        else if (key_is(&k, "exp")) { exp = v; has_exp = 1; }
        else if (key_is(&k, "body")) { body = v; has_body = 1; }
    }
    if (!c->want_msg) return 0;
    if (has_body && body.type != T_BIN) return 1;
    if (has_addr && addr.type != T_STR && addr.type != T_NIL) return 1;
    int bail = 0;
    PyObject *o_mid = NULL, *o_addr = NULL, *o_q = NULL, *o_ts = NULL, *o_exp = NULL;
    PyObject *o_props = NULL, *o_size = NULL, *o_body = NULL;
    o_mid = int_or_none(&mid, has_mid, &bail);
    if (o_mid == NULL) goto fail;
    if (has_addr && addr.type == T_STR) {
        o_addr = PyUnicode_DecodeUTF8((const char *)addr.s, addr.n, NULL);
        if (o_addr == NULL) { PyErr_Clear(); bail = 1; goto fail; }
    } else { o_addr = Py_None; Py_INCREF(o_addr); }
    /* queues: the names of the q list joined with ",", cached by the list's bytes */
    {
        PyObject *key = PyBytes_FromStringAndSize((const char *)(has_q ? q_span.p : (const uint8_t *)""),
                                                  has_q ? q_span.end - q_span.p : 0);
        if (key == NULL) goto fail;
        o_q = PyDict_GetItemWithError(c->joined, key);
        if (o_q != NULL) Py_INCREF(o_q);
        else if (PyErr_Occurred()) { Py_DECREF(key); goto fail; }
        else {
            PyObject *parts = PyList_New(0);
            if (parts == NULL) { Py_DECREF(key); goto fail; }
            if (has_q) {
                Rd qr = q_span;
                Val a, e;
                if (!rd(&qr, &a) || a.type != T_ARR) bail = 1;
                for (uint32_t i = 0; !bail && i < a.n; i++) {
                    PyObject *nm;
                    if (!rd(&qr, &e)) { bail = 1; break; }
                    if (e.type == T_NIL) nm = PyUnicode_FromString("");
                    else if (e.type == T_INT) {
                        PyObject *qid = PyLong_FromLongLong(e.i);
                        nm = qid ? queue_name(c, qid) : NULL;
                        Py_XDECREF(qid);
                    } else { bail = 1; break; }
                    if (nm == NULL || PyList_Append(parts, nm) < 0) {
                        Py_XDECREF(nm); Py_DECREF(parts); Py_DECREF(key); goto fail;
                    }
                    Py_DECREF(nm);
                }
            }
            if (bail) { Py_DECREF(parts); Py_DECREF(key); goto fail; }
            PyObject *sep = PyUnicode_FromString(",");
            o_q = sep ? PyUnicode_Join(sep, parts) : NULL;
            Py_XDECREF(sep);
            Py_DECREF(parts);
            if (o_q == NULL || PyDict_SetItem(c->joined, key, o_q) < 0) { Py_DECREF(key); goto fail; }
        }
        Py_DECREF(key);
    }
    o_ts = int_or_none_falsy(&ts, has_ts, &bail);
    if (o_ts == NULL) goto fail;
    o_exp = int_or_none_falsy(&exp, has_exp, &bail);
    if (o_exp == NULL) goto fail;
    /* props: None when missing or empty, else a str -> str dict */
    if (has_props) {
        Rd pr = props_r;
        Val pm, pk, pv;
        if (!rd(&pr, &pm)) { bail = 1; goto fail; }
        if (pm.type == T_NIL) { o_props = Py_None; Py_INCREF(o_props); }
        else if (pm.type != T_MAP) { bail = 1; goto fail; }
        else if (pm.n == 0) { o_props = Py_None; Py_INCREF(o_props); }
        else {
            o_props = PyDict_New();
            if (o_props == NULL) goto fail;
            for (uint32_t i = 0; i < pm.n; i++) {
                if (!rd(&pr, &pk) || pk.type == T_ARR || pk.type == T_MAP || pk.type == T_BIN ||
                    pk.type == T_FLOAT || pk.type == T_EXT) { bail = 1; goto fail; }
                if (!rd(&pr, &pv)) { bail = 1; goto fail; }
                PyObject *ks = as_text(&pk, &bail);
                if (ks == NULL) { if (PyErr_Occurred()) { PyErr_Clear(); bail = 1; } goto fail; }
                PyObject *vs = as_text(&pv, &bail);
                if (vs == NULL) {
                    Py_DECREF(ks);
                    if (PyErr_Occurred()) { PyErr_Clear(); bail = 1; }
                    goto fail;
                }
                int rc = PyDict_SetItem(o_props, ks, vs);
                Py_DECREF(ks); Py_DECREF(vs);
                if (rc < 0) goto fail;
            }
            o_props = pairs(o_props);
            if (o_props == NULL) goto fail;
        }
    } else { o_props = Py_None; Py_INCREF(o_props); }
    o_size = PyLong_FromLong(has_body ? (long)body.n : 0);
    if (o_size == NULL) goto fail;
    if (c->with_body) {
        o_body = has_body ? PyBytes_FromStringAndSize((const char *)body.s, body.n)
                          : PyBytes_FromStringAndSize("", 0);
        if (o_body == NULL) goto fail;
    } else { o_body = Py_None; Py_INCREF(o_body); }
    Py_INCREF(Py_True);
    return push_row(c, off, lsn, K_MESSAGE, tx, o_mid, o_addr, o_q, Py_True, o_ts, o_exp,
                    (Py_INCREF(Py_None), Py_None), o_props, o_size, o_body);
fail:
    Py_XDECREF(o_mid); Py_XDECREF(o_addr); Py_XDECREF(o_q); Py_XDECREF(o_ts);
    Py_XDECREF(o_exp); Py_XDECREF(o_props); Py_XDECREF(o_size); Py_XDECREF(o_body);
    return bail ? 1 : -1;
}

/* One ACK or DELIVERY map. */
static int ack_or_delivery(Ctx *c, Rd *r, PyObject *off, PyObject *lsn, PyObject *tx, int kind) {
    Val m, k, v, mid = {0}, q = {0}, n = {0}, reason = {0};
    int has_m = 0, has_q = 0, has_n = 0, has_r = 0, bail = 0;
    Rd span;
    if (!rd(r, &m) || m.type != T_MAP) return 1;
    for (uint32_t i = 0; i < m.n; i++) {
        int e = entry(r, &k, &v, &span);
        if (!e) return 1;
        if (e == 2) {
            if (key_is(&k, "m") || key_is(&k, "q") || key_is(&k, "n") || key_is(&k, "r")) return 1;
            continue;
        }
        if (key_is(&k, "m")) { mid = v; has_m = 1; }
        else if (key_is(&k, "q")) { q = v; has_q = 1; }
        else if (key_is(&k, "n")) { n = v; has_n = 1; }
        else if (key_is(&k, "r")) { reason = v; has_r = 1; }
    }
    if (kind == K_ACK ? !c->want_ack : !c->want_dlv) return 0;
    PyObject *o_mid = NULL, *o_q = NULL, *o_dc = NULL, *o_props = NULL;
    o_mid = int_or_none(&mid, has_m, &bail);
    if (o_mid == NULL) goto fail;
    if (!has_q || q.type == T_NIL) { o_q = Py_None; Py_INCREF(o_q); }
    else if (q.type == T_INT) {
        PyObject *qid = PyLong_FromLongLong(q.i);
        o_q = qid ? queue_name(c, qid) : NULL;
        Py_XDECREF(qid);
        if (o_q == NULL) goto fail;
    } else { bail = 1; goto fail; }
    if (kind == K_DELIVERY) {
        if (has_n && n.type == T_INT && (n.i < INT32_MIN || n.i > INT32_MAX)) { bail = 1; goto fail; }
        o_dc = int_or_none(&n, has_n, &bail);
        if (o_dc == NULL) goto fail;
        o_props = Py_None; Py_INCREF(o_props);
    } else {
        o_dc = Py_None; Py_INCREF(o_dc);
        if (has_r && reason.type == T_BIN) { bail = 1; goto fail; }  /* str(bytes) is Python's */
        PyObject *text = has_r ? as_text(&reason, &bail) : PyUnicode_FromString("");
        if (text == NULL) { if (PyErr_Occurred()) { PyErr_Clear(); bail = 1; } goto fail; }
        o_props = untracked(Py_BuildValue("((sN))", "reason", text));
        if (o_props == NULL) goto fail;
    }
    Py_INCREF(Py_None); Py_INCREF(Py_None); Py_INCREF(Py_None); Py_INCREF(Py_None);
    Py_INCREF(Py_None); Py_INCREF(Py_None);
    return push_row(c, off, lsn, kind, kind == K_ACK ? tx : Py_None, o_mid, Py_None, o_q,
                    Py_None, Py_None, Py_None, o_dc, o_props, Py_None, Py_None);
fail:
    Py_XDECREF(o_mid); Py_XDECREF(o_q); Py_XDECREF(o_dc); Py_XDECREF(o_props);
    return bail ? 1 : -1;
}

/* A TX map: every message (in order), then every ack, each a row with the transaction id. */
static int transaction(Ctx *c, Rd *r, PyObject *off, PyObject *lsn) {
    Val m, k, v, tx = {0};
    int has_tx = 0, bail = 0, rc = 0;
    Rd msgs = {0}, acks = {0}, span;
    if (!rd(r, &m) || m.type != T_MAP) return 1;
    for (uint32_t i = 0; i < m.n; i++) {
        int e = entry(r, &k, &v, &span);
        if (!e) return 1;
        if (e == 2) {
            if (key_is(&k, "msgs")) msgs = span;
            else if (key_is(&k, "acks")) acks = span;
            else if (key_is(&k, "tx")) return 1;
            continue;
        }
        if (key_is(&k, "tx")) { tx = v; has_tx = 1; }
        else if (key_is(&k, "msgs") || key_is(&k, "acks")) return 1;  /* not a list */
    }
    PyObject *o_tx = int_or_none(&tx, has_tx, &bail);
    if (o_tx == NULL) return bail ? 1 : -1;
    for (int part = 0; part < 2 && rc == 0; part++) {
        Rd *lr = part == 0 ? &msgs : &acks;
        Val a;
        if (lr->p == NULL) continue;
        if (!rd(lr, &a) || a.type != T_ARR) { rc = 1; break; }
        for (uint32_t i = 0; i < a.n && rc == 0; i++)
            rc = part == 0 ? message(c, lr, off, lsn, o_tx) : ack_or_delivery(c, lr, off, lsn, o_tx, K_ACK);
    }
    Py_DECREF(o_tx);
    return rc;
}

/* Cut every column back to ``len`` rows (undo a frame's partial rows). */
static int cut(PyObject **cols, Py_ssize_t len) {
    for (int k = 0; k < NCOLS; k++)
        if (PyList_GET_SIZE(cols[k]) > len &&
            PyList_SetSlice(cols[k], len, PyList_GET_SIZE(cols[k]), NULL) < 0) return -1;
    return 0;
}

static PyObject *scan(PyObject *self, PyObject *args) {
    PyObject *collist, *seg, *ctx, *cols[NCOLS];
    Py_buffer view;
    Py_ssize_t pos, stop, base;
    unsigned long long generation;
    long long max_frame, last, lsn_min, lsn_max;
    int with_body, want_msg, want_ack, want_dlv;
    PyObject *names, *joined, *kind_names;
    if (!PyArg_ParseTuple(args, "O!y*nnKLOnLO!", &PyList_Type, &collist, &view, &pos, &stop,
                          &generation, &max_frame, &seg, &base, &last, &PyTuple_Type, &ctx))
        return NULL;
    int bad = PyList_GET_SIZE(collist) != NCOLS;
    for (int k = 0; !bad && k < NCOLS; k++) {
        cols[k] = PyList_GET_ITEM(collist, k);
        bad = !PyList_CheckExact(cols[k]) || PyList_GET_SIZE(cols[k]) != PyList_GET_SIZE(cols[0]);
    }
    if (bad || !PyArg_ParseTuple(ctx, "O!O!O!ppppLL", &PyDict_Type, &names, &PyDict_Type, &joined,
                                 &PyTuple_Type, &kind_names, &with_body, &want_msg, &want_ack,
                                 &want_dlv, &lsn_min, &lsn_max) ||
        PyTuple_GET_SIZE(kind_names) != 256) {
        PyBuffer_Release(&view);
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "bad scan columns or context");
        return NULL;
    }
    Ctx c = {cols, seg, names, joined, kind_names, with_body, want_msg, want_ack, want_dlv, NULL};
    const uint8_t *buf = view.buf;
    Py_ssize_t n = view.len;
    int status = 0;
    while (pos < stop) {
        if (n - pos < 4) { status = 2; break; }
        uint32_t flen;
        memcpy(&flen, buf + pos, 4);
        if (flen == 0) {
            Py_ssize_t z = pos;
            while (z < n && buf[z] == 0) z++;
            status = z < n ? 2 : 3;
            break;
        }
        if (flen < FRAME_OVERHEAD || (long long)flen > max_frame || n - pos < (Py_ssize_t)flen) {
            status = 2; break;
        }
        const uint8_t *h = buf + pos;
        uint8_t kind = h[4], flags = h[5];
        uint16_t res; uint64_t lsn, gen; uint32_t crc;
        memcpy(&res, h + 6, 2); memcpy(&lsn, h + 8, 8); memcpy(&gen, h + 16, 8);
        memcpy(&crc, h + flen - 4, 4);
        if (kind == 0 || flags || res || gen != generation || (long long)lsn <= last ||
            lsn > (uint64_t)INT64_MAX || crc32c(h, flen - 4) != crc) {
            status = 2; break;
        }
        if ((lsn_min >= 0 && (long long)lsn < lsn_min) || (lsn_max >= 0 && (long long)lsn > lsn_max)) {
            last = (long long)lsn; pos += flen; continue;
        }
        int wanted = kind == K_MESSAGE ? want_msg : kind == K_ACK ? want_ack :
                     kind == K_DELIVERY ? want_dlv : kind == K_TX ? 1 : -1;
        if (wanted == 0) { last = (long long)lsn; pos += flen; continue; }
        if (wanted < 0) { status = 1; break; }
        Py_ssize_t before = PyList_GET_SIZE(cols[0]);
        PyObject *o_off = PyLong_FromSsize_t(base + pos), *o_lsn = PyLong_FromUnsignedLongLong(lsn);
        PyObject *o_flen = PyLong_FromUnsignedLong(flen);
        c.flen = o_flen;
        int rc = -1;
        if (o_off != NULL && o_lsn != NULL && o_flen != NULL) {
            Rd r = {h + FRAME_HEAD, h + flen - 4};
            if (kind == K_MESSAGE) rc = message(&c, &r, o_off, o_lsn, Py_None);
            else if (kind == K_TX) rc = transaction(&c, &r, o_off, o_lsn);
            else rc = ack_or_delivery(&c, &r, o_off, o_lsn, Py_None, kind);
            if (rc == 0 && r.p != r.end) rc = 1;  /* trailing bytes: Python reports them */
        }
        Py_XDECREF(o_off); Py_XDECREF(o_lsn); Py_XDECREF(o_flen);
        c.flen = NULL;
        if (rc != 0) {
            if (cut(cols, before) < 0 || rc < 0) {
                PyBuffer_Release(&view);
                return NULL;
            }
            status = 1;
            break;
        }
        last = (long long)lsn;
        pos += flen;
    }
    PyBuffer_Release(&view);
    return Py_BuildValue("niL", pos, status, last);
}

/* kind_offsets(buf, pos, max_frame, kind) -> (pos, status, offsets): the header walk of
 * tools.spark.columns.queue_names_in: offsets of the CRC-valid frames of one kind; status 0 at
 * the end of the data, 2 where the walk cannot go on (Python's tolerant scanner takes over). */
static PyObject *kind_offsets(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t pos;
    long long max_frame;
    int want;
    if (!PyArg_ParseTuple(args, "y*nLi", &view, &pos, &max_frame, &want)) return NULL;
    const uint8_t *buf = view.buf;
    Py_ssize_t n = view.len;
    int status = 0;
    PyObject *out = PyList_New(0);
    if (out == NULL) { PyBuffer_Release(&view); return NULL; }
    while (n - pos >= 32) {
        uint32_t flen, crc;
        memcpy(&flen, buf + pos, 4);
        if (flen == 0) break;
        if (flen < FRAME_OVERHEAD || (long long)flen > max_frame || pos + (Py_ssize_t)flen > n) {
            status = 2; break;
        }
        if (buf[pos + 4] == want) {
            memcpy(&crc, buf + pos + flen - 4, 4);
            if (crc32c(buf + pos, flen - 4) != crc) { status = 2; break; }
            PyObject *o = PyLong_FromSsize_t(pos);
            if (o == NULL || PyList_Append(out, o) < 0) {
                Py_XDECREF(o); Py_DECREF(out); PyBuffer_Release(&view); return NULL;
            }
            Py_DECREF(o);
        }
        pos += flen;
    }
    PyBuffer_Release(&view);
    return Py_BuildValue("niN", pos, status, out);
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS, "Append the entry rows of the frames in [pos, stop) to 18 column lists; see the module source."},
    {"kind_offsets", kind_offsets, METH_VARARGS, "Offsets of the CRC-valid frames of one kind."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_scan",
                                    "Compiled fast path of the journal entry scan.", -1, methods};

PyMODINIT_FUNC PyInit__scan(void) {
    crc_init();
    return PyModule_Create(&module);
}
