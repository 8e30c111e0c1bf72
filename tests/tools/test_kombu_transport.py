"""The kombu transport (issue 17): ``kombu.Connection("mqstore:///dir")`` and a Celery worker on
it with no server. A message taken and not acked is in delivery in mqstore, so a closed channel,
a requeue and a killed process all give it back, redelivered; an ack is mqstore's durable ack."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("kombu")
pytest.importorskip("celery")

from kombu import Connection  # noqa: E402

import mqstore.kombu  # noqa: E402  (registers mqstore://)
from mqstore.engine import Broker  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def url(d: Path) -> str:
    return f"mqstore://{d}"


def test_put_get_ack_and_what_is_not_acked_comes_back(tmp_path: Path) -> None:
    d = tmp_path / "s"
    with Connection(url(d)) as conn:
        q = conn.SimpleQueue("jobs")
        for n in range(3):
            q.put({"n": n})
        m = q.get(timeout=1)
        assert m.payload == {"n": 0} and not m.delivery_info.get("redelivered")
        m.ack()
        m = q.get(timeout=1)
        assert m.payload == {"n": 1}  # taken, never acked
        m = q.get(timeout=1)
        m.reject(requeue=True)  # back at once
        q.close()
    with Broker.open(str(d)) as b:  # the store holds both, durably; no connection is open
        assert b.queue_info("jobs").message_count == 2
    with Connection(url(d)) as conn:
        q = conn.SimpleQueue("jobs")
        got = [q.get(timeout=1) for _ in range(2)]
        assert sorted(m.payload["n"] for m in got) == [1, 2]
        assert all(m.delivery_info.get("redelivered") for m in got)
        got[0].reject()  # not requeued: gone (no dead-letter address is set)
        got[1].ack()
        assert q.qsize() == 0
        q.close()


def test_no_ack_consumers_and_purge(tmp_path: Path) -> None:
    with Connection(url(tmp_path / "s")) as conn:
        q = conn.SimpleQueue("a", no_ack=True)
        q.put("x")
        q.put("y")
        assert q.get(timeout=1).payload == "x"
        assert q.qsize() == 1
        assert q.clear() == 1
        q.close()
    with Broker.open(str(tmp_path / "s")) as b:
        assert b.queue_info("a").message_count == 0


@pytest.mark.parametrize("persist", [False, True])
def test_a_killed_consumer_process_loses_nothing(tmp_path: Path, persist: bool) -> None:
    """Never lost; flagged redelivered when the store journals each delivery before hand-out
    (a transport option), else back with the count of its last return (the default)."""
    d = tmp_path / "s"
    options = {"open": {"persist_delivery_count_before_delivery": True}} if persist else {}
    with Connection(url(d)) as conn:
        q = conn.SimpleQueue("jobs")
        q.put({"n": 7})
        q.close()
    child = textwrap.dedent(f"""
        import os, signal, sys
        import mqstore.kombu
        from kombu import Connection
        conn = Connection({url(d)!r}, transport_options={options!r})
        m = conn.SimpleQueue("jobs").get(timeout=5)
        print(m.payload["n"], flush=True)
        os.kill(os.getpid(), signal.SIGKILL)  # mid-task, never acked
    """)
    got = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True,
                         timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert got.returncode == -signal.SIGKILL and got.stdout.strip() == "7", got.stderr
    with Connection(url(d)) as conn:
        q = conn.SimpleQueue("jobs")
        m = q.get(timeout=1)
        assert m.payload == {"n": 7} and bool(m.delivery_info.get("redelivered")) == persist
        m.ack()
        q.close()


def test_a_celery_task_round_trip_with_a_worker_retries_and_acks_late(tmp_path: Path) -> None:
    from celery import Celery
    from celery.contrib.testing.worker import start_worker

    app = Celery("mqstore-test", broker=url(tmp_path / "s"), backend="cache+memory://",
                 set_as_current=False)
    app.conf.update(task_acks_late=True, worker_enable_remote_control=False,
                    worker_send_task_events=False, broker_connection_retry_on_startup=True)
    runs = []

    @app.task(bind=True, max_retries=3)
    def add(self, x: int, y: int) -> int:  # type: ignore[no-untyped-def]
        runs.append(self.request.retries)
        if self.request.retries < 2:
            raise self.retry(countdown=0)
        return x + y

    with start_worker(app, pool="solo", perform_ping_check=False, shutdown_timeout=10):
        assert add.delay(2, 3).get(timeout=30) == 5
    assert runs == [0, 1, 2]
    app.close()
    assert mqstore.kombu.close_stores() == 1  # (Celery keeps a connection of its own)
    with Broker.open(str(tmp_path / "s")) as b:  # every attempt acked: nothing left
        assert b.queue_info("celery").message_count == 0


POISON = [b"\xff\xfe not utf-8", b"plain text", b"[1, 2]", b'{"properties": 3, "body": "x"}',
          b'{"body": "!!", "properties": {"body_encoding": "base64"}}']


@pytest.mark.parametrize("dead_letters", [False, True])
def test_messages_that_are_not_kombu_messages_are_set_aside_and_consumption_goes_on(
        tmp_path: Path, dead_letters: bool) -> None:
    """Issue 36 item 2: one message on a kombu queue that another client sent (or that is
    damaged) raised in ``Channel._get``; the worker died on it, the message went back to the
    head and every restarted worker died on it too. Now it goes to the queue's dead-letter
    rules (a dead-letter address with a queue), or to ``<queue>.undecodable`` when there are
    none, and the kombu messages behind it are delivered."""
    from mqstore.engine import AddressSettings, Message, QueueConfig, RoutingType
    d = tmp_path / "s"
    with Connection(url(d)) as conn:
        q = conn.SimpleQueue("jobs")
        q.put({"n": 0})
        q.close()
    with Broker.open(str(d)) as b:
        if dead_letters:
            b.create_address("DLQ", {RoutingType.ANYCAST})
            b.create_queue(QueueConfig("DLQ", "DLQ", RoutingType.ANYCAST))
            b.set_address_settings("jobs", AddressSettings(dead_letter_address="DLQ"))
        with b.session() as s:
            for body in POISON:
                s.send("jobs", Message(body, {"from": "elsewhere"}))
    with Connection(url(d)) as conn:
        q = conn.SimpleQueue("jobs")
        q.put({"n": 1})
        got = [q.get(timeout=5) for _ in range(2)]
        assert [m.payload for m in got] == [{"n": 0}, {"n": 1}]
        for m in got:
            m.ack()
        assert q.qsize() == 0
        q.close()
    aside = "DLQ" if dead_letters else "jobs.undecodable"
    with Broker.open(str(d)) as b:
        assert b.queue_info("jobs").message_count == 0
        with b.session() as s:
            kept = [m.message for m in s.create_browser(aside)]
        assert [m.body for m in kept] == POISON  # in order, every byte kept
        assert all(m.properties["from"] == "elsewhere" and
                   m.properties["_AMQ_ORIG_QUEUE"] == "jobs" for m in kept)
