"""mqstore's journal: append-only, CRC-framed segments with group commit and log recovery.

The package stores typed, opaque records and knows where they are; it never interprets them.
Public API: ``Journal``, ``JournalOptions``, ``Ticket``, ``Record`` (and ``FrameRun``, frames as
read), ``Location``, the file-system seam (``FileSystem``, ``OsFileSystem``,
``SimulatedFileSystem``) and the error hierarchy.
"""

import logging

from .compaction import CompactionReport
from .errors import (CorruptJournalError, DirectoryLockedError, InvalidRecordError,
                     JournalClosedError, JournalError, JournalFailedError,
                     JournalIOError, MqStoreError, ReadOnlyError, RecordTooLargeError)
from .fs import FileSystem, OsFileSystem
from .journal import Journal, JournalOptions, JournalStatistics
from .opening import OpenReport, SkippedRange
from .records import FrameRun, Record, unpack_payload
from .segment import Location, SegmentSummary
from .simfs import SimulatedFileSystem
from .tickets import Ticket

# a library logs, the application decides what is shown: without its own configuration,
# nothing of mqstore's loggers (mqstore.journal, .recovery, .engine) reaches stderr
logging.getLogger("mqstore").addHandler(logging.NullHandler())

__all__ = [
    "CompactionReport", "CorruptJournalError", "DirectoryLockedError", "FileSystem",
    "FrameRun",
    "InvalidRecordError", "Journal", "JournalClosedError", "JournalError", "JournalFailedError",
    "JournalIOError", "JournalOptions", "JournalStatistics", "Location", "MqStoreError",
    "OpenReport", "OsFileSystem", "ReadOnlyError", "Record", "RecordTooLargeError",
    "SegmentSummary", "SimulatedFileSystem", "SkippedRange", "Ticket", "unpack_payload",
]
