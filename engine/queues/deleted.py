"""Deleted queues kept for management (Qpid queues "Deleting Queues").

Qpid keeps a deleted queue's management object, showing when it was deleted. mqstore keeps the
newest ``KEEP_DELETED`` deletions: a durable queue's entry comes from its journaled QUEUE_DEL
record (``recovery`` lists it and keeps the record live while listed), so it survives a restart;
a non-durable queue's entry lives in RAM only, as the queue did.
"""

from __future__ import annotations

from typing import Iterable, List

from ..model import DeletedQueue, RoutingType
from mqstore.recovery.entries import KEEP_DELETED, DeletedQueueImage


class DeletedQueues:
    """The newest ``KEEP_DELETED`` deleted queues, oldest first (guarded by the broker lock)."""

    def __init__(self, durable: Iterable[DeletedQueueImage] = ()) -> None:
        self._entries: List[DeletedQueue] = [
            DeletedQueue(d.name, d.address, RoutingType(d.routing_type), True, d.deleted_at)
            for d in durable]
        del self._entries[:-KEEP_DELETED]

    def add(self, entry: DeletedQueue) -> None:
        """A queue was deleted (its deletion is durable when it is a durable queue)."""
        self._entries.append(entry)
        del self._entries[:-KEEP_DELETED]

    def list(self) -> List[DeletedQueue]:
        """The entries, oldest first."""
        return list(self._entries)
