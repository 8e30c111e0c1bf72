"""``mqstore.connect(url)``: a served store (``mqstore serve``) through the same session and
consumer calls as an embedded one, so a program moves between the two by changing one line::

    broker = mqstore.connect("amqp://127.0.0.1:5672")   # was: mqstore.Broker.open("store")
    with broker.session() as s:
        s.send("orders", mqstore.Message(b"..."))
        d = s.create_consumer("orders").receive(5.0)
        d.ack()

Underneath it is an AMQP 1.0 client on qpid-proton (``tools.serve.wire`` in a thread of its
own): ``send`` waits until the server settles the transfer, which it does once the message is
durable, and raises the server's mqstore error when the store refused it; a consumer grants the
server credit for what ``receive`` asks for (plus ``prefetch``), never beyond ``window``
unsettled, so messages are not taken from the queue ahead of the receives; ``ack``, ``reject``
and ``release`` send the AMQP outcome (accepted, rejected, released) and return once it is
written to the socket (an ack is durable at the server's next group commit, as the embedded
default), or, in a session made with ``block_on_acknowledge=True``, once the server settled it
after its fsync (AMQP's receiver-settle-mode ``second``). Closing a consumer, a session or the
connection, or losing it, gives back what was received and not settled.

Not over the wire yet: transacted sessions, browsers, management, queue declaration and
deletion (use ``mqstore`` commands or the embedding program for those). The links themselves
are in ``tools.serve.clientlinks``.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import uuid
from typing import Any, Callable, Dict, List, Optional, Sequence, TypeVar
from urllib.parse import urlparse

from proton import Delivery as Transfer
from proton import Data, Described, Event, Link, Terminus, symbol

from mqstore.engine import IllegalStateError, InvalidArgumentError, Message
from mqstore.journal import MqStoreError

from .clientlinks import CONNECT_TIMEOUT, RemoteConsumer, RemoteDelivery, SenderLink
from .conditions import error_of
from .convert import for_send
from .terminus import ANYCAST, MULTICAST
from .wire import ProtonWire

T = TypeVar("T")
DEFAULT_WINDOW = 1000


class ConnectionLostError(MqStoreError):
    """The connection to the served store closed or dropped; what it had received and not
    settled goes back to its queues on the server."""


class _Loop:
    """The client's event loop thread, where every proton object is touched."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="mqstore-client",
                                       daemon=True)
        self.thread.start()

    def call(self, fn: Callable[[], T], timeout: Optional[float] = None) -> T:
        """Run ``fn`` in the loop; return what it returns (raise what it raises)."""
        async def run() -> T:
            return fn()
        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(timeout)

    def run(self, coro: Any) -> Any:
        """Run coroutine ``coro`` in the loop and wait for its result, in one hand-off."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def wait(self, fut: "asyncio.Future[T]", timeout: Optional[float]) -> T:
        """Wait from another thread for a future of the loop (``TimeoutError`` after
        ``timeout`` seconds)."""
        async def run() -> T:
            return await asyncio.wait_for(asyncio.shield(fut), timeout)
        return asyncio.run_coroutine_threadsafe(run(), self.loop).result()

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()
        self.loop.close()


class _Client:
    """The handler of the client's ``ProtonWire`` (in the loop)."""

    def __init__(self, wire: ProtonWire, loop: asyncio.AbstractEventLoop) -> None:
        self.wire = wire
        self.loop = loop
        self.opened: "asyncio.Future[None]" = loop.create_future()
        # the server answered our close (after applying what we sent before it), or the
        # socket is gone
        self.finished: "asyncio.Future[None]" = loop.create_future()
        self.links: Dict[Link, Any] = {}  # link -> SenderLink or RemoteConsumer
        self.lost: Optional[MqStoreError] = None

    def on_event(self, ev: Any) -> None:
        """One proton ``Event`` of this connection."""
        t = ev.type
        if t == Event.CONNECTION_REMOTE_OPEN:
            if not self.opened.done():
                self.opened.set_result(None)
        elif t == Event.LINK_REMOTE_OPEN:
            owner = self.links.get(ev.link)
            if owner is not None:
                owner.on_open()
        elif t == Event.DELIVERY:
            owner = self.links.get(ev.delivery.link)
            if owner is not None:
                owner.on_delivery(ev.delivery)
        elif t == Event.LINK_FLOW:
            owner = self.links.get(ev.link)
            if owner is not None:
                owner.on_flow()
        elif t == Event.LINK_REMOTE_CLOSE or t == Event.LINK_REMOTE_DETACH:
            owner = self.links.pop(ev.link, None)
            if owner is not None:
                owner.on_close(error_of(ev.link.remote_condition, "the server closed the link"))
            if ev.link.state & Link.LOCAL_ACTIVE:
                ev.link.close()
        elif t == Event.CONNECTION_REMOTE_CLOSE:
            self._lose(error_of(self.wire.connection.remote_condition,
                                "the server closed the connection"))
            self.wire.connection.close()
            self._finish()

    def on_closed(self) -> None:
        self._lose(ConnectionLostError("the connection to the served store was lost"))
        self._finish()

    def _finish(self) -> None:
        if not self.finished.done():
            self.finished.set_result(None)

    def _lose(self, error: MqStoreError) -> None:
        if self.lost is None:
            self.lost = error
        if not self.opened.done():
            self.opened.set_exception(self.lost)
        for owner in list(self.links.values()):
            owner.on_close(self.lost)
        self.links.clear()


