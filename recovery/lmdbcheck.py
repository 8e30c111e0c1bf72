"""Checks of the LMDB index file before LMDB maps it, so a damaged file cannot crash the host.

LMDB trusts its file: a truncated ``data.mdb`` makes reads through the map fault with SIGBUS,
a zeroed page trips an assertion (SIGABRT), and neither can be caught in Python. The index is a
rebuildable cache (ZODB FileStorage's model), so it is checked first and, when it fails, never
mapped but rebuilt from the journal:

1. the two meta pages (LMDB 0.9 layout below): a valid magic and version, and a file at least as
   long as the newest meta page's last page says (truncation);
2. a child process reads every entry of every table in key order and checks that keys only
   grow and that every value's CRC-32C (over key and body, ``recovery.tables``) matches: if
   an entry was moved, lost under another key or changed, the check fails. The keys of the
   branch pages, by which LMDB routes a lookup, are checked too (each separator above every
   key before it and not above the first key after it; the reference looks every key up): a
   damaged one would hide entries from lookups that an in-order walk still finds. The compiled walker
   (``recovery._lmdbwalk``) does it by reading the file's pages itself, never mapping it, and
   checks the page layout on the way (each page's own number, nodes inside their page, overflow
   pages inside the file, each table's entry count); it costs one pass over the index's pages
   (25x faster than the reference, which reads through LMDB in Python at about 1 µs an entry
   and is used where the walker is not built: if LMDB crashes there, only the child dies).

LMDB 0.9 meta page (64-bit; one at offset 0 and one at ``page_size``), the fields read here::

    offset size field
    16     4    mm_magic        0xBEEFC0DE
    20     4    mm_version      1
    40     4    page size       (mm_dbs[FREE_DBI].md_pad)
    136    8    mm_last_pg      last page number in use
    144    8    mm_txnid        the meta page with the higher txnid is the current one
"""

from __future__ import annotations

import faulthandler
import os
import struct
import subprocess
import sys
from typing import Optional, Tuple

DATA_FILE = "data.mdb"
LEGACY_FILES = ("data.crc",)  # written by earlier versions; removed with the index
LMDB_MAGIC = 0xBEEFC0DE
_META = struct.Struct("<II")
_TAIL = struct.Struct("<QQ")
EXIT_DAMAGED = 3
EXIT_UNSORTED = 4


def precheck(directory: str) -> Optional[str]:
    """Why the LMDB file in ``directory`` must not be mapped, or ``None`` when it may be.

    Raises:
        OSError: the file cannot be read, or the child cannot be started.
    """
    path = os.path.join(directory, DATA_FILE)
    with open(path, "rb") as f:
        head = f.read(2 * 65536)
        problem = _meta_problem(head, os.fstat(f.fileno()).st_size)
    if problem is not None:
        return problem
    problem = _freelist_problem(path)
    if problem is not None:
        return problem
    return probe(directory)


PROBE = """
import sys
from .lmdbcheck import walk_or_verify
code, why = walk_or_verify(sys.argv[1])
sys.stderr.write(why)
sys.exit(code)
"""


def verify(directory: str) -> int:
    """Read every entry of every table of the index in ``directory``: 0 when keys grow and
    every CRC matches, ``EXIT_DAMAGED`` when not, ``EXIT_UNSORTED`` when keys go backwards.
    Meant to run in a child process (LMDB may crash on a damaged file)."""
    import lmdb

    from mqstore.journal.crc import crc32c
    try:
        env = lmdb.open(directory, readonly=True, lock=False, max_dbs=64, subdir=True)
        with env.begin(buffers=True) as txn:
            names = [bytes(k) for k, _v in txn.cursor()]
            for name in names:
                db = env.open_db(name, txn=txn, create=False)
                prev = b""
                for key, value in txn.cursor(db):
                    k = bytes(key)
                    if k <= prev:
                        return EXIT_UNSORTED
                    prev = k
                    if txn.get(k, db=db) is None:  # a lookup goes by the branch pages' keys
                        return EXIT_DAMAGED  # (a damaged one hides what a walk still sees)
                    if len(value) < 5 or crc32c(value[:-4], crc32c(k)) != \
                            int.from_bytes(value[-4:], "little"):
                        return EXIT_DAMAGED
    except lmdb.Error:
        return EXIT_DAMAGED
    return 0


def walk_or_verify(directory: str) -> Tuple[int, str]:
    """``(verify's exit code, reason)``: the compiled walker when it is built, else
    ``verify``."""
    try:
        from ._lmdbwalk import walk
    except ImportError:
        return verify(directory), ""
    code, why = walk(os.path.join(directory, DATA_FILE))
    return int(code), str(why)


