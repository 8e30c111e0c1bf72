"""``serve(broker, ...)``: an open store served over AMQP 1.0 (qpid-proton), so other processes
and other languages use the store its owner has open.

The server is one thread of the owning process running an asyncio event loop; every client
connection is a ``ProtonWire`` (``tools.serve.wire``) whose events ``ServedConnection`` turns
into the engine's asyncio API (``AsyncSession``, ``AsyncConsumer``): an AMQP connection is an
engine ``Connection`` whose client id is the peer's container id (so a durable subscription is
Artemis's ``container-id.link-name`` queue), an AMQP session an engine ``Session``, a link an
``Inbound`` sender or an ``Outbound`` consumer (``tools.serve.links``). The embedding program
keeps using the broker from its own threads meanwhile (the broker is thread-safe).

A connection that closes or drops gives back what its consumers had not settled, as a closed
consumer does; nothing a client was told is durable (a settled transfer) is lost.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
from typing import Any, Dict, List, Optional, Set, Tuple

from proton import Event, Link, Session as AmqpSession, Terminus

from mqstore.engine import (AsyncConsumer, AsyncSession, Broker, InvalidArgumentError,
                            QueueNotFoundError, ResourceLimitError)
from mqstore.journal import MqStoreError

from .conditions import condition_of
from .links import Inbound, Outbound
from .terminus import capabilities, source_plan, target_destination
from .wire import ProtonWire

log = logging.getLogger("mqstore.serve")

LISTENER_FILE = "listener.json"  # in the store directory while it is served: {"url", "pid"}
MAX_LINKS = 1000  # links one connection may have open at once (more are refused)
DEFAULT_PORT = 5672
CONSUMER_WINDOW = 1000  # deliveries a served consumer may have unsettled
IDLE_TIMEOUT_S = 60.0  # a client silent this long is dropped (it is told to send at least
# an empty frame every 30 s; proton clients do); Artemis's connection TTL is 60 s too


class ServeError(MqStoreError):
    """The server could not start: the address is in use or cannot be listened on."""


class NotAvailableError(MqStoreError):
    """A client asked for something a served store does not do yet (refused with
    ``amqp:not-implemented``)."""


def parse_listen(text: str) -> Tuple[str, int]:
    """``host:port`` (``[::1]:port`` for IPv6; port 0: any free one) as (host, port).

    Raises:
        InvalidArgumentError: not of that form.
    """
    host, sep, port = text.rpartition(":") if isinstance(text, str) else ("", "", "")
    if not sep or not port.isdigit() or not host or int(port) > 65535:
        raise InvalidArgumentError("listen", f"{text!r}: give host:port, e.g. 127.0.0.1:5672")
    return host.strip("[]"), int(port)


class ServedConnection:
    """The handler of one served AMQP connection (``ProtonWire``'s events, in the loop)."""

    def __init__(self, wire: ProtonWire, broker: Broker, server: "Server") -> None:
        self.wire = wire
        self.broker = broker
        self.server = server
        self.engine: Any = None  # the engine Connection, made when the peer opens
        self.sessions: Dict[AmqpSession, AsyncSession] = {}
        # engine sessions with block_on_acknowledge, for the receiver links that ask for it
        self.blocking: Dict[AmqpSession, List[Any]] = {}
        self.inbound: Dict[Link, Inbound] = {}
        self.outbound: Dict[Link, Outbound] = {}
        self.closing: Set["asyncio.Task[None]"] = set()
        wire.transport.idle_timeout = IDLE_TIMEOUT_S
        server.connections.add(self)

    # -- events -------------------------------------------------------------------------------
    def on_event(self, ev: Any) -> None:
        """One proton ``Event`` of this connection."""
        t = ev.type
        if t == Event.CONNECTION_REMOTE_OPEN:
            conn = self.wire.connection
            self.engine = self.broker.connection(client_id=conn.remote_container or None)
            conn.container = "mqstore"
            conn.open()
        elif t == Event.SESSION_REMOTE_OPEN:
            ssn = ev.session
            self.sessions[ssn] = AsyncSession(self.engine.session())
            ssn.open()
        elif t == Event.LINK_REMOTE_OPEN:
            self._attach(ev.link)
        elif t == Event.LINK_FLOW:
            out = self.outbound.get(ev.link)
            if out is not None:
                out.on_flow()
        elif t == Event.DELIVERY:
            transfer = ev.delivery
            link = transfer.link
            inbound = self.inbound.get(link)
            if inbound is not None:
                inbound.on_transfer(transfer)
            else:
                out = self.outbound.get(link)
                if out is not None:
                    out.on_outcome(transfer)
        elif t in (Event.LINK_REMOTE_CLOSE, Event.LINK_REMOTE_DETACH):
            self._later(self._detach(ev.link))
        elif t == Event.SESSION_REMOTE_CLOSE:
            self._later(self._end(ev.session))
        elif t == Event.CONNECTION_REMOTE_CLOSE:
            self._later(self._close(True))

    def on_closed(self) -> None:
        """The socket is gone (closed or dropped): give back what was not settled."""
        self._later(self._close(False))

    def _later(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self.closing.add(task)
        task.add_done_callback(self.closing.discard)

    # -- links --------------------------------------------------------------------------------
    def _attach(self, link: Link) -> None:
        session = self.sessions.get(link.session)
        try:
            if session is None:
                raise MqStoreError("a link on a session that is not open")
            if len(self.inbound) + len(self.outbound) >= MAX_LINKS:
                raise ResourceLimitError(f"this connection has {MAX_LINKS} links open, the "
                                         f"most one connection may have")
            if link.is_receiver and link.remote_target.type == Terminus.COORDINATOR:
                raise NotAvailableError("transactions (the AMQP transaction coordinator) are "
                                        "not available on a served store yet")
            if link.is_receiver:  # the client sends
                address = link.remote_target.address
                destination = target_destination(address, capabilities(link.remote_target))
                link.target.address = address  # type: ignore[assignment]
                self.inbound[link] = Inbound(self.wire, link, session, destination)
            else:  # the client receives
                consumer = self._consumer(session, link)
                link.source.address = link.remote_source.address  # type: ignore[assignment]
                link.source.durability = link.remote_source.durability
                link.source.expiry_policy = link.remote_source.expiry_policy
                self.outbound[link] = Outbound(self.wire, link, consumer)
            link.open()
        except MqStoreError as exc:  # refused: a null terminus, then the close with why
            (link.target if link.is_receiver else link.source).type = Terminus.UNSPECIFIED
            link.condition = condition_of(
                exc, "amqp:not-implemented" if isinstance(exc, NotAvailableError) else None)
            link.open()
            link.close()

    def _consumer(self, session: AsyncSession, link: Link) -> AsyncConsumer:
        """The engine consumer a receiver link's source names (``terminus.source_plan``).

        Raises:
            The engine's errors for the queue or subscription (nothing created then).
        """
        plan = source_plan(link.remote_source, str(link.name))
        s = session.session
        if link.remote_rcv_settle_mode == Link.RCV_SECOND:  # the client waits for durable
            # outcomes: a session of its own whose acks wait for their fsync
            s = self.engine.session(block_on_acknowledge=True)
            self.blocking.setdefault(link.session, []).append(s)
            link.rcv_settle_mode = Link.RCV_SECOND
        if plan.queue is not None:
            try:
                return AsyncConsumer(s.create_consumer(plan.queue, CONSUMER_WINDOW,
                                                       plan.selector))
            except QueueNotFoundError:
                if not plan.fallback:
                    raise
        assert plan.address is not None
        return AsyncConsumer(s.create_subscriber(
            plan.address, plan.subscription, durable=plan.durable, shared=plan.shared,
            selector=plan.selector, window=CONSUMER_WINDOW))

    async def _detach(self, link: Link, quiet: bool = False) -> None:
        """The client detached ``link`` (or it goes with its session or connection): what it
        had not settled goes back, the sends under way finish, then our detach answers
        (``quiet``: no frame, the session's end or the connection's close covers it)."""
        out = self.outbound.pop(link, None)
        if out is not None:
            await out.close()
        inbound = self.inbound.pop(link, None)
        if inbound is not None:
            await inbound.drain()
        if not quiet and link.state & Link.LOCAL_ACTIVE:
            link.close()
            self.wire.pump()

    async def _end(self, ssn: AmqpSession, quiet: bool = False) -> None:
        """The client ended ``ssn`` (or it goes with the connection): its links go (without
        frames of their own: the end covers them), then its engine sessions, then our end
        answers (``quiet``: none, the connection's close covers it)."""
        for link in [lk for lk in (*self.outbound, *self.inbound) if lk.session == ssn]:
            await self._detach(link, quiet=True)
        session = self.sessions.pop(ssn, None)
        if session is not None:
            session.close()
        for extra in self.blocking.pop(ssn, []):
            extra.close()
        if not quiet and ssn.state & AmqpSession.LOCAL_ACTIVE:
            ssn.close()
            self.wire.pump()

    async def _close(self, answer: bool) -> None:
        """The connection goes (closed by the client when ``answer``, which our close then
        answers; else dropped or being shut down): every session and link goes with it, with
        no frames of their own (a peer that sent its close may have gone already, and a frame
        after its close would meet a closed socket)."""
        for ssn in list(self.sessions):
            await self._end(ssn, quiet=True)
        if self.engine is not None:
            self.engine.close()
            self.engine = None
        if answer:
            conn = self.wire.connection
            if conn.state & conn.LOCAL_ACTIVE:
                conn.close()
            self.wire.pump()
        self.server.connections.discard(self)

    async def shutdown(self) -> None:
        """Close this connection from our side (the server is stopping)."""
        await self._close(False)
        self.wire.fail("amqp:connection:forced", "the server is stopping")
        self.wire.pump()


class Server:
    """A broker served on one TCP listener (AMQP 1.0), from a thread of the owning process.

    Use ``serve()`` to make and start one; ``stop()`` (or leaving its ``with`` block) ends it.

    Attributes:
        host, port: where it listens (the port the OS gave when 0 was asked for).
        url: ``amqp://host:port``, for ``mqstore.connect``.
    """

    def __init__(self, broker: Broker, host: str, port: int) -> None:
        self.broker = broker
        self.host = host
        self.port = port
        self.connections: Set[ServedConnection] = set()
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._stopped: Optional["asyncio.Future[None]"] = None
        self._ready = threading.Event()
        self._error: Optional[BaseException] = None
        self._thread = threading.Thread(target=self._run, name="mqstore-serve", daemon=True)
        self._listener_file = ""

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"amqp://{host}:{self.port}"

    def start(self) -> "Server":
        """Start listening; returns once the listener is bound.

        Raises:
            ServeError: the address cannot be listened on (in use, not local...).
        """
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            raise ServeError(f"cannot listen on {self.host}:{self.port}: {self._error}")
        self._write_listener_file()
        return self

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:  # noqa: BLE001 - reported by start()
            self._error = self._error or exc
            self._ready.set()

    async def _main(self) -> None:
        loop = self._loop = asyncio.get_running_loop()
        self._stopped = loop.create_future()
        try:
            listener = await loop.create_server(
                lambda: ProtonWire(True, lambda wire: ServedConnection(wire, self.broker, self)),
                self.host, self.port)
        except OSError as exc:
            self._error = exc
            self._ready.set()
            return
        self.port = listener.sockets[0].getsockname()[1]
        self._ready.set()
        try:
            await self._stopped
        finally:
            listener.close()
            for conn in list(self.connections):
                await conn.shutdown()
            await listener.wait_closed()

    def _write_listener_file(self) -> None:
        """``listener.json`` in the store directory: where other processes find the server."""
        if not self.broker.directory:
            return
        path = os.path.join(self.broker.directory, LISTENER_FILE)
        tmp = path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump({"url": self.url, "pid": os.getpid()}, f)
        os.replace(tmp, path)
        self._listener_file = path

    def stop(self) -> None:
        """Close every client connection (what they had not settled goes back to its queue)
        and the listener; the broker stays open. Safe to call twice."""
        loop, stopped = self._loop, self._stopped
        if loop is not None and stopped is not None and not loop.is_closed():
            def finish() -> None:
                if not stopped.done():
                    stopped.set_result(None)
            loop.call_soon_threadsafe(finish)
        if self._thread.is_alive():
            self._thread.join()
        if self._listener_file:
            try:
                os.unlink(self._listener_file)
            except FileNotFoundError:
                pass
            self._listener_file = ""

    def __enter__(self) -> "Server":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def serve(broker: Broker, listen: str = f"127.0.0.1:{DEFAULT_PORT}", *,
          anonymous: bool = False) -> Server:
    """Serve ``broker`` over AMQP 1.0 on ``listen`` (``host:port``; loopback by default; port 0
    takes a free one) from a thread of this process, and return the running ``Server``.

    Clients authenticate with SASL. This version offers ANONYMOUS only, which must be asked for
    (``anonymous=True``): SASL PLAIN with a users file needs a SASL library the qpid-proton
    package does not bring.

    Raises:
        InvalidArgumentError: ``anonymous`` not given, or a bad ``listen``. ServeError: the
            address cannot be listened on. Nothing is served then.
    """
    if anonymous is not True:
        raise InvalidArgumentError("anonymous", "serving needs a way to authenticate clients "
                                   "and this version has only SASL ANONYMOUS: ask for it with "
                                   "anonymous=True (`mqstore serve DIR --anonymous`); any "
                                   "process that reaches the address can then use the store")
    host, port = parse_listen(listen)
    return Server(broker, host, port).start()