class RemoteSession:
    """A session on a served store (``RemoteBroker.session``): ``send``, ``send_many``,
    ``create_consumer``, ``create_subscriber``, ``ack_many``, as ``mqstore.Session``."""

    _names = itertools.count(1)

    def __init__(self, broker: "RemoteBroker", block_on_acknowledge: bool = False) -> None:
        self._broker = broker
        self.block_on_acknowledge = block_on_acknowledge
        self._loop = broker._loop
        self._client = broker._client
        self._senders: Dict[str, SenderLink] = {}
        self.consumers: List[RemoteConsumer] = []
        self.closed = False
        self._ssn = self._loop.call(self._open_session)

    def _open_session(self) -> Any:
        ssn = self._client.wire.connection.session()
        ssn.open()
        self._client.wire.pump()
        return ssn

    def _check(self) -> None:
        if self.closed:
            raise IllegalStateError("the session is closed")
        if self._client.lost is not None:
            raise self._client.lost

    def _sender(self, destination: str) -> SenderLink:
        found = self._senders.get(destination)
        if found is not None and found.error is None:
            return found

        def step() -> SenderLink:
            link = self._ssn.sender(f"{self._broker.client_id}-sender-{next(self._names)}")
            link.target.address = destination
            link.source.address = destination
            sender = SenderLink(self._client, link)
            self._client.links[link] = sender
            link.open()
            self._client.wire.pump()
            return sender
        sender = self._loop.call(step)
        self._loop.wait(sender.opened, CONNECT_TIMEOUT)
        self._senders[destination] = sender
        return sender

    def send(self, destination: str, message: Message, timeout: Optional[float] = None
             ) -> None:
        """Send one message; returns once the server has it durable (as ``Session.send``).

        Raises:
            The server's mqstore error for a refusal (``AddressNotFoundError``,
            ``AddressFullError``...): nothing sent. InvalidArgumentError: a bad message.
            ConnectionLostError. TimeoutError: no answer within ``timeout`` seconds.
        """
        self.send_many(destination, [message], timeout)

    def send_many(self, destination: str, messages: Sequence[Message],
                  timeout: Optional[float] = None) -> None:
        """Send messages in order and wait for all of them (one group commit on the
        server when they arrive together). Raises the first refusal's error."""
        self._check()
        if not isinstance(destination, str) or not destination:
            raise InvalidArgumentError("destination", f"{destination!r}: an address name")
        payloads = [for_send(m.checked()).encode() for m in messages]
        sender = self._sender(destination)

        async def send_all() -> None:  # the first refusal's error, once all are settled
            futures = [sender.send(p) for p in payloads]
            results = await asyncio.wait_for(
                asyncio.gather(*futures, return_exceptions=True), timeout)
            for r in results:
                if isinstance(r, BaseException):
                    raise r
        try:
            self._loop.run(send_all())
        except (asyncio.TimeoutError, TimeoutError):
            raise TimeoutError(f"the served store did not answer within {timeout} s") \
                from None

    def _receiver(self, source: str, caps: Sequence[str], window: int, prefetch: int,
                  selector: Optional[str], durable: bool, name: Optional[str]
                  ) -> RemoteConsumer:
        self._check()
        if not isinstance(window, int) or window < 1:
            raise InvalidArgumentError("window", f"{window!r}: an int >= 1")
        if not isinstance(prefetch, int) or prefetch < 0:
            raise InvalidArgumentError("prefetch", f"{prefetch!r}: an int >= 0")
        holder: List[RemoteConsumer] = []

        def step() -> None:
            link = self._ssn.receiver(name or f"{self._broker.client_id}-receiver-"
                                              f"{next(self._names)}")
            link.source.address = source
            if caps:
                link.source.capabilities.put_array(False, Data.SYMBOL)
                link.source.capabilities.enter()
                for cap in caps:
                    link.source.capabilities.put_symbol(symbol(cap))
                link.source.capabilities.exit()
            if selector:
                link.source.filter.put_dict({symbol("selector"): Described(
                    symbol("apache.org:selector-filter:string"), selector)})
            if self.block_on_acknowledge:  # the server settles once the outcome is durable
                link.rcv_settle_mode = Link.RCV_SECOND
            if durable:
                link.source.durability = Terminus.DELIVERIES
                link.source.expiry_policy = Terminus.EXPIRE_NEVER
            link.target.address = source
            consumer = RemoteConsumer(self, link, source, window, prefetch)
            self._client.links[link] = consumer
            link.open()
            self._client.wire.pump()
            holder.append(consumer)
        self._loop.call(step)
        consumer = holder[0]
        self._loop.wait(consumer.opened, CONNECT_TIMEOUT)
        self.consumers.append(consumer)
        return consumer

    def create_consumer(self, queue: str, window: int = DEFAULT_WINDOW,
                        selector: Optional[str] = None, prefetch: int = 0) -> RemoteConsumer:
        """A consumer on a queue (name or FQQN ``address::queue``; ``multicast://address``:
        a subscription of its own), as ``Session.create_consumer``.

        Raises:
            The server's error (``QueueNotFoundError``...), nothing created.
        """
        caps = [] if queue.startswith((ANYCAST, MULTICAST)) or "::" in queue else ["queue"]
        return self._receiver(queue, caps, window, prefetch, selector, False, None)

    def create_subscriber(self, address: str, subscription: Optional[str] = None, *,
                          durable: bool = False, shared: bool = False,
                          selector: Optional[str] = None, window: int = DEFAULT_WINDOW,
                          prefetch: int = 0) -> RemoteConsumer:
        """A topic subscriber on multicast address ``address`` (as
        ``Session.create_subscriber``). A durable one's queue is ``<client id>.<subscription>``
        (the client id is ``connect``'s); a durable or shared one needs a name."""
        if (durable or shared) and not subscription:
            raise InvalidArgumentError("subscription", "a durable or shared subscription "
                                       "needs a name")
        caps = ["topic"] + (["shared"] if shared else [])
        return self._receiver(address, caps, window, prefetch, selector, durable,
                              subscription)

    def ack_many(self, deliveries: Sequence[RemoteDelivery]) -> None:
        """Ack each of ``deliveries`` (as ``Session.ack_many``), in one step of the client's
        loop.

        Raises:
            IllegalStateError: one of them is settled already (none is acked then).
        """
        ds = list(deliveries)

        async def ack_all() -> None:
            for d in ds:
                if d.state != "delivered":
                    raise IllegalStateError(f"a delivery is {d.state} already")
            confirms = [d._consumer._settle_here(d, Transfer.ACCEPTED, "acked") for d in ds]
            waiting = [c for c in confirms if c is not None]
            if waiting:
                await asyncio.gather(*waiting)
        self._loop.run(ack_all())

    def close(self) -> None:
        """Close the session: its consumers' unsettled messages go back. Safe to call
        twice."""
        if self.closed:
            return
        for c in self.consumers:
            c.close()
        self.closed = True

        def step() -> None:
            for sender in self._senders.values():
                self._client.links.pop(sender.link, None)
                if sender.link.state & Link.LOCAL_ACTIVE:
                    sender.link.close()
            if self._ssn.state & self._ssn.LOCAL_ACTIVE:
                self._ssn.close()
            self._client.wire.pump()
        if self._client.lost is None:
            self._loop.call(step)

    def __enter__(self) -> "RemoteSession":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class RemoteBroker:
    """A served store, as ``connect`` returns it: ``session()`` and ``close()``, as a
    ``Broker`` has them.

    Attributes:
        url: where it is served. client_id: this connection's AMQP container id (the
            client id of its durable subscriptions).
    """

    def __init__(self, url: str, client_id: Optional[str], timeout: float,
                 heartbeat: Optional[float] = None) -> None:
        parsed = urlparse(url) if isinstance(url, str) else urlparse("")
        host = parsed.hostname
        if parsed.scheme != "amqp" or not host:
            raise InvalidArgumentError("url", f"{url!r}: give amqp://host:port")
        self.url = url
        self.client_id = client_id or f"mqstore-{uuid.uuid4()}"
        self._loop = _Loop()
        holder: List[_Client] = []

        def factory(wire: ProtonWire) -> _Client:
            client = _Client(wire, self._loop.loop)
            if heartbeat:
                wire.transport.idle_timeout = heartbeat
            wire.connection.container = self.client_id
            wire.connection.hostname = host
            wire.connection.open()
            holder.append(client)
            return client

        async def dial() -> None:
            await self._loop.loop.create_connection(lambda: ProtonWire(False, factory),
                                                    host, parsed.port or 5672)
        try:
            asyncio.run_coroutine_threadsafe(dial(), self._loop.loop).result(timeout)
            self._client = holder[0]
            self._loop.wait(self._client.opened, timeout)
        except (OSError, asyncio.TimeoutError, TimeoutError) as exc:
            self._loop.stop()
            raise ConnectionLostError(f"cannot connect to {url}: {exc or 'no answer'}",
                                      hint="is `mqstore serve` running there?") from None
        except MqStoreError:
            self._loop.stop()
            raise
        self.closed = False
        self.sessions: List[RemoteSession] = []

    def session(self, transacted: bool = False, block_on_acknowledge: bool = False
                ) -> RemoteSession:
        """A new session (as ``Broker.session``). With ``block_on_acknowledge``, ``ack``,
        ``reject``, ``release`` and ``ack_many`` return once the server has the outcome
        durable (its receiver links ask for AMQP's receiver-settle-mode ``second``: the server
        settles after the fsync); else once the outcome is written to the socket.

        Raises:
            InvalidArgumentError: ``transacted`` asked for (not available over a served
            connection yet). IllegalStateError: closed.
        """
        if transacted:
            raise InvalidArgumentError("transacted", "transactions over a served store are "
                                       "not available yet")
        if self.closed:
            raise IllegalStateError("the connection is closed")
        s = RemoteSession(self, bool(block_on_acknowledge))
        self.sessions.append(s)
        return s

    def close(self) -> None:
        """Close every session and the connection, and wait (up to ``CONNECT_TIMEOUT``
        seconds) for the server's answer: the acks and outcomes sent before have taken effect
        then. Safe to call twice."""
        if self.closed:
            return
        self.closed = True
        for s in self.sessions:
            try:
                s.close()
            except MqStoreError:
                pass

        def step() -> None:
            conn = self._client.wire.connection
            if conn.state & conn.LOCAL_ACTIVE:
                conn.close()
            self._client.wire.pump()
        try:
            self._loop.call(step, CONNECT_TIMEOUT)
            self._loop.wait(self._client.finished, CONNECT_TIMEOUT)
        except (asyncio.TimeoutError, TimeoutError):
            pass  # the server did not answer: what it had not applied, it gives back
        finally:
            self._loop.stop()

    def __enter__(self) -> "RemoteBroker":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def connect(url: str, client_id: Optional[str] = None, timeout: float = CONNECT_TIMEOUT,
            heartbeat: Optional[float] = None) -> RemoteBroker:
    """Connect to a store served by ``mqstore serve`` (or ``mqstore.serve``) at ``url``
    (``amqp://host:port``) with SASL ANONYMOUS.

    Args:
        client_id: the AMQP container id (the client id of durable subscriptions); default a
            new UUID.
        timeout: seconds to wait for the connection.
        heartbeat: seconds of silence from the server after which the connection counts as
            lost (AMQP's idle timeout: the server is asked for a frame at least every half of
            it, and sends one while idle); ``None``: never.

    Raises:
        ConnectionLostError: nothing answers at ``url``. InvalidArgumentError: a bad URL.
    """
    return RemoteBroker(url, client_id, timeout, heartbeat)
