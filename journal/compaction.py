"""Compaction: rewrite the live records of sealed segments into fewer new segments, crash-safely.

The swap follows Artemis's control-file protocol:

1. write each output as ``{seq}.seg.compact`` and fdatasync it; fsync the directory;
2. write ``compact.ctl`` (inputs and outputs, CRC-framed) through a temporary name, fdatasync,
   rename, fsync the directory: this is the commit point;
3. rename outputs to their final names, unlink the inputs, fsync the directory, remove the
   control file, fsync the directory.

At open, a valid control file is rolled forward (step 3 is idempotent); without one, leftover
``.seg.compact`` files are removed (rolled back). A crash at any step leaves either the old or the
new set of segments, never a mix. Output sequence numbers lie above every input and below the
active segment, so LSN order is kept and a stale location never names a new file. Records keep
their LSNs; they are re-framed with the output's generation id.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Set, Tuple

import msgpack
from pyroaring import BitMap64

from .core import JournalCore
from .errors import JournalIOError
from .format import (SEGMENT_FLAG_COMPACTED, SEGMENT_FLAG_LISTED, SEGMENT_HEADER_SIZE,
                     SegmentHeader, decode_control, encode_control, encode_frame)
from .fs import FileSystem
from .liveness import Liveness
from . import relocations as reloc
from .manifest import MANIFEST_FILE, SegmentManifest, write_atomically
from .records import Record, iter_segment_records
from .segment import (COMPACT_SUFFIX, TMP_SUFFIX, Location, SegmentInfo, join,
                      segment_name)


CONTROL_FILE = "compact.ctl"


@dataclass(frozen=True)
class CompactionReport:
    """What a ``compact`` call did.

    Attributes:
        compacted: whether anything was rewritten.
        reason: why it ran or did not.
        inputs, outputs: segment sequence numbers replaced and written.
        records_copied: live records rewritten.
        bytes_before, bytes_after: record bytes in the inputs and in the outputs.
        relocations: old location -> new location of every copied record.
    """

    compacted: bool
    reason: str
    inputs: Tuple[int, ...] = ()
    outputs: Tuple[int, ...] = ()
    records_copied: int = 0
    bytes_before: int = 0
    bytes_after: int = 0
    relocations: Dict[Location, Location] = field(default_factory=dict)


@dataclass
class Pending:
    """The outcome of resolving an interrupted compaction at open (internal)."""

    overrides: Dict[int, str] = field(default_factory=dict)
    excluded: Set[int] = field(default_factory=set)
    action: str = ""
    removed: int = 0


def _plan(body: bytes) -> Tuple[List[int], List[Tuple[str, int]]]:
    plan = msgpack.unpackb(body, raw=False)
    return list(plan["inputs"]), [(str(n), int(s)) for n, s in plan["outputs"]]


def resolve_pending(fs: FileSystem, directory: str, read_only: bool) -> Pending:
    """Roll an interrupted compaction forward or back, and remove temporary files.

    In read-only mode nothing is changed: the returned overrides describe the rolled-forward
    view (output files by their current names, inputs excluded).
    """
    pending = Pending()
    ctl = join(directory, CONTROL_FILE)
    body = decode_control(fs.read_file(ctl)) if fs.exists(ctl) else None
    if read_only:
        if body is not None:
            inputs, outputs = _plan(body)
            pending.excluded = set(inputs)
            for name, seq in outputs:
                tmp = join(directory, name)
                pending.overrides[seq] = tmp if fs.exists(tmp) else \
                    join(directory, segment_name(seq))
            pending.action = "pending compaction (read-only view rolled forward)"
        return pending
    if body is not None:
        apply_swap(fs, directory, body)
        pending.action = "rolled forward"
    for name in fs.listdir(directory):
        if name.endswith((COMPACT_SUFFIX, TMP_SUFFIX)) or name in (CONTROL_FILE,
                                                                   CONTROL_FILE + ".tmp",
                                                                   MANIFEST_FILE + ".tmp"):
            fs.unlink(join(directory, name))
            pending.removed += 1
            if name.endswith(COMPACT_SUFFIX) and not pending.action:
                pending.action = "rolled back"
    if pending.removed:
        fs.fsync_dir(directory)
    reloc.remove(fs, directory, reloc.stale(fs, directory))  # rolled back
    return pending


def apply_swap(fs: FileSystem, directory: str, body: bytes,
               manifest: Optional[SegmentManifest] = None) -> None:
    """Step 3: rename outputs into place, list them and retire the inputs in the segment
    manifest (``manifest``, or the one on disk), unlink inputs, drop the control file
    (idempotent: an open rolls a cut-short swap forward with it)."""
    inputs, outputs = _plan(body)
    for name, seq in outputs:
        tmp = join(directory, name)
        if fs.exists(tmp):
            fs.rename(tmp, join(directory, segment_name(seq)))
    fs.fsync_dir(directory)
    manifest = manifest or SegmentManifest.load(fs, directory)
    if manifest is not None:
        manifest.retire(inputs, added=[seq for _name, seq in outputs])
    for seq in inputs:
        path = join(directory, segment_name(seq))
        if fs.exists(path):
            fs.unlink(path)
    fs.fsync_dir(directory)
    if manifest is not None:
        manifest.forget(inputs)
    fs.unlink(join(directory, CONTROL_FILE))
    fs.fsync_dir(directory)


def compact(journal: JournalCore, force: bool, record_moves: bool = False) -> CompactionReport:
    """See ``Journal.compact``.

    Raises:
        JournalIOError: an OS error; while writing outputs nothing changed and the journal
            goes on; from the control file on, the journal is fail-stopped and reopening
            rolls the swap forward (valid control file) or back.
    """
    j = journal
    opts = j._options
    with j._lock:
        j._check_writable()
        inputs = []
        for s in sorted(j._segments.values(), key=lambda s: s.sequence):
            if not (s.sealed and s is not j._active and s.handle >= 0 and
                    j.liveness.below_horizon(s)):
                break  # inputs are a run from the oldest: outputs must sort before the rest
            inputs.append(s)
        total = sum(s.total_bytes for s in inputs)
        live = sum(s.live_bytes for s in inputs)
        snapshot = {s.sequence: s.dead.copy() for s in inputs}
        later = [s.sequence for s in j._segments.values() if s.sequence > inputs[-1].sequence] \
            if inputs else []
        limit_seq = min(later) if later else j._active.sequence
    if not inputs or live == total:
        return CompactionReport(False, "no sealed segment with dead records")
    if not force and (len(inputs) <= opts.compact_min_files or
                      live >= opts.compact_live_ratio * total):
        return CompactionReport(False, f"{len(inputs)} sealed segments, "
                                       f"{live / total:.0%} live: below the thresholds")
    copied = [r for s in inputs for r in iter_segment_records(j._fs, s, SEGMENT_HEADER_SIZE,
                                                               opts.max_frame())
              if r.location.offset not in snapshot[s.sequence]]
    outputs = _layout(j, copied, inputs[-1].sequence + 1, limit_seq)
    relocations_of = {r.location: loc for out in outputs for r, loc in out[1]}
    try:
        _write_outputs(j, outputs)
    except OSError as exc:  # no control file yet: the old segments are still the truth
        _discard(j, outputs)
        raise JournalIOError(j._dir, "compaction", exc) from exc
    body = msgpack.packb({"inputs": [s.sequence for s in inputs],
                          "outputs": [[segment_name(o.sequence, COMPACT_SUFFIX), o.sequence]
                                      for o, _ in outputs]})
    if record_moves:  # where each record went, for an open whose index predates this
        try:
            moves = reloc.write(j._fs, j._dir, [s.sequence for s in inputs],
                                [o.sequence for o, _ in outputs], relocations_of)
        except OSError as exc:  # no control file yet: the old segments are still the truth
            _discard(j, outputs)
            raise JournalIOError(j._dir, "compaction", exc) from exc
        j.relocation_files.append(moves)
    try:
        write_atomically(j._fs, j._dir, CONTROL_FILE, encode_control(body))
        apply_swap(j._fs, j._dir, body, j.manifest)
    except OSError as exc:
        # the control file may exist: keep every output for open-time recovery to roll
        # forward (or back, if the control file never became valid), and stop here
        j._fail(exc, j._open)
        raise JournalIOError(j._dir, "compaction swap", exc) from exc
    _install(j, inputs, snapshot, [o for o, _ in outputs], relocations_of)
    j.liveness.reclaim()
    return CompactionReport(True, "forced" if force else "thresholds reached",
                            tuple(s.sequence for s in inputs),
                            tuple(o.sequence for o, _ in outputs), len(copied), total,
                            sum(r.location.length for r in copied), relocations_of)


def _layout(j: JournalCore, records: List[Record], first_seq: int, limit_seq: int
            ) -> List[Tuple[SegmentInfo, List[Tuple[Record, Location]]]]:
    """Assign every copied record a place in new output segments (no I/O yet)."""
    from .writer import new_generation

    outs: List[Tuple[SegmentInfo, List[Tuple[Record, Location]]]] = []
    size = j._options.segment_size
    for rec in records:
        if not outs or outs[-1][0].end + rec.location.length > size:
            seq = first_seq + len(outs)
            assert seq < limit_seq, "compaction outputs must sort below the active segment"
            info = SegmentInfo(seq, new_generation(), rec.lsn, join(j._dir, segment_name(seq)),
                               SEGMENT_FLAG_COMPACTED, sealed=True)
            outs.append((info, []))
        info, placed = outs[-1]
        loc = Location(info.sequence, info.end, rec.location.length)
        placed.append((rec, loc))
        info.end += loc.length
        info.count += 1
        info.total_bytes += loc.length
        info.last_lsn = rec.lsn
    return outs


def _write_outputs(j: JournalCore, outputs: List[Tuple[SegmentInfo, List[Tuple[Record, Location]]]]
                   ) -> None:
    fs = j._fs
    for info, placed in outputs:
        header = SegmentHeader(info.sequence, info.generation, 0, info.first_lsn,
                               info.flags | SEGMENT_FLAG_LISTED, info.end)
        frames = [encode_frame(r.kind, r.lsn, info.generation, r.lsn, r.data) for r, _ in placed]
        assert all(len(f) == r.location.length for f, (r, _) in zip(frames, placed))
        handle = fs.open(join(j._dir, segment_name(info.sequence, COMPACT_SUFFIX)), create=True)
        info.handle = handle
        fs.pwrite(handle, header.encode() + b"".join(frames), 0)
        fs.fdatasync(handle)
        info.written = info.end
    fs.fsync_dir(j._dir)


def _discard(j: JournalCore, outputs: List[Tuple[SegmentInfo, List[Tuple[Record, Location]]]]
             ) -> None:
    for info, _ in outputs:
        try:
            if info.handle >= 0:
                j._fs.close(info.handle)
            j._fs.unlink(join(j._dir, segment_name(info.sequence, COMPACT_SUFFIX)))
        except OSError:
            pass  # removed at the next open (rolled back)


def _install(j: JournalCore, inputs: List[SegmentInfo], snapshot: Dict[int, BitMap64],
             outputs: List[SegmentInfo], relocations: Dict[Location, Location]) -> None:
    """Swap the in-memory table; carry over dead marks made during the copy; move pins of
    copied records, release pins of records left out."""
    by_old = {(loc.segment, loc.offset): new for loc, new in relocations.items()}
    live: Liveness = j.liveness
    with j._lock:
        for info in outputs:
            j._segments[info.sequence] = info
            live.watch(info)
        late_dead: List[Location] = []
        for info in inputs:
            live.remove_segment(info)
            for off in info.dead - snapshot[info.sequence]:
                new = by_old.get((info.sequence, off))
                if new is not None:
                    late_dead.append(new)
        live.relocate_tombstones(relocations)
        for info in inputs:
            live.segment_gone(info.sequence, relocations)
        for loc in late_dead:
            live._kill(loc)
    for info in inputs:
        try:
            j._fs.close(info.handle)
        except OSError:
            pass
        info.handle = -1
