"""A store served over AMQP 1.0 (``mqstore.serve``, ``mqstore serve``) and used from another
connection or process (``mqstore.connect``, a plain qpid-proton client): real sockets on
127.0.0.1, what a client can observe."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Iterator, Tuple

import pytest
from proton import Message as AmqpMessage
from proton.utils import BlockingConnection

from mqstore import (AddressNotFoundError, AddressSettings, Broker, IllegalStateError,
                     InvalidArgumentError, Message, QueueConfig, QueueNotFoundError,
                     RoutingType, connect, serve)
from mqstore.tools.serve import LISTENER_FILE, ServeError
from tests.waiting import PATIENCE, wait_for


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Tuple[Broker, str]]:
    """An open store with an anycast queue ``orders``, served on a free port."""
    broker = Broker.open(str(tmp_path / "store"), expiry_scan_ms=0)
    broker.create_address("orders", routing_types={RoutingType.ANYCAST})
    broker.create_queue(QueueConfig("orders", "orders", routing_type=RoutingType.ANYCAST))
    server = serve(broker, "127.0.0.1:0", anonymous=True)
    try:
        yield broker, server.url
    finally:
        server.stop()
        broker.close()


def test_a_message_goes_through_with_its_fields(served: Tuple[Broker, str]) -> None:
    broker, url = served
    with connect(url) as remote, remote.session() as s:
        s.send("orders", Message(b"body", {"k": 1, "s": "v", "f": 1.5, "b": True, "n": None},
                                 priority=7, expiration=4_102_444_800_000,
                                 timestamp=1_700_000_000_000, group_id="g1"))
        assert broker.queue_info("orders").message_count == 1  # durable before send returned
        d = s.create_consumer("orders").receive(PATIENCE)
        assert d is not None
        m = d.message
        assert (m.body, m.priority, m.expiration, m.timestamp, m.group_id) == \
            (b"body", 7, 4_102_444_800_000, 1_700_000_000_000, "g1")
        assert {k: v for k, v in m.properties.items() if not k.startswith("_AMQ_")} == \
            {"k": 1, "s": "v", "f": 1.5, "b": True, "n": None}
        assert m.message_id > 0 and d.delivery_count == 1 and not d.redelivered
        d.ack()
    wait_for(lambda: broker.queue_info("orders").message_count == 0, "the ack taken")


def test_release_redelivers_with_its_count_and_reject_dead_letters(
        served: Tuple[Broker, str]) -> None:
    broker, url = served
    broker.create_address("DLQ", routing_types={RoutingType.ANYCAST})
    broker.create_queue(QueueConfig("DLQ", "DLQ", routing_type=RoutingType.ANYCAST))
    broker.set_address_settings("orders", AddressSettings(dead_letter_address="DLQ"))
    with connect(url) as remote, remote.session() as s:
        s.send_many("orders", [Message(b"a"), Message(b"b")])
        c = s.create_consumer("orders", window=1)
        first = c.receive(PATIENCE)
        assert first is not None and first.message.body == b"a"
        first.release()
        again = c.receive(PATIENCE)
        assert again is not None and again.message.body == b"a"
        assert again.delivery_count == 2 and again.redelivered
        again.reject()
        second = c.receive(PATIENCE)
        assert second is not None and second.message.body == b"b"
        second.ack()
    wait_for(lambda: broker.queue_info("DLQ").message_count == 1, "the rejected one in DLQ")
    with broker.session() as es:
        dead = es.create_consumer("DLQ").receive(PATIENCE)
        assert dead is not None and dead.message.body == b"a"


def test_acks_that_wait_return_once_the_server_has_them_durable(
        served: Tuple[Broker, str]) -> None:
    """``block_on_acknowledge=True`` over the wire: the receiver link asks for AMQP's
    receiver-settle-mode ``second`` and the server settles each outcome after its fsync, so
    when ``ack`` returns the message has left the queue (no waiting for it here)."""
    broker, url = served
    with connect(url) as remote, remote.session(block_on_acknowledge=True) as s:
        s.send_many("orders", [Message(b"%d" % i) for i in range(4)])
        c = s.create_consumer("orders")
        d = c.receive(PATIENCE)
        assert d is not None
        d.ack()
        assert broker.queue_info("orders").message_count == 3
        rest = []
        while len(rest) < 3:
            rest += c.receive_many(3 - len(rest), PATIENCE)
        s.ack_many(rest)
        assert broker.queue_info("orders").message_count == 0
        with pytest.raises(IllegalStateError):
            d.ack()


def test_refusals_come_back_as_the_same_errors_and_the_server_goes_on(
        served: Tuple[Broker, str]) -> None:
    broker, url = served
    with connect(url) as remote, remote.session() as s:
        with pytest.raises(AddressNotFoundError, match="nowhere"):
            s.send("nowhere", Message(b"x"))
        with pytest.raises(InvalidArgumentError):
            s.send("orders", Message(b"x", priority=12))  # checked before it is sent
        with pytest.raises((QueueNotFoundError, AddressNotFoundError)):
            s.create_consumer("orders::nope")
        s.send("orders", Message(b"fine"))  # the same session goes on
    assert broker.queue_info("orders").message_count == 1
    with pytest.raises(AddressNotFoundError):
        broker.address_info("nowhere")


def test_bad_selectors_and_too_many_links_are_refused_and_the_rest_goes_on(
        served: Tuple[Broker, str], monkeypatch: pytest.MonkeyPatch) -> None:
    from mqstore import FilterSyntaxError, ResourceLimitError
    from mqstore.tools.serve import server as server_module
    monkeypatch.setattr(server_module, "MAX_LINKS", 3)
    broker, url = served
    with connect(url) as remote, remote.session() as s:
        with pytest.raises(FilterSyntaxError):
            s.create_consumer("orders", selector="color = ")
        s.send("orders", Message(b"x"))  # a sender link: 1
        c = s.create_consumer("orders")  # 2
        s.create_consumer("orders")  # 3
        with pytest.raises(ResourceLimitError, match="links"):
            s.create_consumer("orders")
        d = c.receive(PATIENCE)
        assert d is not None and d.message.body == b"x"
        d.ack()


CLIENT = """
import sys
from mqstore import connect
remote = connect(sys.argv[1])
c = remote.session().create_consumer("orders")
got = []
while len(got) < 3:
    got += c.receive_many(3 - len(got), 120)
