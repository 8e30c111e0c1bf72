"""``Broker.statistics()``'s snapshot (a public dataclass of the facade, as the management views
are ``engine.model``'s)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class BrokerStatistics:
    """A snapshot of one broker's state and storage health (``Broker.statistics()``).

    Attributes:
        addresses, queues, messages: how many there are now.
        journal: the journal's counters (segments, records, fsyncs, failed...).
        checkpoint_lsn: LSN of the last index checkpoint written (0: none since open).
        checkpoint_failures: index checkpoints that failed since open (logged, retried).
        last_checkpoint_error: the last such failure's text, "" when none.
        failed: the broker stopped after a storage failure (reopen to recover).
        memory: the RAM budget (``engine.paging.memory.MemoryStatistics``): bytes charged, peak,
            references and messages in RAM, references paged out and back in.
        index_commits: index commits since open; index_entries_written: entries those
            commits wrote or deleted (each commit writes what changed, never the whole state).
        page_files: the page files of paged messages journaled nowhere
            (``engine.paging.pagefile.PageFileStatistics``): files now, entries written, writes that
            failed (those messages stayed in RAM), entries that did not read back (dropped).
        index_rebuilds: times the index was found damaged while the broker ran and was
            rebuilt from the journal (the broker went on); last_index_rebuild: why the last
            one ran, "" when none.
    """

    addresses: int
    queues: int
    messages: int
    journal: Any
    checkpoint_lsn: int
    checkpoint_failures: int
    last_checkpoint_error: str
    failed: bool
    memory: Any = None
    index_commits: int = 0
    index_entries_written: int = 0
    page_files: Any = None
    index_rebuilds: int = 0
    last_index_rebuild: str = ""
