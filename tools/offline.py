"""Offline access to a store directory for the ``mqstore`` commands.

``OfflineStore`` opens a store read-only: the journal without lock, truncation or any write, the
LMDB index read-only without its lock file, and recovery in memory. Nothing in the directory
changes (tested by checksumming it). ``iter_entries`` reads segment files with the Spark source's
row builder and its tolerant scanner, so damage shows up as rows instead of stopping a listing.
"""

from __future__ import annotations

import datetime
import itertools
import os
import time
from typing import Any, Callable, Collection, Dict, Iterator, List, Optional, Sequence

from mqstore.journal import JournalOptions, MqStoreError, OsFileSystem
from mqstore.recovery import INDEX_DIR, LmdbIndex, MemoryIndex, recover
from mqstore.recovery.schema import body_in
from .segments import (MAX_FRAME, SegmentFile, first_lsn, lsn_range_mask, read_segment,
                       segment_files)

__all__ = ["MAX_FRAME", "OfflineStore", "SegmentFile", "iso_ms", "iter_entries", "matches",
           "read_segment", "segment_files"]

class OfflineStore:
    """A store opened read-only for inspection.

    Raises:
        MqStoreError: no store there; CorruptJournalError when the journal is damaged beyond a
            torn tail (open with ``salvage=True`` to skip the damage).
    """

    def __init__(self, directory: str, salvage: bool = False, liveness: bool = False) -> None:
        segment_files(directory)  # a clear error when there is no store
        self.directory = directory
        idx_dir = os.path.join(directory, INDEX_DIR)
        self.index = LmdbIndex(idx_dir, read_only=True) if os.path.exists(
            os.path.join(idx_dir, "data.mdb")) else MemoryIndex()
        rec = recover(directory, JournalOptions(read_only=True, salvage=salvage),
                      OsFileSystem(), self.index, read_only=True, liveness=liveness)
        self.journal = rec.journal
        self.image = rec.image
        self.report = rec.report
        self.extras = _index_extras(self.index)

    def close(self) -> None:
        """Release the files."""
        self.journal.close()
        self.index.close()

    def __enter__(self) -> "OfflineStore":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def queue_rows(self) -> List[Dict[str, Any]]:
        """The qpid-config-style listing of queues."""
        img = self.image
        consumers = self.extras.get("consumers", {})
        counters = self.extras.get("counters", {})
        now = time.time()
        rows = []
        for q in sorted(img.queues.values(), key=lambda q: q.name):
            cfg = q.config
            count = delivering = size = 0
            oldest: Optional[int] = None
            for r in img.refs(q.id):  # streamed from the index: O(queue) time, not memory
                count += 1
                delivering += r.delivery_count > 0
                m = img.message(r.mid)
                if m is not None:
                    size += m.body_size
                    oldest = m.timestamp if oldest is None else min(oldest, m.timestamp)
            for r in img.all_scheduled(q.id):
                m = img.message(r.mid)
                size += m.body_size if m is not None else 0
            rows.append({"queue": q.name, "address": q.address, "routing_type": q.routing_type,
                         "durable": bool(cfg.get("durable", True)),
                         "auto_delete": bool(cfg.get("auto_delete", False)) or
                         bool(cfg.get("auto_created", False)),
                         "exclusive": bool(cfg.get("exclusive", False)),
                         "ring_size": int(cfg.get("ring_size", -1)),
                         "last_value_key": cfg.get("last_value_key"),
                         "non_destructive": bool(cfg.get("non_destructive", False)),
                         "bindings": 1,  # a queue is bound to its one address
                         "max_count": int(cfg.get("max_count", -1)),
                         "max_size": int(cfg.get("max_size", -1)),
                         "policy_type": _policy(cfg),
                         "qpid_lvq": cfg.get("qpid_lvq"),
                         "alternate_address": cfg.get("alt"),
                         "filter": cfg.get("filter"),
                         "messages": count + q.scheduled,
                         "paged": q.paged,
                         "delivering": delivering,
                         "scheduled": q.scheduled,
                         "consumers_at_last_close": consumers.get(q.name),
                         "bytes": size,
                         **_oldest(oldest, now),
                         **_last_run(counters.get(q.name))})
        return rows

    def deleted_rows(self) -> List[Dict[str, Any]]:
        """The deleted durable queues still listed (Qpid queues: a deleted queue's management
        object remains, with the time of deletion), oldest first: queue, address, routing
        type, deletion time (ISO-8601 UTC, and ms since the epoch)."""
        rows = []
        for d in self.image.deleted:
            rows.append({"queue": d.name, "address": d.address, "routing_type": d.routing_type,
                         "deleted": iso_ms(d.deleted_at),
                         "deleted_ms": d.deleted_at})
        return rows

    def scheduled_rows(self, queue: str, limit: int) -> List[Dict[str, Any]]:
        """Up to ``limit`` messages of ``queue``'s scheduled buffer in due order: message id,
        due time (ms since the epoch, and as ISO-8601 UTC), delivery count, body bytes and
        properties.

        Raises:
            MqStoreError: the store has no durable queue of that name.
        """
        img = self.image
        q = self._queue(queue)
        rows = []
        for r in img.scheduled_refs(q.id, None, limit):
            m = img.message(r.mid)
            rows.append({"message_id": r.mid, "due": iso_ms(r.at),
                         "due_ms": r.at, "delivery_count": r.delivery_count,
                         "bytes": m.body_size if m is not None else None,
                         "properties": m.properties if m is not None else None})
        return rows

    def browse_rows(self, queue: str, limit: int, with_body: bool = False
                    ) -> List[Dict[str, Any]]:
        """Up to ``limit`` messages of ``queue`` in the order consumers get them (Artemis
        browse, QueueControl.browse), without acquiring anything: message id, priority,
        delivery count (and whether it is in delivery), when sent (ISO-8601 UTC) and its age,
        expiration, body bytes, properties, and with ``with_body`` the body (text when UTF-8,
        else hex). Scheduled messages are listed by ``scheduled_rows``.

        Raises:
            MqStoreError: the store has no durable queue of that name.
        """
        img = self.image
        q = self._queue(queue)
        now = time.time()
        rows = []
        for r in itertools.islice(img.refs(q.id), limit):
            m = img.message(r.mid)
            if m is None:  # a reference without its message: reported by check
                continue
            age = age_s(m.timestamp, now)
            row = {"message_id": r.mid, "priority": m.priority,
                   "delivery_count": r.delivery_count, "in_delivery": r.delivery_count > 0,
                   "sent": iso_ms(m.timestamp, short=True), "sent_ms": m.timestamp,
                   "age": human_age(age), "age_s": age,
                   "expires": iso_ms(m.expiration) if m.expiration else None,
                   "bytes": m.body_size, "properties": m.properties}
            if with_body:
                row["body"] = body_text(body_in(self.journal.read(m.location).payload, m.slot))
            rows.append(row)
        return rows

    def settings_rows(self, address: str) -> List[Dict[str, Any]]:
        """The effective address settings of ``address`` (which need not exist yet: the
        settings a new address of that name would get): each setting, its value, and the
        match pattern it comes from (``None``: the default), merged as Artemis merges
        address-settings (least to most specific match; default wildcard syntax)."""
        from mqstore.engine import AddressSettings
        from mqstore.engine.config.settings import SettingsRepository
        repo = SettingsRepository()
        for match, (values, _loc) in self.image.settings.items():
            repo.set(match, AddressSettings.from_record(values))
        effective = repo.resolve(address).to_record()
        return [{"setting": name, "value": effective.get(name), "from": match}
                for name, match in repo.sources(address).items()]

    def _queue(self, name: str) -> Any:
        """The durable queue ``name`` of the image.

        Raises:
            MqStoreError: the store has no durable queue of that name.
        """
        q = next((q for q in self.image.queues.values() if q.name == name), None)
        if q is None:
            raise MqStoreError(f"the store has no durable queue {name!r}",
                               hint="list them with: mqstore queues DIRECTORY")
        return q

    def segment_rows(self) -> List[Dict[str, Any]]:
        """Per segment: records, bytes, live bytes and dead bytes (what compaction or reclaim
        would free); needs ``liveness=True``."""
        return [{"segment": s.sequence, "records": s.count, "live_records": s.live_count,
                 "bytes": s.total_bytes, "live_bytes": s.live_bytes,
                 "dead_bytes": s.total_bytes - s.live_bytes}
                for s in self.journal.segments()]

    def address_rows(self) -> List[Dict[str, Any]]:
        """The listing of addresses: routing types and queues (lists of names), references on
        them (messages),
        the durable messages they hold (each once) and their body bytes, paged ones apart."""
        img = self.image
        rows = []
        for a in sorted(img.addresses.values(), key=lambda a: a.name):
            queues = sorted(q.name for q in img.queues.values() if q.address == a.name)
            msgs = sum(q.count for q in img.queues.values() if q.address == a.name)
            held, size = img.ledger.size(a.name)
            state = img.ledger.pages.get(a.name)
            rows.append({"address": a.name, "routing_types": sorted(a.routing_types),
                         "queues": queues, "auto_created": a.auto_created,
                         "messages": msgs, "held": held, "bytes": size,
                         "paging": state is not None,
                         "paged": state.messages if state is not None else 0,
                         "paged_bytes": state.size if state is not None else 0})
        return rows


