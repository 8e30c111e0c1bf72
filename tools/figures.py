"""What the journal report says, judged from the records alone: the rules, and their reference
computation in one process.

The report (``tools.spark.report``) computes these figures with Spark at any journal size
(``tools.spark.figures``); ``plain_figures`` computes the same tables from the plain reader's
rows in one process, holding every message reference in memory: it is the tests' reference and
a check on small stores, not a tool for a 100M-record journal.

Liveness from the records' own acks (what a compaction would keep; ActiveMQ massive queues: a
journal file is reclaimed once no record in it is needed):

- a message's reference on a queue is **gone** once an ACK of it on that queue is in the journal
  (any reason), or a QUEUE_DEL of that queue comes after the message (a queue deleted without an
  alternate address drops its messages with no ack);
- a MESSAGE is live while one of its references is not gone;
- an ACK (a tombstone) is live while the record holding the message it cancels is in the
  journal and either is live itself (a TX record sends many messages, and may be kept by its
  own acks in turn) or is in another segment (the ack must outlive it there, or a replay
  would bring it back); an ack whose message is gone from the journal is dead;
- a DELIVERY is live while its reference is, and only the newest one of that reference;
- a DUE row is live while its reference is;
- a QUEUE_ADD is live until a QUEUE_DEL of that queue comes after it; a SETTINGS record until a
  newer one for the same match, and a removal (no settings) only while an earlier entry of
  that match is in another segment (it is a tombstone too; an empty settings entry reads as
  a removal); every other record (addresses, QUEUE_DEL, QUEUE_UPDATE, DEPAGE) counts as live:
  a few small records, which never decide a reclaim;
- a record is live when one of its rows is (a TX record holds messages and acks); damaged rows
  (``crc_ok`` false: a damaged span, a record that cannot be decoded) are neither live nor
  dead: their bytes are reported apart, and they count in no other table.

The engine's own accounting (``journal.liveness``, kept by the broker as it writes) follows
the same rules: on the tests' store with every record kind, and on the demo's 1.7M entries, the
two agree record for record. Where the engine knows more than the records show (the messages a
DEPAGE record moved, an empty settings entry) it can call a few small records dead that these
rules count as live.

Tables (lists of dicts, the keys below, in this order):

``segment_bytes``: segment, records, live_records, bytes, live_bytes, dead_bytes, damaged_bytes
``bytes_by_kind``: kind (a TX record is TX), records, bytes, live_bytes
``bytes_by_address``: address (of a record's messages), records, bytes, live_bytes
``unacked_per_queue``: queue, unacked (live references), oldest_ms, newest_ms (send times, ms
since the epoch), live_bytes (records of those messages: a message on two queues counts for
both), pinned_from (the oldest segment holding one: no segment from there on can be
reclaimed while it waits)
``queue_activity``: queue, sent (references), acked (acks, any reason), redelivered (references
delivered more than once), max_delivery_count, dead_lettered (acks with reason ``killed``:
past max delivery attempts)
``acks_by_reason``: queue, reason, acks
``oldest_unacked_messages``: queue, message_id, timestamp, segment (the ``STUCK_PER_QUEUE``
oldest live references of each queue, by send time then id)
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Dict, Iterable, List, Optional, Set, Tuple

STUCK_PER_QUEUE = 5  # the oldest unacked messages listed per queue
CONFIG_KINDS = ("ADDRESS_ADD", "ADDRESS_DEL", "QUEUE_DEL", "QUEUE_UPDATE", "DEPAGE")
KILLED = "killed"  # the ack reason of a message past its max delivery attempts

TABLES: Dict[str, Tuple[str, ...]] = {
    "segment_bytes": ("segment", "records", "live_records", "bytes", "live_bytes", "dead_bytes",
                      "damaged_bytes"),
    "bytes_by_kind": ("kind", "records", "bytes", "live_bytes"),
    "bytes_by_address": ("address", "records", "bytes", "live_bytes"),
    "unacked_per_queue": ("queue", "unacked", "oldest_ms", "newest_ms", "live_bytes",
                          "pinned_from"),
    "queue_activity": ("queue", "sent", "acked", "redelivered", "max_delivery_count",
                       "dead_lettered"),
    "acks_by_reason": ("queue", "reason", "acks"),
    "oldest_unacked_messages": ("queue", "message_id", "timestamp", "segment"),
}


def queues_of(row: Dict[str, Any]) -> List[str]:
    """The queue names of a MESSAGE row (its ``queue`` column is a comma-joined list)."""
    return [q for q in (row.get("queue") or "").split(",") if q]


def reason_of(row: Dict[str, Any]) -> str:
    """An ACK row's reason ("" when the record had none)."""
    return str((row.get("properties") or {}).get("reason", ""))


