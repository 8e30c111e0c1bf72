"""One AMQP 1.0 connection on an asyncio socket, with qpid-proton doing all of AMQP.

proton's protocol engine (``proton.Transport``, ``proton.Connection``, ``proton.Collector``)
has no I/O of its own: bytes read from the socket are pushed into the transport, the events it
produces (a peer opened a link, a transfer arrived, credit was granted...) are handed to a
handler, and the bytes it wants to send are written to the socket. ``ProtonWire`` is that pump,
for the server (``tools.serve.server``) and the client (``tools.serve.client``) alike; both run
it in an asyncio event loop, so every proton object of a connection is touched from that loop's
thread only.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable, Optional

from proton import Collector, Connection, Transport

log = logging.getLogger("mqstore.serve")


class ProtonWire(asyncio.Protocol):
    """The byte pump of one AMQP connection (an ``asyncio.Protocol``).

    Args:
        server: ``True`` on the accepting side (proton's server mode: it answers the SASL
            exchange), ``False`` for a client.
        handler_factory: called once with this wire when the socket connects; returns the
            object whose ``on_event(event)`` gets every proton event (``proton.Event``) and whose
            ``on_closed()`` runs once when the socket is gone.
        mechanisms: the SASL mechanisms offered (server) or tried (client), space-separated.

    Attributes:
        connection: the ``proton.Connection`` (set up before ``handler_factory`` runs).
        transport: the ``proton.Transport``.
    """

    def __init__(self, server: bool, handler_factory: Callable[["ProtonWire"], Any],
                 mechanisms: str = "ANONYMOUS") -> None:
        self._server = server
        self._factory = handler_factory
        self._mechanisms = mechanisms
        self._socket: Optional[asyncio.Transport] = None
        self._handler: Any = None
        self._done = False
        self._timer: Optional[asyncio.Handle] = None  # the next ``tick``
        self._ticked = False  # (a pump from ``_tick`` itself schedules no other)
        self.transport = Transport(Transport.SERVER if server else Transport.CLIENT)
        self.connection = Connection()
        self._collector = Collector()
        self.connection.collect(self._collector)

    # -- asyncio.Protocol --------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._socket = transport
        sasl = self.transport.sasl()
        sasl.allowed_mechs(self._mechanisms)
        self.transport.bind(self.connection)
        self._handler = self._factory(self)
        self.pump()

    def data_received(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            room = self.transport.capacity()
            if room <= 0:  # the transport takes no more input (it is closing)
                break
            self.transport.push(bytes(view[:room]))
            view = view[room:]
        self.pump()

    def eof_received(self) -> Optional[bool]:
        self.transport.close_tail()
        self.pump()
        return None

    def connection_lost(self, exc: Optional[BaseException]) -> None:
        if not self.transport.closed:
            self.transport.close_tail()
            self.transport.close_head()
        self._socket = None
        self.pump()
        self._finish()

    # -- the pump -----------------------------------------------------------------------------
    def pump(self) -> None:
        """Hand every pending proton event to the handler, then write what proton wants to
        send. Call after touching any proton object of this connection (in the loop's thread);
        a handler error closes the connection with ``amqp:internal-error``, never the loop."""
        collector = self._collector
        while True:
            event = collector.peek()
            if event is None:
                break
            try:
                if self._handler is not None:
                    self._handler.on_event(event)
            except Exception as exc:  # noqa: BLE001 - one connection's bug, not the server's
                log.exception("AMQP connection failed in its handler")
                self.fail("amqp:internal-error", str(exc))
            collector.pop()
        self._write()
        if self._timer is None and not self._ticked and not self._done and \
                self._socket is not None and (self.transport.idle_timeout or
                                              self.transport.remote_idle_timeout):
            # (no timer at all while neither peer asked for an idle timeout)
            self._timer = asyncio.get_running_loop().call_soon(self._tick)
        self._ticked = False

    def _write(self) -> None:
        socket = self._socket
        while True:
            pending = self.transport.pending()
            if pending < 0:  # the transport's output side is closed: so is the socket
                if socket is not None and not socket.is_closing():
                    socket.close()
                return
            if pending == 0:
                return
            out = self.transport.peek(pending) or b""
            self.transport.pop(len(out))
            if socket is not None and not socket.is_closing():
                socket.write(out)

    def _tick(self) -> None:
        """Let proton keep the idle timeouts both peers asked for: it sends an empty frame
        before the peer would give up on us, and closes a peer silent for longer than ours
        (``amqp:resource-limit-exceeded``). Runs again at the time proton names; while it
        names none (no timeout known yet), after the next pump."""
        self._timer = None
        if self._done:
            return
        loop = asyncio.get_running_loop()
        deadline = self.transport.tick(loop.time())
        self._ticked = True
        self.pump()
        if deadline > 0 and not self._done:
            self._timer = loop.call_at(deadline, self._tick)

    def fail(self, condition: str, description: str) -> None:
        """Close the connection with an AMQP error condition (``amqp:...``)."""
        from proton import Condition
        conn = self.connection
        if not conn.state & Connection.LOCAL_CLOSED:
            conn.condition = Condition(condition, description)
            conn.close()

    def abort(self) -> None:
        """Drop the socket at once (no AMQP close): what a peer sees when a process dies."""
        if self._socket is not None:
            self._socket.abort()

    def _finish(self) -> None:
        if self._done:
            return
        self._done = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._handler is not None:
            try:
                self._handler.on_closed()
            except Exception:  # noqa: BLE001
                log.exception("AMQP connection failed while closing")

    @property
    def closed(self) -> bool:
        """Whether the socket is gone."""
        return self._done


def tag_of(transfer: Any) -> str:
    """A transfer's delivery tag as str (proton gives str or bytes)."""
    tag = transfer.tag
    return tag.decode("latin-1") if isinstance(tag, (bytes, bytearray)) else str(tag)
