"""Liveness of records and reclaim of whole segments.

Upper layers report dead records by location. A segment is deleted once it is sealed and every
record in it is dead. A tombstone (an ack, a queue deletion) must outlive the records it cancels,
or replay would bring them back: ``mark_dead_after`` keeps it live until every target record is
physically gone: its segment deleted, or compaction not copying it (a copied target moves and
keeps pinning). A target in the tombstone's own segment stops pinning as soon as it is dead,
because a dead pair in one segment is deleted, or left out by compaction, together. Segments are
deleted oldest first.

Bounded memory (issue 13): the bookkeeping stays small when a million records die out of
journal order (a scheduled backlog drained in due order, acks of a shared message):

- a segment's dead marks are a compressed bitmap of offsets (``pyroaring.BitMap64``, about 2
  bytes per dead record), stored in the index as one value per segment;
- a dead target in another segment pins only as "a dead record in segment S" (a marker
  ``Location(S, -1, 0)``): nothing about it changes until S leaves;
- a tombstone whose one pin is such a marker lives packed in ``journal.waits.WaitGroups``
  (8 bytes); only tombstones with live targets or several pins keep per-record objects.

Two brakes serve the index above: ``deferred`` (no deletion while a replay is reading segments)
and ``horizon`` (no deletion or compaction of a segment holding an LSN above it: an index
checkpoint older than a tombstone must still find the tombstone in the journal's tail).
``export_changes``/``restore_state`` carry dead marks and pins across a reopen; an index commit
writes only what changed since the last one.
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Set, Tuple

from pyroaring import BitMap64

from .core import JournalCore
from .errors import JournalIOError
from .segment import Location, SegmentInfo
from .waits import LENGTH_MASK, SHIFT, WaitGroups, chunk_values, packable, unpack


def marker(segment: int) -> Location:
    """The pseudo target "a dead record in ``segment``": it pins until the segment leaves."""
    return Location(segment, -1, 0)


class Liveness:
    """Dead-record bookkeeping and segment reclaim of one journal (internal; every method that
    changes state expects the journal lock held, except the public entry points).

    Attributes:
        pins: tombstone -> what it waits for (live targets, markers), for tombstones not in
            ``waits``.
        waits: tombstones whose one pin is a marker, packed.
    """

    def __init__(self, journal: JournalCore) -> None:
        self._j = journal
        self.pins: Dict[Location, Set[Location]] = {}          # tombstone -> targets
        self.by_target: Dict[Location, Set[Location]] = {}     # target -> tombstones
        self.targets_in: Dict[int, Set[Location]] = {}         # segment -> pinned targets
        self.waits = WaitGroups()
        self.deleted_segments = 0
        self.deferred = False
        self.horizon: Optional[int] = None
        # since export_changes: segments whose dead marks changed, segments that left the
        # journal (their stored marks and waits go), tombstones whose pins changed
        self.dirty_dead: Set[int] = set()
        self.gone: Set[int] = set()
        self.changed_pins: Set[Location] = set()
        # every segment whose records may all be dead: reclaim looks only at these, so it
        # costs O(candidates), not O(segments), per call (segments join when their last
        # record dies, or when they enter the journal)
        self.maybe_empty: Set[int] = set()

    # -- reporting ----------------------------------------------------------------------------
    def mark_dead(self, locations: Iterable[Location]) -> None:
        """See ``Journal.mark_dead``."""
        self.apply([(None, list(locations), None, ())])

    def mark_dead_after(self, location: Location, targets: Sequence[Location]) -> None:
        """See ``Journal.mark_dead_after``."""
        self.apply([(None, None, location, targets)])

    def apply(self, facts: Iterable[Tuple[Any, Optional[Sequence[Location]],
                                          Optional[Location], Sequence[Location]]]) -> None:
        """See ``Journal.apply_liveness``."""
        with self._j._lock:
            kill, pin = self._kill, self._pin
            for _tag, dead, tomb, targets in facts:
                if dead is not None:
                    for loc in dead:
                        kill(loc)
                if tomb is not None:
                    pin(tomb, targets)
        if not self.deferred:
            self.reclaim()

    def _pin(self, tomb: Location, targets: Iterable[Location]) -> bool:
        """Keep ``tomb`` live while any of ``targets`` still needs it; kill it when none
        does. Returns whether it pins (lock held)."""
        segments = self._j._segments
        waiting: Set[Location] = set()
        for t in targets:
            info = segments.get(t.segment)
            if info is None:
                continue  # already gone
            if t.offset < 0 or t.offset in info.dead:
                if t.segment != tomb.segment:
                    waiting.add(marker(t.segment))
            else:
                waiting.add(t)
        if not waiting:
            self._kill(tomb)
            return False
        self._hold(tomb, waiting)
        return True

    def _hold(self, tomb: Location, waiting: Set[Location]) -> None:
        """``tomb`` waits for ``waiting`` (live targets, markers; not empty)."""
        if len(waiting) == 1 and tomb not in self.pins and packable(tomb):
            (only,) = waiting
            if only.offset < 0:
                self.waits.add(only.segment, tomb)
                return
        self.pins[tomb] = waiting
        self.changed_pins.add(tomb)
        for t in waiting:
            self.by_target.setdefault(t, set()).add(tomb)
            self.targets_in.setdefault(t.segment, set()).add(t)

    def _kill(self, loc: Location, stored: bool = False) -> None:
        """Mark one record dead; free same-segment tombstones it pinned, and turn the pins of
        tombstones elsewhere into markers. ``stored``: the mark comes from the index
        (``restore_state``), so it is not written back."""
        segments, by_target = self._j._segments, self.by_target
        todo: List[Location] = []
        while True:  # (lookups by ``in``: this runs twice per message settled)
            seq = loc.segment
            info = segments[seq] if seq in segments else None
            if info is not None and loc.offset not in info.dead:
                info.dead.add(loc.offset)
                info.dead_bytes += loc.length
                if not stored and seq not in self.dirty_dead:
                    self.dirty_dead.add(seq)
                stored = False  # tombstones freed on the way are new marks
                # the byte sums first: a bitmap's len() walks its containers, once per record
                if info.dead_bytes >= info.total_bytes and info.count == len(info.dead):
                    self.maybe_empty.add(seq)
                if loc in by_target:
                    for tomb in list(by_target[loc]):
                        if tomb.segment == seq:
                            todo.extend(self._release_target(tomb, loc))
                        else:
                            self._to_marker(tomb, loc)
            if not todo:
                return
            loc = todo.pop()

    def _to_marker(self, tomb: Location, target: Location) -> None:
        """``target`` (in another segment than ``tomb``) died: ``tomb`` now waits only for its
        segment to leave."""
        waiting = self.pins.pop(tomb, None)
        if waiting is None:  # pragma: no cover - a tombstone with a target is in pins
            return
        for t in waiting:
            self._unindex(tomb, t)
        waiting.discard(target)
        waiting.add(marker(target.segment))
        self._hold(tomb, waiting)
        self.changed_pins.add(tomb)

    def _unindex(self, tomb: Location, target: Location) -> None:
        tombs = self.by_target.get(target)
        if tombs is None:
            return
        tombs.discard(tomb)
        if not tombs:
            del self.by_target[target]
            in_seg = self.targets_in.get(target.segment)
            if in_seg is not None:
                in_seg.discard(target)
                if not in_seg:
                    del self.targets_in[target.segment]

    def _release_target(self, tomb: Location, target: Location) -> List[Location]:
        """Drop ``target`` from ``tomb``'s pins; return ``[tomb]`` if it is now free."""
        self._unindex(tomb, target)
        waiting = self.pins.get(tomb)
        if waiting is None:
            return []
        waiting.discard(target)
        self.changed_pins.add(tomb)
        if waiting:
            return []
        del self.pins[tomb]
        return [tomb]

    def segment_gone(self, seq: int, moved: Mapping[Location, Location]) -> None:
        """Segment ``seq`` left the journal: pinned targets in it that ``moved`` (compaction
        copied them) keep pinning at their new place; the rest are gone, and tombstones that
        waited only for them die (lock held)."""
        free: List[Location] = []
        for target in list(self.targets_in.pop(seq, ())):
            tombs = self.by_target.pop(target, set())
            new = moved.get(target) if target.offset >= 0 else None
            for tomb in tombs:
                waiting = self.pins.get(tomb)
                if waiting is None:
                    continue
                waiting.discard(target)
                self.changed_pins.add(tomb)
                if new is not None:
                    waiting.add(new)
                    self.by_target.setdefault(new, set()).add(tomb)
                    self.targets_in.setdefault(new.segment, set()).add(new)
                elif not waiting:
                    del self.pins[tomb]
                    free.append(tomb)
        for tomb in free:
            self._kill(tomb)
        for st, packed in self.waits.pop_segment(seq):
            self._kill_packed(st, packed)

    def _kill_packed(self, segment: int, packed: Iterable[int]) -> None:
        """Kill packed tombstones of ``segment`` (they waited for a segment that left)."""
        info = self._j._segments.get(segment)
        if info is None:
            return
        dead = info.dead
        targets_here = self.targets_in.get(segment)
        for p in packed:
            off = p >> SHIFT
            if off in dead:
                continue
            if targets_here:  # a tombstone that is itself a pinned target: the long way
                self._kill(unpack(segment, p))
                continue
            dead.add(off)
            info.dead_bytes += p & LENGTH_MASK
        self.dirty_dead.add(segment)
        if info.count == len(dead):
            self.maybe_empty.add(segment)

    def relocate_tombstones(self, moved: Mapping[Location, Location]) -> None:
        """Compaction copied pinned tombstones: key their pins by the new locations."""
        for old, new in moved.items():
            waiting = self.pins.pop(old, None)
            if waiting is None:
                continue
            self.pins[new] = waiting
            self.changed_pins.update((old, new))
            for t in waiting:
                tombs = self.by_target.get(t)
                if tombs is not None:
                    tombs.discard(old)
                    tombs.add(new)
        sources = {old.segment for old in moved}
        if sources & self.waits.by_tomb_segment.keys():
            by_old = {(o.segment, o.offset): n for o, n in moved.items()
                      if o.segment in self.waits.by_tomb_segment}
            lost = self.waits.relocate(sorted(sources),
                                       lambda seg, off: by_old.get((seg, off)))
            assert not lost, f"compaction left out waiting tombstones {lost[:3]}"

    # -- reclaim ------------------------------------------------------------------------------
    def reclaim(self) -> int:
        """Delete every sealed segment whose records are all dead, oldest first.

        Returns:
            How many segments were deleted.

        Raises:
            JournalIOError: unlink or directory fsync failed (the segment may reappear after a
                crash; its records are dead, so that is harmless).
        """
        j = self._j
        deleted = 0
        if j._options.read_only:
            return 0  # a read-only journal never deletes; dead marks stay in memory
        while True:
            with j._lock:
                victim = self._oldest_reclaimable()
                if victim is None:
                    return deleted
                self.remove_segment(victim)
                self.segment_gone(victim.sequence, {})
            self._delete_file(victim)
            deleted += 1
            self.deleted_segments += 1

    def _oldest_reclaimable(self) -> Optional[SegmentInfo]:
        """The oldest sealed segment, other than the active one, whose records are all dead
        and that the horizon lets go (lock held). Candidates with live records again (a
        segment that received appends) leave the candidate set."""
        j = self._j
        for seq in sorted(self.maybe_empty):
            info = j._segments.get(seq)
            if info is None or info.live_count > 0:
                self.maybe_empty.discard(seq)
            elif info.sealed and info is not j._active and self.below_horizon(info):
                return info
        return None

    def watch(self, info: SegmentInfo) -> None:
        """A segment entered the journal (opened, created, written by compaction): reclaim
        considers it while its records may all be dead (lock held)."""
        if info.live_count == 0:
            self.maybe_empty.add(info.sequence)

    def remove_segment(self, info: SegmentInfo) -> None:
        """Segment ``info`` leaves the journal's table (deleted, or replaced by compaction):
        its stored dead marks and waits are to be removed from the index (lock held)."""
        seq = info.sequence
        del self._j._segments[seq]
        self.maybe_empty.discard(seq)
        self.dirty_dead.discard(seq)
        self.gone.add(seq)

    def below_horizon(self, info: SegmentInfo) -> bool:
        """Whether segment ``info`` may be deleted or compacted under the horizon."""
        return self.horizon is None or info.last_lsn <= self.horizon

    def _delete_file(self, info: SegmentInfo) -> None:
        fs = self._j._fs
        manifest = self._j.manifest
        try:
            if info.handle >= 0:
                fs.close(info.handle)
                info.handle = -1
            if manifest is not None:
                manifest.retire([info.sequence])  # listed as retiring before it goes
            fs.unlink(info.path)
            fs.fsync_dir(self._j._dir)
            if manifest is not None:
                manifest.forget([info.sequence])
        except OSError as exc:
            raise JournalIOError(info.path, "delete segment", exc) from exc

    def memory(self) -> Dict[str, int]:
        """What the bookkeeping holds: dead marks, packed waits, tombstones in ``pins``."""
        with self._j._lock:
            return {"dead_marks": sum(len(i.dead) for i in self._j._segments.values()),
                    "waiting_tombstones": self.waits.count, "pinned_tombstones": len(self.pins)}

    # -- persistence of the bookkeeping -------------------------------------------------------
    def export_changes(self) -> Dict[str, Any]:
        """What changed since the last call, for an incremental index update. O(changes):

        - ``dead``: segment -> ``(dead bytes, serialized BitMap64 of dead offsets)`` for the
          segments whose marks changed (``None``: it has none any more);
        - ``gone``: segments that left the journal: their stored marks and every stored wait
          for them go;
        - ``pins``: tombstone ``(segment, offset, length)`` -> its targets as
          ``[segment, offset, length]`` lists (``None``: not in ``pins`` any more);
        - ``waits``: ``WaitGroups.export``.
        """
        with self._j._lock:
            segments = self._j._segments
            dead: Dict[int, Optional[Tuple[int, bytes]]] = {}
            for seq in self.dirty_dead:
                info = segments.get(seq)
                if info is not None:
                    dead[seq] = (info.dead_bytes, info.dead.serialize()) if info.dead else None
            pins: Dict[Tuple[int, int, int], Optional[List[List[int]]]] = {}
            for tomb in self.changed_pins:
                targets = self.pins.get(tomb)
                pins[(tomb.segment, tomb.offset, tomb.length)] = \
                    None if not targets else [list(t) for t in sorted(targets)]
            out = {"dead": dead, "gone": sorted(self.gone), "pins": pins,
                   "waits": self.waits.export()}
            self.dirty_dead = set()
            self.gone = set()
            self.changed_pins = set()
        return out

    def requeue_changes(self, exported: Mapping[str, Any]) -> None:
        """Give back what ``export_changes`` returned when the index did not store it, so the
        next export has it again."""
        with self._j._lock:
            segments = self._j._segments
            self.dirty_dead.update(s for s in exported.get("dead", {}) if s in segments)
            self.gone.update(exported.get("gone", ()))
            self.changed_pins.update(Location(*t) for t in exported.get("pins", {}))
            self.waits.requeue(exported.get("waits", {}), lambda s: s in segments)

    def restore_state(self, state: Mapping[str, Any]) -> None:
        """Re-apply stored dead marks and pins at open, before any record is folded. ``state``
        holds iterables (read from the index as they are consumed):

        - ``dead``: ``(segment, dead bytes, BitMap64 of dead offsets)``;
        - ``waits``: ``(waited-for segment, tombstone segment, chunk bytes)`` in key order;
        - ``pins``: ``([segment, offset, length], [[segment, offset, length], ...])``.

        Entries of segments now gone are dropped (and removed from the index at the next
        commit); a tombstone whose targets are all gone is dead. Afterwards only what differs
        from ``state`` counts as changed, so the next commit does not write it back."""
        j = self._j
        with j._lock:
            segments = j._segments
            for seq, dead_bytes, bitmap in state.get("dead", ()):
                info = segments.get(seq)
                if info is None:
                    self.gone.add(seq)
                    continue
                info.dead = bitmap
                info.dead_bytes = dead_bytes
                if info.count == len(info.dead):
                    self.maybe_empty.add(seq)
            for sx, st, raw in state.get("waits", ()):
                if st not in segments:
                    self.waits.touch((sx, st), -1)
                elif sx not in segments:
                    self.gone.add(sx)
                    self._kill_packed(st, chunk_values(raw))
                else:
                    self.waits.load(sx, st, raw)
            restored = []
            for tomb_raw, targets_raw in state.get("pins", ()):
                tomb = Location(*tomb_raw)
                restored.append(tomb)
                if tomb.segment not in segments:
                    continue
                self._pin(tomb, (Location(*x) for x in targets_raw))  # a free one dies: new
            stored = set(restored)
            self.changed_pins = {t for t in self.changed_pins if t not in stored}
            self.changed_pins.update(t for t in restored if t not in self.pins)
        if not self.deferred:
            self.reclaim()

    def reset(self) -> None:
        """Forget every dead mark and pin (before a full replay recomputes them)."""
        with self._j._lock:
            for info in self._j._segments.values():
                if info.dead:
                    self.dirty_dead.add(info.sequence)
                info.dead = BitMap64()
                info.dead_bytes = 0
                self.watch(info)
            self.changed_pins.update(self.pins)
            self.pins.clear()
            self.by_target.clear()
            self.targets_in.clear()
            self.waits.reset()
