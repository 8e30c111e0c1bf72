"""Deleted queues listed for management (Qpid queues "Deleting Queues": a deleted queue's
management object remains, with the time it was deleted).

The image lists the newest ``KEEP_DELETED`` deleted durable queues. Each entry holds its
QUEUE_DEL record live, so a rebuild from the journal lists the same queues even when the queue's
QUEUE_ADD is gone; when an entry leaves the list its record becomes an ordinary tombstone (dead
once the QUEUE_ADD it cancels is physically gone). The decision depends only on the order of
the records, so a replay makes the same one.
"""

from __future__ import annotations

from typing import Any, Mapping

from mypy_extensions import trait

from mqstore.journal import Location
from .entries import KEEP_DELETED, DeletedQueueImage
from .parts import ImageParts


@trait  # a part of StoreImage (mypyc compiles a mixin as a trait)
class QueueDeletions(ImageParts):
    """The folds of QUEUE_DEL records and the list of deleted queues (a mixin of
    ``StoreImage``)."""

    def _delete_queue(self, p: Mapping[str, Any], location: Location, sink: Any
                      ) -> None:
        qid = int(p["id"])
        queue = self.queues.pop(qid, None)
        if queue is None:
            if "name" in p:  # its QUEUE_ADD is gone (reclaimed): listed from the record alone
                self._list_deleted(DeletedQueueImage(qid, p["name"], p["addr"], p["rt"],
                                                     int(p.get("ts", 0)), location), sink)
            else:
                sink.mark_dead([location])
            return
        self.dirty.add(("queue", qid))
        for refs in (self.refs(qid), self.all_scheduled(qid)):
            for ref in refs:  # read in chunks after the last one: deleting is safe
                msg = self.message(ref.mid)
                self._remove_ref(queue, ref, msg, sink)
                if msg is not None:
                    self._release_msg(msg, sink)
        self._superseded(queue.update_location, sink)
        self._superseded(queue.location, sink)
        if "ts" not in p:  # written before deleted queues were listed
            sink.mark_dead_after(location, [queue.location])
            return
        self._list_deleted(DeletedQueueImage(qid, queue.name, queue.address, queue.routing_type,
                                             int(p["ts"]), location, queue.location), sink)


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
