"""``mqstore check``: the fsck of a store, read-only.

Checks every segment header, every frame (length, kind, generation, CRC-32C), LSN order within
and across segments, a pending compaction, and the index: its own integrity (every value's CRC,
entry counts, LMDB readable), its segment catalogue against the journal, and its state against
a full replay of the journal (which also finds CRC-valid records that recovery cannot fold). Every
finding names the file and, where one exists, the offset.
A torn tail is reported as a warning: the next writable open truncates it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional

from mqstore.journal import CorruptJournalError, Journal, JournalOptions, MqStoreError, OsFileSystem
from mqstore.journal.errors import MissingSegmentError
from mqstore.journal.format import decode_segment_header
from mqstore.journal.inspect import Damage, scan_buffer
from mqstore.recovery import (INDEX_DIR, JOURNAL_DIR, IndexInvalidError, LmdbIndex, MalformedRecordError, NullSink,
                              StoreImage, replay)
from mqstore.recovery.checkpoint import read_index
from mqstore.recovery.store import apply_moves, moves_after, validate
from .offline import MAX_FRAME, SegmentFile, read_segment, segment_files


@dataclass(frozen=True)
class Finding:
    """One result: level ("error", "warning", "ok"), the file, the offset or None, text."""

    level: str
    path: str
    offset: Optional[int]
    message: str

    def as_dict(self) -> Dict[str, Any]:
        return {"level": self.level, "path": self.path, "offset": self.offset,
                "message": self.message}


def check_store(directory: str, progress: Optional[Callable[[SegmentFile], None]] = None
                ) -> List[Finding]:
    """Every finding about the store in ``directory`` (nothing is written)."""
    findings: List[Finding] = []
    files = segment_files(directory)
    jdir = os.path.join(directory, JOURNAL_DIR)
    if os.path.exists(os.path.join(jdir, "compact.ctl")):
        findings.append(Finding("warning", os.path.join(jdir, "compact.ctl"), None,
                                "an interrupted compaction; the next open rolls it forward"))
    last_lsn = 0
    frames = 0
    for i, f in enumerate(files):
        if progress:
            progress(f)
        buf = read_segment(f.path)
        header = decode_segment_header(buf)
        if header is None or header.sequence != f.sequence:
            findings.append(Finding("error", f.path, 0, "bad segment header"))
            continue
        for item in scan_buffer(buf, header.generation, MAX_FRAME):
            if isinstance(item, Damage):
                torn = i == len(files) - 1 and item.end >= len(buf.rstrip(b"\x00"))
                findings.append(Finding("warning" if torn else "error", f.path, item.offset,
                                        f"{'torn tail: ' if torn else ''}{item.reason}, "
                                        f"{item.end - item.offset} bytes"))
                continue
            frames += 1
            if item.info.lsn <= last_lsn:
                findings.append(Finding("error", f.path, item.info.offset,
                                        f"LSN {item.info.lsn} not above {last_lsn}"))
            last_lsn = max(last_lsn, item.info.lsn)
    findings.append(Finding("ok", jdir, None, f"{len(files)} segments, {frames} frames, "
                                              f"last LSN {last_lsn}"))
    findings += _check_open(directory)
    findings += _check_index(directory, findings)
    return findings


def _check_open(directory: str) -> List[Finding]:
    """What opening the store would refuse (a missing segment or manifest, a journal that
    ends before the LSN the index proves durable, damage that cannot be a torn tail)."""
    from .offline import OfflineStore
    try:
        OfflineStore(directory).close()
    except MalformedRecordError as exc:  # CRC-valid, but recovery cannot fold it
        return [Finding("error", exc.path, exc.offset, f"malformed record: {exc.reason}")]
    except MissingSegmentError as exc:
        return [Finding("error", path, None, "missing: the journal's manifest lists it")
                for path in exc.missing]
    except CorruptJournalError as exc:
        return [Finding("error", exc.path, exc.offset, f"the store would not open: {exc.reason}")]
    except MqStoreError as exc:
        return [Finding("error", directory, None, f"the store would not open: {exc}")]
    return []


def _check_index(directory: str, found: List[Finding]) -> List[Finding]:
    if any(f.level == "error" for f in found):
        return [Finding("warning", os.path.join(directory, INDEX_DIR), None,
                        "index not compared: the journal is damaged")]
    journal = Journal.open(os.path.join(directory, JOURNAL_DIR),
                           JournalOptions(read_only=True), OsFileSystem())
    try:
        full = StoreImage()
        try:
            replay(journal, full, 0, NullSink())
        except MalformedRecordError as exc:  # CRC-valid, but recovery cannot fold it
            return [Finding("error", exc.path, exc.offset, f"malformed record: {exc.reason}")]
        return _compare_index(directory, journal, full)
    finally:
        journal.close()


def _compare_index(directory: str, journal: Journal, full: StoreImage) -> List[Finding]:
    idx_dir = os.path.join(directory, INDEX_DIR)
    if not os.path.exists(os.path.join(idx_dir, "data.mdb")):
        return [Finding("warning", idx_dir, None, "no index: the next open rebuilds it")]
    index = LmdbIndex(idx_dir, read_only=True)
    try:
        return _compare_with(index, idx_dir, journal, full)
    finally:
        index.close()


def _compare_with(index: LmdbIndex, idx_dir: str, journal: Journal, full: StoreImage
                  ) -> List[Finding]:
    cp, why = read_index(index)
    if cp is None:
        return [Finding("error", os.path.join(idx_dir, "data.mdb"), None,
                        f"index damaged or unreadable: {why}")]
    moves = moves_after(cp, journal)  # a compaction the index predates: as the open does
    problem = validate(cp, journal, moves)
    if problem is not None:
        return [Finding("warning", idx_dir, None,
                        f"index is stale ({problem}); the next open rebuilds it")]
    fast = cp.image
    try:
        apply_moves(fast, moves)
        replay(journal, fast, cp.lsn + 1, NullSink())
        same = describe(fast) == describe(full)
    except IndexInvalidError as exc:
        return [Finding("error", os.path.join(idx_dir, "data.mdb"), None,
                        f"index damaged: {exc.reason}")]
    if not same:
        return [Finding("error", os.path.join(idx_dir, "data.mdb"), None,
                        "the index disagrees with a replay of the journal")]
    return [Finding("ok", idx_dir, None, f"index at LSN {cp.lsn}: entry counts and every "
                                         f"reference's and message's CRC checked, equal to a "
                                         f"full replay")]


def describe(img: StoreImage) -> Dict[str, Any]:
    """A comparable description of an image (locations and ids included)."""
    return {"addresses": {a.id: (a.name, tuple(a.routing_types)) for a in img.addresses.values()},
            "queues": {q.id: (q.name, q.address, q.routing_type, sorted(q.config.items()),
                              [(r.mid, r.order, r.delivery_count) for r in img.refs(q.id)],
                              [(r.mid, r.order, r.at, r.delivery_count)
                               for r in img.all_scheduled(q.id)])
                       for q in img.queues.values()},
            "messages": {m.mid: (m.location, m.slot, m.refcount) for m in img.messages()},
            "settings": {k: v for k, (v, _loc) in img.settings.items()},
            "deleted": [(d.id, d.name, d.address, d.routing_type, d.deleted_at, d.location)
                        for d in img.deleted]}


def problems(findings: List[Finding]) -> bool:
    """Whether any finding is an error (exit code 1)."""
    return any(f.level == "error" for f in findings)


__all__ = ["Finding", "check_store", "problems", "MqStoreError"]
