"""Journal entries as columns: the one row builder of the Spark source and the plain reader.

``EntryColumns`` turns frames (and damage) into column lists in the Spark schema's order, so a
partition becomes a ``pyarrow.RecordBatch`` without a dict per row. It imports neither pyspark
nor pyarrow: ``plain_scan`` uses it to count rows in a single process (the benchmark baseline
and the tests' reference).

Schema (``SCHEMA``; times are ms since the epoch)::

    segment long, offset long, lsn long, record_kind string, transaction_id long,
    message_id long, address string, queue string, durable boolean, timestamp long,
    expiration long, scheduled_time long, delivery_count int, properties map<string,string>,
    body_size int, body binary, crc_ok boolean, error string, record_bytes int

``record_bytes`` is the size of the journal record a row comes from (frame header, payload and
CRC, in bytes), the same on every row of a record that holds several (a TX record's messages
and acks, a DUE or DEPAGE record's references and acks): totals of bytes count each
``(segment, offset)`` once. A DAMAGED row has the length of the damaged span.
"""

from __future__ import annotations

import contextlib
import gc
import struct
from typing import (Any, Callable, Dict, Iterator, List, Mapping, NamedTuple, Optional, Sequence,
                    Tuple)

import msgpack

from mqstore.journal.inspect import Damage, Frame
from mqstore.journal.segment import FrameInfo
from mqstore.recovery.schema import RecordKind

SCHEMA = ("segment long, offset long, lsn long, record_kind string, transaction_id long, "
          "message_id long, address string, queue string, durable boolean, timestamp long, "
          "expiration long, scheduled_time long, delivery_count int, "
          "properties map<string,string>, body_size int, body binary, crc_ok boolean, "
          "error string, record_bytes int")
NAMES = [c.split()[0] for c in SCHEMA.split(", ")]
HEADER_COLUMNS = frozenset({"segment", "offset", "lsn", "record_kind", "crc_ok", "error",
                            "record_bytes"})
ROW_COLUMNS = len(NAMES) - 1  # the columns a row tuple fills (the compiled scan fills all)
KIND_NAMES = {int(k): k.name for k in RecordKind}
MESSAGE, ACK, TX = int(RecordKind.MESSAGE), int(RecordKind.ACK), int(RecordKind.TX)
KIND_TUPLE = tuple(KIND_NAMES.get(k, "UNKNOWN") for k in range(256))

try:  # the compiled scan (setup.py builds it; optional): same rows, about 10x faster
    from ._scan import kind_offsets as _kind_offsets
    from ._scan import scan as _compiled_scan
except ImportError:  # pragma: no cover - exercised only where the extension was not built
    _compiled_scan = _kind_offsets = None
_HEAD = struct.Struct("<IBBHQQQ").unpack_from
_U32 = struct.Struct("<I").unpack_from


class _At(NamedTuple):
    """Offset and LSN of a record (what the row builders need of a frame)."""

    offset: int
    lsn: int


class _Decoded(NamedTuple):
    """A decoded record handed to the generic builder."""

    offset: int
    lsn: int
    kind: int
    payload: Any


def _text(v: Any) -> str:
    return v.hex() if isinstance(v, (bytes, bytearray)) else str(v)


def _props(p: Any) -> Optional[Tuple[Tuple[str, str], ...]]:
    """Properties as (str, str) pairs (the map column's row form: Arrow converts pairs about
    6x faster than dicts), or None."""
    if not p:
        return None
    return tuple({k if k.__class__ is str else str(k): v if v.__class__ is str else _text(v)
                  for k, v in p.items()}.items())


