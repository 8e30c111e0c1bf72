/* recovery._lmdbwalk: the index check of recovery/lmdbcheck.py (``verify``) in C.
 *
 * It reads the LMDB file with pread (never mapping it), walks every named database's B-tree
 * from the newest meta page, in key order, and checks what the Python reference checks: keys
 * strictly grow, and every value ends with the CRC-32C of key + body (recovery/tables.py). On
 * the way it checks the page layout: each page carries its own number and a sane header, every
 * node lies inside its page, overflow pages lie inside the file, no page is visited twice, and
 * each database holds as many entries as its record says. Any doubt is "damaged": the index is
 * a cache, rebuilt from the journal.
 *
 * walk(path) -> (code, reason): code 0 all is well, 3 damaged, 4 keys out of order.
 * LMDB 0.9, 64-bit layout (the meta page fields are described in recovery/lmdbcheck.py). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "crc32c.h"

#define OK 0
#define DAMAGED 3
#define UNSORTED 4
#define P_BRANCH 0x01
#define P_LEAF 0x02
#define P_OVERFLOW 0x04
#define P_LEAF2 0x20
#define F_BIGDATA 0x01
#define F_SUBDATA 0x02
#define F_DUPDATA 0x04
#define P_INVALID UINT64_MAX
#define MAX_DEPTH 32
#define MAX_DBS 64
#define DB_SIZE 48

typedef struct {
    int fd;
    uint32_t psize;
    uint64_t last_pg;
    uint64_t file_size;
    uint64_t visited;
    uint8_t *pages;  /* MAX_DEPTH page buffers */
    uint8_t *scratch;
    size_t scratch_len;
    char why[200];
} Walk;

typedef struct {
    uint64_t pgno;
    int next;
} Frame;

static uint16_t u16(const uint8_t *p) { uint16_t v; memcpy(&v, p, 2); return v; }
static uint32_t u32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static uint64_t u64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }

static int fail(Walk *w, int code, const char *fmt, unsigned long long a) {  /* one number */
    snprintf(w->why, sizeof w->why, fmt, a);
    return code;
}

static int fail0(Walk *w, int code, const char *msg) {
    snprintf(w->why, sizeof w->why, "%s", msg);
    return code;
}

static int read_at(Walk *w, uint8_t *dst, size_t n, uint64_t off) {
    size_t done = 0;
    while (done < n) {
        ssize_t got = pread(w->fd, dst + done, n - done, (off_t)(off + done));
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) return -1;
        done += (size_t)got;
    }
    return 0;
}

static int scratch(Walk *w, size_t n) {
    if (n <= w->scratch_len) return 0;
    uint8_t *p = realloc(w->scratch, n);
    if (p == NULL) return -1;
    w->scratch = p;
    w->scratch_len = n;
    return 0;
}

/* Read page ``pgno`` into ``buf`` and check its header; returns its flags, or -1 (why set). */
static int load_page(Walk *w, uint64_t pgno, uint8_t *buf) {
    if (pgno < 2 || pgno > w->last_pg)
        return fail(w, -1, "a tree points at page %llu, outside the file's pages", pgno);
    if (++w->visited > w->last_pg + 1)
        return fail(w, -1, "the trees visit more pages than the file has (at page %llu)", pgno);
    if (read_at(w, buf, w->psize, pgno * (uint64_t)w->psize) != 0)
        return fail(w, -1, "page %llu cannot be read", pgno);
    uint16_t flags = u16(buf + 10), lower = u16(buf + 12), upper = u16(buf + 14);
    if (u64(buf) != pgno || !(flags & (P_BRANCH | P_LEAF)) || (flags & (P_LEAF2 | P_OVERFLOW)) ||
        lower < 16 || lower > upper || upper > w->psize || (lower - 16) % 2)
        return fail(w, -1, "page %llu has a damaged header", pgno);
    return flags;
}

