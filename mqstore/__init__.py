"""mqstore's public API in one namespace: ``from mqstore import Broker, Message, QueueConfig``.

Everything a program embedding the store uses is here: the broker and its sessions, the
configuration objects, the management views and every error (all ``MqStoreError``
subclasses; a few also ``ValueError``/``TypeError`` where Python code expects those). The
layers it stands on (``journal``, ``recovery``, ``engine``, ``tools``) are importable too, but
only what this module exports is the stable API; import from here. The integrations are
submodules: ``mqstore.crashtest`` (crash-test your application), ``mqstore.kombu`` (the
``mqstore://`` kombu transport, for Celery) and ``mqstore.metrics`` (Prometheus).
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from engine import (AddressFullError, AddressFullPolicy, AddressInfo, AddressNotFoundError,
                    AddressSettings, AlreadyExistsError, AsyncConsumer, AsyncSession, Broker,
                    BrokerFailedError, Browser, ConfigError, Connection, Consumer,
                    DeletedQueue, Delivery, EngineError, ExclusiveQueueError,
                    FilterSyntaxError, IllegalStateError, InvalidArgumentError,
                    InvalidNameError, Message, MessageNotFoundError, PolicyType, QueueConfig,
                    QueueControl, QueueFullError, QueueInfo, QueueInUseError,
                    QueueNotEmptyError, QueueNotFoundError, ReceivedMessage,
                    ResourceLimitError, RoutingType, RoutingTypeError, ScheduledMessage,
                    Session, WildcardSyntax)
from journal import (CorruptJournalError, DirectoryLockedError, JournalError,
                     JournalFailedError, JournalIOError, JournalOptions, MqStoreError,
                     ReadOnlyError, RecordTooLargeError)
from recovery import IndexInvalidError, MalformedRecordError, RecoveryError

try:
    __version__ = version("mqstore")
except PackageNotFoundError:  # running from a checkout that was never installed
    __version__ = "0+unknown"

__all__ = [
    # the broker, its sessions and what flows through them
    "Broker", "Connection", "Session", "AsyncSession", "Consumer", "AsyncConsumer", "Browser",
    "Delivery", "Message", "ReceivedMessage", "ScheduledMessage",
    # configuration
    "QueueConfig", "AddressSettings", "AddressFullPolicy", "RoutingType", "PolicyType",
    "WildcardSyntax", "JournalOptions",
    # management
    "QueueControl", "QueueInfo", "AddressInfo", "DeletedQueue",
    # errors (all MqStoreError)
    "MqStoreError", "EngineError", "InvalidArgumentError", "InvalidNameError", "ConfigError",
    "FilterSyntaxError", "AddressNotFoundError", "QueueNotFoundError", "MessageNotFoundError",
    "AlreadyExistsError", "RoutingTypeError", "ResourceLimitError", "AddressFullError",
    "QueueFullError", "QueueInUseError", "QueueNotEmptyError", "ExclusiveQueueError",
    "IllegalStateError", "BrokerFailedError", "JournalError", "JournalIOError",
    "JournalFailedError", "CorruptJournalError", "DirectoryLockedError", "ReadOnlyError",
    "RecordTooLargeError", "RecoveryError", "IndexInvalidError", "MalformedRecordError",
    "__version__",
]
