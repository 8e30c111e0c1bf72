"""RabbitMQ as a peer of ``mqstore bench e2e``: a private server started and stopped by the
bench, and the workloads the broker is measured against (issue 16).

The bench installs nothing. It uses RabbitMQ when a ``rabbitmq-server`` script is on the machine
(Debian's package: ``apt-get install rabbitmq-server``) and pika is importable
(``pip install 'mqstore[bench]'``); otherwise RabbitMQ is named as not measured.

The private server: its own node name, AMQP and distribution ports (free ones, on 127.0.0.1),
data and log directories under the bench's directory (so on the disk being measured), no
plugins, no configuration file of the machine's, and ``HOME`` there too (the Erlang cookie).
It is stopped with SIGTERM (Erlang's orderly stop), then SIGKILL after 30 s. If the Erlang port
mapper (epmd) was not running before, the one the server started is stopped too.

Workloads (durable queue, persistent 1 KiB messages):

- ``one``: publish with a publisher confirm waited for each message, ``basic.get``, ``basic.ack``
  (the issue's "confirm each");
- ``window``: one publisher keeping at most 100 unconfirmed messages in flight, and one consumer
  with prefetch 100 acking each message (the issue's "confirm window 100"); the figure counts
  acked messages; without the consumer, confirmed ones (``send``).

RabbitMQ's acks have no confirm: an ack is done for the client once written to the socket, as
with mqstore's default ``block_on_acknowledge=False``. CPU figures are the bench process's tree,
which includes the server (the bench's child), so they are the whole system's CPU per message.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from typing import List, Optional, Set

from .proctree import Timed

WINDOW = 100
QUEUE = "bench"
_LIB_SERVER = "/usr/lib/rabbitmq/bin/rabbitmq-server"  # Debian's, without the su wrapper


def server_script() -> Optional[str]:
    """The ``rabbitmq-server`` script to start, or ``None``. ``$MQSTORE_RABBITMQ_SERVER``
    first; then Debian's library copy when running as root (``/usr/sbin``'s wrapper would
    switch to the ``rabbitmq`` user and its machine-wide files); then ``rabbitmq-server`` on
    ``PATH``."""
    env = os.environ.get("MQSTORE_RABBITMQ_SERVER")
    if env:
        return env if os.access(env, os.X_OK) else None
    if os.path.exists(_LIB_SERVER) and hasattr(os, "geteuid") and os.geteuid() == 0:
        return _LIB_SERVER
    return shutil.which("rabbitmq-server")


def missing_reason() -> Optional[str]:
    """Why RabbitMQ cannot be measured here (``None``: it can)."""
    try:
        import pika  # noqa: F401
    except ImportError:
        return "pika is not installed"
    if server_script() is None:
        return "rabbitmq-server is not installed"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), 0.5).close()
        return True
    except OSError:
        return False


class RabbitServer:
    """A private RabbitMQ node, as a context manager: ``with RabbitServer(d) as port``.

    ``directory``: an empty directory for its data, logs and cookie (left in place; the caller
    removes it). Entering waits until the AMQP port accepts connections (at most
    ``start_timeout`` seconds) and raises ``RuntimeError`` with the end of the server's output
    if it exits or does not listen in time (the server is stopped first)."""

    def __init__(self, directory: str, start_timeout: float = 90.0) -> None:
        self.directory = directory
        self.start_timeout = start_timeout
        self.port = _free_port()
        self.process: Optional[subprocess.Popen] = None
        self._epmd_was_up = _listening(4369)

    def __enter__(self) -> int:
        script = server_script()
        if script is None:
            raise RuntimeError("rabbitmq-server is not installed")
        d = self.directory
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "enabled_plugins"), "w") as f:
            f.write("[].\n")
        env = dict(os.environ, HOME=d,
                   RABBITMQ_NODENAME=f"mqstore-bench-{os.getpid()}@localhost",
                   RABBITMQ_NODE_IP_ADDRESS="127.0.0.1",
                   RABBITMQ_NODE_PORT=str(self.port),
                   RABBITMQ_DIST_PORT=str(_free_port()),
                   RABBITMQ_MNESIA_BASE=os.path.join(d, "mnesia"),
                   RABBITMQ_LOG_BASE=os.path.join(d, "log"),
                   RABBITMQ_PID_FILE=os.path.join(d, "pid"),
                   RABBITMQ_ENABLED_PLUGINS_FILE=os.path.join(d, "enabled_plugins"),
                   RABBITMQ_CONFIG_FILE=os.path.join(d, "none"),
                   RABBITMQ_ADVANCED_CONFIG_FILE=os.path.join(d, "none.config"),
                   RABBITMQ_CONF_ENV_FILE=os.path.join(d, "none.env"))
        self._out = open(os.path.join(d, "server.out"), "wb")
        self.process = subprocess.Popen([script], env=env, cwd=d, stdout=self._out,
                                        stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                        start_new_session=True)
        deadline = time.monotonic() + self.start_timeout
        while not _listening(self.port):
            if self.process.poll() is not None or time.monotonic() > deadline:
                tail = self._tail()
                self.__exit__()
                raise RuntimeError(f"RabbitMQ did not start: {tail}")
            time.sleep(0.2)
        return self.port

    def _tail(self) -> str:
        try:
            with open(os.path.join(self.directory, "server.out"), "rb") as f:
                return f.read()[-600:].decode(errors="replace").strip()
        except OSError:
            return ""

    def __exit__(self, *exc: object) -> None:
        p = self.process
        if p is not None and p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGTERM)
                p.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
            except ProcessLookupError:
                pass
        self._out.close()
        if not self._epmd_was_up and shutil.which("epmd"):
            subprocess.run(["epmd", "-kill"], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, check=False)


def _fresh_queue(channel: object) -> None:
    channel.queue_delete(QUEUE)  # type: ignore[attr-defined]
    channel.queue_declare(QUEUE, durable=True)  # type: ignore[attr-defined]


def rabbit_one(port: int, n: int, body: bytes) -> "tuple[int, Timed]":
    """Publish (confirm waited for), ``basic.get``, ack, ``n`` times on one connection.
    Returns (messages, timer). Raises ``RuntimeError`` if a published message is not there."""
    import pika
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
    try:
        ch = conn.channel()
        _fresh_queue(ch)
        ch.confirm_delivery()
        props = pika.BasicProperties(delivery_mode=2)
        with Timed() as t:
            for _ in range(n):
                ch.basic_publish("", QUEUE, body, props)
                method, _, _ = ch.basic_get(QUEUE)
                if method is None:
                    raise RuntimeError("a confirmed message was not in RabbitMQ's queue")
                ch.basic_ack(method.delivery_tag)
    finally:
        conn.close()
    return n, t


class ConfirmWindow:
    """Publisher confirms with at most ``window`` unconfirmed messages in flight: ``sent`` and
    ``pending`` delivery tags (1, 2, ... per channel); a confirm with ``multiple`` settles every
    tag up to its own (AMQP 0-9-1's publisher confirms)."""

    def __init__(self, window: int) -> None:
        self.window = window
        self.sent = 0
        self.pending: Set[int] = set()

    def room(self) -> int:
        return self.window - len(self.pending)

    def published(self) -> None:
        self.sent += 1
        self.pending.add(self.sent)

    def confirmed(self, tag: int, multiple: bool) -> None:
        if multiple:
            self.pending = {p for p in self.pending if p > tag}
        else:
            self.pending.discard(tag)

    @property
    def settled(self) -> int:
        return self.sent - len(self.pending)


def rabbit_window(port: int, n: int, body: bytes, consume: bool,
                  timeout: float = 600.0) -> "tuple[int, Timed]":
    """One publisher with a confirm window of 100 and, with ``consume``, one consumer with
    prefetch 100 acking each message, on one connection (pika's event loop). Returns (acked
    messages, or confirmed ones without ``consume``; timer). Raises ``RuntimeError`` on a
    negative confirm or when ``timeout`` seconds pass."""
    import pika
    from pika.spec import Basic

    props = pika.BasicProperties(delivery_mode=2)
    win = ConfirmWindow(WINDOW)
    acked = [0]
    failed: List[str] = []
    conn: List = []

    def done() -> bool:
        return win.settled >= n and (not consume or acked[0] >= n)

    def publish(ch: object) -> None:
        while win.sent < n and win.room() > 0:
            ch.basic_publish("", QUEUE, body, props)  # type: ignore[attr-defined]
            win.published()

    def on_confirm(frame: object, ch: object) -> None:
        m = frame.method  # type: ignore[attr-defined]
        if isinstance(m, Basic.Nack):
            failed.append("RabbitMQ refused a message (basic.nack)")
            conn[0].close()
            return
        win.confirmed(m.delivery_tag, m.multiple)
        if done():
            conn[0].close()
        else:
            publish(ch)

    def on_message(ch: object, method: object, _props: object, _body: bytes) -> None:
        ch.basic_ack(method.delivery_tag)  # type: ignore[attr-defined]
        acked[0] += 1
        if done():
            conn[0].close()

    def on_publisher(ch: object) -> None:
        ch.confirm_delivery(lambda f: on_confirm(f, ch))  # type: ignore[attr-defined]
        publish(ch)

    def on_consumer(ch: object) -> None:
        ch.basic_qos(prefetch_count=WINDOW,  # type: ignore[attr-defined]
                     callback=lambda _f: ch.basic_consume(QUEUE, on_message))  # type: ignore

    def on_open(c: object) -> None:
        c.channel(on_open_callback=on_publisher)  # type: ignore[attr-defined]
        if consume:
            c.channel(on_open_callback=on_consumer)  # type: ignore[attr-defined]

    setup = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
    _fresh_queue(setup.channel())
    setup.close()
    with Timed() as t:
        c = pika.SelectConnection(pika.ConnectionParameters("127.0.0.1", port),
                                  on_open_callback=on_open,
                                  on_open_error_callback=lambda _c, e: failed.append(str(e)),
                                  on_close_callback=lambda c, _e: c.ioloop.stop())
        conn.append(c)
        c.ioloop.call_later(timeout, lambda: (failed.append(f"not done in {timeout} s"),
                                              c.close()))
        c.ioloop.start()
    if failed:
        raise RuntimeError(failed[0])
    return (acked[0] if consume else win.settled), t