got[0].ack()
print("took", flush=True)
sys.stdin.read()  # killed here
"""


def test_what_a_killed_client_had_not_settled_goes_back(served: Tuple[Broker, str]) -> None:
    broker, url = served
    with broker.session() as es:
        es.send_many("orders", [Message(b"%d" % i) for i in range(3)])
    child = subprocess.Popen([sys.executable, "-c", CLIENT, url], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "took"
        wait_for(lambda: broker.queue_info("orders").message_count == 2, "the first ack")
        assert broker.queue_info("orders").delivering_count == 2
        child.kill()  # no AMQP close: the socket drops
        child.wait(PATIENCE)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(PATIENCE)
    wait_for(lambda: broker.queue_info("orders").delivering_count == 0,
             "the killed client's deliveries back on the queue")
    with broker.session() as es:
        back = es.create_consumer("orders").receive_many(2, PATIENCE)
        assert sorted(d.message.body for d in back) == [b"1", b"2"]
        assert all(d.delivery_count == 2 for d in back)


def test_topic_subscriptions_and_selectors(served: Tuple[Broker, str]) -> None:
    broker, url = served
    broker.create_address("news", routing_types={RoutingType.MULTICAST})
    with connect(url, client_id="app1") as remote, remote.session() as s:
        durable = s.create_subscriber("news", "sub", durable=True)
        picky = s.create_consumer("multicast://news", selector="kind = 'sport'")
        assert broker.queue_info("app1.sub").durable  # Artemis's container-id.link-name
        s.send("news", Message(b"weather", {"kind": "weather"}))
        s.send("news", Message(b"match", {"kind": "sport"}))
        got = [durable.receive(PATIENCE), durable.receive(PATIENCE)]
        assert [d.message.body for d in got if d is not None] == [b"weather", b"match"]
        only = picky.receive(PATIENCE)
        assert only is not None and only.message.body == b"match"
        s.ack_many([d for d in got if d is not None] + [only])
        durable.close()
    with broker.session() as es:
        es.send("news", Message(b"while away"))
    # durable: kept while away (the two acked ones gone)
    assert broker.queue_info("app1.sub").message_count == 1


def test_a_plain_proton_client_as_artemis_clients_use_it(served: Tuple[Broker, str]) -> None:
    """qpid-proton's own blocking client, no mqstore code: a string body and a queue
    capability, an FQQN receiver."""
    broker, url = served
    conn = BlockingConnection(url.replace("amqp://", ""), timeout=PATIENCE)
    try:
        sender = conn.create_sender("orders")
        sender.send(AmqpMessage(body="text body", properties={"n": 3}, durable=True))
        receiver = conn.create_receiver("orders::orders", credit=1)
        got = receiver.receive(timeout=PATIENCE)
        assert got.body == "text body" and got.properties == {"n": 3}
        assert got.durable and got.delivery_count == 0
        receiver.accept()
    finally:
        conn.close()
    wait_for(lambda: broker.queue_info("orders").message_count == 0, "the accept taken")


def test_a_transaction_is_refused_as_not_implemented(served: Tuple[Broker, str]) -> None:
    """A client that attaches to the AMQP transaction coordinator (to declare a transaction)
    is told it is not implemented; its connection goes on."""
    from proton import Terminus
    from proton.reactor import LinkOption
    from proton.utils import LinkDetached

    class Coordinator(LinkOption):  # type: ignore[misc]
        def apply(self, link: Any) -> None:
            link.target.type = Terminus.COORDINATOR

    broker, url = served
    conn = BlockingConnection(url.replace("amqp://", ""), timeout=PATIENCE)
    try:
        with pytest.raises(LinkDetached) as refused:
            conn.create_sender(None, options=Coordinator())
        assert refused.value.condition == "amqp:not-implemented"
        assert "not available" in str(refused.value)
        conn.create_sender("orders").send(AmqpMessage(body=b"after"))
    finally:
        conn.close()
    assert broker.queue_info("orders").message_count == 1


def test_an_idle_connection_is_kept_alive_by_the_servers_empty_frames(
        served: Tuple[Broker, str]) -> None:
    """A client that asks for a 1 s idle timeout gets the server's empty frames while nothing
    else happens (proton's timer, ``ProtonWire._tick``), and its connection stays usable."""
    broker, url = served
    with connect(url, heartbeat=1.0) as remote, remote.session() as s:
        transport = remote._client.wire.transport
        seen = transport.frames_input
        wait_for(lambda: transport.frames_input >= seen + 4, "four empty frames while idle")
        s.send("orders", Message(b"still here"))
    assert broker.queue_info("orders").message_count == 1


def test_a_client_that_goes_silent_is_dropped_and_gives_back(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A client whose process hangs (its event loop blocked: no frames, not even empty ones)
    is dropped after the server's idle timeout, and what it held goes back to the queue."""
    from mqstore.tools.serve import server as server_module
    monkeypatch.setattr(server_module, "IDLE_TIMEOUT_S", 1.0)
    broker = Broker.open(str(tmp_path / "store"), expiry_scan_ms=0)
    hang = threading.Event()
    try:
        broker.create_address("orders", routing_types={RoutingType.ANYCAST})
        broker.create_queue(QueueConfig("orders", "orders", routing_type=RoutingType.ANYCAST))
        with broker.session() as es:
            es.send("orders", Message(b"held"))
        with serve(broker, "127.0.0.1:0", anonymous=True) as server:
            remote = connect(server.url)
            assert remote.session().create_consumer("orders").receive(PATIENCE) is not None
            assert broker.queue_info("orders").delivering_count == 1
            remote._loop.loop.call_soon_threadsafe(hang.wait)  # the client hangs
            wait_for(lambda: broker.queue_info("orders").delivering_count == 0,
                     "the silent client dropped and its delivery back")
            hang.set()
            remote.close()
    finally:
        hang.set()
        broker.close()


def test_serve_refuses_without_a_mechanism_or_on_a_taken_port(tmp_path: Path) -> None:
    broker = Broker.open(str(tmp_path / "store"), expiry_scan_ms=0)
    try:
        with pytest.raises(InvalidArgumentError, match="anonymous"):
            serve(broker, "127.0.0.1:0")
        with pytest.raises(InvalidArgumentError, match="listen"):
            serve(broker, "nohost", anonymous=True)
        taken = socket.socket()
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        try:
            with pytest.raises(ServeError):
                serve(broker, f"127.0.0.1:{taken.getsockname()[1]}", anonymous=True)
        finally:
            taken.close()
        with broker.session() as s:  # the broker is unharmed
            broker.create_address("x")
            s.send("x", Message(b"ok"))
    finally:
        broker.close()


def _mqstore(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "mqstore.tools.cli", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_the_serve_command_needs_anonymous_and_creates_nothing_without_it(
        tmp_path: Path) -> None:
    proc = _mqstore("serve", str(tmp_path / "new"), "--listen", "127.0.0.1:0")
    _out, err = proc.communicate(timeout=PATIENCE)
    assert proc.returncode == 2 and "--anonymous" in err
    assert not (tmp_path / "new").exists()


def test_settled_sends_survive_kill_9_of_the_serving_process(tmp_path: Path) -> None:
    """What the server settled was durable: SIGKILL the ``mqstore serve`` process after a
    client's sends and waiting acks returned, and at the next open every send is in the store
    and every such ack has taken its message away."""
    store = tmp_path / "store"
    with Broker.open(str(store), expiry_scan_ms=0) as b:
        b.create_address("jobs", routing_types={RoutingType.ANYCAST})
        b.create_queue(QueueConfig("jobs", "jobs", routing_type=RoutingType.ANYCAST))
    proc = _mqstore("serve", str(store), "--listen", "127.0.0.1:0", "--anonymous")
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # printed once it listens
        assert "serving" in line, (line, proc.stderr.read() if proc.poll() is not None else "")
        url = line.split(" on ")[1].split(" ")[0]
        listener = json.loads((store / LISTENER_FILE).read_text())
        assert listener == {"url": url, "pid": proc.pid}
        remote = connect(url)
        s = remote.session()
        sent = 0
        for i in range(20):
            s.send_many("jobs", [Message(b"%d" % (i * 10 + k)) for k in range(10)])
            sent += 10
        acking = remote.session(block_on_acknowledge=True)  # acks that return once durable
        taken = acking.create_consumer("jobs", window=50).receive_many(50, PATIENCE)
        acking.ack_many(taken)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(PATIENCE)
        remote.close()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(PATIENCE)
    with Broker.open(str(store), expiry_scan_ms=0) as b:
        assert b.queue_info("jobs").message_count == sent - len(taken)


def test_the_serve_command_stops_on_sigterm_and_closes_the_store(tmp_path: Path) -> None:
    store = tmp_path / "store"
    proc = _mqstore("serve", str(store), "--listen", "127.0.0.1:0", "--anonymous")
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert "serving" in line
    url = line.split(" on ")[1].split(" ")[0]
    with connect(url) as remote, remote.session() as s:
        with pytest.raises(AddressNotFoundError):
            s.send("missing", Message(b"x"))
    proc.send_signal(signal.SIGTERM)
    out, _err = proc.communicate(timeout=PATIENCE)
    assert proc.returncode == 0 and "store is closed" in out
    assert not (store / LISTENER_FILE).exists()
    Broker.open(str(store), expiry_scan_ms=0).close()  # not locked, opens clean
