"""The live index's tables: typed key-value tables over an index store, with a write overlay.

A ``Table`` is what the image keeps its large state in (messages, references, queue order...).
Reads see the overlay first (changes folded since the last commit, decoded Python values),
then the index store's committed bytes. ``Tables.commit`` writes only the overlay, in one
transaction of the store, with the ``meta`` entry that says which LSN the tables reflect: an
index update costs O(changes since the last one), never O(state) (issue 12). Every committed
value carries a CRC-32C of its key and body, checked when it is read.

An overlay value is a decoded Python value, or, when it is ``bytes``, the value already in its
stored form (the compiled fold of MESSAGE records writes those, ``recovery.messagefold``): reads
decode it like a committed value, a commit writes it as it is. No table keeps ``bytes`` as a
decoded value.

Keys are bytes that sort like the numbers they hold (ids as 8-byte big-endian). A key put with
``fresh=True`` is new since the last commit (ids, LSNs and locations are never reused), so
deleting it again before the commit leaves no trace in the store. ``OrderedTable`` also keeps,
per 8-byte key prefix (a queue id), its fresh keys in insertion order, which is key order
because a queue's new order keys only grow (LSNs do); ``scan`` merges them after the store's
committed range without sorting.
"""

from __future__ import annotations

import bisect
import heapq
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import msgpack

from mqstore.journal.crc import crc32c
from .errors import IndexInvalidError

Unpack = Callable[[Any], Any]


class _Deleted:
    """Marks a key deleted in the overlay."""

    __slots__ = ()


DELETED = _Deleted()


def pack_value(key: bytes, obj: Any, pack: Optional[Callable[[Any], bytes]] = None) -> bytes:
    """The stored form of ``obj`` under ``key``: msgpack body + CRC-32C(key, body) (4 bytes,
    little-endian). ``pack``: a ``msgpack.Packer(use_bin_type=True).pack`` to reuse across
    many values (one Packer per call otherwise)."""
    body = msgpack.packb(obj, use_bin_type=True) if pack is None else pack(obj)
    return body + crc32c(body, crc32c(key)).to_bytes(4, "little")


def unpack_value(table: str, key: bytes, value: bytes) -> Any:
    """The object stored under ``key``.

    Raises:
        IndexInvalidError: the CRC does not match (damage, or a value from another key).
    """
    body, stored = value[:-4], value[-4:]
    if len(value) < 5 or crc32c(body, crc32c(key)).to_bytes(4, "little") != stored:
        raise IndexInvalidError(f"CRC mismatch in index table {table!r}")
    try:
        return msgpack.unpackb(body, raw=False, strict_map_key=False)
    except Exception as exc:  # a CRC-valid value msgpack cannot read  # noqa: BLE001
        raise IndexInvalidError(f"unreadable value in index table {table!r}: {exc}") from exc


