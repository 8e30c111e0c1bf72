"""``mqstore config check`` and ``mqstore config export`` (issue 17): a configuration file is
checked without a store; a store's addresses, queues and settings come back as a broker.xml
that loads into the same store shape; read-only, and no file is overwritten."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from mqstore.engine import AddressSettings, Broker, QueueConfig, RoutingType
from mqstore.engine.config.files import load_config
from tests.tools.test_cli import digest
from mqstore.tools.cli import main


def run(*args: str):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_check_shows_what_a_file_configures_and_what_it_does_not_apply(tmp_path: Path
                                                                       ) -> None:
    path = tmp_path / "broker.xml"
    path.write_text('<address name="orders"><anycast><queue name="orders" ring-size="3"/>'
                    '</anycast></address><journal-directory>j</journal-directory>')
    got = run("config", "check", str(path))
    assert got.exit_code == 0, got.output
    assert "orders" in got.output and "ring-size=3" in got.output
    assert "1 addresses, 1 queues, 0 address settings, 1 notes" in got.output
    path.write_text('<address-setting match="#"><max-delivery-atempts>3'
                    '</max-delivery-atempts></address-setting>')
    bad = run("config", "check", str(path))
    assert bad.exit_code == 1 and "unknown element <max-delivery-atempts>" in bad.output
    assert "Traceback" not in bad.output


def test_export_writes_a_broker_xml_that_gives_the_same_store(tmp_path: Path) -> None:
    d = str(tmp_path / "s")
    with Broker.open(d) as b:
        b.set_address_settings("orders.#", AddressSettings(max_delivery_attempts=3,
                                                           default_ring_size=10))
        b.create_address("orders.eu", {RoutingType.ANYCAST, RoutingType.MULTICAST})
        b.create_queue(QueueConfig("eu", "orders.eu", ring_size=5, exclusive=True))
        b.create_queue(QueueConfig("audit", "orders.eu", RoutingType.MULTICAST,
                                   filter="amount > 100", max_consumers=1))
        b.create_address("news.#", {RoutingType.MULTICAST})
        b.create_queue(QueueConfig("all-news", "news.#", RoutingType.MULTICAST,
                                   last_value_key="k", non_destructive=True))
        want = {q: b.queue_info(q) for q in b.queue_names()}
    before = digest(Path(d))
    out = tmp_path / "broker.xml"
    got = run("config", "export", d, "--out", str(out))
    assert got.exit_code == 0, got.output
    assert digest(Path(d)) == before  # read-only
    again = run("config", "export", d, "--out", str(out))
    assert again.exit_code == 1 and "does not overwrite" in again.output
    cfg = load_config(str(out))
    assert cfg.address_settings["orders.#"] == AddressSettings(max_delivery_attempts=3,
                                                               default_ring_size=10)
    with Broker.open(str(tmp_path / "copy"), config=str(out)) as b2:
        for name, info in want.items():
            copy = b2.queue_info(name)
            for field in ("address", "routing_type", "ring_size", "exclusive", "filter",
                          "max_consumers", "last_value_key", "non_destructive", "durable"):
                assert getattr(copy, field) == getattr(info, field), (name, field)
        assert set(b2.address_info("orders.eu").routing_types) == \
            {RoutingType.ANYCAST, RoutingType.MULTICAST}
