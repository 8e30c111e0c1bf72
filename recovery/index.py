"""Index stores: where the live index's tables are committed. ``LmdbIndex`` on disk,
``MemoryIndex`` for tests and offline replays.

The index is a cache of the journal (ZODB FileStorage's model) and the live queue state
(issue 12): ``commit`` applies a batch of changes in one transaction, synced once per batch
(never per operation: the journal is what is fsynced per operation); ``recovery.checkpoint``
decides what goes in a batch and checks what is read back. A missing, stale or damaged index
is rebuilt from the journal alone. Before LMDB maps an existing file, ``recovery.lmdbcheck``
checks its meta pages against its size and has a child process read every page: a damaged file
is never mapped (LMDB would crash the process on it) but removed and rebuilt, and
``discarded`` says why.
LMDB does its own file I/O through mmap, so it cannot sit behind the journal's file-system seam;
under a ``SimulatedFileSystem`` the store uses ``MemoryIndex``, whose ``crash()`` keeps the last
commit or nothing, which is what a power cut can leave of a cache.
"""

from __future__ import annotations

import os
import shutil
from typing import Dict, List, Optional, Tuple

from .errors import IndexInvalidError
from .indexstore import TABLES, Changes, IndexStore, MemoryIndex, Row
from .lmdbcheck import DATA_FILE, LEGACY_FILES, precheck

MAP_SIZE = 1 << 36  # 64 GiB of address space; the file grows only as used
RELEASE_AFTER = 2048  # entries changed by one commit above which LMDB's page cache is released
UNMAP_AFTER_READS = 4096  # reads after which the index pages mapped in are dropped from RSS
MADV_DONTNEED = 4  # Linux


def _load_madvise():  # type: ignore[no-untyped-def]
    try:
        import ctypes
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        return libc.madvise
    except (OSError, AttributeError):  # not glibc: mapped pages stay until the kernel drops them
        return None


_MADVISE = _load_madvise()


def mapped_ranges(path: str) -> List[Tuple[int, int]]:
    """The address ranges at which this process maps the file ``path`` shared
    (``/proc/self/maps``): the mappings whose path is exactly that file's, never another
    file whose path merely ends the same way (another store at ``/x/tmp/s`` when this one is
    ``/tmp/s``), and never the memory between two mappings (``MADV_DONTNEED`` there would
    zero the process's heap)."""
    real = os.path.realpath(path)
    out: List[Tuple[int, int]] = []
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                fields = line.rstrip("\n").split(None, 5)
                if len(fields) < 6 or fields[5] != real or "s" not in fields[1]:
                    continue
                lo, hi = (int(x, 16) for x in fields[0].split("-"))
                out.append((lo, hi))
    except (OSError, ValueError):
        return []
    return out


DAMAGED_FILE = "damaged"  # written when damage is found at run time; the next open rebuilds