class _Refs:
    """Every message reference of a journal and what ends it (the reference run's state)."""

    def __init__(self, rows: List[Dict[str, Any]]) -> None:
        ok = [r for r in rows if r["crc_ok"]]
        self.acked = {(r["queue"], r["message_id"]) for r in ok if r["record_kind"] == "ACK"}
        self.deleted: Dict[str, int] = {}
        for r in ok:
            if r["record_kind"] == "QUEUE_DEL" and r["queue"] is not None:
                self.deleted[r["queue"]] = max(self.deleted.get(r["queue"], -1), r["lsn"])
        self.messages = [r for r in ok if r["record_kind"] == "MESSAGE"]
        self.by_mid: Dict[Any, List[Dict[str, Any]]] = defaultdict(list)
        for m in self.messages:
            self.by_mid[m["message_id"]].append(m)

    def live(self, queue: str, mid: Any, lsn: int) -> bool:
        """Whether the reference of message ``mid`` (sent at ``lsn``) on ``queue`` is live."""
        return (queue, mid) not in self.acked and self.deleted.get(queue, -1) < lsn

    def message_live(self, m: Dict[str, Any]) -> bool:
        return any(self.live(q, m["message_id"], m["lsn"]) for q in queues_of(m))

    def ref_live(self, queue: str, mid: Any) -> bool:
        """Whether some message ``mid`` is live on ``queue``."""
        return any(queue in queues_of(m) and self.live(queue, mid, m["lsn"])
                   for m in self.by_mid.get(mid, ()))


def row_live(row: Dict[str, Any], refs: _Refs, newest_delivery: Dict[Any, int],
             newest_settings: Dict[Any, Tuple[int, set]]) -> bool:
    """Whether one row (of a valid record, not an ACK: ``record_liveness``) keeps its record
    live, by the module's rules."""
    kind = row["record_kind"]
    if kind == "MESSAGE":
        return refs.message_live(row)
    if kind == "DELIVERY":
        key = (row["queue"], row["message_id"])
        return newest_delivery[key] == row["lsn"] and refs.ref_live(*key)
    if kind == "DUE":
        return refs.ref_live(row["queue"], row["message_id"])
    if kind == "QUEUE_ADD":
        return refs.deleted.get(row["queue"], -1) < row["lsn"]
    if kind == "SETTINGS":
        newest, segments = newest_settings[row["address"]]
        return newest == row["lsn"] and (row["properties"] is not None
                                         or bool(segments - {row["segment"]}))
    return kind in CONFIG_KINDS


def record_kind(rows: List[Dict[str, Any]]) -> str:
    """The kind of a record from its rows: TX for a transaction's, DUE or DEPAGE for those
    records (they hold acks too), else the rows' kind."""
    if any(r["transaction_id"] is not None for r in rows):
        return "TX"
    kinds = {r["record_kind"] for r in rows}
    for k in ("DUE", "DEPAGE"):
        if k in kinds:
            return k
    return rows[0]["record_kind"]