class EntryColumns:
    """Column lists for entries of one partition.

    Args:
        queue_names: queue id -> name (built on the driver from QUEUE_ADD records).
        with_body: fill the ``body`` column (else null; ``body_size`` is always set).
        kinds: keep only entries of these kinds (``None``: all).
        lsn_min, lsn_max: keep only frames with LSN in the range (damage rows always kept).
        header_only: only the frame-header columns are wanted (``HEADER_COLUMNS``): payloads
            are not decoded, except TX records, which are one row per message and ack.
    """

    def __init__(self, queue_names: Mapping[int, str], with_body: bool = False,
                 kinds: Optional[Sequence[str]] = None, lsn_min: Optional[int] = None,
                 lsn_max: Optional[int] = None, header_only: bool = False,
                 compiled: bool = True) -> None:
        self.header_only = header_only
        self.names = queue_names
        self.with_body = with_body
        self.kinds = set(kinds) if kinds else None
        self.lsn_min = lsn_min
        self.lsn_max = lsn_max
        self.cols: List[List[Any]] = [[] for _ in NAMES]  # (the compiled scan fills them)
        self._damage: Dict[int, int] = {}  # offset of a damage row not yet sized -> its bytes
        self.rows: List[tuple] = []  # rows built in Python, not yet moved into ``cols``
        self._joined: Dict[tuple, str] = {}
        want = (lambda k: self.kinds is None or k in self.kinds)
        # the compiled scan (when built, and not for header-only scans: Python's is fast there)
        self._fast = _compiled_scan if compiled and not header_only else None
        self._ctx = ({int(k): str(v) for k, v in queue_names.items()}, {}, KIND_TUPLE,
                     with_body, want("MESSAGE"), want("ACK"), want("DELIVERY"),
                     -1 if lsn_min is None else lsn_min, -1 if lsn_max is None else lsn_max)

    def __len__(self) -> int:
        return len(self.cols[0]) + len(self.rows)

    def _flush_rows(self) -> None:
        """Move the rows built in Python into the columns, after the rows already there."""
        rows = self.rows
        for i in range(0, len(rows), 8192):  # transposed in cache-sized chunks (3x faster)
            for col, part in zip(self.cols, zip(*rows[i:i + 8192])):
                col.extend(part)
        rows.clear()

    def take_rows(self) -> List[Dict[str, Any]]:
        """The rows so far as dicts (column name -> value); the builder starts empty again."""
        cols = self.take()
        out = [dict(zip(NAMES, r)) for r in zip(*(cols[n] for n in NAMES))]
        for row in out:
            if row["properties"] is not None:
                row["properties"] = dict(row["properties"])
        return out

    def take(self) -> Dict[str, List[Any]]:
        """The columns so far (name -> list of values, one per row, in scan order); the builder
        starts empty again."""
        self._flush_rows()
        self._size_records(None, 0)
        cols, self.cols = self.cols, [[] for _ in NAMES]
        return dict(zip(NAMES, cols))

    def _size_records(self, buf: Optional[bytes], base: int) -> None:
        """Fill ``record_bytes`` for the rows that lack it: the frame length read at the row's
        offset in ``buf`` (``buf[i]`` is file offset ``base + i``), a damaged span's length on
        a DAMAGED row (``None`` when unknown)."""
        offsets, out = self.cols[1], self.cols[ROW_COLUMNS]
        start, end = len(out), len(offsets)
        if start == end:
            return
        damage, u32, last = self._damage, _U32, -1
        size: Optional[int] = None
        append = out.append
        for i in range(start, end):
            off = offsets[i]
            if off != last:  # the rows of one record are consecutive
                last = off
                size = damage.pop(off, None)
                if size is None and buf is not None and 0 <= off - base <= len(buf) - 4:
                    size = u32(buf, off - base)[0]
            append(size)

    def _row(self, seg: int, off: int, lsn: Optional[int], kind: str, tx: Optional[int],
             mid: Optional[int], addr: Optional[str], queue: Optional[str],
             durable: Optional[bool], ts: Optional[int], exp: Optional[int],
             dc: Optional[int], props: Any, size: Optional[int], body: Optional[bytes],
             ok: bool, error: Optional[str], sched: Optional[int] = None) -> None:
        if self.kinds is not None and kind not in self.kinds and ok:
            return
        self.rows.append((seg, off, lsn, kind, tx, mid, addr, queue, durable, ts, exp, sched,
                          dc, props, size, body, ok, error))

    def add(self, seg: int, item: Any) -> None:
        """Add the entries of one scanned item (a ``Frame`` or a ``Damage``)."""
        if isinstance(item, _Decoded):
            return self._payload_rows(seg, item.offset, item.lsn, item.kind, self._add_payload,
                                      seg, item, item.kind, item.payload)
        if isinstance(item, Damage):
            self._damage[item.offset] = item.end - item.offset
            self._row(seg, item.offset, None, "DAMAGED", None, None, None, None, None, None,
                      None, None, None, None, None, False,
                      f"{item.reason} ({item.end - item.offset} bytes)")
            return
        info = item.info
        if (self.lsn_min is not None and info.lsn < self.lsn_min) or \
                (self.lsn_max is not None and info.lsn > self.lsn_max):
            return
        try:
            p = msgpack.unpackb(item.payload, raw=False, strict_map_key=False)
        except Exception as exc:  # noqa: BLE001 - any decoding failure is a damaged row
            self._row(seg, info.offset, info.lsn, KIND_NAMES.get(info.kind, "UNKNOWN"), None,
                      None, None, None, None, None, None, None, None, None, None, False,
                      f"payload not decodable: {exc}")
            return
        self._payload_rows(seg, info.offset, info.lsn, info.kind, self._add_payload, seg, info,
                           info.kind, p)

    def _payload_rows(self, seg: int, off: int, lsn: int, kind: int,
                      build: Callable[..., None], *args: Any) -> None:
        """Run ``build(*args)``, which adds the rows of one decoded record; a payload of a
        shape it cannot read (a CRC-valid record only a buggy writer makes: not a map, a field
        of the wrong type) becomes one damaged row instead of failing the scan, and any rows
        the record had added are taken back."""
        mark = len(self.rows)
        try:
            build(*args)
        except (AttributeError, TypeError, ValueError, KeyError) as exc:
            del self.rows[mark:]
            self._row(seg, off, lsn, KIND_NAMES.get(kind, "UNKNOWN"), None, None, None, None,
                      None, None, None, None, None, None, None, False,
                      f"payload has an unexpected shape: {type(exc).__name__}: {exc}")

    def _add_payload(self, seg: int, info: Any, kind: int, p: Any) -> None:
        if kind == RecordKind.MESSAGE:
            self._message(seg, info, p, None)
        elif kind == RecordKind.ACK:
            self._ack(seg, info, p, None)
        elif kind == RecordKind.TX:
            tx = p.get("tx")
            for m in p.get("msgs", ()):
                self._message(seg, info, m, tx)
            for a in p.get("acks", ()):
                self._ack(seg, info, a, tx)
        elif kind == RecordKind.DEPAGE:  # paged messages joined their queues; ring/LVQ acks
            self._row(seg, info.offset, info.lsn, "DEPAGE", None, None, p.get("addr"), None,
                      None, None, None, None, None, None, None, True, None)
            for a in p.get("acks", ()):
                self._ack(seg, info, a, None)
        elif kind == RecordKind.DELIVERY:  # with "at": returned through the scheduled buffer
            self._row(seg, info.offset, info.lsn, "DELIVERY", None, p.get("m"), None,
                      self._q(p.get("q")), None, None, None, p.get("n"), None, None, None, True,
                      None, p.get("at") or None)
        elif kind == RecordKind.DUE:  # scheduled messages joined the queue's head: one row each
            queue = self._q(p.get("q"))
            for mid in p.get("m", ()):
                self._row(seg, info.offset, info.lsn, "DUE", None, mid, None, queue, None,
                          None, None, None, None, None, None, True, None)
            for a in p.get("acks", ()):
                self._ack(seg, info, a, None)
        else:
            name = KIND_NAMES.get(kind, f"UNKNOWN({kind})")
            queue = p.get("name") if kind in (RecordKind.QUEUE_ADD,) else (
                self._q(p.get("id")) if kind in (RecordKind.QUEUE_DEL, RecordKind.QUEUE_UPDATE)
                else None)
            addr = p.get("addr") if kind == RecordKind.QUEUE_ADD else (
                p.get("name") if kind == RecordKind.ADDRESS_ADD else p.get("match"))
            props = _props(p.get("cfg") or p.get("settings")) if isinstance(p, dict) else None
            self._row(seg, info.offset, info.lsn, name, None, None, addr, queue, None, None,
                      None, None, props, None, None, True, None)

    def scan_segment(self, seg: int, buf: bytes, max_frame: int = 16 << 20) -> Optional[Any]:
        """Add every entry of a whole segment file's bytes ``buf``; a file without a valid
        header is one damage row. Returns the decoded header (``None``: not valid)."""
        from mqstore.journal.format import SEGMENT_HEADER_SIZE, decode_segment_header
        header = decode_segment_header(buf)
        if header is None:
            self.add(seg, Damage(0, len(buf), "bad segment header"))
        else:
            self.scan(seg, buf, header.generation, SEGMENT_HEADER_SIZE, len(buf), 0, max_frame)
        return header

    def scan(self, seg: int, buf: bytes, generation: int, first: int, stop: int, base: int = 0,
             max_frame: int = 16 << 20) -> None:
        """Add every entry of the frames starting in ``[first, stop)`` of ``buf`` (``buf[i]`` is
        file offset ``base + i``): a fast loop for valid frames (the compiled scan when built,
        handing this loop any frame it does not decode itself); at the first invalid one the
        tolerant scanner takes over (damage rows, resynchronisation)."""
        self._flush_rows()
        self._size_records(None, 0)  # rows added before (``add``) are not of this buffer
        self._scan(seg, buf, generation, first, stop, base, max_frame)
        self._flush_rows()
        self._size_records(buf, base)

    def _scan(self, seg: int, buf: bytes, generation: int, first: int, stop: int, base: int,
              max_frame: int) -> None:
        from mqstore.journal.crc import crc32c
        from mqstore.journal.inspect import scan_buffer
        head = _HEAD
        u32 = _U32
        unpack = msgpack.unpackb
        view = memoryview(buf)
        n = len(buf)
        pos = first
        last = 0
        lo, hi = self.lsn_min, self.lsn_max
        kinds = self.kinds
        header_only = self.header_only
        message, ack, other = self._message_fast, self._ack, self.add_decoded
        fast, ctx = self._fast, self._ctx
        while pos < stop:
            if fast is not None:
                if self.rows:
                    self._flush_rows()
                    self._size_records(buf, base)  # the compiled scan fills every column
                pos, status, last = fast(self.cols, buf, pos, stop, generation, max_frame, seg,
                                         base, last, ctx)
                if status == 0 or status == 3:
                    return
                if status == 2:
                    break
            if n - pos < 4:
                break
            flen = u32(buf, pos)[0]
            if flen == 0:
                if any(view[pos:n]):
                    break  # damage after the end marker: the tolerant scanner reports it
                return
            if flen < 36 or flen > max_frame or n - pos < flen:
                break
            _l, kind, flags, res, lsn, gen, _s = head(buf, pos)
            end = pos + flen
            if kind == 0 or flags or res or gen != generation or lsn <= last or \
                    crc32c(view[pos:end - 4]) != u32(buf, end - 4)[0]:
                break
            last = lsn
            off = base + pos
            pos = end
            if (lo is not None and lsn < lo) or (hi is not None and lsn > hi):
                continue
            if kinds is not None and KIND_NAMES.get(kind) not in kinds and kind != TX:
                continue
            if header_only and kind != TX:
                self.rows.append((seg, off, lsn, KIND_NAMES.get(kind, "UNKNOWN"), None, None,
                                  None, None, None, None, None, None, None, None, None, None,
                                  True, None))
                continue
            try:
                p = unpack(view[off - base + 32:end - 4], raw=False, strict_map_key=False)
            except Exception as exc:  # noqa: BLE001 - an undecodable payload is a damaged row
                self._row(seg, off, lsn, KIND_NAMES.get(kind, "UNKNOWN"), None, None, None,
                          None, None, None, None, None, None, None, None, False,
                          f"payload not decodable: {exc}")
                continue
            if kind == MESSAGE:
                self._payload_rows(seg, off, lsn, kind, message, seg, off, lsn, p, None)
            elif kind == ACK:
                self._payload_rows(seg, off, lsn, kind, ack, seg, _At(off, lsn), p, None)
            else:
                self._payload_rows(seg, off, lsn, kind, other, seg, off, lsn, kind, p)
        else:
            return
        for item in scan_buffer(buf, generation, max_frame, pos, stop):
            if isinstance(item, Frame):
                info = item.info
                item = Frame(FrameInfo(info.offset + base, info.frame_len, info.kind, info.lsn,
                                       info.synced_lsn), item.payload)
            else:
                item = Damage(item.offset + base, item.end + base, item.reason)
            self.add(seg, item)

    def _message_fast(self, seg: int, off: int, lsn: int, m: Mapping[str, Any],
                      tx: Optional[int]) -> None:
        if self.kinds is not None and "MESSAGE" not in self.kinds:
            return
        body = m.get("body", b"")
        qs = m.get("q", ())
        key = tuple(qs)
        queues = self._joined.get(key)
        if queues is None:
            queues = self._joined[key] = ",".join(self._q(q) or "" for q in qs)
        props = m.get("props")
        self.rows.append((seg, off, lsn, "MESSAGE", tx, m.get("mid"), m.get("addr"), queues,
                          True, m.get("ts") or None, m.get("exp") or None, m.get("at") or None,
                          None,
                          _props(props) if props else None, len(body),
                          body if self.with_body else None, True, None))

    def add_decoded(self, seg: int, off: int, lsn: int, kind: int, p: Any) -> None:
        """Entries of a decoded record other than MESSAGE and ACK (TX expands)."""
        if kind == TX:
            tx = p.get("tx")
            for m in p.get("msgs", ()):
                self._message_fast(seg, off, lsn, m, tx)
            at = _At(off, lsn)
            for a in p.get("acks", ()):
                self._ack(seg, at, a, tx)
            return
        self.add(seg, _Decoded(off, lsn, kind, p))

    def _q(self, qid: Any) -> Optional[str]:
        if qid is None:
            return None
        return self.names.get(qid) or f"#{qid}"

    def _message(self, seg: int, info: Any, m: Mapping[str, Any], tx: Optional[int]) -> None:
        self._message_fast(seg, info.offset, info.lsn, m, tx)

    def _ack(self, seg: int, info: Any, a: Mapping[str, Any], tx: Optional[int]) -> None:
        self._row(seg, info.offset, info.lsn, "ACK", tx, a.get("m"), None, self._q(a.get("q")),
                  None, None, None, None, (("reason", str(a.get("r", ""))),), None, None,
                  True, None)


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while rows are built: millions of fresh tuples and
    dicts (none in a cycle) would otherwise trigger collections that cost a third of the
    scan. The previous state is restored."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def plain_scan(directory: str, on_batch: Optional[Callable[[Dict[str, List[Any]]], None]] = None,
               with_body: bool = False, batch: int = 65536) -> int:
    """Read every entry of a store in one process, the way the Spark source does; return the
    number of rows (the benchmark's baseline and the tests' reference)."""
    names = queue_names_of(directory)
    cols = EntryColumns(names, with_body)
    rows = 0
    with gc_paused():
        rows = _plain(directory, cols, on_batch, batch)
    return rows


