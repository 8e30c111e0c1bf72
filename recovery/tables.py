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
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import msgpack

from journal.crc import crc32c
from recovery.errors import IndexInvalidError

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
        value = self.dirty.get(key)
        if value is not None:
            return None if value is DELETED else self._overlaid(key, value)
        raw = self.store.get(self.name, key)
        if raw is None:
            return None
        return self.decode(unpack_value(self.name, key, raw))

    def put(self, key: bytes, value: Any, fresh: bool = False) -> None:
        """Set ``key``; ``fresh``: a new key (counted, and known absent from the store)."""
        if fresh:
            self.count += 1
            if self.dirty.get(key) is not DELETED:  # else: re-added, and in the store
                self.fresh.add(key)
        self.dirty[key] = value

    def delete(self, key: bytes) -> None:
        """Remove ``key`` (it must exist)."""
        self.count -= 1
        if key in self.fresh:
            self.fresh.discard(key)
            self.dirty.pop(key, None)
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
    """A table whose fresh keys per 8-byte prefix arrive in increasing order (queue order
    keys), so a prefix's range is read in order without sorting the overlay."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.new_keys: Dict[bytes, List[bytes]] = {}

    def put(self, key: bytes, value: Any, fresh: bool = False) -> None:
        dirty = self.dirty
        if fresh:  # Table.put, inline (once per reference), then the prefix's order list
            self.count += 1
            if dirty.get(key) is not DELETED:
                self.fresh.add(key)
                prefix = key[:8]
                keys = self.new_keys.get(prefix)
                if keys is None:
                    self.new_keys[prefix] = [key]
                else:
                    keys.append(key)
        dirty[key] = value

    def committed(self) -> None:
        super().committed()
        self.new_keys = {}

    def scan(self, prefix: bytes, after: bytes, limit: int) -> List[Tuple[bytes, Any]]:
        """Up to ``limit`` live entries of ``prefix`` with keys > ``after`` (a key of that
        prefix, or ``prefix`` itself to start at the beginning), in key order."""
        stop = (int.from_bytes(prefix, "big") + 1).to_bytes(8, "big")
        start = after + b"\x00" if len(after) > len(prefix) else prefix
        out = list(self._committed_range(start, stop, max(limit, 64), limit))
        if len(out) >= limit:
            return out
        new = self.new_keys.get(prefix, [])
        for key in new[bisect.bisect_right(new, after):]:
            value = self.dirty.get(key)
            if value is not None and value is not DELETED:
                out.append((key, self._overlaid(key, value)))
                if len(out) >= limit:
                    break
        return out
