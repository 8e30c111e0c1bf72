"""The embedded broker: open a directory, get addresses, queues, sessions; state survives crashes.

``Broker`` owns the runtime state (addresses, queues, messages) and its storage
(``broker.storage``, an ``engine.storage.StorageManager``: writes, waits, ids and the
fail-stop state, over ``engine.persistence``). All state changes happen under one lock, in the
order their records get LSNs; waiting for durability happens outside it (the write path of
ARCHITECTURE.md). Routing
and placement live in ``engine.placement``, delivery and settlement in ``engine.delivery``
(both typed against ``engine.core.BrokerCore``, so neither imports this module); sessions and
consumers in ``engine.session``; what addresses hold in ``engine.addressfull``; opening the
directory in ``engine.opening``; ending deliveries at close and reopen in ``engine.restart``.

Why over 500 lines: most of it is the public management API (addresses, queues, settings,
statistics), each method a short locked step with its docstring; splitting it by verb would
only spread one lock's invariants over several modules.
"""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from .errors import (AddressNotFoundError, AlreadyExistsError, BrokerFailedError,
                     ExclusiveQueueError, IllegalStateError, QueueInUseError,
                     QueueNotEmptyError, QueueNotFoundError, ResourceLimitError,
                     RoutingTypeError)
from . import retroactive
from .connection import Connection
from .control import QueueControl
from .deleted import DeletedQueues
from .model import (AddressInfo, BrokerStatistics, DeletedQueue, QueueConfig, QueueInfo,
                    RoutingType, ScheduledMessage, now_ms, parse_routing_types)
from .lastnode import LastNode, enter as enter_last_node, leave as leave_last_node
from .scheduler import Scheduler
from .scheduling import deliver_now, remove_scheduled
from .names import check_name, queue_reference
from .opening import OpenedStorage, open_storage
from .orphans import move_orphans
from .queuelimits import count_held_bytes
from .delivery import serve_waiters
from .restart import end_open_deliveries, end_recovered_deliveries
from .restore import restore_messages
from .session import Session
from .persistence import Persistence
from .storage import StorageManager
from .settings import (AddressSettings, SettingsRepository, check_match,
                       check_queue_config, checked_settings, resolve_queue_config)
from .values import TIME_MAX, check_bool, check_int, check_text
from .config import deploy, load_config, open_arguments
from .wildcards import DEFAULT_SYNTAX, WildcardIndex, WildcardSyntax, matches
from .policies import build_policies
from .address import Address
from .addressfull import UNLIMITED, AddressSizes, Room, check_global_max_size
from .pagefile import PageFile
from .paging import (DEFAULT_BUDGET, MIN_BUDGET, IndexReader, MemoryBudget,
                     MessageCache, StoredMessage)
from .queue import MessageRef, Queue
from .filters import UnusableFilter, warn_unusable_filter
from mqstore.journal import FileSystem, JournalError, JournalOptions, OsFileSystem
from mqstore.recovery import (IndexInvalidError, IndexStore, MessageImage, Progress, RecoveryReport,
                              StoreImage, relocate)
from mqstore.recovery import schema
from mqstore.recovery.schema import RecordKind


