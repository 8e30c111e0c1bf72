"""``mqstore bench serve``: a served store (``mqstore serve``, AMQP 1.0) beside RabbitMQ, both
networked on 127.0.0.1 and on the same disk, in one run (issue 39's fair comparison).

Shapes (durable queue, persistent 1 KiB messages):

- ``one``: one client sends a message and waits for its settlement (RabbitMQ: its publisher
  confirm), receives it and acks it, one at a time;
- ``window``: ``PRODUCERS`` producer processes, each with at most ``WINDOW`` messages in flight
  (mqstore: ``send_many`` of ``WINDOW`` messages, which returns once all are settled; RabbitMQ: a
  confirm window of ``WINDOW``), and ``CONSUMERS`` consumer processes with ``WINDOW`` messages of
  credit (RabbitMQ: prefetch ``WINDOW``), each acking what it gets. The figure counts acked
  messages, from the first send to the last ack.

Both servers are children of the bench (``mqstore serve`` started as a process, RabbitMQ as in
``bench e2e``), so the CPU figure is the whole system's per message: servers and clients. The
figures are ``bench e2e``'s ``E2EFigure``, its workload the shape.
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from typing import Any, Callable, List, Optional, Tuple

from mqstore.engine import Broker, Message, QueueConfig, RoutingType

from .e2e import E2EFigure
from .proctree import Timed

BODY = os.urandom(1024)
QUEUE = "bench"
WINDOW = 100
PRODUCERS = CONSUMERS = 4
IDLE_S = 0.5  # a consumer with nothing to take looks again whether all are acked after this


class ServedStore:
    """A fresh store with the durable anycast queue ``QUEUE``, served by an ``mqstore serve``
    child process on a free port; ``url`` once started. A context manager: the child gets
    SIGTERM (an orderly close) at the end."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.url = ""
        self._proc: Optional[subprocess.Popen] = None

    def __enter__(self) -> "ServedStore":
        with Broker.open(self.directory, expiry_scan_ms=0) as b:
            b.create_address(QUEUE, routing_types={RoutingType.ANYCAST})
            b.create_queue(QueueConfig(QUEUE, QUEUE, routing_type=RoutingType.ANYCAST))
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "mqstore.tools.cli", "serve", self.directory, "--listen",
             "127.0.0.1:0", "--anonymous"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True)
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline()  # printed once it listens
        if " on " not in line:
            err = self._proc.stderr.read() if self._proc.stderr else ""
            raise RuntimeError(f"mqstore serve did not start: {line}{err}")
        self.url = line.split(" on ")[1].split(" ")[0]
        return self

    def __exit__(self, *exc: object) -> None:
        if self._proc is not None:
            self._proc.terminate()
            try:
                self._proc.wait(60)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()


# -- mqstore's clients ------------------------------------------------------------------------
def mqstore_one(url: str, n: int) -> int:
    """Send (settled = durable), receive, ack, ``n`` times; returns ``n``."""
    from mqstore.tools.serve import connect
    with connect(url) as remote, remote.session() as s:
        c = s.create_consumer(QUEUE, window=1)
        for _ in range(n):
            s.send(QUEUE, Message(BODY))
            d = c.receive(30.0)
            if d is None:
                raise RuntimeError("a settled message was not delivered within 30 s")
            d.ack()
    return n


def _mqstore_producer(url: str, gate: Any, n: int) -> None:
    from mqstore.tools.serve import connect
    with connect(url) as remote, remote.session() as s:
        _ready(gate)
        for start in range(0, n, WINDOW):
            s.send_many(QUEUE, [Message(BODY) for _ in range(min(WINDOW, n - start))])


def _mqstore_consumer(url: str, gate: Any, acked: Any, total: int) -> None:
    from mqstore.tools.serve import connect
    with connect(url) as remote, remote.session() as s:
        c = s.create_consumer(QUEUE, window=WINDOW, prefetch=WINDOW - 1)
        _ready(gate)
        while acked.value < total:
            got = c.receive_many(WINDOW, IDLE_S)
            if got:
                s.ack_many(got)
                with acked.get_lock():
                    acked.value += len(got)


# -- RabbitMQ's clients -----------------------------------------------------------------------
def _rabbit_producer(port: int, gate: Any, n: int) -> None:
    """Publish ``n`` persistent messages with at most ``WINDOW`` unconfirmed."""
    import pika
    from pika.spec import Basic

    from .rabbitmq import ConfirmWindow
    win = ConfirmWindow(WINDOW)
    props = pika.BasicProperties(delivery_mode=2)
    failed: List[str] = []
    conn: List[Any] = []

    def publish(ch: Any) -> None:
        while win.sent < n and win.room() > 0:
            ch.basic_publish("", QUEUE, BODY, props)
            win.published()

    def on_confirm(frame: Any, ch: Any) -> None:
        if isinstance(frame.method, Basic.Nack):
            failed.append("RabbitMQ refused a message (basic.nack)")
            conn[0].close()
            return
        win.confirmed(frame.method.delivery_tag, frame.method.multiple)
        if win.settled >= n:
            conn[0].close()
        else:
            publish(ch)

    def on_channel(ch: Any) -> None:
        ch.confirm_delivery(lambda f: on_confirm(f, ch))
        _ready(gate)
        publish(ch)

    c = pika.SelectConnection(pika.ConnectionParameters("127.0.0.1", port),
                              on_open_callback=lambda c: c.channel(on_open_callback=on_channel),
                              on_open_error_callback=lambda _c, e: failed.append(str(e)),
                              on_close_callback=lambda c, _e: c.ioloop.stop())
    conn.append(c)
    c.ioloop.start()
    if failed:
        raise RuntimeError(failed[0])


