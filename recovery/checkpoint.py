"""Index commits: the image's changes, the journal's liveness changes and the segment
catalogue, written at one durable LSN; and loading what the index holds at open.

The index is the live state (issue 12), not a snapshot: ``commit`` writes only what changed
since the previous commit, in one transaction of the index store, so it costs O(changes). The
``meta`` entry, written in the same transaction, says which LSN the tables reflect and how many
entries each table holds, so a lost or foreign entry is detected at open in O(tables) (LMDB
counts entries itself); every value carries a CRC-32C of its key and body, checked whenever it
is read (LMDB returns wrong data silently under bit flips; REFERENCE.md).

Tables (ids are 8-byte big-endian, so keys sort like numbers)::

    meta     b"checkpoint" -> {version, lsn, next_id, catalogue, counts, seglive, sizes,
                              pages, extras, deleted}
                              sizes: [[address, messages, body bytes], ...]
                              pages: [[address, start lsn, start slot, messages, bytes], ...]
                              deleted: deleted durable queues still listed, oldest first
                              (``DeletedQueueImage.to_meta``)
    addr     id            -> [name, routing types, auto, location]
    queue    id            -> [name, address, routing type, config, location, update loc, count,
                               paged(, scheduled)]
    settings match         -> [values, location]
    msg      mid           -> [mid, address, location, slot, props, ts, exp, prio, size, refs,
                               lsn, lane]
    qref     qid+lane|lsn+slot -> [mid, lane|lsn, slot(, delivery count, delivery location,
                               in delivery)]           a queue's references in order: by
                                                       priority lane, then as sent
                                                       (``recovery.entries.lane_of``)
    busy     qid+mid       -> delivery location        references left in delivery
    tx       seg+offset    -> [remaining, ack targets] TX and DUE records still needed
    jmarks   seg           -> [dead bytes, BitMap64]  a segment's dead records (offsets, as
                                                       ``pyroaring`` serializes them)
    jwait    seg+seg+chunk -> u64 array                tombstones of the second segment that
                                                       wait only for the first to go, packed
                                                       ``offset << 24 | length``
                                                       (``journal.waits``)
    jpin     seg+offset    -> [length, [targets]]      other tombstones waiting for targets
                                                       (offset -1: a dead record of that
                                                       segment)
    jdead    (unused since version 9: version 8's dead marks)
    sched    qid+at+lsn+slot -> as qref, with at      a queue's scheduled buffer, in due order
    moved    qid+mid       -> [at, lsn, slot(, DUE loc)] references not at their message's order
                                                       key: scheduled (at > 0), or put on the
                                                       head when due (a head order key,
                                                       the DUE record's location: its
                                                       ``tx`` entry counts them)

Version 8 added ``sched``, ``moved`` and the queue entry's scheduled count. Version 9 keeps the
journal's dead marks as one bitmap per segment (``jmarks``) and the common pins packed
(``jwait``), so that neither costs RAM per record (issue 13). Version 10 puts the priority lane
at the top of every order key (``recovery.entries.LANE_SHIFT``), so a queue's references sort
by priority (issue 15); an index of an older version is rebuilt from the journal at open.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Mapping, Optional, Tuple

from pyroaring import BitMap64

from mqstore.journal import Location, SegmentSummary
from .errors import IndexInvalidError
from .entries import ID, PAIR, AddressImage, DeletedQueueImage, QueueImage
from .image import StoreImage
from .ledger import AddressLedger
from .indexstore import TABLES, Changes, Row
from .tables import pack_value, unpack_value

VERSION = 10
READABLE = (10,)  # versions this code reads (before 10, order keys had no priority lanes)
META_KEY = b"checkpoint"
_LOC = struct.Struct(">QQ")
_WAIT = struct.Struct(">QQQ")


@dataclass
class Checkpoint:
    """What the index holds: the state at ``lsn``.

    Attributes:
        lsn: every journal record with LSN <= this is reflected.
        image: the image over the index store (its large tables read on demand).
        catalogue: summaries of the sealed segments at that moment.
        liveness: the journal's dead marks and pins, in ``Liveness.restore_state``'s form.
        extras: facts for offline tools, written at a clean close only (every other
            checkpoint writes none): consumers per queue and each queue's counters of that
            run (added, acked, killed, expired, replaced).
    """

    lsn: int
    image: StoreImage
    catalogue: List[SegmentSummary]
    liveness: Dict[str, Any] = field(default_factory=dict)
    extras: Dict[str, Any] = field(default_factory=dict)


def read_meta(store: Any) -> Optional[Dict[str, Any]]:
    """The meta entry, or ``None`` when the index is empty.

    Raises:
        IndexInvalidError: it is damaged.
    """
    raw = store.get("meta", META_KEY)
    return None if raw is None else unpack_value("meta", META_KEY, raw)


def load(store: Any) -> Optional[Checkpoint]:
    """The state the index store holds, checked, or ``None`` when it holds none.

    Reads the meta entry, the small tables (addresses, queues, settings) and the journal's
    liveness; the large tables stay in the store. O(queues + dead records), not O(messages).

    Raises:
        IndexInvalidError: a CRC or count mismatch, a version this code does not read, a
            reference to a queue the index does not hold; nothing of the index is then to be
            trusted.
    """
    meta = read_meta(store)
    if meta is None:
        return None
    if meta.get("version") not in READABLE:
        raise IndexInvalidError(f"index version {meta.get('version')} is not {VERSION}")
    counts = meta["counts"]
    for name in TABLES[1:]:
        have = store.entries(name)
        if have != counts.get(name, 0):
            raise IndexInvalidError(f"index table {name!r} has {have} entries, the "
                                    f"checkpoint says {counts.get(name, 0)}")
    img = StoreImage(store, counts)
    img.last_lsn, img.next_id = meta["lsn"], meta["next_id"]
    img.seglive = {int(seq): int(n) for seq, n in meta.get("seglive", [])}
    img.ledger = AddressLedger.from_meta(meta)
    img.deleted = [DeletedQueueImage.from_meta(row) for row in meta.get("deleted", [])]
    for k, v in store.range("addr", b"", None):
        name, rts, auto, loc = unpack_value("addr", k, v)
        aid = ID.unpack(k)[0]
        img.addresses[aid] = AddressImage(aid, name, tuple(rts), auto, Location(*loc))
    for k, v in store.range("queue", b"", None):
        value = unpack_value("queue", k, v)
        name, addr, rt, cfg, loc, uloc, count, paged = value[:8]
        qid = ID.unpack(k)[0]
        img.queues[qid] = QueueImage(qid, name, addr, rt, cfg, Location(*loc),
                                     None if uloc is None else Location(*uloc), count, paged,
                                     int(value[8]) if len(value) > 8 else 0)
    for k, v in store.range("settings", b"", None):
        values, loc = unpack_value("settings", k, v)
        img.settings[k.decode("utf-8")] = (values, Location(*loc))
    if sum(q.count for q in img.queues.values()) != counts.get("qref", 0) or \
            sum(q.scheduled for q in img.queues.values()) != counts.get("sched", 0):
        raise IndexInvalidError("the queues' reference counts do not match the references")
    return Checkpoint(meta["lsn"], img, [SegmentSummary(*s) for s in meta["catalogue"]],
                      _liveness(store), dict(meta.get("extras") or {}))


def _liveness(store: Any) -> Dict[str, Iterator[Any]]:
    """The stored dead marks and pins in ``Liveness.restore_state``'s form, read as they are
    consumed (a page of rows at a time: RAM does not hold a copy of the tables)."""
    def dead() -> Iterator[Tuple[int, int, BitMap64]]:
        for k, v in rows(store, "jmarks"):
            dead_bytes, raw = unpack_value("jmarks", k, v)
            try:
                bitmap = BitMap64.deserialize(raw)
            except Exception as exc:  # CRC-valid bytes pyroaring cannot read  # noqa: BLE001
                raise IndexInvalidError(f"unreadable dead marks in the index: {exc}") from exc
            yield ID.unpack(k)[0], dead_bytes, bitmap

    def waits() -> Iterator[Tuple[int, int, bytes]]:
        for k, v in rows(store, "jwait"):
            sx, st, _chunk = _WAIT.unpack(k)
            yield sx, st, unpack_value("jwait", k, v)

    def pins() -> Iterator[List[Any]]:
        for k, v in rows(store, "jpin"):
            seg, off = _LOC.unpack(k)
            length, targets = unpack_value("jpin", k, v)
            yield [[seg, off, length], targets]

    return {"dead": dead(), "waits": waits(), "pins": pins()}


def rows(store: Any, table: str, prefix: bytes = b"", page: int = 4096) -> Iterator[Row]:
    """Every committed row of ``table`` whose key starts with ``prefix``, in key order, read
    ``page`` rows at a time.

    Raises:
        IndexInvalidError: the store cannot be read.
    """
    stop = _after(prefix) if prefix else None
    start = prefix
    while True:
        batch = store.range(table, start, stop, page)
        yield from batch
        if len(batch) < page:
            return
        start = batch[-1][0] + b"\x00"


def _after(prefix: bytes) -> Optional[bytes]:
    """The smallest key above every key starting with ``prefix`` (None: there is none)."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return None
    return stripped[:-1] + bytes([stripped[-1] + 1])


