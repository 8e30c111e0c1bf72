"""mqstore's engine: the embedded broker with Artemis and Qpid queue semantics.

    from . import Broker, Message, QueueConfig, RoutingType
    broker = Broker.open("data/")
"""

from .aio import AsyncConsumer, AsyncSession
from .broker import Broker
from .connection import Connection
from .control import QueueControl
from .errors import (AddressFullError, AddressNotFoundError, AlreadyExistsError,
                     BrokerFailedError, EngineError, ExclusiveQueueError,
                     IllegalStateError, InvalidArgumentError, InvalidNameError,
                     MessageNotFoundError, QueueFullError, QueueInUseError,
                     QueueNotEmptyError,
                     QueueNotFoundError, ResourceLimitError, RoutingTypeError)
from .filters.expression import FilterSyntaxError
from .model import (AddressInfo, DeletedQueue, Message, PolicyType, QueueConfig,
                    QueueInfo, ReceivedMessage, RoutingType, ScheduledMessage)
from .delivery.browser import Browser
from .consumer import Consumer, Delivery
from .session import Session
from .config.files import ConfigError
from .config.settings import AddressFullPolicy, AddressSettings
from .addressing.wildcards import WildcardSyntax

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
