"""Opening and closing a broker (Artemis's server start and stop), the ``Broker`` facade's own
two longest steps, kept here so that ``engine.broker`` reads as the public API.

``open_broker`` checks every argument before the directory is touched, opens the storage
(``engine.storage.opening``), builds the broker over it, ends the deliveries a crash left
open, delivers what came due while the store was closed, journals the address settings given,
starts the expiry and scheduler threads and deploys a configuration file's addresses and
queues. Index damage met on the way makes it start again with a rebuild. ``close_broker`` ends
the sessions (cancelling what they hold), stops the threads and writes the last checkpoint.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Callable, Dict, Mapping, Optional, Type

from .config.files import deploy, load_config, open_arguments
from .config.settings import AddressSettings, check_global_max_size, check_match, \
    checked_settings
from .addressing.wildcards import WildcardSyntax
from .delivery.restart import end_open_deliveries, end_recovered_deliveries
from .errors import BrokerFailedError, IllegalStateError
from .paging.memory import MIN_BUDGET
from .paging.pagefile import PageFile
from .session import Session
from .storage.opening import open_storage
from .storage.persistence import Persistence
from .values import TIME_MAX, check_bool, check_int
from mqstore.journal import FileSystem, JournalError, JournalOptions, OsFileSystem
from mqstore.recovery import IndexInvalidError, IndexStore, Progress

if TYPE_CHECKING:  # the facade these steps belong to (no import at run time)
    from .broker import Broker


def open_broker(cls: "Type[Broker]", directory: str, *, fs: Optional[FileSystem],
                journal_options: Optional[JournalOptions], index: Optional[IndexStore],
                checkpoint_records: int,
                address_settings: Optional[Mapping[str, AddressSettings]],
                wildcard_syntax: WildcardSyntax, clock: Optional[Callable[[], int]],
                expiry_scan_ms: int, verify_journal: bool, rebuild_index: bool,
                memory_budget: int, global_max_size: int, progress: Optional[Progress],
                config: Optional[str],
                persist_delivery_count_before_delivery: Optional[bool]) -> "Broker":
    """``Broker.open`` (its docstring gives the arguments, errors and state after them)."""
    cfg = load_config(config) if config is not None else None
    if cfg is not None:
        address_settings, wildcard_syntax, global_max_size, \
            persist_delivery_count_before_delivery = open_arguments(
                cfg, address_settings, wildcard_syntax, global_max_size,
                persist_delivery_count_before_delivery)
    elif persist_delivery_count_before_delivery is None:
        persist_delivery_count_before_delivery = True
    fs = fs or OsFileSystem()
    check_bool("persist_delivery_count_before_delivery", persist_delivery_count_before_delivery)
    check_int("checkpoint_records", checkpoint_records, 0, TIME_MAX)
    check_int("expiry_scan_ms", expiry_scan_ms, 0, TIME_MAX)
    check_int("memory_budget", memory_budget, MIN_BUDGET, TIME_MAX)
    check_global_max_size(global_max_size)
    entries = {check_match(m, wildcard_syntax): checked_settings(v)
               for m, v in (address_settings or {}).items()}
    opened = open_storage(directory, fs, index, journal_options or JournalOptions(),
                          verify_journal, rebuild_index, progress)
    rec = opened.recovered
    try:
        persistence = Persistence(rec.journal, rec.image, rec.index, checkpoint_records)
        pages = PageFile(fs, f"{directory.rstrip('/')}/paging")
        broker = cls(persistence, rec.report, wildcard_syntax, clock, memory_budget,
                     global_max_size, pages)
        broker._opened = opened
        broker.persist_delivery_count = persist_delivery_count_before_delivery
        end_recovered_deliveries(broker, rec.image)
        broker.deliver_scheduled()  # times that passed while the store was closed
        for match, values in entries.items():
            if broker.settings.entries.get(match) != values:
                broker.set_address_settings(match, values)
        if rec.report.rebuilt or rec.journal.relocation_files:
            # (a compaction's moves mapped at open: a checkpoint makes them the index's)
            with broker.lock:
                broker.storage.guard(persistence.checkpoint_quietly)
    except (BrokerFailedError, IndexInvalidError) as exc:
        opened.release()
        cause = exc.cause if isinstance(exc, BrokerFailedError) else exc
        if rebuild_index or not isinstance(cause, IndexInvalidError):
            raise
        # damage in the index found while opening (ending the deliveries it lists, say):
        # open again, rebuilding it
        return open_broker(cls, directory, fs=fs, journal_options=journal_options, index=index,
                           checkpoint_records=checkpoint_records,
                           address_settings=address_settings,
                           wildcard_syntax=wildcard_syntax, clock=clock,
                           expiry_scan_ms=expiry_scan_ms, verify_journal=verify_journal,
                           rebuild_index=True, memory_budget=memory_budget,
                           global_max_size=global_max_size, progress=progress,
                           config=config, persist_delivery_count_before_delivery=(
                               persist_delivery_count_before_delivery))
    except BaseException:
        opened.release()
        raise
    if expiry_scan_ms > 0:
        start_reaper(broker, expiry_scan_ms / 1000.0)
    broker.scheduler.start()
    if cfg is not None:
        try:
            deploy(broker, cfg)
        except BaseException:
            broker.close()
            raise
    return broker


def start_reaper(broker: "Broker", period_s: float) -> None:
    """The expiry thread: ``expire_messages`` every ``period_s`` seconds until close."""
    def run() -> None:
        while not broker._stop_reaper.wait(period_s):
            try:
                broker.expire_messages()
            except (BrokerFailedError, IllegalStateError):
                return
    broker._reaper = threading.Thread(target=run, name="mqstore-expiry", daemon=True)
    broker._reaper.start()


def close_broker(broker: "Broker") -> None:
    """``Broker.close``."""
    storage = broker.storage
    if storage.closed:
        return
    with broker.lock:
        consumers = {q.name: len(q.consumers) for q in broker.queues.values() if q.durable}
        broker.closing = True  # closing its consumers deletes no auto-delete queue
    end_open_deliveries(broker)
    for s in list(broker.sessions):
        assert isinstance(s, Session)
        try:
            s.close()
        except BrokerFailedError:
            pass
    with broker.lock:
        storage.closed = True
        broker._stop_reaper.set()
        broker.scheduler.wake()
        broker.room.notify()  # senders waiting for room: they find the broker closed
        p = storage.persistence
        try:
            if storage.failure is None:
                p.checkpoint_quietly({"consumers": consumers, "counters": counters(broker)})
        except JournalError:
            pass  # the journal failed: nothing more to save; recovery runs at open
        finally:
            if broker.pages is not None:
                broker.pages.close()
            if broker._opened is not None:
                broker._opened.release()
            else:
                p.journal.close()
                p.index.close()


def counters(broker: Any) -> Dict[str, Dict[str, int]]:
    """What each durable queue counted during this run (``QueueInfo``'s messages_added
    ... counters, Artemis's queue counters), kept in the index at close for the offline
    listing (``mqstore queues``)."""
    return {q.name: {"added": q.added, "acked": q.acknowledged, "killed": q.killed,
                     "expired": q.expired, "replaced": q.replaced}
            for q in broker.queues.values() if q.durable}
