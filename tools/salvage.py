"""``mqstore recover --salvage``: keep what is readable of a damaged store and rewrite it as a
clean one that a plain open accepts, with a report of what was dropped beside it (as Artemis's
``artemis data recover`` writes a clean journal from a damaged one).

The salvage open (``JournalOptions(salvage=True)``) reads around damage: records in damaged
ranges, segments with a bad header, segments the manifest lists and that are missing. What it
keeps is the store's live state; that state is written into a new store built beside the old
one, exactly as ``mqstore export`` and ``mqstore import`` would carry it (addresses, queues
with their configuration, address settings, every message on every queue with its delivery
count, scheduled time and priority), and swapped in. Nothing is deleted: the damaged journal
and its index stay in the store directory as ``journal.damaged-<time>`` and
``index.damaged-<time>``, and ``salvage-<time>.json`` says what was skipped and lost.

Not carried by the rewrite: the list of deleted queues, and message ids (the new store numbers
its messages again, as an import does).
"""

from __future__ import annotations

import datetime
import json
import os
import shutil
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Optional

from mqstore.recovery import INDEX_DIR, JOURNAL_DIR


@dataclass
class SalvageReport:
    """What a salvage rewrite did.

    Attributes:
        skipped: what the salvage open read around: ``{"file", "start", "end", "reason"}``
            each (byte offsets in that file).
        lost: what the last checkpoint held that the salvaged store lacks (addresses and
            queues by name, a count of messages), when there was a checkpoint.
        kept: ``{"addresses", "queues", "messages"}`` counts of the rewritten store.
        damaged_journal, damaged_index: where the damaged journal and index were moved
            (inside the store directory). report: the report file's path.
    """

    skipped: List[Dict[str, Any]] = field(default_factory=list)
    lost: Dict[str, Any] = field(default_factory=dict)
    kept: Dict[str, int] = field(default_factory=dict)
    damaged_journal: str = ""
    damaged_index: Optional[str] = None
    report: str = ""


def skipped_rows(ranges: List[Any]) -> List[Dict[str, Any]]:
    """A salvage open's ``SkippedRange`` list as report rows: file name, start, end, reason."""
    return [{"file": os.path.basename(s.path), "start": s.start, "end": s.end,
             "reason": s.reason} for s in ranges]


def rewrite(directory: str) -> Optional[SalvageReport]:
    """Rewrite the (closed) store in ``directory`` from what a read-only salvage open reads of
    it, when that open had to skip damaged bytes (a plain open would refuse the store); the
    damaged journal is never written to.

    Returns:
        ``None`` when no damaged bytes were skipped (the salvage open settles the rest); else the
        ``SalvageReport`` (also written as JSON beside the store's journal).

    Raises:
        MqStoreError: the store cannot be read even with salvage, or the new store cannot be
            written (nothing in ``directory`` was changed then: the new store is built in
            ``<directory>.salvage-<pid>`` and removed on failure).
        OSError: the swap's renames failed (what was moved is named in the error).
    """
    from .offline import OfflineStore
    from .transfer import export_lines, import_store

    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    target = os.path.abspath(directory)
    work = f"{target}.salvage-{os.getpid()}"
    lines_path = f"{work}.jsonl"
    shutil.rmtree(work, ignore_errors=True)
    try:
        with OfflineStore(directory, salvage=True) as store:
            skipped, lost = list(store.journal.report.skipped), dict(store.report.lost)
            if not any(s.end > s.start for s in skipped):
                # no damaged bytes in a file that stays: a missing segment or a stray file
                # only, which the salvage open itself settles (the manifest forgets the one,
                # the other is set aside as *.unlisted); the store then opens as it is
                return None
            with open(lines_path, "w", encoding="utf-8") as out:
                for line in export_lines(store):
                    out.write(json.dumps(line, sort_keys=True, separators=(",", ":")) + "\n")
        with open(lines_path, encoding="utf-8") as lines:
            messages = import_store(lines, work)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    finally:
        if os.path.exists(lines_path):
            os.unlink(lines_path)
    report = SalvageReport(
        skipped=skipped_rows(skipped),
        lost=lost,
        kept={"messages": messages},
        damaged_journal=f"{JOURNAL_DIR}.damaged-{stamp}")
    _swap(target, work, report, stamp)
    return report


def _swap(target: str, work: str, report: SalvageReport, stamp: str) -> None:
    """Move the damaged journal and index aside, the new ones in, and write the report."""
    os.rename(os.path.join(target, JOURNAL_DIR), os.path.join(target, report.damaged_journal))
    index = os.path.join(target, INDEX_DIR)
    if os.path.exists(index):
        report.damaged_index = f"{INDEX_DIR}.damaged-{stamp}"
        os.rename(index, os.path.join(target, report.damaged_index))
    for part in (JOURNAL_DIR, INDEX_DIR):
        if os.path.exists(os.path.join(work, part)):
            os.rename(os.path.join(work, part), os.path.join(target, part))
    shutil.rmtree(work, ignore_errors=True)
    report.report = os.path.join(target, f"salvage-{stamp}.json")
    from mqstore.engine import Broker
    with Broker.open(target, expiry_scan_ms=0) as b:  # a plain open: it must accept it now
        report.kept = {"addresses": len(b.address_names()), "queues": len(b.queue_names()),
                       "messages": report.kept["messages"]}
    with open(report.report, "w", encoding="utf-8") as f:
        json.dump(asdict(report), f, indent=1, sort_keys=True)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    fd = os.open(target, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


__all__ = ["SalvageReport", "rewrite", "skipped_rows"]
