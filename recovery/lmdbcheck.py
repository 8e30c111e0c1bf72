"""Checks of the LMDB index file before LMDB maps it, so a damaged file cannot crash the host.

LMDB trusts its file: a truncated ``data.mdb`` makes reads through the map fault with SIGBUS,
a zeroed page trips an assertion (SIGABRT), and neither can be caught in Python. The index is a
rebuildable cache (ZODB FileStorage's model), so it is checked first and, when it fails, never
mapped but rebuilt from the journal:

1. the two meta pages (LMDB 0.9 layout below): a valid magic and version, and a file at least as
   long as the newest meta page's last page says (truncation);
2. a checksum of the whole file (``data.crc``), written when the index is closed cleanly and
   removed before its next change: any byte changed since, by damage at rest or a write cut
   short, fails the check;
3. when there is no checksum (the store was not closed cleanly: kill -9, power loss), a child
   process reads every entry of every table and checks its CRC (``probe``): if LMDB crashes or
   finds damage there, the host process never maps the file. This costs one pass over the
   index after an unclean shutdown, and nothing after a clean close.

LMDB 0.9 meta page (64-bit; one at offset 0 and one at ``page_size``), the fields read here::

    offset size field
    16     4    mm_magic        0xBEEFC0DE
    20     4    mm_version      1
    40     4    page size       (mm_dbs[FREE_DBI].md_pad)
    136    8    mm_last_pg      last page number in use
    144    8    mm_txnid        the meta page with the higher txnid is the current one

Checksum file ``data.crc`` (24 bytes)::

    0      8    magic           b"MQSIDXC1"
    8      8    size            u64, bytes of data.mdb
    16     4    crc             u32, CRC-32C of data.mdb
    20     4    crc             u32, CRC-32C of bytes 0..20
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from typing import Optional, Tuple

from journal.crc import crc32c

DATA_FILE = "data.mdb"
CHECKSUM_FILE = "data.crc"
LMDB_MAGIC = 0xBEEFC0DE
_META = struct.Struct("<II")
_TAIL = struct.Struct("<QQ")
_SUM = struct.Struct("<8sQI")
SUM_MAGIC = b"MQSIDXC1"
CHUNK = 16 << 20

assert _SUM.size + 4 == 24


def precheck(directory: str) -> Optional[str]:
    """Why the LMDB file in ``directory`` must not be mapped, or ``None`` when it may be.

    Raises:
        OSError: the files cannot be read.
    """
    path = os.path.join(directory, DATA_FILE)
    with open(path, "rb") as f:
        head = f.read(2 * 65536)
        problem = _meta_problem(head, os.fstat(f.fileno()).st_size)
    if problem is not None:
        return problem
    stored = _stored_checksum(directory)
    if stored is None:
        return probe(directory)
    size, value = _file_crc(path)
    if stored[0] != size:
        return f"the index file is {size} bytes, its checksum was taken at {stored[0]}"
    if value != stored[1]:
        return "the index file changed since its last checkpoint (checksum mismatch)"
    return None


PROBE = """
import sys, lmdb
from journal.crc import crc32c
env = lmdb.open(sys.argv[1], readonly=True, lock=False, max_dbs=64, subdir=True)
with env.begin() as txn:
    for name in [bytes(k) for k, _v in txn.cursor()]:
        db = env.open_db(name, txn=txn, create=False)
        for k, v in txn.cursor(db):
            if len(v) < 5 or crc32c(v[:-4], crc32c(k)).to_bytes(4, "little") != v[-4:]:
                sys.exit(3)
"""


def probe(directory: str) -> Optional[str]:
    """Read every entry of the index in a child process (LMDB may crash on a damaged file;
    then only the child dies). ``None`` when every value's CRC checks.

    Raises:
        OSError: the child cannot be started.
    """
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [root] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    out = subprocess.run([sys.executable, "-c", PROBE, directory], env=env,
                         capture_output=True, timeout=3600)
    if out.returncode == 0:
        return None
    if out.returncode < 0:
        return f"reading the index crashed LMDB (signal {-out.returncode}): it is damaged"
    if out.returncode == 3:
        return "an index value fails its CRC: the index is damaged"
    return f"the index cannot be read: {out.stderr.decode(errors='replace')[-300:].strip()}"


def remove_checksum(directory: str) -> None:
    """Drop ``data.crc`` before the index changes (its absence sends the next open through
    ``probe`` unless a clean close writes a new one)."""
    try:
        os.unlink(os.path.join(directory, CHECKSUM_FILE))
    except FileNotFoundError:
        pass


def _file_crc(path: str) -> Tuple[int, int]:
    """(size in bytes, CRC-32C) of the file at ``path``."""
    value = 0
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        while chunk := f.read(CHUNK):
            value = crc32c(chunk, value)
    return size, value


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


def _stored_checksum(directory: str) -> Optional[Tuple[int, int]]:
    try:
        with open(os.path.join(directory, CHECKSUM_FILE), "rb") as f:
            data = f.read(64)
    except FileNotFoundError:
        return None
    if len(data) != 24 or struct.unpack_from("<I", data, 20)[0] != crc32c(data[:20]):
        return None
    magic, size, value = _SUM.unpack_from(data, 0)
    return (size, value) if magic == SUM_MAGIC else None


def write_checksum(directory: str) -> None:
    """Checksum ``data.mdb`` as it is now (after a synced commit) into ``data.crc``: written
    under a temporary name, fsynced, renamed, and the directory fsynced.

    Raises:
        OSError: the old checksum may stay; it then fails the next check (a rebuild).
    """
    size, value = _file_crc(os.path.join(directory, DATA_FILE))
    body = _SUM.pack(SUM_MAGIC, size, value)
    tmp = os.path.join(directory, CHECKSUM_FILE + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, body + struct.pack("<I", crc32c(body)))
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, os.path.join(directory, CHECKSUM_FILE))
    dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