def read_index(store: Any) -> Tuple[Optional[Checkpoint], str]:
    """``load``, or ``(None, why not)``; never raises for what the stored bytes hold (any
    decoding failure is a reason to rebuild)."""
    if store.discarded:
        return None, f"index damaged: {store.discarded}"
    try:
        cp = load(store)
        return (cp, "") if cp is not None else (None, "no index")
    except IndexInvalidError as exc:
        return None, exc.reason
    except Exception as exc:  # bytes that passed LMDB but not the decoder  # noqa: BLE001
        return None, f"index damaged: {type(exc).__name__}: {exc}"


def changes(store: Any, image: StoreImage, lsn: int, catalogue: List[SegmentSummary],
            liveness: Mapping[str, Any], extras: Mapping[str, Any]) -> Changes:
    """Everything to write for a commit at ``lsn``: the image's changes since the last commit,
    ``liveness`` (``Liveness.export_changes``) and the meta entry. Nothing is forgotten by
    this call; ``committed(image)`` does that once the store has the changes."""
    out: Changes = {name: {} for name in TABLES}
    for table in image.tables.all():
        out[table.name] = table.changes()
    for kind, key in image.dirty:
        if kind == "addr":
            a = image.addresses.get(key)
            k = ID.pack(key)
            out["addr"][k] = None if a is None else pack_value(
                k, [a.name, list(a.routing_types), a.auto_created, list(a.location)])
        elif kind == "queue":  # a live queue is written below: only deletions here
            if key not in image.queues:
                out["queue"][ID.pack(key)] = None
        else:
            k = key.encode("utf-8")
            entry = image.settings.get(key)
            out["settings"][k] = None if entry is None else pack_value(
                k, [entry[0], list(entry[1])])
    # a queue's entry holds its counts: written when they changed, and for new or updated
    # queues (O(queues changed), not O(queues))
    for qid in image.counted.union(key for kind, key in image.dirty if kind == "queue"):
        q = image.queues.get(qid)
        if q is not None:
            k = ID.pack(q.id)
            out["queue"][k] = pack_value(k, _queue_value(q))
    _liveness_changes(store, liveness, out)
    counts = {t.name: t.count for t in image.tables.all()}
    counts.update(addr=len(image.addresses), queue=len(image.queues),
                  settings=len(image.settings))
    for name in ("jpin", "jmarks", "jwait"):
        n = store.entries(name)
        for k, v in out[name].items():
            there = store.get(name, k) is not None
            n += (v is not None) - there
        counts[name] = n
    meta = {"version": VERSION, "lsn": lsn, "next_id": image.next_id,
            "catalogue": [list(s) for s in catalogue], "counts": counts,
            "seglive": sorted([seq, n] for seq, n in image.seglive.items()),
            "extras": dict(extras), "deleted": [d.to_meta() for d in image.deleted],
            **image.ledger.to_meta()}
    out["meta"][META_KEY] = pack_value(META_KEY, meta)
    return out


