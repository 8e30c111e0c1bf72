"""Checkpoints: the image, the journal's liveness and segment catalogue at one LSN, as tables.

A checkpoint is encoded into named tables of ``key -> value`` bytes, the layout an index store
(LMDB, or memory in simulated crash tests) writes in one transaction. Every value carries a
CRC-32C of its key and body, and the ``meta`` entry carries the entry count of every table, so a
flipped bit, a lost entry or an entry from another checkpoint is detected before the index is
trusted (LMDB itself returns wrong data silently under bit flips; REFERENCE.md).

Tables (ids are 8-byte big-endian, so keys sort like numbers)::

    meta   b"checkpoint" -> {version, lsn, next_id, catalogue, counts}
    addr   id            -> [name, routing types, auto, location]
    queue  id            -> [name, address, routing type, config, location, update location]
    settings match       -> [values, location]
    ref    qid+lsn+slot  -> [mid, delivery count, delivery location or None, in delivery]
    msg    mid           -> [address, location, slot, properties, ts, exp, prio, size, refcount]
    tx     seg+offset    -> [length, remaining, ack targets]
    jdead  seq           -> [[offset, length], ...]   dead records of a segment
    jpin   seg+offset    -> [length, [segment seqs]]  tombstones waiting for targets
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple

import msgpack

from journal import Location, SegmentSummary
from journal.crc import crc32c
from recovery.errors import IndexInvalidError
from recovery.image import (AddressImage, MessageImage, QueueImage, RefImage, StoreImage,
                            TxImage)

VERSION = 3
TABLES = ("meta", "addr", "queue", "ref", "msg", "tx", "jdead", "jpin", "settings")
Tables = Dict[str, Dict[bytes, bytes]]

_ID = struct.Struct(">Q")
_REF = struct.Struct(">QQQ")
_LOC = struct.Struct(">QQ")


@dataclass
class Checkpoint:
    """The durable state at ``lsn``: what an index stores.

    Attributes:
        lsn: every journal record with LSN <= this is reflected.
        image: the folded image.
        catalogue: summaries of the sealed segments at that moment.
        liveness: the journal's dead marks and pins (``Liveness.export_state``).
        extras: facts for offline tools (consumers per queue at the last close).
    """

    lsn: int
    image: StoreImage
    catalogue: List[SegmentSummary]
    liveness: Dict[str, Any] = field(default_factory=dict)
    extras: Dict[str, Any] = field(default_factory=dict)


def _val(key: bytes, obj: Any) -> bytes:
    body = msgpack.packb(obj, use_bin_type=True)
    return body + crc32c(body, crc32c(key)).to_bytes(4, "little")


def _unval(table: str, key: bytes, value: bytes) -> Any:
    body, stored = value[:-4], value[-4:]
    if len(value) < 5 or crc32c(body, crc32c(key)).to_bytes(4, "little") != stored:
        raise IndexInvalidError(f"CRC mismatch in index table {table!r}")
    return msgpack.unpackb(body, raw=False, strict_map_key=False)


def _loc(loc: Optional[Location]) -> Optional[List[int]]:
    return None if loc is None else list(loc)


def _unloc(raw: Optional[List[int]]) -> Optional[Location]:
    return None if raw is None else Location(*raw)


def encode(cp: Checkpoint) -> Tables:
    """Encode a checkpoint into tables (see the module docstring)."""
    img = cp.image
    t: Tables = {name: {} for name in TABLES}
    for a in img.addresses.values():
        k = _ID.pack(a.id)
        t["addr"][k] = _val(k, [a.name, list(a.routing_types), a.auto_created, list(a.location)])
    for q in img.queues.values():
        k = _ID.pack(q.id)
        t["queue"][k] = _val(k, [q.name, q.address, q.routing_type, q.config, list(q.location),
                                 _loc(q.update_location)])
        for r in q.refs.values():
            rk = _REF.pack(q.id, r.order[0], r.order[1])
            t["ref"][rk] = _val(rk, [r.mid, r.delivery_count, _loc(r.delivery_location),
                                     r.in_delivery])
    for match, (values, loc) in img.settings.items():
        k = match.encode("utf-8")
        t["settings"][k] = _val(k, [values, list(loc)])
    for m in img.messages.values():
        k = _ID.pack(m.mid)
        t["msg"][k] = _val(k, [m.address, list(m.location), m.slot, m.properties, m.timestamp,
                               m.expiration, m.priority, m.body_size, m.refcount])
    for loc, tx in img.txs.items():
        k = _LOC.pack(loc.segment, loc.offset)
        t["tx"][k] = _val(k, [loc.length, tx.remaining, [list(x) for x in tx.ack_targets]])
    for seq, entries in cp.liveness.get("dead", {}).items():
        k = _ID.pack(int(seq))
        t["jdead"][k] = _val(k, entries)
    for loc, seqs in cp.liveness.get("pins", []):
        k = _LOC.pack(loc[0], loc[1])
        t["jpin"][k] = _val(k, [loc[2], list(seqs)])
    meta = {"version": VERSION, "lsn": cp.lsn, "next_id": img.next_id,
            "catalogue": [list(s) for s in cp.catalogue],
            "counts": {name: len(t[name]) for name in TABLES if name != "meta"},
            "extras": cp.extras}
    t["meta"][b"checkpoint"] = _val(b"checkpoint", meta)
    return t


def decode(tables: Mapping[str, Iterable[Tuple[bytes, bytes]]]) -> Checkpoint:
    """Decode and verify tables into a checkpoint.

    Raises:
        IndexInvalidError: a CRC mismatch, a count mismatch, a missing entry or a version this
            code does not read; nothing of the index is then to be trusted.
    """
    rows = {name: list(tables.get(name, ())) for name in TABLES}
    metas = dict(rows["meta"])
    if b"checkpoint" not in metas:
        raise IndexInvalidError("no checkpoint in the index")
    meta = _unval("meta", b"checkpoint", metas[b"checkpoint"])
    if meta.get("version") != VERSION:
        raise IndexInvalidError(f"index version {meta.get('version')} is not {VERSION}")
    for name, count in meta["counts"].items():
        if len(rows[name]) != count:
            raise IndexInvalidError(f"index table {name!r} has {len(rows[name])} entries, "
                                    f"the checkpoint says {count}")
    img = StoreImage(last_lsn=meta["lsn"], next_id=meta["next_id"])
    for k, v in rows["addr"]:
        name, rts, auto, loc = _unval("addr", k, v)
        aid = _ID.unpack(k)[0]
        img.addresses[aid] = AddressImage(aid, name, tuple(rts), auto, Location(*loc))
    for k, v in rows["queue"]:
        name, addr, rt, cfg, loc, uloc = _unval("queue", k, v)
        qid = _ID.unpack(k)[0]
        img.queues[qid] = QueueImage(qid, name, addr, rt, cfg, Location(*loc),
                                     update_location=_unloc(uloc))
    for k, v in rows["settings"]:
        values, loc = _unval("settings", k, v)
        img.settings[k.decode("utf-8")] = (values, Location(*loc))
    for k, v in sorted(rows["ref"]):
        qid, lsn, slot = _REF.unpack(k)
        mid, count, dloc, busy = _unval("ref", k, v)
        if qid not in img.queues:
            raise IndexInvalidError("a reference to a queue the index does not hold")
        img.queues[qid].refs[mid] = RefImage(mid, (lsn, slot), count, _unloc(dloc), bool(busy))
    for k, v in rows["msg"]:
        addr, loc, slot, props, ts, exp, prio, size, refs = _unval("msg", k, v)
        mid = _ID.unpack(k)[0]
        img.messages[mid] = MessageImage(mid, addr, Location(*loc), slot, props, ts, exp, prio,
                                         size, refs)
    for k, v in rows["tx"]:
        seg, off = _LOC.unpack(k)
        length, remaining, targets = _unval("tx", k, v)
        img.txs[Location(seg, off, length)] = TxImage(remaining, [Location(*x) for x in targets])
    dead = {_ID.unpack(k)[0]: _unval("jdead", k, v) for k, v in rows["jdead"]}
    pins = []
    for k, v in rows["jpin"]:
        seg, off = _LOC.unpack(k)
        length, seqs = _unval("jpin", k, v)
        pins.append([[seg, off, length], seqs])
    _check_refs(img)
    return Checkpoint(meta["lsn"], img, [SegmentSummary(*s) for s in meta["catalogue"]],
                      {"dead": dead, "pins": pins}, dict(meta.get("extras") or {}))


def _check_refs(img: StoreImage) -> None:
    counts: Dict[int, int] = {}
    for q in img.queues.values():
        for mid in q.refs:
            if mid not in img.messages:
                raise IndexInvalidError("a reference to a message the index does not hold")
            counts[mid] = counts.get(mid, 0) + 1
    for m in img.messages.values():
        if counts.get(m.mid, 0) != m.refcount:
            raise IndexInvalidError(f"message {m.mid} reference count does not match")