def _index_extras(index: Any) -> Dict[str, Any]:
    from mqstore.recovery.checkpoint import read_meta
    try:
        meta = read_meta(index)
    except MqStoreError:
        return {}
    return dict(meta.get("extras") or {}) if meta else {}


def iter_entries(directory: str, with_body: bool = False,
                 progress: Optional[Callable[[SegmentFile], None]] = None,
                 lsn_from: Optional[int] = None, lsn_to: Optional[int] = None,
                 kinds: Optional[Sequence[str]] = None,
                 segments: Optional[Collection[int]] = None,
                 read: Optional[List[int]] = None) -> Iterator[Dict[str, Any]]:
    """The entries of the segments as dicts (the Spark source's columns), in journal order;
    damaged bytes and undecodable payloads become rows with ``crc_ok=False`` and ``error``
    set (always kept). ``lsn_from``/``lsn_to`` (inclusive), ``kinds`` and ``segments`` (segment
    sequence numbers) keep only those entries, and no row is built for the others.

    Seeking: the segments' headers give the LSN each starts at, and LSNs grow with the
    sequence, so a segment whose successor starts at or below ``lsn_from``, or one not in
    ``segments``, is only walked for its QUEUE_ADD records (a queue's name comes from that
    record, which precedes every record naming it) and never scanned; reading stops at the
    first segment whose header says every LSN in it is above ``lsn_to``, or past the last of
    ``segments``. Memory: one segment's bytes and its kept rows. ``read``, when given, gets
    the sequence of every segment scanned for rows (for the caller's summary)."""
    from .spark.columns import EntryColumns, gc_paused, queue_names_in
    files = segment_files(directory)
    mask = lsn_range_mask([first_lsn(f.path) for f in files], lsn_from, lsn_to)
    names: Dict[int, str] = {}
    for f, (below, above) in zip(files, mask):
        if above or (segments is not None and f.sequence > max(segments, default=-1)):
            return
        wanted = not below and (segments is None or f.sequence in segments)
        buf = read_segment(f.path)
        if progress:
            progress(f)
        names.update(queue_names_in(buf, MAX_FRAME))
        if not wanted:
            continue
        if read is not None:
            read.append(f.sequence)
        cols = EntryColumns(names, with_body, kinds or None, lsn_from, lsn_to)
        with gc_paused():
            cols.scan_segment(f.sequence, buf, MAX_FRAME)
            rows = cols.take_rows()
        del buf
        yield from rows


