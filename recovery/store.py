"""Opening a store: recover the journal, trust or rebuild the index, fold the tail.

``recover`` is the one open-time procedure. It loads the index checkpoint, opens the journal
trusting the checkpoint's segment catalogue, checks the checkpoint against the journal (same
segment generations, no segment the checkpoint did not know below its newest, LSN not past the
journal's end, every location it holds still present), restores the journal's liveness, and folds
the records after the checkpoint. When any check fails, or there is no index, it replays the
whole journal instead (a rebuild) and says why. Both paths give the same image (tested).
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from mqstore.journal import (FileSystem, InvalidRecordError, Journal, JournalOptions, OpenReport,
                             Record)
from .checkpoint import Checkpoint, changes, committed, read_index
from .errors import IndexInvalidError, MalformedRecordError
from .image import NullSink, StoreImage
from .indexstore import IndexStore
from .messagefold import MessageFold
from .relocation import relocate
from mqstore.journal.relocations import Relocation, applying, relocated_liveness

JOURNAL_DIR = "journal"
INDEX_DIR = "index"

log = logging.getLogger("mqstore.recovery")  # the recovery layer's logger

Progress = Callable[[int, int], None]  # (records replayed, records to replay)


@dataclass(frozen=True)
class RecoveryReport:
    """What opening a store found and did.

    Attributes:
        journal: the journal's own ``OpenReport`` (torn bytes dropped, segments, time...).
        index: "used" (fast path), or "rebuilt: <why>" after a full replay.
        checkpoint_lsn: LSN of the checkpoint used (0 when rebuilt).
        replayed_records: records folded (the tail after the checkpoint, or all).
        elapsed_s: seconds for the whole recovery.
        counts: addresses, queues, messages, references in the recovered image.
        lost: after a salvage, what the last checkpoint held that the salvaged store does not
            (``addresses`` and ``queues``: names; ``messages``: how many); empty otherwise or
            when there was no checkpoint to compare with.
        warnings: what the open found in the records and could not apply as written, one
            sentence each (the engine adds to it: a journaled queue filter that no longer
            compiles); also logged at WARNING.
    """

    journal: OpenReport
    index: str
    checkpoint_lsn: int
    replayed_records: int
    elapsed_s: float
    counts: Dict[str, int]
    lost: Dict[str, Any] = field(default_factory=dict)
    warnings: List[str] = field(default_factory=list)

    @property
    def rebuilt(self) -> bool:
        """Whether the index was rebuilt from the journal."""
        return self.index.startswith("rebuilt")


@dataclass
class Recovered:
    """An opened store's parts: the journal, the image, the index and the report."""

    journal: Journal
    image: StoreImage
    index: IndexStore
    report: RecoveryReport


def moves_after(cp: Checkpoint, journal: Journal) -> List[Relocation]:
    """The compactions after checkpoint ``cp`` (it still lists their inputs) whose moves are
    to be applied to its image before it is used (``journal.relocations``), in order."""
    return applying(journal.relocations(), {s.sequence for s in cp.catalogue})


def apply_moves(image: StoreImage, moves: Sequence[Relocation]) -> None:
    """Point ``image``'s locations where ``moves`` moved the records (``moves_after``).

    Raises:
        IndexInvalidError: a committed index value read on the way is damaged.
    """
    for r in moves:
        relocate(image, r.moved)


def validate(cp: Checkpoint, journal: Journal, moves: Sequence[Relocation] = ()
             ) -> Optional[str]:
    """Why the checkpoint cannot be trusted with this journal, or ``None``. ``moves``: the
    compactions after it whose moves are applied to it (``moves_after``): their outputs are
    known to it then."""
    if cp.lsn >= journal.next_lsn:
        return f"checkpoint LSN {cp.lsn} is past the journal's end"
    present = {s.sequence: s for s in journal.segments()}
    known = {s.sequence: s for s in cp.catalogue}
    for seq in (o for r in moves for o in r.outputs):
        if seq in present:
            known.setdefault(seq, present[seq].summary())
    for seq, summary in known.items():
        seg = present.get(seq)
        if seg is not None and seg.generation != summary.generation:
            return f"segment {seq} was rewritten since the checkpoint"
    newest = max(known, default=0)
    for seq in present:
        if seq <= newest and seq not in known:
            return f"segment {seq} is not in the checkpoint's catalogue"
    return None


