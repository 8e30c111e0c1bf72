"""Connections: sessions grouped as one client connection (AMQP), for Qpid no-local queues
(Qpid queues: "a queue owner might send itself messages using that exchange, but have no need to
receive those messages").

``Broker.connection()`` opens one; ``connection.session()`` makes its sessions; closing it
closes them. A session from ``Broker.session()`` is a connection of its own. A queue declared
``no_local`` and owned by a session (``Session.declare_queue(..., exclusive=True)``) does not
receive what sessions of the owner's connection send (``engine.routing.exclusive.not_local``).
"""

from __future__ import annotations

import itertools
from typing import Any, List, Optional

from .errors import IllegalStateError

_ids = itertools.count(1)


class Connection:
    """A client connection of one broker (create with ``Broker.connection``); a context manager.

    Attributes:
        id: a number unique in this process. client_id: the name the application gave, or
            ``None``. sessions: its open sessions.
    """

    def __init__(self, broker: Any, client_id: Optional[str] = None) -> None:
        self.broker = broker
        self.id = next(_ids)
        self.client_id = client_id
        self.sessions: List[Any] = []
        self.closed = False

    def session(self, transacted: bool = False, block_on_acknowledge: bool = False) -> Any:
        """A new session on this connection (as ``Broker.session``).

        Raises:
            IllegalStateError: the connection or the broker is closed. InvalidArgumentError.
        """
        if self.closed:
            raise IllegalStateError("the connection is closed")
        s = self.broker.session(transacted, block_on_acknowledge)
        s.connection = self
        self.sessions = [x for x in self.sessions if not x.closed] + [s]
        return s

    def close(self) -> None:
        """Close every session of the connection. Safe to call twice."""
        self.closed = True
        for s in list(self.sessions):
            s.close()
        self.sessions = []

    def __enter__(self) -> "Connection":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
