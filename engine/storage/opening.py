"""Opening a store's directory for a broker: the directory itself, the store lock, the index.

``open_storage`` takes the store lock (``store.lock``, an exclusive ``flock``) before anything
else touches the directory, so a second opener, in this process or another, gets
``DirectoryLockedError`` and never reaches LMDB (which refuses a second open of one environment
in a process with an error of its own). The directory is made 0700, as the journal and index
directories are. Whatever fails releases what was taken: a failed open leaves nothing held.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional

from mqstore.journal import (DirectoryLockedError, FileSystem, JournalIOError, JournalOptions,
                             OsFileSystem)
from mqstore.recovery import (INDEX_DIR, IndexStore, LmdbIndex, MemoryIndex, Progress, Recovered,
                              recover)

STORE_LOCK = "store.lock"


@dataclass
class OpenedStorage:
    """What ``open_storage`` hands over: the recovered store and the lock to release."""

    recovered: Recovered
    lock: Optional[int]
    fs: FileSystem

    def release(self) -> None:
        """Close the journal and the index and drop the store lock (each step always runs)."""
        try:
            self.recovered.journal.close()
        finally:
            try:
                self.recovered.index.close()
            finally:
                unlock(self.fs, self.lock)
                self.lock = None


def open_storage(directory: str, fs: FileSystem, index: Optional[IndexStore],
                 options: JournalOptions, verify: bool, rebuild: bool,
                 progress: Optional[Progress] = None) -> OpenedStorage:
    """Lock ``directory``, open its index (LMDB unless given; in memory under a simulated file
    system) and recover the store (``progress``: as ``recovery.recover``'s).

    Raises:
        DirectoryLockedError: another opener holds the store. JournalIOError: the directory
            cannot be created or locked (a file of that name, no permission). The errors of
            ``recover``.
        Nothing is held after any error.
    """
    lock = None
    if isinstance(fs, OsFileSystem):
        path = os.path.join(directory, STORE_LOCK)
        try:
            os.makedirs(directory, mode=0o700, exist_ok=True)
            os.chmod(directory, 0o700)
            lock = fs.lock(path)
        except BlockingIOError:
            raise DirectoryLockedError(path, fs.lock_holder(path)) from None
        except OSError as exc:  # not a directory, no permission...
            raise JournalIOError(directory, "open the store directory", exc) from exc
    try:
        if index is None:
            index = LmdbIndex(os.path.join(directory, INDEX_DIR)) \
                if isinstance(fs, OsFileSystem) else MemoryIndex()
        try:
            rec = recover(directory, options, fs, index, verify=verify, rebuild=rebuild,
                          progress=progress)
        except BaseException:
            index.close()
            raise
    except BaseException:
        unlock(fs, lock)
        raise
    return OpenedStorage(rec, lock, fs)


def unlock(fs: FileSystem, lock: Optional[int]) -> None:
    """Drop the store lock taken by ``open_storage`` (``None``: nothing to drop)."""
    if lock is not None:
        fs.unlock(lock)
