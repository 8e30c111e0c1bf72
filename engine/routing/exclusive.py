"""Qpid exclusive queues (Qpid queues: "If the server receives a declare, bind, delete or subscribe
request for a queue that has been declared as exclusive, an exception will be raised and the
requesting session will be ended"; "Auto-delete is handled differently for exclusive and
non-exclusive queues").

A session that declares a queue exclusive (``Session.declare_queue(config, exclusive=True)``)
owns it until the session closes: only it may consume from, browse, declare or delete the queue;
another session that tries is ended and gets ``ExclusiveQueueError``. Sending to the queue stays
open to everyone, as publishing through an exchange does in Qpid. When the owner closes, an
auto-delete queue it owned is deleted (``QueueConfig.auto_delete``); ownership itself lives in
RAM only: it ends with the broker object, and a reopened store has no owners. Separate from
Artemis's exclusive consumers (``QueueConfig.exclusive``). A no-local queue
(``QueueConfig.no_local``) an owner holds does not receive what sessions of the owner's
connection send (``not_local``; ``engine.connection``). Every function runs with the broker
lock held (re-entrant).
"""

from __future__ import annotations

from typing import Any, List, Optional

from .autocreate import auto_delete, idle
from .core import BrokerCore
from ..errors import ExclusiveQueueError
from ..queues.queue import Queue


def check_use(broker: BrokerCore, session: Any, queue: Queue) -> None:
    """Let ``session`` consume from, browse, declare or delete ``queue``, or end the session
    and raise.

    Raises:
        ExclusiveQueueError: another session owns the queue; ``session`` is closed (its
            unacked deliveries go back to their queues) before this is raised.
    """
    owner = broker.owners.get(queue.name)
    if owner is None or owner is session:
        return
    session.close()
    raise ExclusiveQueueError(queue.name)


def claim(broker: BrokerCore, session: Any, queue: Queue) -> None:
    """``session`` owns ``queue`` from now on (``check_use`` passed)."""
    broker.owners[queue.name] = session


def delete(broker: BrokerCore, session: Any, name: str, if_empty: bool, if_unused: bool
           ) -> None:
    """``Session.delete_queue``: the owner (or anyone, for a queue no session owns) deletes.

    Raises:
        ExclusiveQueueError (the session is ended first), and as ``Broker.delete_queue``; the
        ownership stays when the deletion is refused.
    """
    queue = broker.find_queue(name)
    check_use(broker, session, queue)
    mine = broker.owners.pop(name, None)
    try:
        broker.delete_queue(name, if_empty=if_empty, if_unused=if_unused)
    except BaseException:
        if mine is not None:
            broker.owners[name] = mine
        raise


def session_closed(broker: BrokerCore, session: Any) -> None:
    """``session`` closed: its queues are free, and its auto-delete ones are deleted (not while
    the broker closes: a restart deletes no queue)."""
    for name in [n for n, s in broker.owners.items() if s is session]:
        del broker.owners[name]
        queue = broker.queues.get(name)
        if queue is not None and queue.config.auto_delete and idle(broker, queue):
            auto_delete(broker, queue)


def not_local(broker: BrokerCore, queues: List[Queue], sender: Optional[Any]) -> List[Queue]:
    """``queues`` without the no-local ones (``QueueConfig.no_local``) whose owner is on the
    same connection as ``sender`` (the sending session; ``None``: not a session's send). A
    no-local queue no session owns receives everything."""
    if sender is None or not broker.owners:  # the common case: nothing to look at
        return queues
    return [q for q in queues
            if not (q.config.no_local and _same_connection(broker.owners.get(q.name), sender))]


def _same_connection(owner: Optional[Any], sender: Any) -> bool:
    if owner is None:
        return False
    if owner is sender:
        return True
    conn = getattr(owner, "connection", None)
    return conn is not None and conn is getattr(sender, "connection", None)
