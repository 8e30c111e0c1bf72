"""A simulated file system for crash and fault testing, behind the ``FileSystem`` seam.

``SimulatedFileSystem`` keeps files in memory and logs every mutating operation in order. An
operation is durable once the matching sync covers it: ``fdatasync``/``fsync`` of a file make its
writes and truncations durable; ``fsync_dir`` of a directory makes its creates, renames, unlinks
and mkdirs durable. ``crash()`` returns the file system a machine would find after a power cut:
every durable operation, plus a prefix of the unsynced ones (0 keeps none: all unsynced data
lost), the last kept write optionally torn at a 512-byte sector boundary or filled with garbage.
Unsynced directory operations are lost unless the prefix keeps them. ``fail_at`` injects an
``OSError`` (EIO, ENOSPC...) at the N-th operation, counting from 1; the failing operation
changes nothing. ``hook``, when set, is called with the operation's name just before each counted
operation (under the file system's mutex), so a test can take crash states in the middle of
the journal's work, e.g. right before an fdatasync. Locks are process-local and vanish with a
crash, as flocks do when a process dies.
"""

from __future__ import annotations

import errno as errno_mod
import os
import functools
import random
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Set, Tuple, TypeVar

from .fs import FileSystem

_F = TypeVar("_F", bound=Callable[..., Any])


def _locked(method: _F) -> _F:
    """Run a method under the file system's mutex (the writer thread and callers share it)."""
    @functools.wraps(method)
    def wrapper(self: "SimulatedFileSystem", *args: Any, **kwargs: Any) -> Any:
        with self._mutex:
            return method(self, *args, **kwargs)
    return wrapper  # type: ignore[return-value]

SECTOR = 512


@dataclass
class _Op:
    kind: str                      # write | truncate | create | rename | unlink | mkdir
    inode: int = -1
    offset: int = 0
    data: bytes = b""
    path: str = ""
    dst: str = ""
    durable: bool = False


@dataclass
class _State:
    inodes: Dict[int, bytearray] = field(default_factory=dict)
    names: Dict[str, int] = field(default_factory=dict)
    dirs: Set[str] = field(default_factory=set)

    def copy(self) -> "_State":
        return _State({k: bytearray(v) for k, v in self.inodes.items()}, dict(self.names),
                      set(self.dirs))

    def apply(self, op: _Op) -> None:
        if op.kind == "write":
            buf = self.inodes.setdefault(op.inode, bytearray())
            end = op.offset + len(op.data)
            if len(buf) < end:
                buf.extend(bytes(end - len(buf)))
            buf[op.offset:end] = op.data
        elif op.kind == "truncate":
            buf = self.inodes.setdefault(op.inode, bytearray())
            if op.offset < len(buf):
                del buf[op.offset:]
            else:
                buf.extend(bytes(op.offset - len(buf)))
        elif op.kind == "create":
            self.inodes.setdefault(op.inode, bytearray())
            self.names[op.path] = op.inode
        elif op.kind == "rename":
            if op.path in self.names:
                self.names[op.dst] = self.names.pop(op.path)
        elif op.kind == "unlink":
            self.names.pop(op.path, None)
        elif op.kind == "mkdir":
            self.dirs.add(op.path)


def _norm(path: str) -> str:
    return os.path.normpath(path)


