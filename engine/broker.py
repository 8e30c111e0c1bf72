"""The embedded broker: open a directory, get addresses, queues, sessions; state survives crashes.

``Broker`` is the facade over the engine's subsystems (ARCHITECTURE.md "Rooms"). It owns the
runtime state (addresses, queues, messages) and its storage (``broker.storage``, an
``engine.storage.manager.StorageManager``: writes, waits, ids, the fail-stop state and the index
rebuilt while running). All state changes happen under one lock, in the order their records get
LSNs; waiting for durability happens outside it (the write path of ARCHITECTURE.md). Opening
is ``engine.lifecycle``'s; the management API (addresses, queues, settings,
scheduled messages) is the ``engine.management`` mixin over ``engine.routing.declare``; routing
and placement live in ``engine.routing``, delivery and settlement in ``engine.delivery`` (typed
against ``engine.routing.core.BrokerCore``, so none imports this module); sessions in
``engine.session``, consumers and deliveries in ``engine.consumer``.
"""

from __future__ import annotations

import os
import threading
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from .addressing.names import queue_reference
from .addressing.wildcards import DEFAULT_SYNTAX, WildcardIndex, WildcardSyntax
from .config.settings import UNLIMITED, AddressSettings, SettingsRepository
from .connection import Connection
from .delivery.settle import serve_waiters
from .config.files import deploy
from .delivery.restart import end_open_deliveries
from .errors import (AddressNotFoundError, BrokerFailedError, IllegalStateError,
                     QueueNotFoundError)
from .lifecycle import open_broker
from .management import BrokerManagement
from .model import AddressInfo, QueueConfig, QueueInfo, now_ms
from .statistics import BrokerStatistics
from .paging.addressfull import AddressSizes, Room
from .paging.memory import DEFAULT_BUDGET, IndexReader, MemoryBudget, MessageCache
from .paging.pagefile import PageFile
from .paging.transient import TransientAccounting
from .queues.deleted import DeletedQueues
from .queues.queue import MessageRef, Queue
from .routing import declare
from .routing.address import Address
from .routing.lastnode import LastNode
from .routing.restore import restore_messages
from .scheduling.timer import Scheduler
from .session import Session
from .storage.manager import StorageManager
from .storage.opening import OpenedStorage
from .storage.persistence import Persistence
from .values import check_bool, check_text
from mqstore.journal import FileSystem, JournalError, JournalOptions
from mqstore.recovery import IndexStore, Progress, RecoveryReport, relocate