class LmdbIndex(IndexStore):
    """The LMDB index in ``directory`` (created 0700, files 0600).

    Args:
        directory: the index directory.
        read_only: open without locking or writing anything (offline inspection).
    """

    def __init__(self, directory: str, read_only: bool = False) -> None:
        import lmdb

        self._lmdb = lmdb
        self.directory = directory
        self.read_only = read_only
        self._env = None
        self._reads = 0
        self._dbs: Dict[str, object] = {}
        self._rtxn = None
        if not read_only:
            os.makedirs(directory, mode=0o700, exist_ok=True)
        marker = os.path.join(directory, DAMAGED_FILE)
        if os.path.exists(marker):
            with open(marker, "r", encoding="utf-8", errors="replace") as f:
                self.discarded = f"found while the store was open: {f.read(500).strip()}"
        elif os.path.exists(os.path.join(directory, DATA_FILE)):
            try:
                self.discarded = precheck(directory) or ""
            except OSError as exc:
                self.discarded = f"the index file cannot be read: {exc}"
            if not self.discarded:
                try:
                    self._open()
                    return
                except IndexInvalidError as exc:
                    self.discarded = exc.reason
        if not read_only:  # a new index, or a damaged one never mapped: rebuilt from the journal
            self._wipe()
            self._open()

    def _wipe(self) -> None:
        for name in (DATA_FILE, "lock.mdb", DAMAGED_FILE) + LEGACY_FILES:
            try:
                os.unlink(os.path.join(self.directory, name))
            except FileNotFoundError:
                pass

    def _open(self) -> None:
        lmdb = self._lmdb
        self._map: Optional[List[Tuple[int, int]]] = None
        try:
            self._env = lmdb.open(self.directory, map_size=MAP_SIZE, max_dbs=len(TABLES) + 1,
                                  subdir=True, readonly=self.read_only, lock=not self.read_only,
                                  mode=0o600, sync=True, metasync=True, readahead=False)
            if self.read_only:  # handles opened in a read transaction die with it
                for name in TABLES:
                    try:
                        self._dbs[name] = self._env.open_db(name.encode(), create=False)
                    except lmdb.NotFoundError:
                        pass  # an index without that table: it reads empty
            else:
                with self._env.begin(write=True) as txn:
                    for name in TABLES:
                        self._dbs[name] = self._env.open_db(name.encode(), txn=txn)
        except lmdb.Error as exc:
            raise IndexInvalidError(f"LMDB cannot open the index: {exc}") from exc

    def _txn(self):  # type: ignore[no-untyped-def]
        if self._rtxn is None:
            self._rtxn = self._env.begin(buffers=False)
        return self._rtxn

    def _end_read(self) -> None:
        if self._rtxn is not None:
            self._rtxn.abort()
            self._rtxn = None

    def _read(self) -> None:
        """Count a read; every ``UNMAP_AFTER_READS`` reads, drop the index pages they mapped
        in (see ``_unmap``): random reads between two commits (a drain in due order looks up
        messages all over the ``msg`` table) would otherwise map the whole table into RSS."""
        self._reads += 1
        if self._reads >= UNMAP_AFTER_READS:
            self._reads = 0
            self._unmap()

    def get(self, table: str, key: bytes) -> Optional[bytes]:
        db = self._dbs.get(table)
        if self._env is None or db is None:
            return None
        self._read()
        try:
            return self._txn().get(key, db=db)
        except self._lmdb.Error as exc:
            raise IndexInvalidError(f"LMDB read failed: {exc}") from exc

    def range(self, table: str, start: bytes, stop: Optional[bytes],
              limit: Optional[int] = None) -> List[Row]:
        db = self._dbs.get(table)
        if self._env is None or db is None:
            return []
        out: List[Row] = []
        self._read()
        try:
            cur = self._txn().cursor(db)
            if not cur.set_range(start):
                return out
            for key, value in cur:
                if stop is not None and key >= stop:
                    break
                out.append((key, value))
                if limit is not None and len(out) >= limit:
                    break
        except self._lmdb.Error as exc:
            raise IndexInvalidError(f"LMDB read failed: {exc}") from exc
        return out

    def entries(self, table: str) -> int:
        db = self._dbs.get(table)
        if self._env is None or db is None:
            return 0
        with self._env.begin() as txn:
            return int(txn.stat(db)["entries"])

    def commit(self, changes: Changes) -> None:
        assert self._env is not None and not self.read_only
        lmdb = self._lmdb
        self._end_read()
        try:
            with self._env.begin(write=True) as txn:
                for name, rows in changes.items():
                    db = self._dbs[name]
                    puts = []
                    for key in sorted(rows):
                        value = rows[key]
                        if value is None:
                            txn.delete(key, db=db)
                        else:
                            puts.append((key, value))
                    if puts:  # one call into LMDB for the table's puts, in key order
                        txn.cursor(db).putmulti(puts)
        except lmdb.Error as exc:
            raise IndexInvalidError(f"LMDB write failed: {exc}") from exc
        self._count(changes)
        self._unmap()
        if sum(len(rows) for rows in changes.values()) >= RELEASE_AFTER:
            self._release()

    def _release(self) -> None:
        """Give back the memory of a large write transaction: LMDB keeps every page a write
        transaction dirtied on a free list for later transactions (``mdb_page_free`` puts them on
        ``me_dpages``) until the environment closes, so one commit that touched N random pages
        would hold N * 4 KB of the process's RAM for good (a million scheduled messages coming
        due: hundreds of MB). Closing and opening the environment again costs a few mmap calls
        and no write (issue 13)."""
        self._end_read()
        self._env.close()
        self._env = None
        self._dbs = {}
        self._open()

    def _unmap(self) -> None:
        """Drop this process's mappings of the index pages it touched (``madvise
        MADV_DONTNEED`` on LMDB's read-only shared map: the pages stay in the kernel's page
        cache, a later read maps them again). Without it, every page a commit ever touched
        stays counted in the process's RSS, which with many queues grows with the index
        (about 1 GB at 10M messages over 100 queues) although none of it is the process's own
        memory."""
        if _MADVISE is None:
            return
        if self._map is None:
            self._map = mapped_ranges(os.path.join(self.directory, DATA_FILE))
        for start, end in self._map:
            _MADVISE(start, end - start, MADV_DONTNEED)

    def destroy(self) -> None:
        self.close()
        shutil.rmtree(self.directory, ignore_errors=True)
        if not self.read_only:
            os.makedirs(self.directory, mode=0o700, exist_ok=True)
            self._dbs = {}
            self._open()

    def mark_damaged(self, reason: str) -> None:
        """Write the ``damaged`` marker (synced), so the next writable open rebuilds the index
        from the journal; a read-only index only remembers it."""
        self.discarded = reason
        if self.read_only:
            return
        path = os.path.join(self.directory, DAMAGED_FILE)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                os.write(fd, reason.encode("utf-8", errors="replace"))
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError:
            pass  # without the marker, the next open's checks run as usual

    def close(self) -> None:
        """Close LMDB (safe to call twice)."""
        if self._env is None:
            return
        self._end_read()
        self._env.close()
        self._env = None



__all__ = ["IndexStore", "LmdbIndex", "MemoryIndex"]