def _rabbit_consumer(port: int, gate: Any, acked: Any, total: int) -> None:
    import pika
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
    try:
        ch = conn.channel()
        ch.basic_qos(prefetch_count=WINDOW)
        _ready(gate)
        for method, _props, _body in ch.consume(QUEUE, inactivity_timeout=IDLE_S):
            if method is not None:
                ch.basic_ack(method.delivery_tag)
                with acked.get_lock():
                    acked.value += 1
            if acked.value >= total:
                break
        ch.cancel()
    finally:
        conn.close()


def _ready(gate: Any) -> None:
    """A bench process is connected: count it, and wait until the clock runs."""
    ready, go = gate
    with ready.get_lock():
        ready.value += 1
    go.wait()


def _processes(producer: Callable[..., None], producer_args: Tuple[Any, ...],
               consumer: Callable[..., None], consumer_args: Tuple[Any, ...], n: int
               ) -> Tuple[int, Timed]:
    """``PRODUCERS`` processes each sending ``n // PRODUCERS`` messages and ``CONSUMERS``
    acking them all; returns (acked, timer). The clock starts once every process is connected
    (their start-up is not measured). Raises ``RuntimeError`` when a process fails."""
    ctx = multiprocessing.get_context("spawn")
    each = max(1, n // PRODUCERS)
    total = each * PRODUCERS
    acked = ctx.Value("q", 0)
    gate = (ctx.Value("i", 0), ctx.Event())
    procs = [ctx.Process(target=consumer, args=(*consumer_args, gate, acked, total))
             for _ in range(CONSUMERS)]
    procs += [ctx.Process(target=producer, args=(*producer_args, gate, each))
              for _ in range(PRODUCERS)]
    for p in procs:
        p.start()
    try:
        while gate[0].value < len(procs):  # every process connected, or one failed
            if any(p.exitcode not in (None, 0) for p in procs):
                raise RuntimeError("a bench process failed before it connected")
            gate[1].wait(0.05)
        with Timed() as t:
            gate[1].set()
            for p in procs:
                p.join()
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join()
    bad = [p.exitcode for p in procs if p.exitcode != 0]
    if bad:
        raise RuntimeError(f"a bench process failed (exit codes {bad})")
    return int(acked.value), t


@dataclass(frozen=True)
class ServeResult:
    """Every figure of one run, and the peers not measured (each "name (what to install)")."""

    figures: List[E2EFigure]
    missing: List[str]

    def get(self, shape: str, system: str) -> Optional[E2EFigure]:
        return next((f for f in self.figures if f.workload == shape and f.system == system),
                    None)


MQSTORE, RABBIT = "mqstore serve", "RabbitMQ"


def run(directory: Optional[str], messages: int, progress: Callable[[str], None]
        ) -> ServeResult:
    """Both shapes on both systems, each on fresh storage in a temporary directory under
    ``directory`` (removed after). ``messages``: the window shape's count; the one-at-a-time
    shape takes a tenth of it."""
    from .rabbitmq import RabbitServer, missing_reason, rabbit_one
    root = tempfile.mkdtemp(prefix="mqstore-serve-", dir=directory)
    one = max(50, messages // 10)
    figures: List[E2EFigure] = []
    missing: List[str] = []
    try:
        progress("mqstore serve, one at a time...")
        with ServedStore(os.path.join(root, "one")) as served, Timed() as t:
            done = mqstore_one(served.url, one)
        figures.append(E2EFigure("one", MQSTORE, done, t.wall, t.cpu))
        progress(f"mqstore serve, {PRODUCERS} producers + {CONSUMERS} consumers...")
        with ServedStore(os.path.join(root, "window")) as served:
            done, t = _processes(_mqstore_producer, (served.url,), _mqstore_consumer,
                                 (served.url,), messages)
        figures.append(E2EFigure("window", MQSTORE, done, t.wall, t.cpu))
        why = missing_reason()
        if why is not None:
            missing.append(f"RabbitMQ ({why}: apt-get install rabbitmq-server; "
                           f"pip install 'mqstore[bench]')")
        else:
            progress("RabbitMQ...")
            with RabbitServer(os.path.join(root, "rabbitmq")) as port:
                n1, t1 = rabbit_one(port, one, BODY)
                figures.append(E2EFigure("one", RABBIT, n1, t1.wall, t1.cpu))
                done, t = _processes(_rabbit_producer, (port,), _rabbit_consumer, (port,),
                                     messages)
                figures.append(E2EFigure("window", RABBIT, done, t.wall, t.cpu))
        return ServeResult(figures, missing)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def ratios(result: ServeResult) -> List[Tuple[str, Optional[float], float]]:
    """(name, mqstore's rate / RabbitMQ's or ``None`` when one is missing, issue 39's
    bound: at least)."""
    out = []
    for shape, what in (("one", "one at a time"),
                        ("window", f"{PRODUCERS} producers + {CONSUMERS} consumers, window "
                                   f"{WINDOW}")):
        a, b = result.get(shape, MQSTORE), result.get(shape, RABBIT)
        out.append((f"{what}: mqstore serve / RabbitMQ",
                    a.rate / b.rate if a is not None and b is not None and b.rate else None,
                    1.0))
    return out
