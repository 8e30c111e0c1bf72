"""Which segments the image holds locations in (``StoreImage.seglive``), so that a check that
every segment the image needs is present costs O(segments), and a compaction's moves can be
counted again (``recovery.relocation``).
"""

from __future__ import annotations

from typing import Any, List, Optional, Sequence

from mypy_extensions import trait

from mqstore.journal import Location
from .parts import ImageParts


@trait  # a part of StoreImage (mypyc compiles a mixin as a trait)
class SegmentHolds(ImageParts):
    """Location accounting (a part of ``StoreImage``; ``recovery.parts``)."""

    def _hold(self, loc: Optional[Location]) -> None:
        if loc is not None:
            self.seglive[loc.segment] = self.seglive.get(loc.segment, 0) + 1

    def _drop(self, loc: Optional[Location]) -> None:
        if loc is not None:
            seglive, seg = self.seglive, loc.segment
            n = seglive[seg] - 1 if seg in seglive else 0
            if n > 0:
                seglive[seg] = n
            elif seg in seglive:
                del seglive[seg]

    def _superseded(self, loc: Optional[Location], sink: Any) -> None:
        """A record the image held is no longer needed: not held, and dead for the journal."""
        if loc is not None:
            self._drop(loc)
            sink.mark_dead([loc])

    def missing_segments(self, present: Sequence[int]) -> List[int]:
        """Segments the image holds locations in that are not in ``present``."""
        have = set(present)
        return sorted(seq for seq, n in self.seglive.items() if n > 0 and seq not in have)

    def recount_holds(self) -> None:
        """Recompute ``seglive`` from every location held (after compaction moved records:
        ``recovery.relocation``); a full scan, streamed from the index in chunks."""
        self.seglive = {}
        for a in self.addresses.values():
            self._hold(a.location)
        for _values, loc in self.settings.values():
            self._hold(loc)
        for q in self.queues.values():
            self._hold(q.location)
            self._hold(q.update_location)
        for d in self.deleted:
            self._hold(d.location)
        for table in (self.tables.qref, self.tables.sched):
            for _key, r in table.items():
                self._hold(r.delivery_location)
        for m in self.messages():
            self._hold(m.location)
