"""Destination parameters (seed 004 §4.9.2, §4.9.6.2, §4.11.1): ``name?key=value&...`` sets the
attributes of the queue created for that destination, as an Artemis JMS client's
``session.createQueue("my.destination.name?last-value-key=stock_ticker")`` does; bad
parameters are refused before anything is created."""

from __future__ import annotations

from pathlib import Path

import pytest

from mqstore.engine import (AddressSettings, Broker, InvalidArgumentError, InvalidNameError,
                            Message, QueueConfig, RoutingType)

AUTO = {"#": AddressSettings(auto_create_queues=True, auto_create_addresses=True,
                             default_address_routing_type=RoutingType.ANYCAST)}


def test_the_seed_examples_configure_the_auto_created_queue(tmp_path: Path) -> None:
    with Broker.open(str(tmp_path / "s"), address_settings=AUTO) as b, b.session() as s:
        s.create_consumer("prices?last-value-key=stock_ticker")
        assert b.queue_info("prices").last_value_key == "stock_ticker"
        s.create_consumer("quotes?last-value=true")
        assert b.queue_info("quotes").last_value_key == "_AMQ_LVQ_NAME"
        s.create_consumer("stock?last-value-key=stock_ticker&non-destructive=true")
        info = b.queue_info("stock")
        assert (info.last_value_key, info.non_destructive) == ("stock_ticker", True)
        s.create_consumer("orders?exclusive=true&max-consumers=2&ring-size=3")
        info = b.queue_info("orders")
        assert (info.exclusive, info.max_consumers, info.ring_size, info.auto_created) == \
            (True, 2, 3, True)
        for i in range(3):
            s.send("prices", Message(b"%d" % i, {"stock_ticker": "ACME"}))
        assert b.queue_info("prices").message_count == 1  # the last value only


def test_a_send_creates_its_queue_with_the_parameters(tmp_path: Path) -> None:
    with Broker.open(str(tmp_path / "s"), address_settings=AUTO) as b, b.session() as s:
        s.send("anycast://jobs?non-destructive=true", Message(b"x"))
        assert b.queue_info("jobs").non_destructive is True
        s.send("jobs?non-destructive=false", Message(b"y"))  # it exists: used as it is
        assert b.queue_info("jobs").non_destructive is True
        assert b.queue_info("jobs").message_count == 2


def test_an_existing_queue_is_used_as_it_is(tmp_path: Path) -> None:
    with Broker.open(str(tmp_path / "s"), address_settings=AUTO) as b, b.session() as s:
        b.create_address("a")
        b.create_queue(QueueConfig("a", "a"))
        s.create_consumer("a?exclusive=true")
        assert b.queue_info("a").exclusive is False


@pytest.mark.parametrize("dest", [
    "q?colour=red", "q?exclusive=yes", "q?max-consumers=two", "q?last-value-key=",
    "q?exclusive=true&exclusive=false", "q?exclusive", "q?ring-size=-5",
])
def test_bad_parameters_create_nothing(tmp_path: Path, dest: str) -> None:
    with Broker.open(str(tmp_path / "s"), address_settings=AUTO) as b, b.session() as s:
        with pytest.raises(InvalidArgumentError) as exc:
            s.create_consumer(dest)
        assert repr(dest) in str(exc.value)
        assert b.queue_names() == [] and b.address_names() == []


def test_parameters_are_refused_where_no_queue_is_created(tmp_path: Path) -> None:
    with Broker.open(str(tmp_path / "s"), address_settings=AUTO) as b, b.session() as s:
        b.create_address("a")
        b.create_queue(QueueConfig("a", "a"))
        with pytest.raises(InvalidArgumentError):
            s.create_browser("a?exclusive=true")
        with pytest.raises(InvalidArgumentError):
            b.queue_info("a?exclusive=true")
        with pytest.raises(InvalidArgumentError):
            s.create_consumer("a?b?exclusive=true")  # not key=value pairs
        with pytest.raises(InvalidNameError):
            s.create_consumer("a b?exclusive=true")
