"""Opening a broker (Artemis's server start), the ``Broker`` facade's longest step, kept here so
that ``engine.broker`` reads as the public API.

``open_broker`` checks every argument before the directory is touched, opens the storage
(``engine.storage.opening``), builds the broker over it, ends the deliveries a crash left
open, delivers what came due while the store was closed and journals the address settings
given. Index damage met on the way makes it start again with a rebuild. ``Broker.open`` then
starts the broker's threads and deploys a configuration file's addresses and queues.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Optional, Protocol, Tuple, TypeVar

from .config.files import BrokerConfig, load_config, open_arguments
from .config.settings import AddressSettings, SettingsRepository, check_global_max_size, \
    check_match, checked_settings
from .addressing.wildcards import WildcardSyntax
from .delivery.restart import end_recovered_deliveries, replace_superseded
from .errors import BrokerFailedError
from .paging.memory import MIN_BUDGET
from .paging.pagefile import PageFile
from .storage.manager import StorageManager
from .storage.opening import open_storage
from .storage.persistence import Persistence
from .values import TIME_MAX, check_bool, check_int
from mqstore.journal import FileSystem, JournalOptions, OsFileSystem
from mqstore.recovery import IndexInvalidError, IndexStore, Progress


class Opening(Protocol):
    """What the opening steps use of the broker they build (``engine.broker.Broker``, which
    ``open_broker`` gets as ``build`` so that neither module imports the other)."""

    lock: Any
    storage: StorageManager
    settings: SettingsRepository
    persist_delivery_count: bool

    def deliver_scheduled(self) -> int: ...

    def set_address_settings(self, match: str, settings: AddressSettings) -> None: ...


B = TypeVar("B", bound=Opening)


def open_broker(build: Callable[..., B], directory: str, *, fs: Optional[FileSystem],
                journal_options: Optional[JournalOptions], index: Optional[IndexStore],
                checkpoint_records: int,
                address_settings: Optional[Mapping[str, AddressSettings]],
                wildcard_syntax: WildcardSyntax, clock: Optional[Callable[[], int]],
                expiry_scan_ms: int, verify_journal: bool, rebuild_index: bool,
                memory_budget: int,
                global_max_size: int, progress: Optional[Progress], config: Optional[str],
                persist_delivery_count_before_delivery: Optional[bool]
                ) -> Tuple[B, Optional[BrokerConfig]]:
    """``Broker.open`` up to its threads (its docstring gives the arguments, errors and state
    after them): the broker built by ``build(persistence, report, wildcard_syntax, clock,
    memory_budget, global_max_size, pages, opened)``, recovered, and the configuration file
    read (``None``: none given), for ``Broker.open`` to deploy once the broker runs.
    """
    cfg = load_config(config) if config is not None else None
    if cfg is not None:
        address_settings, wildcard_syntax, global_max_size, \
            persist_delivery_count_before_delivery = open_arguments(
                cfg, address_settings, wildcard_syntax, global_max_size,
                persist_delivery_count_before_delivery)
    elif persist_delivery_count_before_delivery is None:
        persist_delivery_count_before_delivery = False
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
        broker = build(persistence, rec.report, wildcard_syntax, clock, memory_budget,
                       global_max_size, pages, opened)
        broker.persist_delivery_count = persist_delivery_count_before_delivery
        end_recovered_deliveries(broker, rec.image)
        replace_superseded(broker)
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
        return open_broker(build, directory, fs=fs, journal_options=journal_options,
                           index=index, checkpoint_records=checkpoint_records,
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
    return broker, cfg
