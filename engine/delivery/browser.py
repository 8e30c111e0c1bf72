"""Browsers: reading a queue's messages without acquiring them (Artemis queue browsers)."""

from __future__ import annotations

from typing import Any, Iterator, Optional

from ..filters.expression import Filter
from ..model import ReceivedMessage
from ..routing.placement import body_of
from ..queues.queue import Queue


class Browser:
    """Iterates the messages ready on a queue without acquiring them, in queue order: the
    head in RAM, then the backlog read from the index in chunks, then the paged ones (weakly
    consistent, as Artemis browsers are: what is consumed meanwhile is skipped).

    Args:
        session: the ``Session`` that made it (its broker is read through it).
        queue: the queue browsed.
        selector: only the messages this filter matches (``None``: all).
    """

    CHUNK = 256

    def __init__(self, session: Any, queue: Queue, selector: Optional[Filter] = None) -> None:
        self._session = session
        self._queue = queue
        self._selector = selector

    def __iter__(self) -> Iterator[ReceivedMessage]:
        broker = self._session.broker
        after = None
        while True:
            with broker.lock:
                refs = self._queue.browse(after, self.CHUNK)
            for ref in refs:
                if self._selector is not None and not self._selector.matches(ref.msg):
                    continue
                with broker.lock:
                    try:
                        body = body_of(broker, ref.msg)
                    except KeyError:
                        continue  # settled meanwhile
                    self._queue.browsed(ref)  # Qpid last-value queues protect it
                yield ReceivedMessage(ref.msg.to_message(body), ref.delivery_count,
                                      self._queue.name)
            if not refs:
                return
            after = refs[-1].order