/* A leaf node's value: inline, or on overflow pages (copied to scratch after the key). */
static int node_value(Walk *w, const uint8_t *page, uint64_t pgno, uint16_t ptr,
                      const uint8_t **key, size_t *klen, const uint8_t **val, size_t *vlen,
                      uint16_t *nflags) {
    if (ptr < u16(page + 14) || (uint32_t)ptr + 8 > w->psize)
        return fail(w, DAMAGED, "page %llu has a node outside it", pgno);
    const uint8_t *node = page + ptr;
    size_t dsize = (size_t)u16(node) | ((size_t)u16(node + 2) << 16);
    *nflags = u16(node + 4);
    *klen = u16(node + 6);
    if ((uint32_t)ptr + 8 + *klen > w->psize)
        return fail(w, DAMAGED, "page %llu has a key outside it", pgno);
    *key = node + 8;
    if (!(*nflags & F_BIGDATA)) {
        if ((uint64_t)ptr + 8 + *klen + dsize > w->psize)
            return fail(w, DAMAGED, "page %llu has a value outside it", pgno);
        *val = node + 8 + *klen;
        *vlen = dsize;
        return OK;
    }
    if ((uint32_t)ptr + 8 + *klen + 8 > w->psize)
        return fail(w, DAMAGED, "page %llu has a value outside it", pgno);
    uint64_t over = u64(node + 8 + *klen);
    uint64_t npages = (16 + (uint64_t)dsize + w->psize - 1) / w->psize;
    if (over < 2 || over > w->last_pg || over + npages - 1 > w->last_pg ||
        (over + npages) * (uint64_t)w->psize > w->file_size)
        return fail(w, DAMAGED, "an overflow value at page %llu lies outside the file", over);
    uint8_t head[16];
    if (read_at(w, head, 16, over * (uint64_t)w->psize) != 0 || u64(head) != over ||
        !(u16(head + 10) & P_OVERFLOW))
        return fail(w, DAMAGED, "overflow page %llu is damaged", over);
    if (scratch(w, *klen + dsize) != 0)
        return fail(w, DAMAGED, "no memory for %llu bytes", dsize);
    memcpy(w->scratch, *key, *klen);
    if (read_at(w, w->scratch + *klen, dsize, over * (uint64_t)w->psize + 16) != 0)
        return fail(w, DAMAGED, "overflow page %llu cannot be read", over);
    *key = w->scratch;
    *val = w->scratch + *klen;
    *vlen = dsize;
    w->visited += npages;
    return OK;
}

typedef struct { uint8_t name[512]; size_t nlen; uint64_t root; uint64_t entries; } Db;

/* Walk one tree in key order. main: collect the named databases into dbs; else check the
 * entries (order, CRC) and count them into *entries. */
static int walk_tree(Walk *w, uint64_t root, int main, Db *dbs, int *ndbs, uint64_t *entries) {
    Frame stack[MAX_DEPTH];
    int depth = 0;
    uint8_t prev[512];
    size_t prev_len = 0;
    int have_prev = 0;
    /* the separator of the branch node last descended through (node 1 on of a branch page):
     * every key before it must sort below it, the next key read must not (LMDB routes a
     * lookup by these keys alone, so a damaged one hides entries an in-order walk still
     * finds) */
    uint8_t sep[512];
    size_t sep_len = 0;
    int have_sep = 0;
    if (root == P_INVALID) return OK;
    stack[0].pgno = root;
    stack[0].next = 0;
    if (load_page(w, root, w->pages) < 0) return DAMAGED;
    while (depth >= 0) {
        uint8_t *page = w->pages + (size_t)depth * w->psize;
        Frame *f = &stack[depth];
        int n = (u16(page + 12) - 16) / 2;
        uint16_t flags = u16(page + 10);
        if (f->next >= n) { depth--; continue; }
        uint16_t ptr = u16(page + 16 + 2 * f->next);
        f->next++;
        if (flags & P_BRANCH) {
            if (ptr < u16(page + 14) || (uint32_t)ptr + 8 > w->psize)
                return fail(w, DAMAGED, "page %llu has a node outside it", f->pgno);
            const uint8_t *node = page + ptr;
            uint64_t child = (uint64_t)u16(node) | ((uint64_t)u16(node + 2) << 16) |
                             ((uint64_t)u16(node + 4) << 32);
            if (f->next > 1) {  /* node 0's key is implicit: the others separate children */
                size_t slen = u16(node + 6);
                if (slen > sizeof sep || (uint32_t)ptr + 8 + slen > w->psize)
                    return fail(w, DAMAGED, "page %llu has a separator key outside it",
                                f->pgno);
                if (have_prev) {
                    size_t m = slen < prev_len ? slen : prev_len;
                    int c = memcmp(node + 8, prev, m);
                    if (c < 0 || (c == 0 && slen <= prev_len))
                        return fail(w, DAMAGED, "a separator key on page %llu is not above "
                                    "the keys before it", f->pgno);
                }
                memcpy(sep, node + 8, slen);
                sep_len = slen;
                have_sep = 1;
            }
            if (depth + 1 >= MAX_DEPTH)
                return fail(w, DAMAGED, "a tree is deeper than %llu pages", MAX_DEPTH);
            uint8_t *buf = w->pages + (size_t)(depth + 1) * w->psize;
            if (load_page(w, child, buf) < 0) return DAMAGED;
            depth++;
            stack[depth].pgno = child;
            stack[depth].next = 0;
            continue;
        }
        const uint8_t *key, *val;
        size_t klen, vlen;
        uint16_t nflags;
        int rc = node_value(w, page, f->pgno, ptr, &key, &klen, &val, &vlen, &nflags);
        if (rc != OK) return rc;
        if (klen > sizeof prev)
            return fail(w, DAMAGED, "page %llu has a key longer than LMDB allows", f->pgno);
        if (have_prev) {
            size_t m = klen < prev_len ? klen : prev_len;
            int c = memcmp(key, prev, m);
            if (c < 0 || (c == 0 && klen <= prev_len))
                return fail(w, UNSORTED, "keys go backwards on page %llu", f->pgno);
        }
        if (have_sep) {  /* the first key after a separator: not below it */
            size_t m = klen < sep_len ? klen : sep_len;
            int c = memcmp(key, sep, m);
            if (c < 0 || (c == 0 && klen < sep_len))
                return fail(w, DAMAGED, "a key on page %llu sorts below the separator that "
                            "routes lookups to it", f->pgno);
            have_sep = 0;
        }
        memcpy(prev, key, klen);
        prev_len = klen;
        have_prev = 1;
        if (main) {
            if (!(nflags & F_SUBDATA) || vlen != DB_SIZE || *ndbs >= MAX_DBS)
                return fail(w, DAMAGED, "the database list on page %llu is damaged", f->pgno);
            Db *d = &dbs[(*ndbs)++];
            memcpy(d->name, key, klen);
            d->nlen = klen;
            d->entries = u64(val + 32);
            d->root = u64(val + 40);
            continue;
        }
        if (nflags & (F_SUBDATA | F_DUPDATA) || vlen < 5)
            return fail(w, DAMAGED, "an entry on page %llu has an unexpected shape", f->pgno);
        if (scratch(w, klen + vlen) != 0)
            return fail(w, DAMAGED, "no memory for %llu bytes", vlen);
        if (val != w->scratch + klen) {  /* inline: join key and body for one CRC */
            memmove(w->scratch, key, klen);
            memcpy(w->scratch + klen, val, vlen);
        }
        if (crc32c(w->scratch, klen + vlen - 4) != u32(w->scratch + klen + vlen - 4))
            return fail(w, DAMAGED, "an entry on page %llu fails its CRC", f->pgno);
        (*entries)++;
    }
    return OK;
}