class SimulatedFileSystem(FileSystem):
    """An in-memory ``FileSystem`` that can crash and fail on purpose.

    Args:
        fail_at: 1-based index of the operation that raises ``OSError(fail_errno)``; ``None``
            for no fault. Operations counted: open with create, pwrite, fdatasync, fsync,
            truncate, rename, unlink, mkdir, fsync_dir.
        fail_errno: the errno raised, e.g. ``errno.EIO`` or ``errno.ENOSPC``.
        fail_sticky: when true every counted operation after ``fail_at`` fails too.
    """

    def __init__(self, fail_at: Optional[int] = None, fail_errno: int = errno_mod.EIO,
                 fail_sticky: bool = False, _base: Optional[_State] = None) -> None:
        self._mutex = threading.RLock()
        self._base = _base if _base is not None else _State(dirs={"/"})
        self._cur = self._base.copy()
        self._log: List[_Op] = []
        self._handles: Dict[int, int] = {}
        self._next_handle = 3
        self._next_inode = max(self._base.inodes, default=0) + 1
        self._locks: Dict[str, Tuple[bool, int]] = {}
        self._lock_handles: Dict[int, str] = {}
        self.fail_at = fail_at
        self.fail_errno = fail_errno
        self.fail_sticky = fail_sticky
        self.op_count = 0
        self.failures = 0
        self.hook: Optional[Callable[[str], None]] = None

    # -- fault injection -------------------------------------------------------------------
    def _count(self, what: str) -> None:
        if self.hook is not None:
            self.hook(what)
        self.op_count += 1
        if self.fail_at is not None and (self.op_count == self.fail_at or
                                         (self.fail_sticky and self.op_count > self.fail_at)):
            self.failures += 1
            raise OSError(self.fail_errno, f"injected {errno_mod.errorcode[self.fail_errno]} "
                                           f"at operation {self.op_count} ({what})")

    def _log_op(self, op: _Op) -> None:
        self._cur.apply(op)
        self._log.append(op)

    def _fold(self) -> None:
        """Move the durable prefix of the log into the base snapshot."""
        i = 0
        while i < len(self._log) and self._log[i].durable:
            self._base.apply(self._log[i])
            i += 1
        if i:
            del self._log[:i]

    # -- FileSystem ------------------------------------------------------------------------
    @_locked
    def open(self, path: str, create: bool = False, read_only: bool = False) -> int:
        path = _norm(path)
        if path not in self._cur.names:
            if not create or read_only:
                raise FileNotFoundError(errno_mod.ENOENT, "no such file", path)
            if os.path.dirname(path) not in self._cur.dirs:
                raise FileNotFoundError(errno_mod.ENOENT, "no such directory", path)
            self._count("create")
            ino = self._next_inode
            self._next_inode += 1
            self._log_op(_Op("create", inode=ino, path=path))
        h = self._next_handle
        self._next_handle += 1
        self._handles[h] = self._cur.names[path]
        return h

    @_locked
    def close(self, handle: int) -> None:
        self._handles.pop(handle, None)

    def _ino(self, handle: int) -> int:
        try:
            return self._handles[handle]
        except KeyError:
            raise OSError(errno_mod.EBADF, "bad handle") from None

    @_locked
    def pwrite(self, handle: int, data: bytes, offset: int) -> None:
        ino = self._ino(handle)
        self._count("pwrite")
        self._log_op(_Op("write", inode=ino, offset=offset, data=bytes(data)))

    @_locked
    def pread(self, handle: int, size: int, offset: int) -> bytes:
        buf = self._cur.inodes[self._ino(handle)]
        return bytes(buf[offset:offset + size])

    def _sync_inode(self, ino: int) -> None:
        for op in self._log:
            if op.inode == ino and op.kind in ("write", "truncate"):
                op.durable = True
        self._fold()

    @_locked
    def fdatasync(self, handle: int) -> None:
        ino = self._ino(handle)
        self._count("fdatasync")
        self._sync_inode(ino)

    @_locked
    def fsync(self, handle: int) -> None:
        ino = self._ino(handle)
        self._count("fsync")
        self._sync_inode(ino)

    @_locked
    def size(self, handle: int) -> int:
        return len(self._cur.inodes[self._ino(handle)])

    @_locked
    def truncate(self, handle: int, size: int) -> None:
        ino = self._ino(handle)
        self._count("truncate")
        self._log_op(_Op("truncate", inode=ino, offset=size))

    @_locked
    def rename(self, src: str, dst: str) -> None:
        src, dst = _norm(src), _norm(dst)
        if src not in self._cur.names:
            raise FileNotFoundError(errno_mod.ENOENT, "no such file", src)
        self._count("rename")
        self._log_op(_Op("rename", path=src, dst=dst))

    @_locked
    def unlink(self, path: str) -> None:
        path = _norm(path)
        if path not in self._cur.names:
            raise FileNotFoundError(errno_mod.ENOENT, "no such file", path)
        self._count("unlink")
        self._log_op(_Op("unlink", path=path))

    @_locked
    def listdir(self, path: str) -> List[str]:
        path = _norm(path)
        if path not in self._cur.dirs:
            raise FileNotFoundError(errno_mod.ENOENT, "no such directory", path)
        names = [os.path.basename(p) for p in self._cur.names if os.path.dirname(p) == path]
        names += [os.path.basename(d) for d in self._cur.dirs
                  if d != path and os.path.dirname(d) == path]
        return sorted(names)

    @_locked
    def exists(self, path: str) -> bool:
        path = _norm(path)
        return path in self._cur.names or path in self._cur.dirs

    @_locked
    def mkdir(self, path: str) -> None:
        path = _norm(path)
        missing = []
        while path not in self._cur.dirs:
            missing.append(path)
            path = os.path.dirname(path)
        for d in reversed(missing):
            self._count("mkdir")
            self._log_op(_Op("mkdir", path=d))

    @_locked
    def fsync_dir(self, path: str) -> None:
        path = _norm(path)
        self._count("fsync_dir")
        for op in self._log:
            if op.kind in ("create", "rename", "unlink", "mkdir"):
                if os.path.dirname(op.path) == path or os.path.dirname(op.dst or op.path) == path:
                    op.durable = True
        self._fold()

    @_locked
    def lock(self, path: str, shared: bool = False) -> int:
        path = _norm(path)
        held = self._locks.get(path)
        if held is not None and (not shared or not held[0]):
            raise BlockingIOError(errno_mod.EWOULDBLOCK, "locked", path)
        self._locks[path] = (shared, (held[1] if held else 0) + 1)
        h = self._next_handle
        self._next_handle += 1
        self._lock_handles[h] = path
        return h

    @_locked
    def unlock(self, handle: int) -> None:
        path = self._lock_handles.pop(handle, None)
        if path is None:
            return
        shared, count = self._locks[path]
        if count <= 1:
            del self._locks[path]
        else:
            self._locks[path] = (shared, count - 1)

    # -- crash states ----------------------------------------------------------------------
    @_locked
    def unsynced_count(self) -> int:
        """How many logged operations are not yet durable."""
        return sum(1 for op in self._log if not op.durable)

    @_locked
    def crash(self, keep: int = 0, tear: Optional[str] = None,
              rng: Optional[random.Random] = None) -> "SimulatedFileSystem":
        """The file system after a power cut at this moment.

        Args:
            keep: how many of the unsynced operations survive, in the order they were issued
                (0 = all unsynced data and directory changes lost).
            tear: ``None``; ``"sector"`` to keep only a sector-aligned prefix of the last kept
                write; ``"garbage"`` to replace the last kept write's bytes with random bytes.
            rng: randomness for the tear point and the garbage.

        Returns:
            A new ``SimulatedFileSystem`` whose every file is durable, with no locks held.
        """
        rng = rng or random.Random(0)
        state = self._base.copy()
        unsynced = [op for op in self._log if not op.durable]
        kept = set(id(op) for op in unsynced[:keep])
        last = unsynced[keep - 1] if 0 < keep <= len(unsynced) else None
        for op in self._log:
            if op.durable or id(op) in kept:
                if op is last and tear and op.kind == "write" and op.data:
                    op = self._torn(op, tear, rng)
                state.apply(op)
        return SimulatedFileSystem(_base=state)

    @staticmethod
    def _torn(op: _Op, tear: str, rng: random.Random) -> _Op:
        if tear == "garbage":
            return _Op("write", inode=op.inode, offset=op.offset, data=rng.randbytes(len(op.data)))
        end = op.offset + len(op.data)
        bounds = list(range((op.offset // SECTOR + 1) * SECTOR, end, SECTOR))
        cut = rng.choice(bounds) if bounds else op.offset
        return _Op("write", inode=op.inode, offset=op.offset, data=op.data[:cut - op.offset])

    @_locked
    def snapshot(self) -> Dict[str, bytes]:
        """Every file's current content by path (for assertions)."""
        return {p: bytes(self._cur.inodes[i]) for p, i in self._cur.names.items()}