def _plain(directory: str, cols: "EntryColumns",
           on_batch: Optional[Callable[[Dict[str, List[Any]]], None]], batch: int) -> int:
    from ..segments import MAX_FRAME, read_segment, segment_files
    rows = 0
    for f in segment_files(directory):
        cols.scan_segment(f.sequence, read_segment(f.path), MAX_FRAME)
        if len(cols) >= batch:
            rows += len(cols)
            out = cols.take()
            if on_batch:
                on_batch(out)
    rows += len(cols)
    if on_batch and len(cols):
        on_batch(cols.take())
    return rows


def queue_names_of(directory: str) -> Dict[int, str]:
    """Queue id -> name from every QUEUE_ADD record of a store (deleted queues included)."""
    from ..segments import read_segment, segment_files
    names: Dict[int, str] = {}
    for f in segment_files(directory):
        names.update(queue_names_in(read_segment(f.path)))
    return names


def queue_names_in(buf: bytes, max_frame: int = 16 << 20, compiled: bool = True
                   ) -> Dict[int, str]:
    """Queue id -> name from the QUEUE_ADD records of one segment's bytes: a header-only walk
    that decodes (and CRC-checks) QUEUE_ADD frames only; damage falls back to the tolerant
    scanner."""
    from mqstore.journal.crc import crc32c
    from mqstore.journal.format import decode_segment_header
    from mqstore.journal.inspect import scan_buffer
    header = decode_segment_header(buf)
    if header is None:
        return {}
    names: Dict[int, str] = {}
    view, n, pos = memoryview(buf), len(buf), 64
    qadd = int(RecordKind.QUEUE_ADD)

    def take(payload: bytes) -> None:
        try:
            p = msgpack.unpackb(payload, raw=False, strict_map_key=False)
            names[int(p["id"])] = str(p["name"])
        except Exception:  # noqa: BLE001 - a damaged record names nothing
            pass

    if compiled and _kind_offsets is not None:
        pos, status, offsets = _kind_offsets(buf, pos, max_frame, qadd)
        for off in offsets:
            take(bytes(view[off + 32:off + _U32(buf, off)[0] - 4]))
        if status == 0:
            return names
    else:
        while n - pos >= 32:
            flen, kind = _U32(buf, pos)[0], buf[pos + 4]
            if flen == 0:
                return names
            if flen < 36 or flen > max_frame or pos + flen > n:
                break
            if kind == qadd:
                if crc32c(view[pos:pos + flen - 4]) != _U32(buf, pos + flen - 4)[0]:
                    break
                take(bytes(view[pos + 32:pos + flen - 4]))
            pos += flen
        else:
            return names
    for item in scan_buffer(buf, header.generation, max_frame, pos):
        if isinstance(item, Frame) and item.info.kind == qadd:
            take(item.payload)
    return names


