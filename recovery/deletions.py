"""Deleted queues listed for management (seed 002 "Deleting Queues": a deleted queue's
management object remains, with the time it was deleted).

The image lists the newest ``KEEP_DELETED`` deleted durable queues. Each entry holds its
QUEUE_DEL record live, so a rebuild from the journal lists the same queues even when the queue's
QUEUE_ADD is gone; when an entry leaves the list its record becomes an ordinary tombstone (dead
once the QUEUE_ADD it cancels is physically gone). The decision depends only on the order of
the records, so a replay makes the same one.
"""

from __future__ import annotations

from typing import Any, List, Optional

from journal import Location
from recovery.entries import KEEP_DELETED, DeletedQueueImage


class QueueDeletions:
    """The fold that lists deleted queues (a mixin of ``StoreImage``)."""

    deleted: List[DeletedQueueImage]

    def _hold(self, loc: Optional[Location]) -> None: ...  # StoreImage's

    def _drop(self, loc: Optional[Location]) -> None: ...  # StoreImage's

    def _list_deleted(self, entry: DeletedQueueImage, sink: Any) -> None:
        """List a deleted queue (its QUEUE_DEL record held); the oldest beyond
        ``KEEP_DELETED`` leaves the list and its record becomes an ordinary tombstone."""
        self.deleted.append(entry)
        self._hold(entry.location)
        while len(self.deleted) > KEEP_DELETED:
            old = self.deleted.pop(0)
            self._drop(old.location)
            sink.mark_dead_after(old.location, [] if old.queue_location is None
                                 else [old.queue_location])