class Broker(BrokerManagement):
    """An open store. Create with ``Broker.open(directory)``; close with ``close()``.

    Thread-safe. One opener per directory (a second one gets ``DirectoryLockedError``).

    Attributes:
        directory: the store directory as opened (absolute; ``""`` for a broker built
            without ``open``).
    """

    directory = ""

    def __init__(self, persistence: Persistence, report: RecoveryReport,
                 syntax: WildcardSyntax = DEFAULT_SYNTAX,
                 clock: Optional[Callable[[], int]] = None,
                 memory_budget: int = DEFAULT_BUDGET,
                 global_max_size: int = UNLIMITED,
                 pages: Optional[PageFile] = None,
                 opened: Optional[OpenedStorage] = None) -> None:
        self._p = persistence
        self.budget = MemoryBudget(memory_budget)
        self.sizes = AddressSizes(persistence.image, global_max_size)
        self.cache = MessageCache(self.budget)
        self.pages = pages
        self.recovery_report = report
        self.lock = threading.RLock()
        self.room = Room(self.lock)
        transient = TransientAccounting(self.cache, self.sizes, self.room, pages)
        self.cache.gone = transient.transient_gone
        if pages is not None:
            pages.held = self.cache.get
            pages.lost = self.sizes.lost_transient
            pages.gone = transient.paged_copies_gone
        persistence.image.released = transient.image_released
        self.storage = StorageManager(persistence, self.room)  # writes, waits, ids, fail-stop
        self.reader = IndexReader(persistence.image, self.cache, self.storage.guard)
        self.settings = SettingsRepository(syntax)
        self.wildcards = WildcardIndex(syntax)  # wildcard addresses (consumers on news.#)
        self._clock = clock or now_ms
        self.addresses: Dict[str, Address] = {}
        self.queues: Dict[str, Queue] = {}
        self.queues_by_id: Dict[int, Queue] = {}
        self.closing = False
        self.persist_delivery_count = True  # Broker.open's persist_delivery_count_before_...
        self.owners: Dict[str, object] = {}  # Qpid exclusive queues (engine.routing.exclusive)
        self.sessions: List[object] = []
        self._reaper: Optional[threading.Thread] = None
        self._stop_reaper = threading.Event()
        self.scheduler = Scheduler(self)
        self.last_node = LastNode()
        self._opened = opened  # the store lock and files (``None``: the caller holds them)
        self.deliveries = 0  # numbers deliveries in consumption order (MessageRef.taken)
        self.deleted = DeletedQueues(persistence.image.deleted)
        for match, (values, _loc) in persistence.image.settings.items():
            self.settings.set(match, AddressSettings.from_record(values))
        declare.load(self, persistence.image)

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
            config: an Artemis ``broker.xml`` or a TOML file (``engine.config.files``): its address
                settings (``address_settings`` entries of the same match win), wildcard
                syntax and global-max-size apply, and its addresses and queues are created
                when the store lacks them. Read and checked before the directory is touched.
            persist_delivery_count_before_delivery: journal each delivery (its count) and wait
                for it before a receive returns (True): after a crash every message a consumer
                may have seen comes back flagged redelivered. False (the default, Artemis's
                default): a delivery of a message already durable writes nothing and waits for
                nothing; its count is journaled only when it comes back unsettled (release,
                close, rollback), so after a crash a message handed out and not acked comes
                back with the count of its last return (maybe not flagged redelivered), never
                lost. A message whose own record is not durable yet is handed out after the
                fdatasync of the write that journaled it, with no record of its own (on a Qpid
                last-value queue, and at a head position from a scheduled message coming due,
                as with True). docs/guarantees.md gives the costs.
                ``None``: the configuration file's ``persist-delivery-count-before-delivery``,
                else False.

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
        broker, cfg = open_broker(
            cls, directory, fs=fs, journal_options=journal_options, index=index,
            checkpoint_records=checkpoint_records, address_settings=address_settings,
            wildcard_syntax=wildcard_syntax, clock=clock, expiry_scan_ms=expiry_scan_ms,
            verify_journal=verify_journal, rebuild_index=rebuild_index,
            memory_budget=memory_budget, global_max_size=global_max_size, progress=progress,
            config=config,
            persist_delivery_count_before_delivery=persist_delivery_count_before_delivery)
        broker.directory = os.path.abspath(directory)
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

    def _start_reaper(self, period_s: float) -> None:
        """The expiry thread: ``expire_messages`` every ``period_s`` seconds until close."""
        def run() -> None:
            while not self._stop_reaper.wait(period_s):
                try:
                    self.expire_messages()
                except (BrokerFailedError, IllegalStateError):
                    return
        self._reaper = threading.Thread(target=run, name="mqstore-expiry", daemon=True)
        self._reaper.start()

    def new_queue(self, qid: int, config: QueueConfig) -> Queue:
        """A runtime queue sharing this broker's RAM budget (not attached yet)."""
        return declare.new_queue(self, qid, config)

    def close(self) -> None:
        """Close every session (cancelling unacked deliveries), write a checkpoint, close the
        journal and the index. Safe to call twice."""
        storage = self.storage
        if storage.closed:
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
            storage.closed = True
            self._stop_reaper.set()
            self.scheduler.wake()
            self.room.notify()  # senders waiting for room: they find the broker closed
            try:
                if storage.failure is None:
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
        qualified ``address::queue`` or ``::queue`` (``engine.addressing.names.queue_reference``).

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
        ``engine.routing.restore.restore_messages``."""
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

    def session(self, transacted: bool = False, block_on_acknowledge: bool = False) -> Session:
        """A new session (``engine.session.Session``), a connection of its own; use it as a
        context manager.

        Args:
            transacted: sends and acks take effect together at ``commit()``.
            block_on_acknowledge: ``True``: ``ack()`` and ``ack_many()`` return once the ack
                is durable. ``False`` (the default, Artemis's ``blockOnAcknowledge=false``):
                they return once the ack is journaled, and the journal's writer makes it
                durable with its next group commit; a crash before then can only bring the
                message back, never lose it; see ``Session``.

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

