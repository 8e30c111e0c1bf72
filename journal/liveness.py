"""Liveness of records and reclaim of whole segments.

Upper layers report dead records by location. A segment is deleted once it is sealed and every
record in it is dead. A tombstone (an ack, a queue deletion) must outlive the records it cancels,
or replay would bring them back: ``mark_dead_after`` keeps it live until every target record is
physically gone: its segment deleted, or compaction not copying it (a copied target moves and
keeps pinning). A target in the tombstone's own segment stops pinning as soon as it is dead,
because a dead pair in one segment is deleted, or left out by compaction, together. Segments are
deleted oldest first.

Two brakes serve the index above: ``deferred`` (no deletion while a replay is reading segments)
and ``horizon`` (no deletion or compaction of a segment holding an LSN above it: an index
checkpoint older than a tombstone must still find the tombstone in the journal's tail).
``export_changes``/``restore_state`` carry dead marks and pins across a reopen, one entry per
dead record, so an index commit writes only the marks made since the last one.
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Set, Tuple

from journal.core import JournalCore
from journal.errors import JournalIOError
from journal.segment import Location, SegmentInfo


class Liveness:
    """Dead-record bookkeeping and segment reclaim of one journal (internal; every method that
    changes state expects the journal lock held, except the public entry points)."""

    def __init__(self, journal: JournalCore) -> None:
        self._j = journal
        self.pins: Dict[Location, Set[Location]] = {}          # tombstone -> targets
        self.by_target: Dict[Location, Set[Location]] = {}     # target -> tombstones
        self.targets_in: Dict[int, Set[Location]] = {}         # segment -> pinned targets
        self.dead_lengths: Dict[Tuple[int, int], int] = {}
        self.deleted_segments = 0
        self.deferred = False
        self.horizon: Optional[int] = None
        # since export_changes: dead marks made (not stored yet), stored dead marks whose
        # segment left (to remove from the store), pins changed
        self.unsaved_dead: Set[Tuple[int, int]] = set()
        self.unsaved_gone: Set[Tuple[int, int]] = set()
        self.changed_pins: Set[Location] = set()
        # every segment whose records may all be dead: reclaim looks only at these, so it
        # costs O(candidates), not O(segments), per call (segments join when their last
        # record dies, or when they enter the journal)
        self.maybe_empty: Set[int] = set()

    # -- reporting ----------------------------------------------------------------------------
    def mark_dead(self, locations: Iterable[Location]) -> None:
        """See ``Journal.mark_dead``."""
        with self._j._lock:
            for loc in locations:
                self._kill(loc)
        if not self.deferred:
            self.reclaim()

    def mark_dead_after(self, location: Location, targets: Sequence[Location]) -> None:
        """See ``Journal.mark_dead_after``."""
        with self._j._lock:
            if self._pin(location, targets):
                self.changed_pins.add(location)
        if not self.deferred:
            self.reclaim()

    def _pin(self, tomb: Location, targets: Iterable[Location]) -> bool:
        """Keep ``tomb`` live while any of ``targets`` still needs it; kill it when none
        does. Returns whether it pins (lock held)."""
        waiting = {t for t in targets if self._still_pins(tomb, t)}
        if not waiting:
            self._kill(tomb)
            return False
        self.pins[tomb] = waiting
        for t in waiting:
            self.by_target.setdefault(t, set()).add(tomb)
            self.targets_in.setdefault(t.segment, set()).add(t)
        return True

    def _still_pins(self, tomb: Location, target: Location) -> bool:
        info = self._j._segments.get(target.segment)
        if info is None:
            return False  # already gone
        return not (target.segment == tomb.segment and target.offset in info.dead)

    def _kill(self, loc: Location, stored: bool = False) -> None:
        """Mark one record dead, and free same-segment tombstones it pinned. ``stored``: the
        mark comes from the index (``restore_state``), so it is not written back."""
        todo = [loc]
        while todo:
            loc = todo.pop()
            info = self._j._segments.get(loc.segment)
            if info is None or loc.offset in info.dead:
                continue
            info.dead.add(loc.offset)
            info.dead_bytes += loc.length
            key = (loc.segment, loc.offset)
            if not stored:
                self.unsaved_dead.add(key)
            stored = False  # tombstones freed on the way are new marks
            self.dead_lengths[key] = loc.length
            if info.count == len(info.dead):
                self.maybe_empty.add(loc.segment)
            for tomb in list(self.by_target.get(loc, ())):
                if tomb.segment == loc.segment:
                    todo.extend(self._release_target(tomb, loc))

    def _release_target(self, tomb: Location, target: Location) -> List[Location]:
        """Drop ``target`` from ``tomb``'s pins; return ``[tomb]`` if it is now free."""
        waiting = self.pins.get(tomb)
        tombs = self.by_target.get(target)
        if tombs is not None:
            tombs.discard(tomb)
            if not tombs:
                del self.by_target[target]
                in_seg = self.targets_in.get(target.segment)
                if in_seg is not None:
                    in_seg.discard(target)
        if waiting is None:
            return []
        waiting.discard(target)
        self.changed_pins.add(tomb)
        if waiting:
            return []
        del self.pins[tomb]
        return [tomb]

    def segment_gone(self, seq: int, moved: Mapping[Location, Location]) -> List[Location]:
        """Segment ``seq`` left the journal: pinned targets in it that ``moved`` (compaction
        copied them) keep pinning at their new place; the rest are gone, freeing tombstones.
        Returns the tombstones now free (the caller kills them, lock held)."""
        free: List[Location] = []
        for target in list(self.targets_in.pop(seq, ())):
            tombs = self.by_target.pop(target, set())
            new = moved.get(target)
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
        return free

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
                for tomb in self.segment_gone(victim.sequence, {}):
                    self._kill(tomb)
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
        its stored dead marks are to be removed from the index (lock held)."""
        seq = info.sequence
        del self._j._segments[seq]
        self.maybe_empty.discard(seq)
        for off in info.dead:
            key = (seq, off)
            self.dead_lengths.pop(key, None)
            if key in self.unsaved_dead:
                self.unsaved_dead.discard(key)
            else:
                self.unsaved_gone.add(key)

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

    # -- persistence of the bookkeeping -------------------------------------------------------
    def export_changes(self) -> Dict[str, Any]:
        """What changed since the last call, for an incremental index update: ``dead`` maps a
        record's ``(segment, offset)`` to its frame length (a new dead mark) or ``None`` (a
        stored mark whose segment is gone), ``pins`` a tombstone ``(segment, offset, length)``
        to its target locations (``None``: it pins nothing any more). O(changes), not
        O(state): a segment's older dead marks are not written again."""
        with self._j._lock:
            dead: Dict[Tuple[int, int], Optional[int]] = dict.fromkeys(self.unsaved_gone)
            for key in self.unsaved_dead:
                length = self.dead_lengths.get(key)
                if length is not None:
                    dead[key] = length
            pins: Dict[Tuple[int, int, int], Optional[List[List[int]]]] = {}
            for tomb in self.changed_pins:
                targets = self.pins.get(tomb)
                pins[tuple(tomb)] = None if not targets else [list(t) for t in sorted(targets)]
            self.unsaved_dead = set()
            self.unsaved_gone = set()
            self.changed_pins = set()
        return {"dead": dead, "pins": pins}

    def requeue_changes(self, exported: Mapping[str, Any]) -> None:
        """Give back what ``export_changes`` returned when the index did not store it, so the
        next export has it again."""
        with self._j._lock:
            for key, length in exported.get("dead", {}).items():
                if length is None:
                    self.unsaved_gone.add(key)
                elif key in self.dead_lengths:
                    self.unsaved_dead.add(key)
            self.changed_pins.update(Location(*t) for t in exported.get("pins", {}))

    def restore_state(self, state: Dict[str, Any]) -> None:
        """Re-apply exported dead marks and pins (records in segments that are gone are
        skipped; a tombstone whose targets are all gone is dead). In one pass under the lock;
        afterwards only what differs from ``state`` counts as changed for ``export_changes``
        (entries of segments now gone, pins that ended), so the next index commit does not
        write the restored state back."""
        j = self._j
        with j._lock:
            segments = j._segments
            for seq, entries in state.get("dead", {}).items():
                seq = int(seq)
                if seq not in segments:
                    self.unsaved_gone.update((seq, off) for off, _length in entries)
                    continue
                for off, length in entries:
                    self._kill(Location(seq, off, length), stored=True)
            restored = []
            for tomb_raw, targets_raw in state.get("pins", []):
                tomb = Location(*tomb_raw)
                restored.append(tomb)
                if tomb.segment not in segments:
                    continue
                self._pin(tomb, (Location(*x) for x in targets_raw))  # a free one dies: new
            self.changed_pins = {t for t in restored if t not in self.pins}
        if not self.deferred:
            self.reclaim()

    def reset(self) -> None:
        """Forget every dead mark and pin (before a full replay recomputes them)."""
        with self._j._lock:
            for info in self._j._segments.values():
                self.unsaved_gone.update((info.sequence, off) for off in info.dead
                                         if (info.sequence, off) not in self.unsaved_dead)
                info.dead.clear()
                info.dead_bytes = 0
                self.watch(info)
            self.unsaved_dead = set()
            self.changed_pins.update(self.pins)
            self.pins.clear()
            self.by_target.clear()
            self.targets_in.clear()
            self.dead_lengths.clear()