def _sorted(rows: Iterable[Dict[str, Any]], *keys: str) -> List[Dict[str, Any]]:
    return sorted(rows, key=lambda r: tuple((r[k] is None, r[k]) for k in keys))


def plain_figures(rows: List[Dict[str, Any]]) -> Dict[str, List[Dict[str, Any]]]:
    """The report's tables (module docstring) from every row of a journal, in one process.

    Args:
        rows: the plain reader's rows (``EntryColumns.take_rows``), every segment, any order.
    """
    refs = _Refs(rows)
    newest_delivery: Dict[Any, int] = {}
    newest_settings: Dict[Any, Tuple[int, set]] = {}
    for r in rows:
        if r["crc_ok"] and r["record_kind"] == "DELIVERY":
            key = (r["queue"], r["message_id"])
            newest_delivery[key] = max(newest_delivery.get(key, -1), r["lsn"])
        elif r["crc_ok"] and r["record_kind"] == "SETTINGS":
            lsn, segments = newest_settings.get(r["address"], (-1, set()))
            newest_settings[r["address"]] = (max(lsn, r["lsn"]), segments | {r["segment"]})
    records: Dict[Tuple[int, int], List[Dict[str, Any]]] = defaultdict(list)
    for r in rows:
        records[(r["segment"], r["offset"])].append(r)
    alive = record_liveness(records, refs, newest_delivery, newest_settings)
    segs: Dict[int, Dict[str, Any]] = {}
    kinds: Dict[str, Dict[str, Any]] = {}
    addresses: Dict[str, Dict[str, Any]] = {}
    for (seg, off), parts in records.items():
        s = segs.setdefault(seg, dict.fromkeys(TABLES["segment_bytes"], 0))
        s["segment"] = seg
        size = parts[0]["record_bytes"] or 0
        if not parts[0]["crc_ok"]:  # a damaged span, or a record it cannot decode
            s["damaged_bytes"] += size
            continue
        live = alive[(seg, off)]
        s["records"] += 1
        s["bytes"] += size
        s["live_records"] += live
        s["live_bytes"] += size if live else 0
        s["dead_bytes"] += 0 if live else size
        kind = record_kind(parts)
        for table, key in ((kinds, kind), (addresses, _address(parts))):
            if key is None:
                continue
            t = table.setdefault(key, {"records": 0, "bytes": 0, "live_bytes": 0})
            t["records"] += 1
            t["bytes"] += size
            t["live_bytes"] += size if live else 0
    out: Dict[str, List[Dict[str, Any]]] = {
        "segment_bytes": _sorted(segs.values(), "segment"),
        "bytes_by_kind": _sorted(({"kind": k, **v} for k, v in kinds.items()), "kind"),
        "bytes_by_address": _sorted(({"address": k, **v} for k, v in addresses.items()),
                                    "address"),
    }
    out.update(_queue_tables(rows, refs))
    return out


def record_liveness(records: Dict[Tuple[int, int], List[Dict[str, Any]]], refs: _Refs,
                    newest_delivery: Dict[Any, int], newest_settings: Dict[Any, Tuple[int, set]]
                    ) -> Dict[Tuple[int, int], bool]:
    """Which valid records are live: those live by their rows other than acks, those with an
    ack of a message in another segment, and those with an ack of a message in a live record
    of their own segment (``pinned``: a chain of such acks, as a last-value queue's
    replacements make, keeps every record on it live)."""
    valid = {k: p for k, p in records.items() if p[0]["crc_ok"]}
    roots: Dict[int, Set[int]] = defaultdict(set)
    edges: Dict[int, List[Tuple[int, int]]] = defaultdict(list)
    for (seg, off), parts in valid.items():
        if any(row_live(r, refs, newest_delivery, newest_settings)
               for r in parts if r["record_kind"] != "ACK"):
            roots[seg].add(off)
        for a in parts:
            if a["record_kind"] != "ACK":
                continue
            for m in refs.by_mid.get(a["message_id"], ()):
                if m["segment"] != seg:
                    roots[seg].add(off)
                elif m["offset"] != off:
                    edges[seg].append((off, m["offset"]))
    live = {(seg, off) for seg in set(roots) | set(edges)
            for off in pinned(roots.get(seg, ()), edges.get(seg, ()))}
    return {k: k in live for k in valid}