def probe(directory: str) -> Optional[str]:
    """Check every entry of the index in a child process (``verify``; LMDB may crash on a
    damaged file: then only the child dies). ``None`` when all is well.

    The child is forked where the platform allows (it runs ``verify`` and exits without
    cleanup), else started as a new interpreter.

    Raises:
        OSError: the child cannot be started.
    """
    if hasattr(os, "fork"):
        rfd, wfd = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: verify, then _exit (no cleanup of the parent's state)
            code = EXIT_DAMAGED
            try:
                os.close(rfd)
                faulthandler.disable()  # a crash here is the expected verdict, not a report
                code, why = walk_or_verify(directory)
                os.write(wfd, why.encode("utf-8", errors="replace")[:500])
            finally:
                os._exit(code)
        os.close(wfd)
        with os.fdopen(rfd, "rb") as reader:
            detail = reader.read().decode("utf-8", errors="replace")
        _pid, status = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(status)
    else:  # pragma: no cover - platforms without fork
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        out = subprocess.run([sys.executable, "-c", PROBE, directory], capture_output=True,
                             timeout=3600, cwd=root)
        code, detail = out.returncode, out.stderr.decode(errors="replace")[-300:].strip()
    if code == 0:
        return None
    if code < 0:
        return f"reading the index crashed LMDB (signal {-code}): it is damaged"
    if code == EXIT_DAMAGED:
        return f"the index file is damaged: {detail}" if detail else \
            "an index entry fails its CRC or LMDB finds the file damaged"
    if code == EXIT_UNSORTED:
        return f"index keys are out of order (a damaged page): {detail}" if detail else \
            "index keys are out of order (a damaged page)"
    return f"the index cannot be read: {detail or f'exit code {code}'}"


P_BRANCH, P_LEAF, P_OVERFLOW = 0x01, 0x02, 0x04
F_BIGDATA = 0x01
_PAGE = struct.Struct("<QHHHH")  # pgno, pad, flags, lower, upper
_NODE = struct.Struct("<HHHH")   # lo, hi, flags, key size


def _freelist_problem(path: str) -> Optional[str]:
    """Walk LMDB's free-page list (which LMDB reads when it writes, and which no table scan
    reaches): every page must carry its own number and a sane layout, every free page number
    must be a page of the file. Pure parsing with bounds checks: it cannot crash."""
    with open(path, "rb") as f:
        return _walk_freelist(f.fileno(), os.fstat(f.fileno()).st_size)


def _walk_freelist(fd: int, file_size: int) -> Optional[str]:
    data = os.pread(fd, 2 * 65536, 0)
    psize = _page_size(data)
    if psize is None:
        return "the index file has no valid LMDB meta page"
    metas = [o for o in (0, psize) if len(data) >= o + 152 and
             _META.unpack_from(data, o + 16) == (LMDB_MAGIC, 1)]
    if not metas:
        return "the index file has no valid LMDB meta page"
    meta = max(metas, key=lambda o: _TAIL.unpack_from(data, o + 136)[1])
    last_pg = _TAIL.unpack_from(data, meta + 136)[0]
    root = struct.unpack_from("<Q", data, meta + 16 + 24 + 40)[0]
    if root == 0xFFFFFFFFFFFFFFFF:
        return None  # no free pages
    todo, seen = [root], 0
    while todo:
        pgno = todo.pop()
        seen += 1
        if pgno < 2 or pgno > last_pg or seen > last_pg + 1:
            return f"the index's free-page list points at page {pgno}: it is damaged"
        data, base = os.pread(fd, psize, pgno * psize), 0
        if len(data) < psize:
            return "the index's free-page list runs past the file: it is damaged"
        own, _pad, flags, lower, upper = _PAGE.unpack_from(data, base)
        if own != pgno or not flags & (P_BRANCH | P_LEAF) or \
                not 16 <= lower <= upper <= psize:
            return f"page {pgno} of the index's free-page list is damaged"
        for i in range((lower - 16) // 2):
            ptr = struct.unpack_from("<H", data, base + 16 + 2 * i)[0]
            if not upper <= ptr <= psize - 8:
                return f"page {pgno} of the index's free-page list is damaged"
            lo, hi, nflags, ksize = _NODE.unpack_from(data, base + ptr)
            if flags & P_BRANCH:
                todo.append(lo | hi << 16 | nflags << 32)
                continue
            start = base + ptr + 8 + ksize
            size = lo | hi << 16
            if nflags & F_BIGDATA:
                if start + 8 > base + psize:
                    return f"page {pgno} of the index's free-page list is damaged"
                over = struct.unpack_from("<Q", data, start)[0]
                head = os.pread(fd, 16, over * psize)
                if over < 2 or over > last_pg or len(head) < 16 or \
                        not _PAGE.unpack_from(head, 0)[2] & P_OVERFLOW:
                    return f"the index's free-page list points at page {over}: it is damaged"
                if over * psize + 16 + size > file_size:
                    return "the index's free-page list runs past the file: it is damaged"
                ids, start = os.pread(fd, size, over * psize + 16), 0
            elif start + size > base + psize:
                return f"page {pgno} of the index's free-page list is damaged"
            else:
                ids, start = data[start:start + size], 0
            if size < 8:
                return f"the index's free-page list on page {pgno} is damaged"
            count = struct.unpack_from("<Q", ids, 0)[0]
            if count * 8 + 8 > size or any(
                    not 2 <= p <= last_pg
                    for p in struct.unpack_from(f"<{count}Q", ids, 8)):
                return f"the index's free-page list on page {pgno} is damaged"
    return None


def _meta_problem(head: bytes, size: int) -> Optional[str]:
    best = None
    for offset in (0, _page_size(head)):
        if offset is None or len(head) < offset + 152:
            continue
        magic, version = _META.unpack_from(head, offset + 16)
        if magic != LMDB_MAGIC or version != 1:
            continue
        last_pg, txnid = _TAIL.unpack_from(head, offset + 136)
        if best is None or txnid > best[1]:
            best = (last_pg, txnid)
    psize = _page_size(head)
    if best is None or psize is None:
        return "the index file has no valid LMDB meta page"
    if size < (best[0] + 1) * psize:
        return (f"the index file is {size} bytes but its meta page needs "
                f"{(best[0] + 1) * psize}: it was truncated")
    return None


def _page_size(head: bytes) -> Optional[int]:
    if len(head) < 44:
        return None
    psize = struct.unpack_from("<I", head, 40)[0]
    return psize if psize in (4096, 8192, 16384, 32768, 65536) else None
