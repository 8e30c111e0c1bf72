"""Index stores: where checkpoints live. ``LmdbIndex`` on disk, ``MemoryIndex`` for tests.

The index is a cache of the journal (ZODB FileStorage's model): a checkpoint is written in one
LMDB transaction, synced once per checkpoint (never per operation: the journal is what is
fsynced), and checked before it is trusted (``recovery.checkpoint.decode``, then the catalogue
against the journal). A missing, stale or damaged index is rebuilt from the journal alone.
Before LMDB maps an existing file, ``recovery.lmdbcheck`` checks its meta pages against its size
and its whole-file checksum: a damaged file is never mapped (LMDB would crash the process on
it) but removed and rebuilt, and ``discarded`` says why.
LMDB does its own file I/O through mmap, so it cannot sit behind the journal's file-system seam;
under a ``SimulatedFileSystem`` the store uses ``MemoryIndex``, whose ``crash()`` keeps the last
checkpoint or none, which is what a power cut can leave of a cache.
"""

from __future__ import annotations

import os
import random
import shutil
from abc import ABC, abstractmethod
from typing import List, Optional, Tuple

from recovery.checkpoint import TABLES, Checkpoint, Tables, decode, encode
from recovery.errors import IndexInvalidError
from recovery.lmdbcheck import CHECKSUM_FILE, DATA_FILE, precheck, write_checksum

MAP_SIZE = 1 << 36  # 64 GiB of address space; the file grows only as used


class IndexStore(ABC):
    """Where checkpoints are kept."""

    @abstractmethod
    def read_tables(self) -> Optional[Tables]:
        """The stored tables, or ``None`` when there is no index.

        Raises:
            IndexInvalidError: the store cannot be read.
        """

    @abstractmethod
    def write_tables(self, tables: Tables) -> None:
        """Replace the stored tables atomically and durably."""

    @abstractmethod
    def destroy(self) -> None:
        """Remove the index entirely (before a rebuild)."""

    def close(self) -> None:
        """Release resources."""

    discarded = ""  # why an existing index was found damaged and not used ("" when it was not)

    def load(self) -> Tuple[Optional[Checkpoint], str]:
        """The stored checkpoint, verified, or ``(None, why not)``; never raises for what the
        stored bytes hold (any decoding failure is a reason to rebuild)."""
        if self.discarded:
            return None, f"index damaged: {self.discarded}"
        try:
            tables = self.read_tables()
            if tables is None:
                return None, "no index"
            return decode({k: v.items() for k, v in tables.items()}), ""
        except IndexInvalidError as exc:
            return None, exc.reason
        except Exception as exc:  # bytes that passed LMDB but not the decoder  # noqa: BLE001
            return None, f"index damaged: {type(exc).__name__}: {exc}"

    def save(self, checkpoint: Checkpoint) -> None:
        """Store ``checkpoint`` (replacing the previous one)."""
        self.write_tables(encode(checkpoint))


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
        if not read_only:
            os.makedirs(directory, mode=0o700, exist_ok=True)
        if os.path.exists(os.path.join(directory, DATA_FILE)):
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
        for name in (DATA_FILE, "lock.mdb", CHECKSUM_FILE):
            try:
                os.unlink(os.path.join(self.directory, name))
            except FileNotFoundError:
                pass

    def _open(self) -> None:
        lmdb = self._lmdb
        try:
            self._env = lmdb.open(self.directory, map_size=MAP_SIZE, max_dbs=len(TABLES) + 1,
                                  subdir=True, readonly=self.read_only, lock=not self.read_only,
                                  mode=0o600, sync=True, metasync=True, readahead=False)
            if not self.read_only:
                with self._env.begin(write=True) as txn:
                    for name in TABLES:
                        self._env.open_db(name.encode(), txn=txn)
        except lmdb.Error as exc:
            raise IndexInvalidError(f"LMDB cannot open the index: {exc}") from exc

    def read_tables(self) -> Optional[Tables]:
        if self._env is None:
            return None
        lmdb = self._lmdb
        try:
            tables: Tables = {}
            with self._env.begin() as txn:
                for name in TABLES:
                    try:
                        db = self._env.open_db(name.encode(), txn=txn, create=False)
                    except lmdb.NotFoundError:
                        return None
                    tables[name] = {bytes(k): bytes(v) for k, v in txn.cursor(db)}
            return tables if tables.get("meta") else None
        except lmdb.Error as exc:
            raise IndexInvalidError(f"LMDB read failed: {exc}") from exc

    def write_tables(self, tables: Tables) -> None:
        assert self._env is not None and not self.read_only
        lmdb = self._lmdb
        try:
            with self._env.begin(write=True) as txn:
                for name in TABLES:
                    db = self._env.open_db(name.encode(), txn=txn)
                    txn.drop(db, delete=False)
                    cur = txn.cursor(db)
                    cur.putmulti(sorted(tables[name].items()), append=True)
        except lmdb.Error as exc:
            raise IndexInvalidError(f"LMDB write failed: {exc}") from exc
        try:
            write_checksum(self.directory)  # what the next open checks before mapping
        except OSError as exc:
            raise IndexInvalidError(f"writing the index checksum failed: {exc}") from exc

    def destroy(self) -> None:
        self.close()
        shutil.rmtree(self.directory, ignore_errors=True)
        if not self.read_only:
            os.makedirs(self.directory, mode=0o700, exist_ok=True)
            self._open()

    def close(self) -> None:
        if self._env is not None:
            self._env.close()
            self._env = None


class MemoryIndex(IndexStore):
    """An index kept in memory, with the history a crash can roll back to (tests)."""

    def __init__(self) -> None:
        self.history: List[Tables] = []
        self.current: Optional[Tables] = None

    def read_tables(self) -> Optional[Tables]:
        return self.current

    def write_tables(self, tables: Tables) -> None:
        self.current = {k: dict(v) for k, v in tables.items()}
        self.history.append(self.current)

    def destroy(self) -> None:
        self.current = None

    def crash(self, rng: random.Random) -> "MemoryIndex":
        """What a power cut may leave: the latest checkpoint (LMDB commits are synced, and the
        reclaim horizon moves only after the commit) or none (a lost or damaged index)."""
        out = MemoryIndex()
        choices: List[Optional[Tables]] = [None, self.current]
        out.current = rng.choice(choices)
        out.history = [t for t in self.history if t is not None]
        return out
