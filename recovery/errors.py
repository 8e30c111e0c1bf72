"""Errors of the recovery package (all under ``MqStoreError``)."""

from __future__ import annotations

from mqstore.journal.errors import CorruptJournalError, MqStoreError


class RecoveryError(MqStoreError):
    """Any error of the recovery package."""


class IndexInvalidError(RecoveryError):
    """The index cannot be trusted (damaged, stale, or from another journal); it is rebuilt
    from the journal when opened for writing. ``reason`` says which check failed."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(f"index not usable: {reason}",
                         hint="it is rebuilt from the journal at the next writable open")


class MalformedRecordError(RecoveryError, CorruptJournalError):
    """A record passed its CRC check but its payload does not fit its kind (not a msgpack map,
    a field missing or of the wrong type): a buggy writer or another format made it. Opening
    the store stops there and changes nothing; salvage does not skip such a record, because its
    bytes are exactly what was written.

    Attributes:
        path: the segment file. offset: byte offset of the record's frame in it.
        lsn: the record's LSN. kind: its kind (u8). reason: what did not fit.
    """

    def __init__(self, path: str, offset: int, lsn: int, kind: int, reason: str) -> None:
        self.path = path
        self.offset = offset
        self.lsn = lsn
        self.kind = kind
        self.reason = f"record LSN {lsn} of kind {kind}: {reason}"
        MqStoreError.__init__(self, f"malformed record: {path} at offset {offset}: {self.reason}",
                              hint="'mqstore print' shows the record; it was written by another "
                                   "format or a buggy writer, so recovery cannot fold it")
