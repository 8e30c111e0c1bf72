"""mqstore's engine: the embedded broker with Artemis and Qpid queue semantics.

    from engine import Broker, Message, QueueConfig, RoutingType
    broker = Broker.open("data/")
"""

from engine.aio import AsyncConsumer, AsyncSession
from engine.broker import Broker
from engine.connection import Connection
from engine.control import QueueControl
from engine.errors import (AddressFullError, AddressNotFoundError, AlreadyExistsError,
                           BrokerFailedError, EngineError, ExclusiveQueueError,
                           IllegalStateError, InvalidArgumentError, InvalidNameError,
                           MessageNotFoundError, QueueFullError, QueueInUseError,
                           QueueNotEmptyError,
                           QueueNotFoundError, ResourceLimitError, RoutingTypeError)
from engine.filters import FilterSyntaxError
from engine.model import (AddressInfo, DeletedQueue, Message, PolicyType, QueueConfig,
                          QueueInfo, ReceivedMessage, RoutingType, ScheduledMessage)
from engine.session import Browser, Consumer, Delivery, Session
from engine.config import ConfigError
from engine.settings import AddressFullPolicy, AddressSettings
from engine.wildcards import WildcardSyntax

__all__ = [
    "AddressFullError", "AddressFullPolicy", "AddressInfo", "AddressNotFoundError",
    "AddressSettings", "AsyncConsumer", "AsyncSession", "AlreadyExistsError", "Broker",
    "ConfigError",
    "BrokerFailedError", "Browser", "Connection", "Consumer", "DeletedQueue", "Delivery",
    "EngineError",
    "ExclusiveQueueError", "FilterSyntaxError", "IllegalStateError", "InvalidArgumentError",
    "InvalidNameError",
    "Message", "MessageNotFoundError", "PolicyType", "QueueConfig", "QueueControl",
    "QueueFullError",
    "QueueInUseError", "QueueInfo", "QueueNotEmptyError", "QueueNotFoundError",
    "ReceivedMessage", "ResourceLimitError", "RoutingType", "RoutingTypeError",
    "ScheduledMessage", "Session", "WildcardSyntax",
]