def _liveness_changes(store: Any, liveness: Mapping[str, Any], out: Changes) -> None:
    """Put ``Liveness.export_changes`` into ``out``: O(changes + stored rows of the segments
    that left and of the packed groups rewritten), never O(dead records)."""
    for seq, value in liveness.get("dead", {}).items():
        k = ID.pack(seq)
        out["jmarks"][k] = None if value is None else pack_value(k, [value[0], value[1]])
    for (sx, st), (first, chunks) in liveness.get("waits", {}).items():
        prefix = PAIR.pack(sx, st)
        if first < 0:  # rewritten whole: the stored chunks go first
            for k, _v in rows(store, "jwait", prefix):
                out["jwait"][k] = None
        for i, raw in enumerate(chunks, start=max(first, 0)):
            k = _WAIT.pack(sx, st, i)
            out["jwait"][k] = pack_value(k, raw)
    for seq in liveness.get("gone", ()):
        out["jmarks"][ID.pack(seq)] = None
        for k, _v in rows(store, "jwait", ID.pack(seq)):
            out["jwait"][k] = None
    for tomb, targets in liveness.get("pins", {}).items():
        k = _LOC.pack(tomb[0], tomb[1])
        out["jpin"][k] = None if targets is None else pack_value(k, [tomb[2], targets])


def committed(image: StoreImage) -> None:
    """The store holds the image's changes now: drop them from RAM."""
    for table in image.tables.all():
        table.committed()
    image.dirty = set()
    image.counted = set()


def _queue_value(q: QueueImage) -> List[Any]:
    return [q.name, q.address, q.routing_type, q.config, list(q.location),
            None if q.update_location is None else list(q.update_location), q.count, q.paged,
            q.scheduled]


__all__ = ["Checkpoint", "TABLES", "VERSION", "changes", "committed", "load", "read_index",
           "read_meta", "PAIR"]
