"""mqstore's public API in one namespace: ``from mqstore import Broker, Message, QueueConfig``.

Everything a program embedding the store uses is here: the broker and its sessions, the
configuration objects, the management views and every error (all ``MqStoreError``
subclasses; a few also ``ValueError``/``TypeError`` where Python code expects those). The
layers it stands on are its subpackages, ``mqstore.journal``, ``mqstore.recovery``,
``mqstore.engine`` and ``mqstore.tools`` (in the repository, the folders ``journal/`` ...
at its root); they are importable, but only what this module exports is the stable API. The
integrations are submodules: ``mqstore.crashtest`` (crash-test your application),
``mqstore.kombu`` (the ``mqstore://`` kombu transport, for Celery), ``mqstore.metrics``
(Prometheus) and ``mqstore.spark`` (journal segments as a Spark source). ``serve(broker, ...)``
serves an open store over AMQP 1.0 to other processes, and ``connect(url)`` is such a process's
way in, with the same session calls.

The names load on first use (PEP 562), so importing one layer (``mqstore.journal`` in a
Spark executor or a crash-test child) does not load the others.
"""

from __future__ import annotations

import importlib
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any, Dict, List, Tuple

from .compiled import prefer_source

prefer_source()  # MQSTORE_PURE=1: the compiled modules from their Python source

try:
    __version__ = version("mqstore")
except PackageNotFoundError:  # running from a checkout that was never installed
    __version__ = "0+unknown"

_EXPORTS: Tuple[Tuple[str, Tuple[str, ...]], ...] = (
    # the broker, its sessions and what flows through them
    ("engine", ("Broker", "Connection", "Session", "AsyncSession", "Consumer", "AsyncConsumer",
                "Browser", "Delivery", "Message", "ReceivedMessage", "ScheduledMessage")),
    # configuration
    ("engine", ("QueueConfig", "AddressSettings", "AddressFullPolicy", "RoutingType",
                "PolicyType", "WildcardSyntax")),
    ("journal", ("JournalOptions",)),
    # management
    ("engine", ("QueueControl", "QueueInfo", "AddressInfo", "DeletedQueue")),
    # errors (all MqStoreError)
    ("journal", ("MqStoreError",)),
    ("engine", ("EngineError", "InvalidArgumentError", "InvalidNameError", "ConfigError",
                "FilterSyntaxError", "AddressNotFoundError", "QueueNotFoundError",
                "MessageNotFoundError", "AlreadyExistsError", "RoutingTypeError",
                "ResourceLimitError", "AddressFullError", "QueueFullError", "QueueInUseError",
                "QueueNotEmptyError", "ExclusiveQueueError", "IllegalStateError",
                "BrokerFailedError")),
    ("journal", ("JournalError", "JournalIOError", "JournalFailedError", "CorruptJournalError",
                 "DirectoryLockedError", "ReadOnlyError", "RecordTooLargeError")),
    ("recovery", ("RecoveryError", "IndexInvalidError", "MalformedRecordError")),
    # serving a store to other processes (AMQP 1.0), and a client of a served one
    ("tools.serve", ("serve", "connect", "ConnectionLostError", "ServeError")),
)
_LAYER_OF: Dict[str, str] = {name: layer for layer, names in _EXPORTS for name in names}

__all__: List[str] = [name for _layer, names in _EXPORTS for name in names] + ["__version__"]

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time __getattr__ loads each name
    from .engine import *  # noqa: F401,F403
    from .journal import *  # noqa: F401,F403
    from .recovery import *  # noqa: F401,F403


def __getattr__(name: str) -> Any:
    """An exported name, imported from its layer on first use (then kept here)."""
    layer = _LAYER_OF.get(name)
    if layer is None:
        raise AttributeError(f"module 'mqstore' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{layer}"), name)
    globals()[name] = value
    return value


def __dir__() -> List[str]:
    return sorted(set(globals()) | set(__all__))
