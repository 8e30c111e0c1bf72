"""Tombstones that wait only for one segment to leave the journal, packed 8 bytes each.

The common pin is an ack whose message is already dead in an older segment: the ack must stay
until that segment is deleted or compacted (compaction never copies a dead record), and then it
dies. Such a tombstone needs no per-record objects: ``WaitGroups`` keeps, for each segment it
waits for, and each segment the tombstones sit in, an ``array('Q')`` of
``offset << 24 | length``. A million pinned acks cost 8 MB instead of the ~700 bytes each that a
dict of sets of ``Location`` costs (issue 13: a million scheduled messages drained in random
order pin a million acks until the message segments go).

What changed since the last index commit is tracked per group and chunk (``CHUNK`` tombstones),
so a commit writes only the chunks that grew. A group only grows, until it goes whole: its
segment left (the stored rows go with the segment's other rows) or compaction moved its
tombstones (the stored rows are rewritten).
"""

from __future__ import annotations

import sys
from array import array
from typing import Callable, Dict, Iterable, List, Optional, Set, Tuple

from .segment import Location

SHIFT = 24                       # bits of the packed length
LENGTH_MASK = (1 << SHIFT) - 1   # frames longer than 16 MiB take the general path
MAX_OFFSET = 1 << 40             # the largest segment (JournalOptions) fits
CHUNK = 8192                     # packed tombstones per stored row

GroupKey = Tuple[int, int]       # (segment waited for, segment of the tombstones)


def packable(tomb: Location) -> bool:
    """Whether ``tomb`` fits the packed form."""
    return 0 <= tomb.offset < MAX_OFFSET and 0 < tomb.length <= LENGTH_MASK


def unpack(segment: int, packed: int) -> Location:
    """The location of one packed tombstone of ``segment``."""
    return Location(segment, packed >> SHIFT, packed & LENGTH_MASK)


def chunk_bytes(values: "array[int]") -> bytes:
    """A chunk as stored: little-endian u64s."""
    if sys.byteorder != "little":  # pragma: no cover - every supported machine is little-endian
        values = array("Q", values)
        values.byteswap()
    return values.tobytes()


def chunk_values(raw: bytes) -> "array[int]":
    """The packed tombstones of a stored chunk."""
    out = array("Q")
    out.frombytes(raw)
    if sys.byteorder != "little":  # pragma: no cover
        out.byteswap()
    return out


class WaitGroups:
    """Packed tombstones grouped by (segment waited for, segment they sit in) (internal to
    ``Liveness``; guarded by the journal lock).

    Attributes:
        groups: waited-for segment -> tombstone segment -> packed tombstones.
        count: how many tombstones wait.
    """

    def __init__(self) -> None:
        self.groups: Dict[int, Dict[int, "array[int]"]] = {}
        self.by_tomb_segment: Dict[int, Set[int]] = {}
        # group -> first chunk to write at the next commit; -1: remove every stored chunk of
        # the group first (its tombstones moved)
        self.dirty: Dict[GroupKey, int] = {}
        self.count = 0

    def add(self, waits_for: int, tomb: Location) -> None:
        """``tomb`` (``packable``) waits until segment ``waits_for`` leaves."""
        arr = self.groups.setdefault(waits_for, {}).setdefault(tomb.segment, array("Q"))
        arr.append(tomb.offset << SHIFT | tomb.length)
        self.by_tomb_segment.setdefault(tomb.segment, set()).add(waits_for)
        self.touch((waits_for, tomb.segment), (len(arr) - 1) // CHUNK)
        self.count += 1

    def load(self, waits_for: int, tomb_segment: int, raw: bytes) -> None:
        """Append one stored chunk (read in key order at open); not a change to store."""
        arr = self.groups.setdefault(waits_for, {}).setdefault(tomb_segment, array("Q"))
        values = chunk_values(raw)
        arr.extend(values)
        self.by_tomb_segment.setdefault(tomb_segment, set()).add(waits_for)
        self.count += len(values)

    def touch(self, key: GroupKey, chunk: int) -> None:
        """Group ``key`` changed from ``chunk`` on (-1: rewrite it whole)."""
        old = self.dirty.get(key)
        if old is None or chunk < old:
            self.dirty[key] = chunk

    def pop_segment(self, seq: int) -> List[Tuple[int, "array[int]"]]:
        """Segment ``seq`` left the journal: the groups that waited for it, as
        ``(tombstone segment, packed tombstones)``; they wait no more. Their stored rows go
        with the segment's (the caller lists it as gone)."""
        groups = self.groups.pop(seq, {})
        for st, arr in groups.items():
            waited = self.by_tomb_segment.get(st)
            if waited is not None:
                waited.discard(seq)
                if not waited:
                    del self.by_tomb_segment[st]
            self.dirty.pop((seq, st), None)
            self.count -= len(arr)
        return list(groups.items())

    def relocate(self, segments: Iterable[int],
                 new_place: Callable[[int, int], Optional[Location]]) -> List[Location]:
        """Compaction copied the records of ``segments``: every tombstone waiting in them
        waits on at its new place (``new_place(segment, offset)``). Returns the tombstones
        compaction did not copy (none, unless the caller's bookkeeping is wrong: a waiting
        tombstone is live, and compaction copies every live record)."""
        lost: List[Location] = []
        for st in segments:
            for sx in self.by_tomb_segment.pop(st, set()):
                arr = self.groups[sx].pop(st)
                if not self.groups[sx]:
                    del self.groups[sx]
                self.dirty[(sx, st)] = -1
                self.count -= len(arr)
                for packed in arr:
                    new = new_place(st, packed >> SHIFT)
                    if new is None:
                        lost.append(unpack(st, packed))
                    else:
                        self.add(sx, new)
        return lost

    def export(self) -> Dict[GroupKey, Tuple[int, List[bytes]]]:
        """The changed groups since the last call: ``(first chunk, chunks from there on)``;
        first -1 means the group's stored chunks all go before these (from chunk 0) are
        written; an empty list with -1: the group is gone."""
        out: Dict[GroupKey, Tuple[int, List[bytes]]] = {}
        for key, first in self.dirty.items():
            arr = self.groups.get(key[0], {}).get(key[1])
            chunks: List[bytes] = []
            if arr is not None:
                for start in range(max(first, 0) * CHUNK, len(arr), CHUNK):
                    chunks.append(chunk_bytes(arr[start:start + CHUNK]))
            out[key] = (first, chunks)
        self.dirty = {}
        return out

    def requeue(self, exported: Dict[GroupKey, Tuple[int, List[bytes]]],
                alive: Callable[[int], bool]) -> None:
        """Give back an export the index did not store (groups of segments still there)."""
        for key, (first, _chunks) in exported.items():
            if alive(key[0]):
                self.touch(key, first)

    def reset(self) -> None:
        """Forget every group; their stored rows are to go."""
        for sx, by_st in self.groups.items():
            for st in by_st:
                self.dirty[(sx, st)] = -1
        self.groups.clear()
        self.by_tomb_segment.clear()
        self.count = 0