class Table:
    """One table of the live index.

    Args:
        store: the committed side (an ``IndexStore``: ``get``, ``range``).
        name: the table's name in the store.
        encode: value object -> plain msgpack-able object. decode: the reverse.
        count: committed entries (from the checkpoint's meta entry).
    """

    def __init__(self, store: Any, name: str, encode: Callable[[Any], Any] = lambda v: v,
                 decode: Unpack = lambda v: v, count: int = 0) -> None:
        self.store = store
        self.name = name
        self.encode = encode
        self.decode = decode
        self.dirty: Dict[bytes, Any] = {}
        self.fresh: set = set()
        self.count = count  # live entries, overlay included

    def get(self, key: bytes) -> Any:
        """The value under ``key`` or ``None``.

        Raises:
            IndexInvalidError: the committed value is damaged.
        """
        try:
            value = self.dirty[key]
        except KeyError:
            pass
        else:  # (the overlay, _overlaid inline: most reads are of what changed lately)
            if value is DELETED:
                return None
            return value if value.__class__ is not bytes else \
                self.decode(unpack_value(self.name, key, value))
        raw = self.store.get(self.name, key)
        if raw is None:
            return None
        return self.decode(unpack_value(self.name, key, raw))

    def put(self, key: bytes, value: Any, fresh: bool = False) -> None:
        """Set ``key``; ``fresh``: a new key (counted, and known absent from the store)."""
        if fresh:
            self.count += 1
            if key not in self.dirty or self.dirty[key] is not DELETED:  # else: re-added,
                self.fresh.add(key)  # and in the store
        self.dirty[key] = value

    def delete(self, key: bytes) -> None:
        """Remove ``key`` (it must exist)."""
        self.count -= 1
        if key in self.fresh:
            self.fresh.remove(key)
            if key in self.dirty:
                del self.dirty[key]
        else:
            self.dirty[key] = DELETED

    def changes(self) -> Dict[bytes, Optional[bytes]]:
        """The overlay as stored bytes (``None``: delete), for a commit."""
        out: Dict[bytes, Optional[bytes]] = {}
        pack = msgpack.Packer(use_bin_type=True).pack  # one per call: a Packer is not shared
        encode = self.encode
        for key, value in self.dirty.items():
            if type(value) is bytes:  # stored form already
                out[key] = value
            else:
                out[key] = None if value is DELETED else pack_value(key, encode(value), pack)
        return out

    def committed(self) -> None:
        """The overlay is in the store now: forget it."""
        self.dirty = {}
        self.fresh = set()

    def items(self, start: bytes = b"", stop: Optional[bytes] = None
              ) -> Iterator[Tuple[bytes, Any]]:
        """Every live ``(key, value)`` with ``start <= key < stop``, committed first then
        the overlay's new keys, each part in key order (a full scan: O(table)). The store is
        read in chunks, so no read transaction stays open between items."""
        fresh = sorted(k for k in self.fresh if k >= start and (stop is None or k < stop))
        for key, value in self._committed_range(start, stop, CHUNK, None):
            yield key, value
        for key in fresh:
            value = self.dirty.get(key)
            if value is not None and value is not DELETED:
                yield key, self._overlaid(key, value)

    def _overlaid(self, key: bytes, value: Any) -> Any:
        """An overlay value (not ``DELETED``) as a decoded value."""
        return self.decode(unpack_value(self.name, key, value)) if type(value) is bytes \
            else value

    def _committed_range(self, start: bytes, stop: Optional[bytes], chunk: int,
                         limit: Optional[int]) -> Iterator[Tuple[bytes, Any]]:
        """Committed entries in ``[start, stop)`` as the overlay has them (deleted ones left
        out, changed ones changed), up to ``limit``."""
        n = 0
        while True:
            rows = self.store.range(self.name, start, stop, chunk)
            for key, raw in rows:
                value = self.dirty.get(key)
                if value is None:
                    value = self.decode(unpack_value(self.name, key, raw))
                elif value is DELETED:
                    continue
                yield key, self._overlaid(key, value)
                n += 1
                if limit is not None and n >= limit:
                    return
            if len(rows) < chunk:
                return
            start = rows[-1][0] + b"\x00"


CHUNK = 4096