static int run(Walk *w, const char *path) {
    struct stat st;
    w->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (w->fd < 0 || fstat(w->fd, &st) != 0)
        return fail(w, DAMAGED, "the index cannot be opened (errno %llu)", (unsigned)errno);
    w->file_size = (uint64_t)st.st_size;
    uint8_t head[2 * 65536];
    size_t have = w->file_size < sizeof head ? (size_t)w->file_size : sizeof head;
    if (have < 152 || read_at(w, head, have, 0) != 0)
        return fail(w, DAMAGED, "the index file is too short (%llu bytes)", w->file_size);
    uint32_t psize = u32(head + 40);
    if (psize != 4096 && psize != 8192 && psize != 16384 && psize != 32768 && psize != 65536)
        return fail(w, DAMAGED, "the index file has no valid page size (%llu)", psize);
    w->psize = psize;
    const uint8_t *best = NULL;
    for (int i = 0; i < 2; i++) {
        size_t off = (size_t)i * psize;
        if (off + 152 > have) continue;
        const uint8_t *m = head + off;
        if (u32(m + 16) != 0xBEEFC0DEu || u32(m + 20) != 1) continue;
        if (best == NULL || u64(m + 144) > u64(best + 144)) best = m;
    }
    if (best == NULL) return fail0(w, DAMAGED, "the index file has no valid meta page");
    w->last_pg = u64(best + 136);
    if ((w->last_pg + 1) * (uint64_t)psize > w->file_size)
        return fail(w, DAMAGED, "the index file is shorter than its last page %llu", w->last_pg);
    w->pages = malloc((size_t)MAX_DEPTH * psize);
    if (w->pages == NULL) return fail0(w, DAMAGED, "no memory for the page buffers");
    Db dbs[MAX_DBS];
    int ndbs = 0;
    uint64_t ignored = 0;
    int rc = walk_tree(w, u64(best + 128), 1, dbs, &ndbs, &ignored);
    if (rc != OK) return rc;
    for (int i = 0; i < ndbs; i++) {
        uint64_t entries = 0;
        rc = walk_tree(w, dbs[i].root, 0, NULL, NULL, &entries);
        if (rc != OK) return rc;
        if (entries != dbs[i].entries)
            return fail(w, DAMAGED, "a table holds %llu entries, not what its record says",
                        entries);
    }
    return OK;
}

static PyObject *walk(PyObject *self, PyObject *args) {
    const char *path;
    if (!PyArg_ParseTuple(args, "s", &path)) return NULL;
    Walk w;
    memset(&w, 0, sizeof w);
    w.fd = -1;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = run(&w, path);
    Py_END_ALLOW_THREADS
    if (w.fd >= 0) close(w.fd);
    free(w.pages);
    free(w.scratch);
    return Py_BuildValue("(is)", rc, rc == OK ? "" : w.why);
}

static PyMethodDef methods[] = {
    {"walk", walk, METH_VARARGS, "walk(path) -> (code, reason): check an LMDB index file."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_lmdbwalk", NULL, -1, methods};

PyMODINIT_FUNC PyInit__lmdbwalk(void) {
    crc_init();
    return PyModule_Create(&module);
}
