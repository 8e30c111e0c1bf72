"""Errors of the engine (all under ``MqStoreError``). Each is raised before anything is
written, so the store is unchanged after it, unless its docstring says otherwise."""

from __future__ import annotations

from typing import Optional

from mqstore.journal.errors import MqStoreError


class EngineError(MqStoreError):
    """Any error of the engine."""


class InvalidNameError(EngineError):
    """An address or queue name breaks the naming rules (Artemis addressing §4.1).

    Attributes:
        name: the rejected name.
    """

    def __init__(self, name: str, why: str) -> None:
        self.name = name
        super().__init__(f"invalid name {name!r}: {why}",
                         hint="names may not contain spaces, '&', '::', ',', '?', '>'; "
                              "the wildcard characters '#' and '*' stand only as whole words "
                              "of a wildcard address such as news.# (Artemis manual, "
                              "\"Address and Queue Naming Requirements\")")


class AddressNotFoundError(EngineError):
    """No address of that name. Attributes: address."""

    def __init__(self, address: str) -> None:
        self.address = address
        super().__init__(f"no address {address!r}", hint="create it with create_address()")


class QueueNotFoundError(EngineError):
    """No queue of that name (or not on that address). Attributes: queue."""

    def __init__(self, queue: str, address: Optional[str] = None) -> None:
        self.queue = queue
        self.address = address
        where = f" on address {address!r}" if address else ""
        super().__init__(f"no queue {queue!r}{where}", hint="create it with create_queue()")


class MessageNotFoundError(EngineError):
    """No message of that id where it was looked for (a queue's scheduled buffer).
    Attributes: message_id, queue."""

    def __init__(self, message_id: int, queue: str) -> None:
        self.message_id = message_id
        self.queue = queue
        super().__init__(f"queue {queue!r} has no scheduled message {message_id}",
                         hint="list them with scheduled_messages()")


class AlreadyExistsError(EngineError):
    """An address or queue of that name exists already. Attributes: name."""

    def __init__(self, what: str, name: str) -> None:
        self.name = name
        super().__init__(f"{what} {name!r} exists already")


class RoutingTypeError(EngineError):
    """The routing type asked for is not one the address supports."""


class IllegalStateError(EngineError):
    """The operation does not fit the object's state: a settled delivery acked again, a closed
    session, consumer or broker used, rollback on a non-transacted session..."""


class ResourceLimitError(EngineError):
    """A limit refuses the operation (max-consumers reached, queue in use...)."""


class ExclusiveQueueError(EngineError):
    """Another session declared the queue exclusive (Qpid exclusive queue, Qpid queues): only
    that session may consume from, browse, declare or delete it until it closes. A session
    that tried was ended (closed, its unacked deliveries returned) before this was raised.

    Attributes:
        queue: the queue. ended: whether a session was ended (not for ``Broker`` calls).
    """

    def __init__(self, queue: str, ended: bool = True) -> None:
        self.queue = queue
        self.ended = ended
        what = "; this session was ended" if ended else ""
        super().__init__(f"queue {queue!r} is exclusive to a session{what}",
                         hint="use the session that declared it, or wait until that session "
                              "closes")


class QueueInUseError(ResourceLimitError):
    """A queue with consumers was not deleted (Qpid's ifUnused check; mqstore also refuses
    without it, as Artemis's destroyQueue does without removeConsumers).

    Attributes:
        queue: the queue. consumers: how many it has.
    """

    def __init__(self, queue: str, consumers: int) -> None:
        self.queue = queue
        self.consumers = consumers
        super().__init__(f"queue {queue!r} has {consumers} consumer(s)",
                         hint="close its consumers first, then delete it")


class QueueNotEmptyError(ResourceLimitError):
    """A queue holding messages was not deleted because ``if_empty`` was asked (Qpid's
    ifEmpty check, Qpid queues "Deleting Queues").

    Attributes:
        queue: the queue. messages: how many it holds (on it, in delivery, scheduled).
    """

    def __init__(self, queue: str, messages: int) -> None:
        self.queue = queue
        self.messages = messages
        super().__init__(f"queue {queue!r} is not empty: it holds {messages} message(s)",
                         hint="consume or purge them first, or delete without if_empty")


class BrokerFailedError(EngineError):
    """The broker stopped after a storage failure (fail-stop); reopen the directory to recover.

    Attributes:
        cause: the storage error.
    """

    def __init__(self, cause: BaseException) -> None:
        self.cause = cause
        super().__init__(f"the broker stopped after a storage failure: {cause}",
                         hint="close it and reopen the directory; recovery runs at open")


class InvalidArgumentError(EngineError, ValueError, TypeError):
    """A value handed to mqstore is of the wrong type or out of range (a message field, a
    queue or settings value, a window...). Raised before anything is written: the store and the
    broker are unchanged and keep serving. Also a ``ValueError`` and a ``TypeError``, for
    callers that caught those.

    Attributes:
        field: what was wrong (``"priority"``, ``"properties['k']"``...).
    """

    def __init__(self, field: str, why: str) -> None:
        self.field = field
        super().__init__(f"invalid {field}: {why}")


class AddressFullError(ResourceLimitError):
    """A send to a full address was refused (``address_full_policy`` FAIL, or BLOCK when the
    wait for room timed out); nothing of that send was stored (Artemis ring queues §4; Artemis's
    ``AddressFullException``).

    Attributes:
        address: the full address. limit: which limit it reached ("max_size_bytes",
            "max_size_messages" or "global_max_size"; "timeout" when a BLOCK wait timed out).
        sent: messages of a ``send_many`` sent before the one that waited (0 otherwise).
    """

    def __init__(self, address: str, limit: str, why: str = "", sent: int = 0) -> None:
        self.address = address
        self.limit = limit
        self.sent = sent
        reached = "" if limit == "timeout" else f" ({limit} reached)"
        super().__init__(f"address {address!r} is full{reached}{why}",
                         hint="consume from its queues, or raise the limit with "
                              "set_address_settings()")


class QueueFullError(ResourceLimitError):
    """A send was refused because a queue is at its Qpid size limit (Qpid queues "Controlling
    queue size"; Qpid's ResourceLimitExceededException): its policy is ``reject``, or
    ``ring_strict`` and the oldest message is in delivery, or the message alone is larger than
    a ring queue's ``max_size``. Nothing of the send (or of the transaction, at commit) was
    stored, on any queue.

    Attributes:
        queue: the queue. limit: ``"max_count"`` or ``"max_size"``. policy: the queue's
            policy type value.
    """

    def __init__(self, queue: str, limit: str, policy: str, why: str = "") -> None:
        self.queue = queue
        self.limit = limit
        self.policy = policy
        super().__init__(f"queue {queue!r} is full ({limit} reached, policy {policy}){why}",
                         hint="consume from the queue, or declare it with a larger limit or "
                              "another policy_type")