def recover(directory: str, options: JournalOptions, fs: FileSystem, index: IndexStore,
            read_only: bool = False, verify: bool = False, liveness: bool = False,
            rebuild: bool = False, progress: Optional[Progress] = None) -> Recovered:
    """Open the store in ``directory``: journal in ``journal/``, index as given.

    Args:
        directory: the store directory.
        options: journal options (``read_only`` must match ``read_only``).
        fs: the file-system seam for the journal.
        index: the index store (LMDB in ``directory/index`` normally).
        read_only: change nothing: no truncation, no index rebuild written, no reclaim.
        verify: scan every segment, even those the index's catalogue lets the journal trust
            (always so in salvage mode, which must see the damage to skip it).
        liveness: in read-only mode, still compute which records are dead (in memory only;
            for reports of what compaction would reclaim).
        rebuild: replay the whole journal instead of using the checkpoint (whose LSN still
            proves which records were durable, so damage there is refused, not dropped).
        progress: called as ``progress(records replayed, records to replay)`` after each
            1,000 records replayed (the second figure counts the journal's records after the
            checkpoint, or all of them for a rebuild).

    Raises:
        CorruptJournalError, DirectoryLockedError, JournalIOError: from the journal.
        MalformedRecordError: a CRC-valid record cannot be folded (names file and offset); the
            journal is closed again and nothing is written.
    """
    start = time.monotonic()
    cp, why = read_index(index)
    # salvage and rebuild replay everything (salvage then says what the checkpoint had more);
    # the checkpoint's LSN still proves what was durable, except to salvage (the journal's call)
    use = None if options.salvage or rebuild else cp
    why = "salvage" if options.salvage else "asked for" if rebuild else why
    journal = Journal.open(os.path.join(directory, JOURNAL_DIR), options, fs,
                           trusted=use.catalogue if use is not None and not verify else None,
                           proven_lsn=cp.lsn if cp is not None else 0)
    try:
        before = _contents(cp.image) if options.salvage and cp is not None else None
        image, how, replayed = _fold(journal, index, use, why, read_only, liveness, progress)
        lost = _lost(before, image) if before is not None else {}
        if not read_only:
            journal.liveness.reclaim()
    except BaseException:
        journal.close()
        raise
    report = RecoveryReport(journal.report, how, cp.lsn if how == "used" and cp else 0,
                            replayed, time.monotonic() - start, image.summary(), lost)
    log_recovery(directory, report)
    return Recovered(journal, image, index, report)


def log_recovery(directory: str, report: RecoveryReport) -> None:
    """Log how a store was opened (``mqstore.recovery``): INFO with the index used or a new
    store; WARNING when a store with records had its index rebuilt (and why) and for what a
    salvage lost."""
    if report.rebuilt and report.replayed_records:
        log.warning("store %s: index %s; %d records replayed in %.1f s", directory,
                    report.index, report.replayed_records, report.elapsed_s)
    else:
        log.info("store %s opened in %.2f s: index %s, %d records replayed after LSN %d",
                 directory, report.elapsed_s, report.index, report.replayed_records,
                 report.checkpoint_lsn)
    lost = report.lost
    if lost and (lost.get("addresses") or lost.get("queues") or lost.get("messages")):
        log.warning("store %s: the salvage lost what the last index held: addresses %s, "
                    "queues %s, %d messages", directory, lost.get("addresses"),
                    lost.get("queues"), lost.get("messages", 0))


def _fold(journal: Journal, index: IndexStore, cp: Optional[Checkpoint], why: str,
          read_only: bool, liveness: bool, progress: Optional[Progress] = None):
    live = journal.liveness

    def ticker(after_lsn: int) -> Optional[Callable[[int], None]]:
        if progress is None:
            return None
        total = journal.report.records if after_lsn == 0 else \
            max(journal.report.last_lsn - after_lsn, 0)
        return lambda n: progress(n, max(total, n))

    sink = NullSink() if read_only and not liveness else journal
    live.deferred = True
    try:
        if cp is not None:
            moves = moves_after(cp, journal)
            problem = validate(cp, journal, moves)
            if problem is None:
                image = cp.image
                state = cp.liveness
                every = None if read_only else \
                    (lambda: write_index(index, image, journal, cp.extras, REBUILD_BATCH))
                try:
                    apply_moves(image, moves)  # compacted after it, before the next one
                    for r in moves:
                        state = relocated_liveness(state, r.moved)
                    if not read_only or liveness:
                        live.restore_state(state)
                    replayed = replay(journal, image, cp.lsn + 1, sink, every, ticker(cp.lsn))
                    problem = _dangling(image, journal)
                except IndexInvalidError as exc:  # a damaged value met on the way
                    problem = exc.reason
                if problem is None:
                    live.horizon = cp.lsn
                    return image, "used", replayed
            why = problem
        if read_only:  # nothing written: the rebuild stays in memory
            from .indexstore import MemoryIndex
            live.reset()  # (``rebuild`` does this for a writable open)
            image = StoreImage(MemoryIndex())
            replayed = replay(journal, image, 0, sink, None, ticker(0))
        else:
            image, replayed = rebuild(journal, index, ticker(0))
        live.horizon = 0  # nothing may be reclaimed before a commit covers it
        return image, f"rebuilt: {why}", replayed
    finally:
        live.deferred = False


REBUILD_BATCH = 50_000  # records folded between index commits during a rebuild (bounded RAM)


