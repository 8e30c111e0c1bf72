"""Reading segments for inspection: every valid frame, and every damaged range as an item.

Recovery refuses corruption; inspection must show it. ``scan_buffer`` walks frames like the
recovery scan, but on a damaged frame it yields a ``Damage`` item (offset, reason) and resumes
at the next valid frame, found by searching the segment's generation id. The offline tools and
the Spark source (``tools.spark.columns``) fall back to it at the first invalid frame.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Optional, Union

from .format import (FRAME_HEADER_SIZE, SEGMENT_HEADER_SIZE)
from .segment import (NEED_MORE, ZERO_END, FrameInfo, decode_run, find_valid_frames,
                      last_nonzero)


@dataclass(frozen=True)
class Frame:
    """A valid frame: its fixed fields and payload bytes."""

    info: FrameInfo
    payload: bytes


@dataclass(frozen=True)
class Damage:
    """Bytes that are not a valid frame: ``offset`` to ``end`` in the segment, and why."""

    offset: int
    end: int
    reason: str


Item = Union[Frame, Damage]


def scan_buffer(buf: bytes, generation: int, max_frame: int, start: int = SEGMENT_HEADER_SIZE,
                stop: Optional[int] = None) -> Iterator[Item]:
    """Yield the frames starting in ``[start, stop)`` of a whole-segment buffer, and the damage
    met on the way. ``start`` must be a frame boundary (or the header's end)."""
    stop = len(buf) if stop is None else stop
    pos = start
    while pos < stop:
        frames, end, status, _last = decode_run(buf, pos, len(buf), generation, max_frame, 0)
        for f in frames:
            if f.offset >= stop:
                return
            yield Frame(f, bytes(buf[f.offset + FRAME_HEADER_SIZE:f.offset + f.frame_len - 4]))
        if status == ZERO_END or end >= stop:
            if status == ZERO_END and end < stop and last_nonzero(buf, end) > end:
                status = "nonzero bytes after the end of the written data"
            else:
                return
        if status == NEED_MORE:
            if last_nonzero(buf, end) > end:
                yield Damage(end, len(buf), "truncated frame (torn tail?)")
            return
        nxt = next((o for o, _h in find_valid_frames(buf, generation, max_frame, end)), None)
        yield Damage(end, nxt if nxt is not None else last_nonzero(buf, end), status)
        if nxt is None:
            return
        pos = nxt
