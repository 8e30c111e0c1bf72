"""Liveness of records and reclaim of whole segments.

Upper layers report dead records by location. A segment is deleted once it is sealed and every
record in it is dead. A tombstone (an ack, a queue deletion) must outlive the records it cancels,
or replay would bring them back: ``mark_dead_after`` keeps it live until every target's segment
is gone (deleted or compacted away). Targets in the tombstone's own segment go with it, so they
do not pin it. Segments are deleted oldest first, so a target always goes before its tombstone.

Two brakes serve the index above: ``deferred`` (no deletion while a replay is reading segments)
and ``horizon`` (no deletion or compaction of a segment holding an LSN above it: an index
checkpoint older than a tombstone must still find the tombstone in the journal's tail).
``export_state``/``restore_state`` carry dead marks and pins across a reopen.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Optional, Sequence, Set, Tuple

from journal.errors import JournalIOError
from journal.segment import Location, SegmentInfo

if TYPE_CHECKING:  # pragma: no cover
    from journal.journal import Journal


class Liveness:
    """Dead-record bookkeeping and segment reclaim of one journal (internal)."""

    def __init__(self, journal: "Journal") -> None:
        self._j = journal
        self.pins: Dict[Location, Set[int]] = {}
        self.by_target: Dict[int, Set[Location]] = {}
        self.deleted_segments = 0
        self.deferred = False
        self.horizon: Optional[int] = None
        self.dead_lengths: Dict[Tuple[int, int], int] = {}

    def mark_dead(self, locations: Iterable[Location]) -> None:
        """See ``Journal.mark_dead``."""
        with self._j._lock:
            touched = [self._kill(loc) for loc in locations]
        if any(touched) and not self.deferred:
            self.reclaim()

    def mark_dead_after(self, location: Location, targets: Sequence[Location]) -> None:
        """See ``Journal.mark_dead_after``."""
        with self._j._lock:
            segs = self._j._segments
            waiting = {t.segment for t in targets
                       if t.segment != location.segment and t.segment in segs}
            if not waiting:
                touched = self._kill(location)
            else:
                self.pins[location] = waiting
                for seq in waiting:
                    self.by_target.setdefault(seq, set()).add(location)
                touched = False
        if touched and not self.deferred:
            self.reclaim()

    def _kill(self, loc: Location) -> bool:
        info = self._j._segments.get(loc.segment)
        if info is None or loc.offset in info.dead:
            return False
        info.dead.add(loc.offset)
        info.dead_bytes += loc.length
        self.dead_lengths[(loc.segment, loc.offset)] = loc.length
        return info.live_count == 0

    def released(self, seq: int) -> List[Location]:
        """Forget segment ``seq`` as a pin target; return tombstones now free (caller holds the
        lock and kills them)."""
        free = []
        for loc in self.by_target.pop(seq, ()):
            waiting = self.pins.get(loc)
            if waiting is None:
                continue
            waiting.discard(seq)
            if not waiting:
                del self.pins[loc]
                free.append(loc)
        return free

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
        while True:
            with j._lock:
                victim = next((s for s in sorted(j._segments.values(), key=lambda s: s.sequence)
                               if s.sealed and s.live_count == 0 and s is not j._active
                               and self.below_horizon(s)), None)
                if victim is None:
                    return deleted
                del j._segments[victim.sequence]
                for loc in self.released(victim.sequence):
                    self._kill(loc)
            for off in victim.dead:
                self.dead_lengths.pop((victim.sequence, off), None)
            self._delete_file(victim)
            deleted += 1
            self.deleted_segments += 1

    def below_horizon(self, info: SegmentInfo) -> bool:
        """Whether segment ``info`` may be deleted or compacted under the horizon."""
        return self.horizon is None or info.last_lsn <= self.horizon

    def export_state(self) -> Dict[str, Any]:
        """Dead marks and pins, as plain lists (for an index checkpoint)."""
        with self._j._lock:
            dead = {info.sequence: [[off, 0] for off in sorted(info.dead)]
                    for info in self._j._segments.values() if info.dead}
            lengths = self.dead_lengths
            for seq, entries in dead.items():
                for entry in entries:
                    entry[1] = lengths.get((seq, entry[0]), 0)
            pins = [[list(loc), sorted(seqs)] for loc, seqs in self.pins.items()]
        return {"dead": dead, "pins": pins}

    def restore_state(self, state: Dict[str, Any]) -> None:
        """Re-apply exported dead marks and pins (segments that are gone are skipped)."""
        with self._j._lock:
            for seq, entries in state.get("dead", {}).items():
                info = self._j._segments.get(int(seq))
                if info is None:
                    continue
                for off, length in entries:
                    self._kill(Location(info.sequence, off, length))
            for loc, seqs in state.get("pins", []):
                location = Location(*loc)
                waiting = {s for s in seqs if s in self._j._segments}
                if not waiting:
                    self._kill(location)
                    continue
                self.pins[location] = waiting
                for seq in waiting:
                    self.by_target.setdefault(seq, set()).add(location)

    def reset(self) -> None:
        """Forget every dead mark and pin (before a full replay recomputes them)."""
        with self._j._lock:
            for info in self._j._segments.values():
                info.dead.clear()
                info.dead_bytes = 0
            self.pins.clear()
            self.by_target.clear()
            self.dead_lengths.clear()

    def _delete_file(self, info: SegmentInfo) -> None:
        fs = self._j._fs
        try:
            if info.handle >= 0:
                fs.close(info.handle)
                info.handle = -1
            fs.unlink(info.path)
            fs.fsync_dir(self._j._dir)
        except OSError as exc:
            raise JournalIOError(info.path, "delete segment", exc) from exc