def pinned(roots: Iterable[int], edges: Iterable[Tuple[int, int]]) -> Set[int]:
    """The live records of one segment (by offset): ``roots`` (live by themselves) and every
    record with a chain of ``edges`` (record, record whose message its ack cancels) leading
    to one: an ack keeps its record live while the record it cancels in is."""
    back: Dict[int, List[int]] = defaultdict(list)
    for src, dst in edges:
        back[dst].append(src)
    live = set(roots)
    todo = list(live)
    while todo:
        for src in back.get(todo.pop(), ()):
            if src not in live:
                live.add(src)
                todo.append(src)
    return live


def _address(parts: List[Dict[str, Any]]) -> Optional[str]:
    """The address of a record's messages (of a DEPAGE record: its address), or None."""
    for r in parts:
        if r["record_kind"] in ("MESSAGE", "DEPAGE") and r["address"] is not None:
            return r["address"]
    return None


def _queue_tables(rows: List[Dict[str, Any]], refs: _Refs) -> Dict[str, List[Dict[str, Any]]]:
    waiting: Dict[str, List[Dict[str, Any]]] = defaultdict(list)
    sent: Dict[str, int] = defaultdict(int)
    for m in refs.messages:
        for q in queues_of(m):
            sent[q] += 1
            if refs.live(q, m["message_id"], m["lsn"]):
                waiting[q].append(m)
    unacked = []
    stuck = []
    for q, ms in waiting.items():
        times = [m["timestamp"] for m in ms if m["timestamp"] is not None]
        unacked.append({"queue": q, "unacked": len(ms), "oldest_ms": min(times, default=None),
                        "newest_ms": max(times, default=None),
                        "live_bytes": sum(m["record_bytes"] or 0 for m in ms),
                        "pinned_from": min(m["segment"] for m in ms)})
        first = _sorted(ms, "timestamp", "message_id")[:STUCK_PER_QUEUE]
        stuck += [{"queue": q, "message_id": m["message_id"], "timestamp": m["timestamp"],
                   "segment": m["segment"]} for m in first]
    reasons: Dict[Tuple[str, str], int] = defaultdict(int)
    counts: Dict[Tuple[Any, Any], int] = {}
    for r in rows:
        if not r["crc_ok"]:
            continue
        if r["record_kind"] == "ACK":
            reasons[(r["queue"], reason_of(r))] += 1
        elif r["record_kind"] == "DELIVERY" and r["delivery_count"] is not None:
            key = (r["queue"], r["message_id"])
            counts[key] = max(counts.get(key, 0), r["delivery_count"])
    activity = {}
    for q in set(sent) | {q for q, _r in reasons} | {q for q, _m in counts}:
        dcs = [n for (qq, _m), n in counts.items() if qq == q]
        activity[q] = {"queue": q, "sent": sent.get(q, 0),
                       "acked": sum(n for (qq, _r), n in reasons.items() if qq == q),
                       "redelivered": sum(1 for n in dcs if n > 1),
                       "max_delivery_count": max(dcs, default=None),
                       "dead_lettered": reasons.get((q, KILLED), 0)}
    return {
        "unacked_per_queue": _sorted(unacked, "queue"),
        "queue_activity": _sorted(activity.values(), "queue"),
        "acks_by_reason": _sorted(({"queue": q, "reason": r, "acks": n}
                                   for (q, r), n in reasons.items()), "queue", "reason"),
        "oldest_unacked_messages": _sorted(stuck, "queue", "timestamp", "message_id"),
    }
