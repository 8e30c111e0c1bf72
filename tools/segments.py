"""The segment files of a store directory, for the offline tools and the Spark source."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import List

from mqstore.journal import MqStoreError, OsFileSystem
from mqstore.journal.compaction import resolve_pending
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
    if not os.path.isdir(jdir):
        raise MqStoreError(f"no mqstore journal in {directory}",
                           hint="give the directory passed to Broker.open")
    fs = OsFileSystem()
    pending = resolve_pending(fs, jdir, read_only=True)
    return [SegmentFile(seq, path, os.path.getsize(path))
            for seq, path in list_segment_paths(fs, jdir, pending.overrides, pending.excluded)]


def read_segment(path: str) -> bytes:
    """The bytes of a segment file."""
    with open(path, "rb") as f:
        return f.read()