class Broker:
    """An open store. Create with ``Broker.open(directory)``; close with ``close()``.

    Thread-safe. One opener per directory (a second one gets ``DirectoryLockedError``).
    """

    def __init__(self, persistence: Persistence, report: RecoveryReport,
                 syntax: WildcardSyntax = DEFAULT_SYNTAX,
                 clock: Optional[Callable[[], int]] = None,
                 memory_budget: int = DEFAULT_BUDGET,
                 global_max_size: int = UNLIMITED,
                 pages: Optional[PageFile] = None) -> None:
        self._p = persistence
        self.budget = MemoryBudget(memory_budget)
        self.sizes = AddressSizes(persistence.image, global_max_size)
        self.cache = MessageCache(self.budget, self._transient_gone)
        self.pages = pages
        if pages is not None:
            pages.held = self.cache.get
            pages.lost = self.sizes.lost_transient
            pages.gone = self._paged_copies_gone
        persistence.image.released = self._image_released
        self.recovery_report = report
        self.lock = threading.RLock()
        self.room = Room(self.lock)
        self.storage = StorageManager(persistence, self.room)  # writes, waits, ids, fail-stop
        self.reader = IndexReader(persistence.image, self.cache, self.storage.index_damaged)
        self.settings = SettingsRepository(syntax)
        self.wildcards = WildcardIndex(syntax)  # wildcard addresses (consumers on news.#)
        self._clock = clock or now_ms
        self.addresses: Dict[str, Address] = {}
        self.queues: Dict[str, Queue] = {}
        self.queues_by_id: Dict[int, Queue] = {}
        self.closing = False
        self.persist_delivery_count = True  # Broker.open's persist_delivery_count_before_...
        self.owners: Dict[str, object] = {}  # Qpid exclusive queues (engine.exclusive)
        self.sessions: List[object] = []
        self._reaper: Optional[threading.Thread] = None
        self._stop_reaper = threading.Event()
        self.scheduler = Scheduler(self)
        self.last_node = LastNode()
        self._opened: Optional[OpenedStorage] = None  # the store lock and files
        self.deliveries = 0  # numbers deliveries in consumption order (MessageRef.taken)
        self.deleted = DeletedQueues(persistence.image.deleted)
        for match, (values, _loc) in persistence.image.settings.items():
            self.settings.set(match, AddressSettings.from_record(values))
        self._load(persistence.image)

    # -- opening and closing ------------------------------------------------------------------
    @classmethod
    def open(cls, directory: str, *, fs: Optional[FileSystem] = None,
             journal_options: Optional[JournalOptions] = None,
             index: Optional[IndexStore] = None,
             checkpoint_records: int = 10_000,
             address_settings: Optional[Mapping[str, AddressSettings]] = None,
             wildcard_syntax: WildcardSyntax = DEFAULT_SYNTAX,
             clock: Optional[Callable[[], int]] = None,
             expiry_scan_ms: int = 30_000,
             verify_journal: bool = False,
             rebuild_index: bool = False,
             memory_budget: int = DEFAULT_BUDGET,
             global_max_size: int = UNLIMITED,
             progress: Optional[Progress] = None,
             config: Optional[str] = None,
             persist_delivery_count_before_delivery: Optional[bool] = None) -> "Broker":
        """Open (creating when missing) the store in ``directory`` and recover it.

        Args:
            directory: the store directory (``journal/`` and ``index/`` inside, 0700).
            fs: the file-system seam for the journal (tests pass a ``SimulatedFileSystem``,
                with which the index is kept in memory unless ``index`` is given).
            journal_options: journal settings (segment size, sync policy...).
            index: the index store; LMDB in ``directory/index`` by default.
            checkpoint_records: commit the index (what changed since the last commit) after
                this many records; a commit costs O(changes), never O(state).
            address_settings: address-settings entries by match pattern (Artemis addressing §4.17),
                journaled when they differ from the stored ones; entries stored earlier and
                not named here stay (remove them with ``remove_address_settings``).
            wildcard_syntax: delimiter, any-words and single-word characters.
            clock: the time in ms since the epoch (expiry); ``time.time`` when ``None``.
            expiry_scan_ms: how often a background thread expires messages (0: never; they
                still expire when met at delivery, or with ``expire_messages()``).
            verify_journal: check every frame of every segment at open, even those a valid
                index lets recovery trust (records are CRC-checked whenever read anyway).
            rebuild_index: rebuild the index from the journal alone (the old checkpoint's LSN
                still proves which records were durable).
            memory_budget: bytes of RAM for message references and messages: queue heads,
                deliveries held by consumers, messages they share (ActiveMQ massive queues' linked
                caches of fixed size). A durable queue's backlog beyond its head stays in the index
                and is read back in order as the head drains; at least 4096 (a budget that small
                makes every durable queue page).
            global_max_size: bytes of message bodies all addresses may hold together (-1:
                no such limit); once reached, every address applies its
                ``address_full_policy`` (Artemis ``global-max-size``).
            progress: called as ``progress(records replayed, records to replay)`` after each
                1,000 records the open replays from the journal (a rebuild, or the tail after
                the index), for a progress display; ``None``: not called.
            config: an Artemis ``broker.xml`` or a TOML file (``engine.config``): its address
                settings (``address_settings`` entries of the same match win), wildcard
                syntax and global-max-size apply, and its addresses and queues are created
                when the store lacks them. Read and checked before the directory is touched.
            persist_delivery_count_before_delivery: journal each delivery (its count) and wait
                for it before a receive returns (True, the default): after a crash every
                message a consumer may have seen comes back flagged redelivered. False (Artemis's
                default): a delivery of a message already durable writes nothing and waits for
                nothing; its count is journaled only when it comes back unsettled (release,
                close, rollback), so after a crash a message handed out and not acked comes
                back with the count of its last return (maybe not flagged redelivered), never
                lost. A message whose own record is not durable yet is handed out after the
                fdatasync of the write that journaled it, with no record of its own (on a Qpid
                last-value queue, and at a head position from a scheduled message coming due,
                as with True). docs/guarantees.md gives the costs.
                ``None``: the configuration file's ``persist-delivery-count-before-delivery``,
                else True.

        Returns:
            The broker; ``broker.recovery_report`` says what recovery found and did.

        Raises:
            DirectoryLockedError: another opener holds the directory (this process or another).
            InvalidArgumentError: a bad ``address_settings`` entry (match pattern or value);
                checked before the directory is touched. ``ConfigError``: a configuration
                file that cannot be applied (names the file and where in it).
            CorruptJournalError: journal damage that is not a torn tail, a missing segment
                (``MissingSegmentError``), a journal that ends before what the index proves
                durable (``JournalBehindError``): names the file and offset; nothing changed.
            JournalIOError: an OS error.
            After any error nothing is held: the directory can be opened again at once.
        """
        cfg = load_config(config) if config is not None else None
        if cfg is not None:
            address_settings, wildcard_syntax, global_max_size, \
                persist_delivery_count_before_delivery = open_arguments(
                    cfg, address_settings, wildcard_syntax, global_max_size,
                    persist_delivery_count_before_delivery)
        elif persist_delivery_count_before_delivery is None:
            persist_delivery_count_before_delivery = True
        fs = fs or OsFileSystem()
        check_bool("persist_delivery_count_before_delivery",
                   persist_delivery_count_before_delivery)
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
            return cls.open(directory, fs=fs, journal_options=journal_options, index=index,
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
            broker._start_reaper(expiry_scan_ms / 1000.0)
        broker.scheduler.start()
        if cfg is not None:
            try:
                deploy(broker, cfg)
            except BaseException:
                broker.close()
                raise
        return broker

    def _load(self, image: StoreImage) -> None:
        """Addresses and queues from the image; messages stay in the index (a pageable
        queue reads its head when first needed)."""
        for a in image.addresses.values():
            self.addresses[a.name] = Address(a.id, a.name,
                                             {RoutingType(r) for r in a.routing_types},
                                             a.auto_created)
            self.wildcards.added(a.name)
        for qi in image.queues.values():
            config = QueueConfig.from_record(qi.name, qi.address, qi.routing_type, qi.config)
            queue = self.new_queue(qi.id, config)
            if isinstance(queue.filter, UnusableFilter):
                warn_unusable_filter(self.recovery_report, queue.name, queue.filter)
            self._attach_queue(queue)
            queue.open_from_index()
            if config.max_size > 0:  # what a Qpid max_size counts (``engine.queuelimits``)
                count_held_bytes(queue)

    def new_queue(self, qid: int, config: QueueConfig) -> Queue:
        """A runtime queue sharing this broker's RAM budget (not attached yet)."""
        image = self._p.image

        def page_start() -> Optional[Tuple[int, ...]]:
            state = image.ledger.pages.get(config.address)
            return None if state is None else state.start
        queue = Queue(qid, config, self.cache, self.reader if config.durable else None,
                      build_policies(config), page_start, self.pages)
        queue.persisting = config.persist_last_node and self.last_node.active
        return queue

    def _attach_queue(self, queue: Queue) -> None:
        self.queues[queue.name] = queue
        self.queues_by_id[queue.id] = queue
        addr = self.addresses.get(queue.config.address)
        if addr is not None:
            addr.queues[queue.name] = queue

    def close(self) -> None:
        """Close every session (cancelling unacked deliveries), write a checkpoint, close the
        journal and the index. Safe to call twice."""
        if self.storage.closed:
            return
        with self.lock:
            consumers = {q.name: len(q.consumers) for q in self.queues.values() if q.durable}
            self.closing = True  # closing its consumers deletes no auto-delete queue
        end_open_deliveries(self)
        for s in list(self.sessions):
            assert isinstance(s, Session)
            try:
                s.close()
            except BrokerFailedError:
                pass
        with self.lock:
            self.storage.closed = True
            self._stop_reaper.set()
            self.scheduler.wake()
            self.room.notify()  # senders waiting for room: they find the broker closed
            try:
                if self.storage.failure is None:
                    self._p.checkpoint_quietly({"consumers": consumers,
                                                "counters": self._counters()})
            except JournalError:
                pass  # the journal failed: nothing more to save; recovery runs at open
            finally:
                if self.pages is not None:
                    self.pages.close()
                if self._opened is not None:
                    self._opened.release()
                else:
                    self._p.journal.close()
                    self._p.index.close()

    def _counters(self) -> Dict[str, Dict[str, int]]:
        """What each durable queue counted during this run (``QueueInfo``'s messages_added
        ... counters, Artemis's queue counters), kept in the index at close for the offline
        listing (``mqstore queues``)."""
        return {q.name: {"added": q.added, "acked": q.acknowledged, "killed": q.killed,
                         "expired": q.expired, "replaced": q.replaced}
                for q in self.queues.values() if q.durable}

    def __enter__(self) -> "Broker":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- guards -------------------------------------------------------------------------------
    @property
    def failed(self) -> bool:
        """Whether the broker stopped after a storage failure (fail-stop: every call raises
        ``BrokerFailedError`` until the store is reopened, which recovers from the journal)."""
        return self.storage.failed

    def now_ms(self) -> int:
        """The broker's clock, ms since the epoch (injectable for tests)."""
        return self._clock()

    def _start_reaper(self, period_s: float) -> None:
        def run() -> None:
            while not self._stop_reaper.wait(period_s):
                try:
                    self.expire_messages()
                except (BrokerFailedError, IllegalStateError):
                    return
        self._reaper = threading.Thread(target=run, name="mqstore-expiry", daemon=True)
        self._reaper.start()

    def wake_scheduler(self) -> None:
        """A message was scheduled: the scheduler thread looks at the due times again."""
        self.scheduler.wake()

    def deliver_scheduled(self) -> int:
        """Put every scheduled message due now (the broker's clock) on the head of its queue and
        hand it to waiting consumers (Artemis ring queues §3; ``engine.scheduling``), then run the
        delayed auto-deletes that are due (``QueueConfig.auto_delete_delay_ms``). The broker does
        this itself: on a timer, at each receive and at open; call it after moving an injected
        ``clock`` forward.

        Returns:
            How many scheduled messages this call put on their queues (a full ring queue
            removes those at once); the broker's scheduler thread may have put some there
            first, so look at ``queue_info`` for what is still scheduled.

        Raises:
            BrokerFailedError: the journal failed (fail-stop). IllegalStateError: closed.
        """
        return self.scheduler.deliver_due()

    def scheduled_messages(self, queue: str, limit: int = 100) -> List[ScheduledMessage]:
        """Up to ``limit`` messages of ``queue``'s scheduled buffer, in due order (Artemis
        listScheduledMessages).

        Raises:
            QueueNotFoundError. InvalidArgumentError: limit not an int >= 0.
            BrokerFailedError: a body could not be read.
        """
        return self.scheduler.listing(queue, limit)

    def deliver_scheduled_message(self, queue: str, message_id: int) -> None:
        """Put scheduled message ``message_id`` of ``queue`` on its head now (Artemis
        deliverScheduledMessage); it is then delivered like one that came due.

        Raises:
            QueueNotFoundError. MessageNotFoundError: it is not in the queue's scheduled
            buffer; nothing changed.
        """
        self.scheduler.step(queue, message_id, deliver_now)

    def remove_scheduled_message(self, queue: str, message_id: int) -> None:
        """Remove scheduled message ``message_id`` from ``queue`` (Artemis removeMessage:
        counted in ``messages_killed``; journaled).

        Raises:
            QueueNotFoundError. MessageNotFoundError: it is not in the queue's scheduled
            buffer; nothing changed.
        """
        self.scheduler.step(queue, message_id, remove_scheduled)

    def purge_queue(self, name: str) -> int:
        """Remove every message of queue ``name`` (a name, ``address::queue`` or ``::queue``)
        that no consumer holds: ready, scheduled and paged ones; those in delivery stay
        (Artemis removeAllMessages, Qpid purge, RabbitMQ queue.purge; ``engine.purge``).
        Counted in ``messages_killed``; journaled before it returns.

        Returns:
            How many messages were removed.

        Raises:
            QueueNotFoundError, InvalidNameError: nothing removed. BrokerFailedError.
        """
        from .purge import purge
        with self.lock:
            self.storage.check_open()
            ticket, removed = purge(self, self.referenced_queue(name))
        self.storage.wait(ticket)
        return removed

    def queue_control(self, name: str) -> QueueControl:
        """Management of queue ``name`` (a name, ``address::queue`` or ``::queue``): remove
        or move messages by filter or id (Artemis QueueControl; ``engine.control``).

        Raises:
            QueueNotFoundError, InvalidNameError.
        """
        return QueueControl(self, name)

    def expire_messages(self) -> int:
        """Expire every ready message whose expiration has passed now (moved to the expiry
        address, or dropped and counted in ``messages_expired``).

        Returns:
            How many messages expired.
        """
        from .deadletter import expire_messages
        with self.lock:
            self.storage.check_open()
            count, ticket = expire_messages(self)
        self.storage.wait(ticket)
        return count

    # -- address settings ---------------------------------------------------------------------
    def set_address_settings(self, match: str, settings: AddressSettings) -> None:
        """Add or replace the address-settings entry for wildcard ``match`` (journaled).

        Raises:
            InvalidArgumentError: a bad pattern (Artemis addressing §4.17: words, ``#`` at the end)
                or a value of the wrong type or range; nothing changed.
        """
        match = check_match(match, self.settings.syntax)
        settings = checked_settings(settings)
        with self.lock:
            self.storage.check_open()
            ticket = self.storage.write([(RecordKind.SETTINGS,
                                  schema.settings(match, settings.to_record()))])
            self.settings.set(match, settings)
            touched = [a for a in self.addresses if matches(match, a, self.settings.syntax)]
        self.storage.wait(ticket)
        for address in touched:  # a retroactive count given or changed (Artemis addressing §4.14)
            retroactive.ensure(self, address)

    def remove_address_settings(self, match: str) -> None:
        """Remove the entry for ``match`` (journaled). No error when there is none."""
        with self.lock:
            self.storage.check_open()
            if match not in self.settings.entries:
                return
            ticket = self.storage.write([(RecordKind.SETTINGS, schema.settings(match, None))])
            self.settings.set(match, None)
        self.storage.wait(ticket)

    def address_settings(self, address: str) -> AddressSettings:
        """The effective settings of ``address`` (every matching entry overlaid)."""
        with self.lock:
            return self.settings.resolve(address)

    def set_ring_size(self, queue: str, ring_size: int) -> QueueInfo:
        """Change a queue's ring size at run time (Artemis ring queues: lowering it deletes nothing
        now; new messages keep the queue from growing until it shrinks by consumption).

        Raises:
            QueueNotFoundError. InvalidArgumentError: ring_size not an int in -1..2**63-1.
        """
        check_int("ring_size", ring_size, -1, TIME_MAX)
        with self.lock:
            self.storage.check_open()
            q = self.find_queue(queue)
            config = replace(q.config, ring_size=ring_size)
            ticket = None
            if q.durable:
                ticket = self.storage.write([(RecordKind.QUEUE_UPDATE,
                                      schema.queue_update(q.id, config.to_record()))])
            q.config = config
            lvq = [p for p in q.policies if hasattr(p, "latest")]
            q.policies = lvq + [p for p in build_policies(config) if not hasattr(p, "latest")]
        self.storage.wait(ticket)
        return q.info()

    def set_cluster_nodes(self, nodes: int) -> None:
        """Tell the broker how many nodes of the embedding application's cluster are alive
        (this one included). When the count falls to 1 from more than one, the broker enters
        last-node mode: non-durable messages on ``persist_last_node`` queues are journaled,
        those already there at once (Qpid queues, Qpid cluster-durable queues); a count above 1
        ends the mode. A store that started alone (first count 1) never enters it.

        Raises:
            InvalidArgumentError: nodes not an int >= 1. BrokerFailedError, IllegalStateError.
        """
        with self.lock:
            self.storage.check_open()
            change = self.last_node.report(nodes)
            queues = [q for q in self.queues.values() if q.config.persist_last_node]
            ticket = None
            if change is True:
                ticket = enter_last_node(self, queues)
            elif change is False:
                leave_last_node(queues)
        self.storage.wait(ticket)

    # -- addresses and queues -----------------------------------------------------------------
    def create_address(self, name: str,
                       routing_types: Iterable[RoutingType] = (RoutingType.ANYCAST,),
                       auto_created: bool = False) -> AddressInfo:
        """Create an address (journaled; Artemis addressing §4.2-4.5). A wildcard expression in the
        broker's syntax (``news.#``, ``news.*.sport``) makes a wildcard address: its queues take
        what is sent to every address it matches (Artemis addressing §4.17; nothing is sent to it
        directly, as in Artemis).

        Raises:
            InvalidNameError: bad name (004 §4.1). AlreadyExistsError. RoutingTypeError: no
            routing type given. InvalidArgumentError: not RoutingType values.
        """
        check_name(name, self.settings.syntax, wildcards=True)
        rts = parse_routing_types(routing_types)
        check_bool("auto_created", auto_created)
        if not rts:
            raise RoutingTypeError("an address needs at least one routing type (004 §4)")
        with self.lock:
            self.storage.check_open()
            if name in self.addresses:
                raise AlreadyExistsError("address", name)
            aid = self.storage.next_id()
            ticket = self.storage.write([(RecordKind.ADDRESS_ADD, schema.address_add(
                aid, name, [r.value for r in rts], auto_created))])
            addr = self.addresses[name] = Address(aid, name, rts, auto_created)
            self.wildcards.added(name)
        self.storage.wait(ticket)
        retroactive.ensure(self, name)  # Artemis addressing §4.14: its ring, when its settings ask
        with self.lock:
            return addr.info(self.sizes, self.settings.resolve(name))

    def delete_address(self, name: str) -> None:
        """Delete an address that has no queues.

        Raises:
            AddressNotFoundError. ResourceLimitError: it still has queues.
        """
        with self.lock:
            self.storage.check_open()
            addr = self.addresses.get(name)
            if addr is None:
                raise AddressNotFoundError(name)
            if addr.queues:
                raise ResourceLimitError(f"address {name!r} still has queues "
                                         f"{sorted(addr.queues)}; delete them first")
            ticket = self.storage.write([(RecordKind.ADDRESS_DEL, schema.by_id(addr.id))])
            del self.addresses[name]
            self.wildcards.removed(name)
        self.storage.wait(ticket)

    def create_queue(self, config: QueueConfig) -> QueueInfo:
        """Create a queue on an existing address (journaled when durable).

        Raises:
            InvalidNameError, InvalidArgumentError: bad configuration. AddressNotFoundError.
            AlreadyExistsError: a queue of that name exists (queue names are broker-wide).
            RoutingTypeError: the address does not support the queue's routing type.
            AddressNotFoundError: also when its ``alternate_address`` does not exist.
        """
        check_queue_config(config, self.settings.syntax)
        with self.lock:
            self.storage.check_open()
            config = self._resolve_config(config)
            addr = self.addresses.get(config.address)
            if addr is None:
                raise AddressNotFoundError(config.address)
            if config.name in self.queues:
                raise AlreadyExistsError("queue", config.name)
            if config.routing_type not in addr.routing_types:
                raise RoutingTypeError(f"address {addr.name!r} does not support "
                                       f"{config.routing_type.value}")
            if config.alternate_address and config.alternate_address not in self.addresses:
                raise AddressNotFoundError(config.alternate_address)
            queue = self.new_queue(self.storage.next_id(), config)
            ticket = None
            if config.durable:
                ticket = self.storage.write([(RecordKind.QUEUE_ADD, schema.queue_add(
                    queue.id, config.name, config.address, config.routing_type.value,
                    config.to_record()))])
            self._attach_queue(queue)
        self.storage.wait(ticket)
        if not retroactive.is_ring(config.name):
            retroactive.copy_to(self, queue)  # a retroactive address's last messages first
        return queue.info()

    def _resolve_config(self, config: QueueConfig) -> QueueConfig:
        return resolve_queue_config(self.settings.resolve(config.address), config)

    def delete_queue(self, name: str, if_empty: bool = False, if_unused: bool = False) -> None:
        """Delete a queue and its messages (Qpid queues "Deleting Queues"; Artemis destroyQueue).
        The queue stays listed in ``deleted_queues()`` with the time of deletion. Messages
        still on it go to its ``alternate_address`` when it has one (``engine.orphans``: a
        crash meanwhile leaves each either moved or still on the queue), else are deleted.

        Args:
            if_empty: refuse when it holds messages (on it, in delivery or scheduled).
            if_unused: refuse when it has consumers (Qpid ifUnused). mqstore refuses that
                without the flag too: close the consumers first.

        Raises:
            QueueNotFoundError. QueueInUseError: it has consumers. QueueNotEmptyError: asked
            ``if_empty`` and it holds messages. InvalidArgumentError: a flag not a bool.
            ExclusiveQueueError: a session declared it exclusive (that session deletes it,
            ``Session.delete_queue``). Nothing is deleted after any of them.
        """
        check_bool("if_empty", if_empty)
        check_bool("if_unused", if_unused)
        with self.lock:
            self.storage.check_open()
            queue = self.queues.get(name)
            if queue is None:
                raise QueueNotFoundError(name)
            if name in self.owners:  # its owner deletes it through Session.delete_queue
                raise ExclusiveQueueError(name, ended=False)
            if queue.consumers:
                raise QueueInUseError(name, len(queue.consumers))
            held = queue.info().message_count if if_empty else 0
            if held:
                raise QueueNotEmptyError(name, held)
            ticket = move_orphans(self, queue)  # to its alternate address (Qpid queues)
            now = self.now_ms()
            cfg = queue.config
            if queue.durable:
                ticket = self.storage.write([(RecordKind.QUEUE_DEL, schema.queue_deleted(
                    queue.id, name, cfg.address, cfg.routing_type.value, now))])
            for ref in list(queue.ready) + list(queue.tail) + list(queue.delivering.values()) \
                    + queue.paged.drop() + queue.scheduled.drop():
                self.drop_message_ref(ref)
            del self.queues[name]
            del self.queues_by_id[queue.id]
            addr = self.addresses.get(cfg.address)
            if addr is not None:
                addr.queues.pop(name, None)
            self.deleted.add(DeletedQueue(name, cfg.address, cfg.routing_type, queue.durable,
                                          now))
        self.storage.wait(ticket)

    def deleted_queues(self) -> List[DeletedQueue]:
        """The newest 100 deleted queues, oldest first, with the time each was deleted (seed
        002: the management object of a deleted queue remains). Durable queues' entries
        survive restarts."""
        with self.lock:
            return self.deleted.list()

    def _image_released(self, gone: MessageImage, paged: bool) -> None:
        """The image let a message go (its durable references are gone): one RAM still holds
        on a queue journaled nowhere is journaled nowhere from now on, and counted as such."""
        msg = self.cache.get(gone.mid)
        counted = msg is not None and msg.journaled
        if msg is not None and msg.journaled:
            msg.journaled = False
            self.sizes.add_transient(msg, paged)
        if self.pages is not None and self.pages.image_released(gone.mid, paged) and \
                not counted:  # only a page file holds it now, for a queue that journals none
            self.sizes.count_transient(gone.address, gone.body_size, paged)

    def _paged_copies_gone(self, address: str, size: int, paged: bool) -> None:
        """A message journaled nowhere whose paged copies did not read back for the queues
        that had it paged, and that no queue holds in RAM: its address has room again."""
        self.sizes.uncount_transient(address, size, paged)
        self.room.notify()

    def _transient_gone(self, msg: StoredMessage) -> None:
        """A message journaled nowhere left its last queue (unless a queue still has it paged
        in a page file): its address has room again."""
        if self.pages is not None and self.pages.paged_elsewhere(msg.mid):
            return
        self.sizes.release_transient(msg)
        self.room.notify()

    def serve(self, queue: Queue) -> None:
        """Give ``queue``'s available messages to consumers blocked in receive (lock held)."""
        serve_waiters(self, queue)

    def read_body(self, mid: int) -> bytes:
        """The body of durable message ``mid``, read from its record (lock held).

        Raises:
            KeyError: the store no longer holds it. BrokerFailedError: a storage error (the
                broker fail-stops).
        """
        return self.storage.guard(self._p.read_body, mid)  # type: ignore[no-any-return]

    def drop_message_ref(self, ref: MessageRef) -> None:
        """Forget a reference that left its queue; RAM lets the message go with its last
        in-memory reference (the index keeps a journaled one while it has references)."""
        ref.queue.release(ref)

    def find_queue(self, name: str) -> Queue:
        """The queue called ``name`` (lock held). Raises QueueNotFoundError."""
        queue = self.queues.get(name)
        if queue is None:
            raise QueueNotFoundError(name)
        return queue

    # -- management ---------------------------------------------------------------------------
    def queue_info(self, name: str) -> QueueInfo:
        """Counters and configuration of one queue: ``name`` is a queue name, a fully
        qualified ``address::queue`` or ``::queue`` (``engine.names.queue_reference``).

        Raises:
            QueueNotFoundError: no such queue (on that address); InvalidNameError.
        """
        with self.lock:
            return self.referenced_queue(name).info()

    def referenced_queue(self, name: str) -> Queue:
        """The queue ``name`` refers to: a name, ``address::queue`` or ``::queue`` (lock
        held). Raises QueueNotFoundError (none, or not on that address), InvalidNameError."""
        address, queue = queue_reference(name, self.settings.syntax)
        q = self.find_queue(queue)
        if address is not None and q.config.address != address:
            raise QueueNotFoundError(queue, address)
        return q

    def address_info(self, name: str) -> AddressInfo:
        """Routing types and queues of one address. Raises AddressNotFoundError."""
        with self.lock:
            addr = self.addresses.get(name)
            if addr is None:
                raise AddressNotFoundError(name)
            return addr.info(self.sizes, self.settings.resolve(name))

    def queue_names(self) -> List[str]:
        """Every queue name, sorted."""
        with self.lock:
            return sorted(self.queues)

    def address_names(self) -> List[str]:
        """Every address name, sorted."""
        with self.lock:
            return sorted(self.addresses)

    def statistics(self) -> BrokerStatistics:
        """Counts, the journal's counters and the index's health (failed checkpoints,
        rebuilds while running)."""
        with self.lock:
            p = self._p
            transient = sum(1 for m in self.cache.by_id.values() if not m.journaled)
            return BrokerStatistics(len(self.addresses), len(self.queues),
                                    p.image.tables.msg.count + transient,
                                    p.journal.statistics(), p.last_checkpoint_lsn,
                                    p.checkpoint_failures, p.last_checkpoint_error,
                                    self.storage.failure is not None, self.budget.statistics(),
                                    p.index.commits, p.index.written,
                                    self.pages.statistics() if self.pages else None,
                                    p.index_rebuilds, p.last_index_rebuild)

    def checkpoint(self) -> int:
        """Write an index checkpoint now; returns its LSN.

        Raises:
            IndexInvalidError: the index could not be written (a full disk under ``index/``):
                counted in ``statistics().checkpoint_failures``; nothing else changes, the
                broker goes on serving and the journal still holds everything.
            BrokerFailedError (the journal's sync failed), IllegalStateError (closed).
        """
        with self.lock:
            self.storage.check_open()
            return self.storage.guard_journal(self._p.checkpoint_or_raise)

    def compact(self, force: bool = False):  # type: ignore[no-untyped-def]
        """Checkpoint, compact the journal, apply the relocations and checkpoint again.

        Returns:
            The journal's ``CompactionReport``.

        Raises:
            IndexInvalidError: the first checkpoint failed (a full index disk): nothing was
                compacted, the broker goes on. The second one failing is logged and retried
                as an automatic one is (until it succeeds, a crash rebuilds the index).
            BrokerFailedError: the journal failed. IllegalStateError: closed.
        """
        with self.lock:
            self.storage.check_open()
            self.storage.guard_journal(self._p.checkpoint_or_raise)
            report = self.storage.guard(self._p.journal.compact, force,
                                        True)  # record_moves: for a crash before the next
            if report.compacted:
                self.storage.repairing(relocate, self._p.image, report.relocations)
                self.storage.guard(self._p.checkpoint_quietly)
            return report

    def restore_messages(self, items: Sequence[Tuple[Any, ...]]) -> None:
        """Put messages back exactly as exported (``mqstore import``); see
        ``engine.restore.restore_messages``."""
        restore_messages(self, items)

    def connection(self, client_id: Optional[str] = None) -> Connection:
        """A new client connection (``engine.connection.Connection``): its sessions count as
        one connection for no-local queues (Qpid). Close it, or use it as a context manager.

        Raises:
            IllegalStateError: the broker is closed. InvalidArgumentError: ``client_id`` not
            a str (or ``None``).
        """
        if client_id is not None:
            check_text("client_id", client_id)
        with self.lock:
            self.storage.check_open()
            return Connection(self, client_id)

    def session(self, transacted: bool = False, block_on_acknowledge: bool = True) -> Session:
        """A new session (``engine.session.Session``), a connection of its own; use it as a
        context manager.

        Args:
            transacted: sends and acks take effect together at ``commit()``.
            block_on_acknowledge: ``ack()`` and ``ack_many()`` return once the ack is durable
                (the default). ``False``: they return once the ack is journaled, and the
                journal's writer makes it durable with its next group commit (Artemis's
                ``blockOnAcknowledge=false``); see ``Session``.

        Raises:
            InvalidArgumentError: a flag that is not a bool. IllegalStateError: closed.
        """
        check_bool("transacted", transacted)
        check_bool("block_on_acknowledge", block_on_acknowledge)
        with self.lock:
            self.storage.check_open()
            s = Session(self, transacted, block_on_acknowledge)
            self.sessions.append(s)
            return s

