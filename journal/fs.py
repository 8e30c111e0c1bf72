"""The file-system seam: every file operation of the journal and the index goes through here.

``FileSystem`` is the interface; ``OsFileSystem`` does real I/O; ``journal.simfs`` has
``SimulatedFileSystem`` that records operations, produces power-loss crash states and injects
EIO/ENOSPC. Files are addressed by path and opened handles are plain ints. Operations raise
``OSError`` as the OS would; the journal wraps them into ``JournalIOError`` at its boundary.
Files are created 0600 and directories 0700 (the store holds users' messages).
"""

from __future__ import annotations

import errno
import fcntl
import os
from abc import ABC, abstractmethod
from typing import List, Optional


class FileSystem(ABC):
    """The operations the storage layers may perform on files (all paths absolute or relative
    to the process working directory; handles are ints owned by the file system)."""

    @abstractmethod
    def open(self, path: str, create: bool = False, read_only: bool = False) -> int:
        """Open ``path`` for reading and (unless ``read_only``) writing; create it (empty, 0600)
        when ``create`` and it is missing. Raises ``FileNotFoundError`` when missing."""

    @abstractmethod
    def close(self, handle: int) -> None:
        """Close a handle."""

    @abstractmethod
    def pwrite(self, handle: int, data: bytes, offset: int) -> None:
        """Write all of ``data`` at byte ``offset`` (extends the file when past its end)."""

    @abstractmethod
    def pread(self, handle: int, size: int, offset: int) -> bytes:
        """Read up to ``size`` bytes at ``offset``; shorter at end of file."""

    @abstractmethod
    def fdatasync(self, handle: int) -> None:
        """Make the file's data durable (and its size, when it changed)."""

    @abstractmethod
    def fsync(self, handle: int) -> None:
        """Make the file's data and metadata durable."""

    def start_writeback(self, handle: int, offset: int, length: int) -> None:
        """Ask the OS to start writing ``length`` bytes at ``offset`` back to the disk without
        waiting (a hint: nothing becomes durable before an fdatasync; a later fdatasync then
        finds less to write). The default does nothing."""

    @abstractmethod
    def size(self, handle: int) -> int:
        """Current size of the open file in bytes."""

    @abstractmethod
    def truncate(self, handle: int, size: int) -> None:
        """Set the file's size to ``size`` bytes."""

    @abstractmethod
    def rename(self, src: str, dst: str) -> None:
        """Atomically rename ``src`` to ``dst``, replacing ``dst``; durable after ``fsync_dir``."""

    @abstractmethod
    def unlink(self, path: str) -> None:
        """Remove a file name; durable after ``fsync_dir``."""

    @abstractmethod
    def listdir(self, path: str) -> List[str]:
        """Names in a directory, sorted."""

    @abstractmethod
    def exists(self, path: str) -> bool:
        """Whether ``path`` names a file or directory."""

    @abstractmethod
    def mkdir(self, path: str) -> None:
        """Create a directory (0700) and its missing parents; no error when it exists."""

    @abstractmethod
    def fsync_dir(self, path: str) -> None:
        """Make the directory's entries (creates, renames, unlinks) durable."""

    @abstractmethod
    def lock(self, path: str, shared: bool = False) -> int:
        """Take a non-blocking flock on ``path`` (created when missing); return a handle to
        ``unlock``. Raises ``BlockingIOError`` when another holder conflicts."""

    @abstractmethod
    def unlock(self, handle: int) -> None:
        """Release a lock taken with ``lock``."""

    def lock_holder(self, path: str) -> Optional[int]:
        """The process id holding a lock on ``path``, or ``None`` when unknown (for the
        error a blocked ``lock`` leads to)."""
        return None

    def read_file(self, path: str) -> bytes:
        """The whole content of a file."""
        h = self.open(path, read_only=True)
        try:
            return self.pread(h, self.size(h), 0)
        finally:
            self.close(h)


class OsFileSystem(FileSystem):
    """The real file system through ``os``; flock for directory locks (released by the kernel
    when the holder dies, and not lost when another handle to the file closes, unlike lockf)."""

    def open(self, path: str, create: bool = False, read_only: bool = False) -> int:
        flags = os.O_RDONLY if read_only else os.O_RDWR
        if create and not read_only:
            flags |= os.O_CREAT
        return os.open(path, flags | os.O_CLOEXEC, 0o600)

    def close(self, handle: int) -> None:
        os.close(handle)

    def pwrite(self, handle: int, data: bytes, offset: int) -> None:
        view = memoryview(data)
        while view:
            written = os.pwrite(handle, view, offset)
            if written <= 0:  # pragma: no cover - the OS raises instead
                raise OSError(errno.EIO, "short write")
            view = view[written:]
            offset += written

    def pread(self, handle: int, size: int, offset: int) -> bytes:
        return os.pread(handle, size, offset)

    def fdatasync(self, handle: int) -> None:
        os.fdatasync(handle)

    def fsync(self, handle: int) -> None:
        os.fsync(handle)

    def start_writeback(self, handle: int, offset: int, length: int) -> None:
        # DONTNEED starts the writeback of dirty pages and keeps them cached while they are
        # dirty or being written (only clean pages would be dropped)
        os.posix_fadvise(handle, offset, length, os.POSIX_FADV_DONTNEED)

    def size(self, handle: int) -> int:
        return os.fstat(handle).st_size

    def truncate(self, handle: int, size: int) -> None:
        os.ftruncate(handle, size)

    def rename(self, src: str, dst: str) -> None:
        os.replace(src, dst)

    def unlink(self, path: str) -> None:
        os.unlink(path)

    def listdir(self, path: str) -> List[str]:
        return sorted(os.listdir(path))

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def mkdir(self, path: str) -> None:
        os.makedirs(path, mode=0o700, exist_ok=True)

    def fsync_dir(self, path: str) -> None:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def lock(self, path: str, shared: bool = False) -> int:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600) if not shared else \
            os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise
        return fd

    def unlock(self, handle: int) -> None:
        fcntl.flock(handle, fcntl.LOCK_UN)
        os.close(handle)

    def lock_holder(self, path: str) -> Optional[int]:
        """From Linux's ``/proc/locks`` (flock lines name the holder's pid, device and
        inode); ``None`` elsewhere or when no holder is listed."""
        try:
            st = os.stat(path)
            with open("/proc/locks", encoding="ascii", errors="replace") as f:
                lines = f.read().splitlines()
        except OSError:
            return None
        want = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
        for line in lines:
            fields = line.split()
            if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5] == want:
                try:
                    return int(fields[4])
                except ValueError:
                    return None
        return None
