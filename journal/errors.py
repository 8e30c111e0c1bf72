"""The one exception hierarchy of mqstore.

Every error that mqstore raises on purpose derives from :class:`MqStoreError`. The journal is the
lowest layer, so the root lives here and the upper packages (``recovery``, ``engine``, ``tools``)
subclass it. Errors carry the fields a caller needs (path, offset, queue name...) as attributes,
and their message ends with a hint where one exists. ``OSError`` is wrapped at the file-system
boundary with ``raise ... from exc``.
"""

from __future__ import annotations

import os
from typing import Optional


class MqStoreError(Exception):
    """Root of every error mqstore raises on purpose.

    Args:
        message: what went wrong, in one sentence.
        hint: what the caller can do about it, or ``None``.
    """

    def __init__(self, message: str, hint: Optional[str] = None) -> None:
        self.hint = hint
        super().__init__(f"{message} (hint: {hint})" if hint else message)


class JournalError(MqStoreError):
    """Any error of the journal package."""


class JournalIOError(JournalError):
    """An operating-system error on a journal file (wraps the ``OSError`` as ``__cause__``).

    Attributes:
        path: the file or directory the operation was on.
        errno: the ``errno`` value of the underlying ``OSError``, or ``None``.
    """

    def __init__(self, path: str, operation: str, exc: OSError) -> None:
        self.path = path
        self.operation = operation
        self.errno = exc.errno
        super().__init__(f"{operation} failed on {path}: {exc}",
                         hint="the journal is now fail-stop; reopen it to recover")


class JournalFailedError(JournalError):
    """The journal hit a write or fsync error earlier and refuses all further work (fail-stop).

    Attributes:
        cause: the error that made the journal fail.
    """

    def __init__(self, cause: BaseException) -> None:
        self.cause = cause
        super().__init__(f"the journal is fail-stopped after an I/O error: {cause}",
                         hint="close it and reopen the directory; recovery runs at open")


class JournalClosedError(JournalError):
    """An operation was attempted on a closed journal."""

    def __init__(self) -> None:
        super().__init__("the journal is closed")


class ReadOnlyError(JournalError):
    """A write was attempted on a journal opened read-only."""

    def __init__(self, path: str) -> None:
        self.path = path
        super().__init__(f"journal {path} is open read-only")


class RecordTooLargeError(JournalError):
    """A record is larger than the journal accepts; nothing was written.

    Attributes:
        size: the encoded frame size in bytes.
        limit: the largest frame size accepted, in bytes.
    """

    def __init__(self, size: int, limit: int) -> None:
        self.size = size
        self.limit = limit
        super().__init__(f"record of {size} bytes exceeds the limit of {limit} bytes",
                         hint="raise max_record_size and segment_size, or split the message")


class InvalidRecordError(JournalError):
    """A record's kind or payload cannot be journaled (bad kind, unserialisable payload)."""


class InvalidOptionError(JournalError, ValueError, TypeError):
    """A journal setting of the wrong type or out of range (``JournalOptions``); raised when
    the options are built, before any file is touched.

    Attributes:
        option: the setting's name.
    """

    def __init__(self, option: str, why: str) -> None:
        self.option = option
        super().__init__(f"invalid journal option {option}: {why}")


class CorruptJournalError(JournalError):
    """A journal file holds bytes that are not a valid record where one must be.

    Attributes:
        path: the segment or control file.
        offset: byte offset of the bad record or header in that file.
        reason: what check failed (``crc mismatch``, ``bad length``, ``lsn order``...).
    """

    def __init__(self, path: str, offset: int, reason: str) -> None:
        self.path = path
        self.offset = offset
        self.reason = reason
        super().__init__(f"corrupt journal: {path} at offset {offset}: {reason}",
                         hint="run 'mqstore check' to list every problem, or open with "
                              "salvage=True to skip damaged records")


class DirectoryLockedError(JournalError):
    """Another opener (this process or another) holds the directory lock.

    Attributes:
        path: the lock file.
        holder: the process id holding it, when the system says (Linux), else ``None``.
    """

    def __init__(self, path: str, holder: Optional[int] = None) -> None:
        self.path = path
        self.holder = holder
        who = "another opener" if holder is None else (
            "this process (another opener in it)" if holder == os.getpid()
            else f"process {holder}")
        super().__init__(f"{path} is locked by {who}",
                         hint="one process opens a store directory at a time; close the other "
                              "opener, or open read-only for inspection")


class MissingSegmentError(CorruptJournalError):
    """Segment files the journal's manifest lists are missing (deleted, or lost with a disk),
    or the manifest itself is. Opening refuses, and nothing is deleted or rewritten.

    Attributes:
        missing: paths of every missing file. path: the first of them. offset: 0.
    """

    def __init__(self, missing: "list[str]", manifest: str) -> None:
        self.missing = list(missing)
        CorruptJournalError.__init__(self, self.missing[0], 0,
                                     f"{len(self.missing)} file(s) of the journal are missing: "
                                     f"{', '.join(self.missing)} (listed in {manifest})")


class JournalBehindError(CorruptJournalError):
    """The journal ends before an LSN that is known durable (an index checkpoint covers it):
    records were cut from its end after they were written. Opening refuses.

    Attributes:
        path: the last segment file. offset: where its records end. proven_lsn: the LSN
        known durable. last_lsn: the last LSN the journal still holds.
    """

    def __init__(self, path: str, offset: int, proven_lsn: int, last_lsn: int) -> None:
        self.proven_lsn = proven_lsn
        self.last_lsn = last_lsn
        super().__init__(path, offset, f"records up to LSN {proven_lsn} were durable (the "
                                       f"index checkpoint covers them) but the journal ends at "
                                       f"LSN {last_lsn}: its end was cut off or zeroed")