def rebuild(journal: Journal, index: IndexStore,
            tick: Optional[Callable[[int], None]] = None) -> Tuple[StoreImage, int]:
    """Empty ``index`` and the journal's liveness, and fold the whole journal into a new image
    over ``index``, committing every ``REBUILD_BATCH`` records (bounded RAM): the one rebuild,
    at open (``recover``) and while a broker runs (``engine.storage.persistence``). The caller sets
    the liveness's ``deferred`` and ``horizon`` brakes (no segment deleted while the replay reads
    them, none before a commit covers it), and commits what is left in the overlay.

    Returns:
        The image (its overlay not yet committed) and how many records were folded.

    Raises:
        MalformedRecordError, CorruptJournalError, JournalIOError: as ``replay``.
        IndexInvalidError: an index commit failed (the index then holds part of the replay;
            the open after it sees a checkpoint whose tail it folds, as after any crash).
    """
    journal.liveness.reset()
    index.destroy()
    image = StoreImage(index)
    replayed = replay(journal, image, 0, journal,
                      lambda: write_index(index, image, journal, {}, REBUILD_BATCH), tick)
    return image, replayed


def write_index(index: IndexStore, image: StoreImage, journal: Journal,
                extras: Dict[str, Any], min_changes: int = 0) -> int:
    """Commit the image's changes to the index at the image's last folded LSN, which must be
    durable in the journal (at open: everything replayed is; at run time the caller syncs
    first). With ``min_changes``, do nothing until the overlay holds that many changes.

    Returns:
        The LSN committed, or 0 when nothing was written.

    Raises:
        IndexInvalidError: the index write failed; the changes stay in RAM for the next try.
    """
    if min_changes and sum(len(t.dirty) for t in image.tables.all()) < min_changes:
        return 0
    exported = journal.liveness.export_changes()
    lsn = image.last_lsn
    try:
        index.commit(changes(index, image, lsn, journal.catalogue(), exported, extras))
    except BaseException:
        journal.liveness.requeue_changes(exported)
        raise
    committed(image)
    return lsn


def replay(journal: Journal, image: StoreImage, from_lsn: int, sink,
           every: Optional[Callable[[], Any]] = None,
           tick: Optional[Callable[[int], None]] = None) -> int:
    """Fold every record with LSN >= ``from_lsn`` into ``image``; return how many. ``every``
    is called after each 1,000 records (a rebuild commits its overlay there), then ``tick``
    with the records folded so far (progress). Runs of plain
    MESSAGE records go through the compiled fold when it was built (``MessageFold``), every
    other record through ``StoreImage.apply``; both give the same image.

    Raises:
        MalformedRecordError: a CRC-valid record whose payload does not fit its kind (names the
            segment file, offset, LSN and kind); ``image`` is then partly folded and must be
            dropped. CorruptJournalError, JournalIOError: from reading the journal.
    """
    fold = MessageFold(image)
    n, due = 0, EVERY
    for run in journal.runs(from_lsn=from_lsn):
        frames, i = run.frames, 0
        while i < len(frames):
            j, folded = fold(run, i, from_lsn, due - n)
            n += folded
            if j == i:  # the frame is not for the compiled fold
                frame, j = frames[i], i + 1
                if frame.lsn >= from_lsn:
                    _apply(journal, image, run.record(frame), sink)
                    n += 1
            i = j
            if n >= due:
                if every is not None:
                    every()
                if tick is not None:
                    tick(n)
                due = n - n % EVERY + EVERY
    return n


EVERY = 1000  # records folded between calls of replay's ``every``


def _apply(journal: Journal, image: StoreImage, rec: Record, sink) -> None:
    try:
        image.apply(rec.kind, rec.payload, rec.location, rec.lsn, sink)
    except MALFORMED as exc:
        loc = rec.location
        path = next(s.path for s in journal.segments() if s.sequence == loc.segment)
        raise MalformedRecordError(path, loc.offset, rec.lsn, rec.kind,
                                   f"{type(exc).__name__}: {exc}") from exc


# what folding a payload of the wrong shape raises (a field missing, not a map, a wrong type)
MALFORMED = (InvalidRecordError, KeyError, IndexError, TypeError, ValueError, AttributeError)


def _contents(image: StoreImage) -> Dict[str, Any]:
    """Names and message ids an image holds (read before a salvage replaces it)."""
    return {"addresses": {a.name for a in image.addresses.values()},
            "queues": {q.name for q in image.queues.values()},
            "messages": {m.mid for m in image.messages()}}


def _lost(before: Dict[str, Any], after: StoreImage) -> Dict[str, Any]:
    """What ``before`` (the last checkpoint's contents) holds that ``after`` (the salvaged
    image) lacks."""
    names = {a.name for a in after.addresses.values()}
    queues = {q.name for q in after.queues.values()}
    return {"addresses": sorted(before["addresses"] - names),
            "queues": sorted(before["queues"] - queues),
            "messages": sum(1 for mid in before["messages"] if after.message(mid) is None)}


def _dangling(image: StoreImage, journal: Journal) -> Optional[str]:
    missing = image.missing_segments([s.sequence for s in journal.segments()])
    if missing:
        return f"the index refers to segment {missing[0]}, which is gone"
    return None


__all__ = ["Recovered", "RecoveryReport", "apply_moves", "log_recovery", "moves_after",
           "rebuild", "recover", "replay", "validate", "write_index", "IndexInvalidError",
           "MalformedRecordError"]