class OrderedTable(Table):
    """A table whose fresh keys per 8-byte prefix mostly arrive in increasing order (queue
    order keys grow within a priority lane), so a prefix's range is read in order without
    sorting the overlay; a key that does not (a higher priority's, a scheduled message put on
    the head of its queue) is inserted in order."""

    def __init__(self, store: Any, name: str, encode: Callable[[Any], Any] = lambda v: v,
                 decode: Unpack = lambda v: v, count: int = 0) -> None:
        super().__init__(store, name, encode, decode, count)
        self.new_keys: Dict[bytes, List[bytes]] = {}

    def put(self, key: bytes, value: Any, fresh: bool = False) -> None:
        dirty = self.dirty
        if fresh:  # Table.put, inline (once per reference), then the prefix's order list
            self.count += 1
            if key not in dirty or dirty[key] is not DELETED:
                self.fresh.add(key)
                prefix = key[:8]
                keys = self.new_keys[prefix] if prefix in self.new_keys else None
                if keys is None:
                    self.new_keys[prefix] = [key]
                elif key > keys[-1]:
                    keys.append(key)
                else:  # a higher priority's key, one put on the head of its lane (a
                    # scheduled message came due), or one put again in place of a deleted
                    # one (Qpid last-value queue)
                    i = bisect.bisect_left(keys, key)
                    if i >= len(keys) or keys[i] != key:  # a deleted fresh key stays listed
                        keys.insert(i, key)
        dirty[key] = value

    def committed(self) -> None:
        super().committed()
        self.new_keys = {}

    def scan(self, prefix: bytes, after: bytes, limit: int) -> List[Tuple[bytes, Any]]:
        """Up to ``limit`` live entries of ``prefix`` with keys > ``after`` (a key of that
        prefix, or ``prefix`` itself to start at the beginning), in key order: the committed
        ones, then the fresh ones, merged when a fresh key sorts among the committed (a
        head key put since the last commit)."""
        stop = (int.from_bytes(prefix, "big") + 1).to_bytes(8, "big")
        start = after + b"\x00" if len(after) > len(prefix) else prefix
        out = list(self._committed_range(start, stop, max(limit, 64), limit))
        new = self.new_keys.get(prefix, [])
        i = bisect.bisect_right(new, after)
        if i >= len(new) or (len(out) >= limit and new[i] > out[-1][0]):
            return out
        last = out[-1][0] if len(out) >= limit else None
        fresh: List[Tuple[bytes, Any]] = []
        for key in new[i:]:
            if len(fresh) >= limit or (last is not None and key > last):
                break
            value = self.dirty.get(key)
            if value is not None and value is not DELETED:
                fresh.append((key, self._overlaid(key, value)))
        if not out or fresh and fresh[0][0] > out[-1][0]:  # the common case: all after
            return (out + fresh)[:limit]
        return list(heapq.merge(out, fresh, key=lambda kv: kv[0]))[:limit]


class SortedTable(Table):
    """A table whose fresh keys are kept sorted (keys that arrive in any order: a scheduled
    buffer's due times), so a range is read in key order, committed and fresh keys merged."""

    def __init__(self, store: Any, name: str, encode: Callable[[Any], Any] = lambda v: v,
                 decode: Unpack = lambda v: v, count: int = 0) -> None:
        super().__init__(store, name, encode, decode, count)
        self.sorted_fresh: List[bytes] = []

    def put(self, key: bytes, value: Any, fresh: bool = False) -> None:
        new = fresh and self.dirty.get(key) is not DELETED
        super().put(key, value, fresh)
        if new:
            bisect.insort(self.sorted_fresh, key)

    def delete(self, key: bytes) -> None:
        if key in self.fresh:
            i = bisect.bisect_left(self.sorted_fresh, key)
            if i < len(self.sorted_fresh) and self.sorted_fresh[i] == key:
                del self.sorted_fresh[i]
        super().delete(key)

    def committed(self) -> None:
        super().committed()
        self.sorted_fresh = []

    def range(self, start: bytes, stop: bytes, limit: int) -> List[Tuple[bytes, Any]]:
        """Up to ``limit`` live entries with ``start <= key < stop``, in key order."""
        committed = self._committed_range(start, stop, max(limit, 64), limit)
        lo = bisect.bisect_left(self.sorted_fresh, start)
        hi = bisect.bisect_left(self.sorted_fresh, stop)
        fresh = iter(self.sorted_fresh[lo:min(hi, lo + limit)])
        out: List[Tuple[bytes, Any]] = []
        a = next(committed, None)
        b = next(fresh, None)
        while len(out) < limit and (a is not None or b is not None):
            if b is None or (a is not None and a[0] < b):
                out.append(a)  # type: ignore[arg-type]
                a = next(committed, None)
            else:
                value = self.dirty.get(b)
                if value is not None and value is not DELETED:
                    out.append((b, self._overlaid(b, value)))
                b = next(fresh, None)
        return out
