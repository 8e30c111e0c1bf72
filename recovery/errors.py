"""Errors of the recovery package (all under ``MqStoreError``)."""

from __future__ import annotations

from journal.errors import MqStoreError


class RecoveryError(MqStoreError):
    """Any error of the recovery package."""


class IndexInvalidError(RecoveryError):
    """The index cannot be trusted (damaged, stale, or from another journal); it is rebuilt
    from the journal when opened for writing. ``reason`` says which check failed."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(f"index not usable: {reason}",
                         hint="it is rebuilt from the journal at the next writable open")
