"""Compaction's relocations applied to an image.

Compaction rewrites the live records of mostly-dead segments into new ones
(``journal.compaction``); every location the image holds that pointed into them (addresses,
settings, queues, references' DELIVERY records, scheduled ones too, messages, TX records)
must then point to the record's new place, and the entries that hold them are written again
with the next index commit. The references and messages are streamed from the index in
chunks, so the memory used is that of what moved, not of the store.
"""

from __future__ import annotations

from typing import Mapping

from mqstore.journal import Location
from .entries import ID, PAIR, ref_key, tx_key
from .image import StoreImage


def relocate(image: StoreImage, moved: Mapping[Location, Location]) -> None:
    """Point every location ``image`` holds that is a key of ``moved`` (old location -> new
    location) to its new place, then recount the locations held per segment.

    Raises:
        IndexInvalidError: a committed index value read on the way is damaged.
    """
    if not moved:
        return
    for a in image.addresses.values():
        if a.location in moved:
            a.location = moved[a.location]
            image.dirty.add(("addr", a.id))
    for match, (values, loc) in list(image.settings.items()):
        if loc in moved:
            image.settings[match] = (values, moved[loc])
            image.dirty.add(("settings", match))
    for q in image.queues.values():
        if q.location in moved or q.update_location in moved:
            q.location = moved.get(q.location, q.location)
            if q.update_location is not None:
                q.update_location = moved.get(q.update_location, q.update_location)
            image.dirty.add(("queue", q.id))
    for d in image.deleted:
        d.location = moved.get(d.location, d.location)
        if d.queue_location is not None:
            d.queue_location = moved.get(d.queue_location, d.queue_location)
    t = image.tables
    # streamed: a put changes a key already read, never the keys still to come
    for table in (t.qref, t.sched):
        for key, r in table.items():
            if r.delivery_location in moved:
                r.delivery_location = moved[r.delivery_location]
                table.put(key, r)
                if r.in_delivery:
                    t.busy.put(ref_key(ID.unpack(key[:8])[0], r.mid),
                               list(r.delivery_location))
    for key, m in t.msg.items():
        if m.location in moved:
            m.location = moved[m.location]
            t.msg.put(key, m)
    by_pos = {(o.segment, o.offset): n for o, n in moved.items()}
    for key, where in t.moved.items():  # a head reference names the DUE record that put it
        if len(where) > 3:
            new = by_pos.get((where[3], where[4]))
            if new is not None:
                t.moved.put(key, [where[0], where[1], where[2], *new])
    for key, tx in list(t.tx.items()):  # few, and their keys change: read first
        new = by_pos.get(PAIR.unpack(key))
        tx.ack_targets = [moved.get(x, x) for x in tx.ack_targets]
        if new is not None and tx_key(new) != key:
            t.tx.delete(key)
            t.tx.put(tx_key(new), tx, fresh=True)
        else:
            t.tx.put(key, tx)
    image.recount_holds()


__all__ = ["relocate"]
