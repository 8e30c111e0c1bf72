"""The segment files of a store directory, for the offline tools and the Spark source."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, List, Optional, Sequence, Tuple

from mqstore.journal import MqStoreError, OsFileSystem
from mqstore.journal.compaction import resolve_pending
from mqstore.journal.format import SEGMENT_HEADER_SIZE, decode_segment_header
from mqstore.journal.manifest import MANIFEST_FILE, reconcile
from mqstore.journal.opening import list_segment_paths
from mqstore.recovery import JOURNAL_DIR

MAX_FRAME = 64 << 20


@dataclass(frozen=True)
class SegmentFile:
    """A segment file of a store: sequence, path, size in bytes."""

    sequence: int
    path: str
    size: int


def segment_files(directory: str) -> List[SegmentFile]:
    """The segment files of the store in ``directory``, in order (a pending compaction is
    seen rolled forward, as the next writable open will make it)."""
    jdir = os.path.join(directory, JOURNAL_DIR)
    try:
        if not os.path.isdir(jdir):
            raise MqStoreError(f"no mqstore journal in {directory}",
                               hint="give the store's directory, the one the application opens")
        paths = _segment_paths(OsFileSystem(), jdir)
        if not paths and not os.path.exists(os.path.join(jdir, MANIFEST_FILE)):
            # every store has a segment from its first open on (or a manifest that lists
            # them): an empty journal/ is no store, and no command makes it one
            raise MqStoreError(f"no mqstore journal in {directory}: {jdir} holds no segment "
                               f"and no manifest", hint="give the store's directory, the one "
                               "the application opens")
        return [SegmentFile(seq, path, os.path.getsize(path)) for seq, path in paths]
    except OSError as exc:  # a symlink loop, a file where a directory is, no permission
        raise MqStoreError(f"{directory} cannot be read as a store: "
                           f"{exc.filename or directory}: {exc.strerror or exc}") from None


def _segment_paths(fs: OsFileSystem, jdir: str) -> List[Tuple[int, str]]:
    """(sequence, path) of the journal's segments, a pending compaction seen rolled forward."""
    pending = resolve_pending(fs, jdir, read_only=True)
    return list_segment_paths(fs, jdir, pending.overrides, pending.excluded)


def missing_segments(directory: str) -> List[str]:
    """The segment files the journal's manifest lists and the directory lacks (a gap in the
    records; ``Broker.open`` refuses such a store), or the manifest itself when a listed
    journal has none; empty when nothing is missing. Reads only; nothing is changed."""
    jdir = os.path.join(directory, JOURNAL_DIR)
    fs = OsFileSystem()
    try:
        return reconcile(fs, jdir, _segment_paths(fs, jdir), read_only=True,
                         salvage=True).missing
    except MqStoreError:  # a damaged manifest: the open says so; nothing to list here
        return []


def read_segment(path: str) -> bytes:
    """The bytes of a segment file."""
    with open(path, "rb") as f:
        return f.read()


def lsn_range_mask(starts: Sequence[Optional[int]], lsn_min: Optional[int],
                   lsn_max: Optional[int]) -> List[Tuple[bool, bool]]:
    """For segments in sequence order, given the LSN each one's header says it starts at
    (``None``: an unreadable header), whether each lies wholly below ``lsn_min`` and whether
    wholly above ``lsn_max`` (``None``: unbounded): ``[(below, above), ...]``.

    LSNs grow with the sequence (compaction's outputs keep their inputs' start), so segment
    ``i`` holds only LSNs in ``[starts[i], starts[i + 1] - 1]``. An unreadable header decides
    nothing: that segment, and the one before it, are neither below nor above."""
    out = []
    for i, first in enumerate(starts):
        following = starts[i + 1] if i + 1 < len(starts) else None
        below = lsn_min is not None and following is not None and following <= lsn_min
        above = lsn_max is not None and first is not None and first > lsn_max
        out.append((below, above))
    return out


def first_lsn(path: str, fs: Any = None) -> Optional[int]:
    """The LSN a segment file's header says it starts at (``None``: no readable header); reads
    only the header. ``fs``: a ``pyarrow.fs`` file system (default: a local path)."""
    if fs is None:
        with open(path, "rb") as f:
            data = f.read(SEGMENT_HEADER_SIZE)
    else:
        with fs.open_input_file(path) as f:
            data = f.read_at(SEGMENT_HEADER_SIZE, 0)
    header = decode_segment_header(data)
    return None if header is None else header.first_lsn