def _oldest(timestamp: Optional[int], now: float) -> Dict[str, Any]:
    """The oldest message's send time (ISO-8601 UTC) and its age, in seconds and in human
    units, at ``now`` (seconds since the epoch); ``None`` on an empty queue."""
    if timestamp is None:
        return {"oldest": None, "oldest_age": None, "oldest_age_s": None}
    age = age_s(timestamp, now)
    return {"oldest": iso_ms(timestamp, short=True), "oldest_age": human_age(age),
            "oldest_age_s": age}


def _last_run(counters: Optional[Dict[str, int]]) -> Dict[str, Any]:
    """A queue's counters of the broker's last run (Artemis's messages added / acknowledged
    / killed / expired, and replaced), as its clean close recorded them; ``None`` when the
    last run did not end with a close (a crash, kill -9) or the queue was not there then."""
    c = counters or {}
    return {f"{k}_last_run": c.get(k) for k in ("added", "acked", "killed", "expired",
                                                  "replaced")}


def body_text(body: Optional[bytes]) -> str:
    """A body as the listings show it: UTF-8 text as is, anything else as a hex prefix."""
    if body is None:
        return ""
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        return body[:32].hex() + ("..." if len(body) > 32 else "")


def age_s(ms: int, now: float) -> int:
    """Whole seconds from ``ms`` (ms since the epoch) to ``now`` (seconds since the epoch),
    0 for a time in the future."""
    return max(0, int(now - ms / 1000))


def human_age(seconds: int) -> str:
    """An age in the two largest units: ``45s``, ``12m 5s``, ``3h 12m``, ``2d 4h``."""
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [(days, "d"), (hours, "h"), (minutes, "m"), (secs, "s")]
    while len(parts) > 1 and parts[0][0] == 0:
        parts.pop(0)
    return " ".join(f"{n}{unit}" for n, unit in parts[:2])


def iso_ms(ms: int, short: bool = False) -> str:
    """A time in ms since the epoch as ISO-8601 UTC with milliseconds
    (``2013-01-01T05:15:00.000+00:00``), or ``short`` to the second (``2013-01-01T05:15:00Z``,
    for narrow tables)."""
    when = datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc)
    if short:
        return when.strftime("%Y-%m-%dT%H:%M:%SZ")
    return when.isoformat(timespec="milliseconds")


def matches(row: Dict[str, Any], kinds: Sequence[str], address: Optional[str],
            queue: Optional[str], lsn_from: Optional[int], lsn_to: Optional[int],
            message_id: Optional[int]) -> bool:
    """Whether an entry row passes the ``mqstore print`` filters."""
    if kinds and row["record_kind"] not in kinds:
        return False
    if address and row.get("address") != address:
        return False
    if queue and queue not in (row.get("queue") or "").split(","):
        return False
    lsn = row.get("lsn")
    if lsn_from is not None and (lsn is None or lsn < lsn_from):
        return False
    if lsn_to is not None and (lsn is None or lsn > lsn_to):
        return False
    if message_id is not None and row.get("message_id") != message_id:
        return False
    return True


def _policy(cfg: Dict[str, Any]) -> Optional[str]:
    """The Qpid policy type in force on a queue of configuration ``cfg`` (a QUEUE_ADD record's
    settings), ``None`` when it has no size limit."""
    if int(cfg.get("max_count", -1)) <= 0 and int(cfg.get("max_size", -1)) <= 0:
        return None
    return str(cfg.get("policy_type") or
               ("flow_to_disk" if cfg.get("durable", True) else "reject"))
